//! What the next job will get: the RLIMIT_MEMLOCK of each launcher running on the node. A rank
//! inherits its limits from the process that started it (fork keeps `signal->rlim`, exec keeps
//! it too: kernel/fork.c `copy_signal`), so slurmd's, containerd's or dockerd's own soft limit is
//! what a job gets unless something on the way sets another. A node whose slurmd runs at 64 KiB
//! is seen here before any job fails on it.
//!
//! Only the real launcher counts ([`memlock_kernel::launchers::identify`]): its expected
//! executable, read from `/proc/PID/exe`, run by the expected uid. A user's process that calls
//! itself `slurmd` is not exported, and neither is one whose executable cannot be read (the
//! exporter then lacks ptrace access to it, and its comm proves nothing).

use std::any::Any;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::budget::Grants;
use crate::collect::settings::{Configured, Context, Invalid};
use crate::collect::{Collector, Data, Stats};
use crate::exposition::{Exposition, Kind};
use memlock_kernel::fsroot::{self, Roots, SourceError};
use memlock_kernel::launchers::{self, Identity, Launcher};
use memlock_kernel::pid_limits::{self, MemlockLimits};
use memlock_kernel::{Limit, ParseError};

/// The launchers watched by default: those that start a job's ranks directly
/// (slurmd, slurmstepd, the container engines, kubelet's runtime, an ssh login).
pub(crate) const DEFAULT_LAUNCHERS: [&str; 7] =
    ["slurmd", "slurmstepd", "containerd", "dockerd", "crio", "sshd", "kubelet"];

/// At most this many launcher processes are exported: a node runs a few daemons, and one
/// slurmstepd per job step; a fork storm of sshd sessions must not grow the series without bound.
pub(crate) const MAX_LAUNCHERS: usize = 256;

/// `[collector.launchers]` as the file, the environment and the flags give it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RawLaunchersCollector {
    /// The launchers to export, by name (the `launcher` label): any of the known table.
    pub launchers: Vec<String>,
}

impl Default for RawLaunchersCollector {
    fn default() -> Self {
        Self { launchers: DEFAULT_LAUNCHERS.iter().map(|s| (*s).to_owned()).collect() }
    }
}

/// What the collector runs with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LaunchersConfig {
    pub launchers: Vec<&'static str>,
}

impl Configured for LaunchersCollector {
    type Raw = RawLaunchersCollector;
    type Settings = LaunchersConfig;

    fn validate(raw: RawLaunchersCollector) -> Result<LaunchersConfig, Invalid> {
        let mut names = Vec::new();
        for name in &raw.launchers {
            let Some(launcher) = launchers::by_name(name) else {
                let known: Vec<&str> = launchers::LAUNCHERS.iter().map(|l| l.name).collect();
                return Err(Invalid::new(
                    "launchers",
                    format!("unknown launcher {name:?}; known: {}", known.join(", ")),
                ));
            };
            if !names.contains(&launcher.name) {
                names.push(launcher.name);
            }
        }
        Ok(LaunchersConfig { launchers: names })
    }

    fn build(context: &Context, settings: &LaunchersConfig) -> Self {
        LaunchersCollector { roots: context.roots.clone(), config: settings.clone() }
    }
}

pub(crate) struct LaunchersCollector {
    roots: Roots,
    config: LaunchersConfig,
}

/// One launcher process and its limit.
#[derive(Debug, Clone, PartialEq)]
pub struct LauncherLimit {
    pub launcher: &'static str,
    pub pid: u32,
    pub limits: MemlockLimits,
}

#[derive(Debug, Default)]
pub struct LaunchersStats {
    /// By launcher name, then pid.
    pub launchers: Vec<LauncherLimit>,
    /// Launcher processes beyond [`MAX_LAUNCHERS`], not exported.
    pub dropped: u64,
}

/// The real uid, the first number of `Uid:` in `/proc/PID/status` (fs/proc/array.c
/// `task_state`: real, effective, saved, filesystem).
pub(crate) fn real_uid(status: &str) -> Result<u32, ParseError> {
    let (index, line) = status
        .split('\n')
        .enumerate()
        .find(|(_, l)| l.starts_with("Uid:"))
        .ok_or_else(|| ParseError::Format("no Uid: line".to_owned()))?;
    let value = line["Uid:".len()..].split_ascii_whitespace().next().unwrap_or("");
    value.parse().map_err(|_| ParseError::NotANumber {
        line: index + 1,
        key: "Uid".to_owned(),
        value: value.to_owned(),
    })
}

impl LaunchersCollector {
    #[cfg(test)]
    pub fn new(roots: Roots, config: LaunchersConfig) -> Self {
        Self { roots, config }
    }

    /// The watched launcher this pid is, read from `comm`, `exe` and `status`; its limits.
    /// `Ok(None)` when it is none, or vanished meanwhile.
    fn read_pid(&self, pid: u32, errors: &mut Vec<SourceError>) -> Option<LauncherLimit> {
        let dir = self.roots.proc(pid.to_string());
        let comm = fsroot::read_string(&dir.join("comm")).ok()?;
        // Only a name of a watched launcher is worth three more reads.
        // The comm is only a hint (the exe decides below), but no launcher's comm, no launcher.
        launchers::by_comm(comm.trim_end_matches('\n'))?;
        // Without ptrace access the link cannot be read: unverified, and not exported.
        let exe = std::fs::read_link(dir.join("exe")).ok()?;
        let exe = exe.to_str()?.to_owned();
        let found = |result: Result<String, SourceError>, errors: &mut Vec<SourceError>| match result {
            Ok(text) if !text.is_empty() => Some(text),
            // Gone between the reads (a reaped task reads empty): not an error.
            Ok(_) => None,
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                errors.push(e);
                None
            }
        };
        let status_path = dir.join("status");
        let status = found(fsroot::read_string(&status_path), errors)?;
        let uid = match real_uid(&status) {
            Ok(uid) => uid,
            Err(source) => {
                errors.push(SourceError::Parse { path: status_path, source });
                return None;
            }
        };
        let launcher: &'static Launcher = match launchers::identify(&comm, Some(&exe), uid) {
            Identity::Launcher { launcher, exe_verified: true } => launcher,
            _ => return None,
        };
        if !self.config.launchers.contains(&launcher.name) {
            return None;
        }
        let limits_path = dir.join("limits");
        let text = found(fsroot::read_string(&limits_path), errors)?;
        match pid_limits::parse(&text) {
            Ok(limits) => Some(LauncherLimit { launcher: launcher.name, pid, limits }),
            Err(source) => {
                errors.push(SourceError::Parse { path: limits_path, source });
                None
            }
        }
    }

    pub fn read(&self, errors: &mut Vec<SourceError>) -> LaunchersStats {
        let mut stats = LaunchersStats::default();
        let entries = match std::fs::read_dir(&self.roots.procfs) {
            Ok(entries) => entries,
            Err(source) => {
                errors.push(SourceError::Io { path: self.roots.procfs.clone(), source });
                return stats;
            }
        };
        let mut pids: Vec<u32> =
            entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).filter(|&pid: &u32| pid > 0).collect();
        pids.sort_unstable();
        for pid in pids {
            let Some(found) = self.read_pid(pid, errors) else { continue };
            if stats.launchers.len() >= MAX_LAUNCHERS {
                stats.dropped += 1;
                continue;
            }
            stats.launchers.push(found);
        }
        let order = |name: &str| self.config.launchers.iter().position(|n| *n == name).unwrap_or(usize::MAX);
        stats.launchers.sort_by_key(|l| (order(l.launcher), l.pid));
        stats
    }
}

impl Collector for LaunchersCollector {
    fn name(&self) -> &'static str {
        "launchers"
    }

    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data> {
        Some(Arc::new(self.read(errors)))
    }
}

impl Stats for LaunchersStats {
    fn render(&self, out: &mut Exposition, _grants: &Grants) {
        let mut pids = Vec::with_capacity(self.launchers.len());
        for l in &self.launchers {
            pids.push(l.pid.to_string());
        }
        out.family(
            "memlock_launcher_limit_bytes",
            "RLIMIT_MEMLOCK of a job launcher running on the node, which the jobs it starts inherit.",
            Kind::Gauge,
        );
        for (l, pid) in self.launchers.iter().zip(&pids) {
            for (kind, limit) in [("soft", l.limits.soft), ("hard", l.limits.hard)] {
                out.maybe(&[("launcher", l.launcher), ("pid", pid), ("kind", kind)], limit.bytes());
            }
        }
        out.family(
            "memlock_launcher_limit_unlimited",
            "1 when the launcher's RLIMIT_MEMLOCK (soft or hard, by kind) is unlimited, else 0.",
            Kind::Gauge,
        );
        for (l, pid) in self.launchers.iter().zip(&pids) {
            for (kind, limit) in [("soft", l.limits.soft), ("hard", l.limits.hard)] {
                out.sample(&[("launcher", l.launcher), ("pid", pid), ("kind", kind)], limit == Limit::Unlimited);
            }
        }
        out.family("memlock_launcher_dropped", "Launcher processes found beyond the 256 exported.", Kind::Gauge);
        out.sample(&[], self.dropped);
    }

    /// The soft memlock limit each launcher would hand a job it starts now.
    fn state(&self) -> Option<String> {
        if self.launchers.is_empty() {
            return Some("no launcher running".into());
        }
        let shown: Vec<String> = self
            .launchers
            .iter()
            .map(|l| {
                let soft = l.limits.soft.bytes();
                let soft = soft.map_or_else(|| "unlimited".to_owned(), |b| crate::units::bytes(b as f64));
                format!("{} (pid {}) hands jobs {soft}", l.launcher, l.pid)
            })
            .collect();
        Some(shown.join("; "))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// This collector's entry in the registry ([`crate::collect::REGISTRY`]): its name, flags,
/// default interval and settings.
pub(crate) const REGISTRATION: super::Registration = super::Registration {
    name: "launchers",
    reads: "the memlock limits of the launchers that start jobs (slurmd, containerd, dockerd, sshd...)",
    default_interval: "15s",
    default_enabled: true,
    settings: super::settings::of::<LaunchersCollector>(),
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(names: &[&str]) -> LaunchersConfig {
        let raw = RawLaunchersCollector { launchers: names.iter().map(|s| (*s).to_owned()).collect() };
        LaunchersCollector::validate(raw).unwrap()
    }

    /// A process directory in a fixture root, in the real files' formats; `exe` is a symlink to a
    /// path that need not exist (readlink reads the target as the kernel's link prints it).
    fn process(root: &Path, pid: u32, comm: &str, exe: &str, uid: u32, limits: &str) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        std::fs::write(dir.join("status"), format!("Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")).unwrap();
        std::fs::write(dir.join("limits"), limits).unwrap();
    }

    fn limits_text(soft: &str, hard: &str) -> String {
        format!(
            "Limit                     Soft Limit           Hard Limit           Units     \n\
             Max open files            1024                 524288               files     \n\
             Max locked memory         {soft:<20} {hard:<20} bytes     \n"
        )
    }

    fn temp(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(&format!("memlock-launchers-{name}-")).tempdir().unwrap()
    }

    #[test]
    fn real_launchers_only_with_their_limits() {
        let tmp = temp("real");
        let root = tmp.path().to_path_buf();
        process(&root, 812, "slurmd", "/usr/sbin/slurmd", 0, &limits_text("65536", "65536"));
        process(&root, 901, "containerd", "/usr/bin/containerd (deleted)", 0, &limits_text("unlimited", "unlimited"));
        process(&root, 4242, "slurmd", "/usr/bin/python3.11", 1000, &limits_text("8388608", "8388608"));
        process(&root, 4243, "dockerd", "/home/alice/bin/dockerd", 1000, &limits_text("8388608", "8388608"));
        process(&root, 77, "bash", "/usr/bin/bash", 0, &limits_text("8388608", "8388608"));
        let collector =
            LaunchersCollector::new(Roots { procfs: root.clone(), sysfs: root.clone() }, config(&DEFAULT_LAUNCHERS));
        let mut errors = Vec::new();
        let stats = collector.read(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let found: Vec<_> = stats.launchers.iter().map(|l| (l.launcher, l.pid)).collect();
        assert_eq!(found, [("slurmd", 812), ("containerd", 901)], "a user's look-alikes are left out");
        let mut out = Exposition::new();
        stats.render(&mut out, &Grants::default());
        let text = out.finish();
        assert!(
            text.contains("memlock_launcher_limit_bytes{launcher=\"slurmd\",pid=\"812\",kind=\"soft\"} 65536\n"),
            "{text}"
        );
        assert!(!text.contains("memlock_launcher_limit_bytes{launcher=\"containerd\""), "unlimited: {text}");
        assert!(
            text.contains("memlock_launcher_limit_unlimited{launcher=\"containerd\",pid=\"901\",kind=\"hard\"} 1\n")
        );
        assert!(text.contains("memlock_launcher_limit_unlimited{launcher=\"slurmd\",pid=\"812\",kind=\"soft\"} 0\n"));
    }

    #[test]
    fn configuration_adds_launchers_and_refuses_unknown_names() {
        let tmp = temp("config");
        let root = tmp.path().to_path_buf();
        process(&root, 300, "mpirun", "/opt/openmpi/bin/mpirun", 1000, &limits_text("8388608", "unlimited"));
        process(&root, 301, "containerd-shim", "/usr/bin/containerd-shim-runc-v2", 0, &limits_text("1024", "1024"));
        let roots = Roots { procfs: root.clone(), sysfs: root.clone() };
        let stats = LaunchersCollector::new(roots.clone(), config(&DEFAULT_LAUNCHERS)).read(&mut Vec::new());
        assert!(stats.launchers.is_empty(), "not watched by default: {stats:?}");
        let stats = LaunchersCollector::new(roots, config(&["mpirun", "containerd-shim"])).read(&mut Vec::new());
        let found: Vec<_> = stats.launchers.iter().map(|l| (l.launcher, l.limits.soft.bytes())).collect();
        assert_eq!(found, [("mpirun", Some(8388608)), ("containerd-shim", Some(1024))]);
        let raw = RawLaunchersCollector { launchers: vec!["slurmd".into(), "slurmdd".into()] };
        let err = LaunchersCollector::validate(raw).unwrap_err();
        let text = format!("{err:?}");
        assert!(text.contains("launchers") && text.contains("\\\"slurmdd\\\"") && text.contains("kubelet"), "{text}");
    }

    #[test]
    fn hostile_files_are_errors_naming_the_file_not_crashes() {
        let tmp = temp("hostile");
        let root = tmp.path().to_path_buf();
        process(&root, 10, "slurmd", "/usr/sbin/slurmd", 0, "Max locked memory         lots      lots      bytes\n");
        process(&root, 11, "containerd", "/usr/bin/containerd", 0, &"x".repeat(1 << 20));
        process(&root, 12, "dockerd", "/usr/bin/dockerd", 0, &limits_text("65536", "65536"));
        std::fs::write(root.join("12/status"), "Name:\tdockerd\nUid:\troot\n").unwrap();
        // Vanished mid-read: comm and exe there, status and limits gone.
        process(&root, 13, "crio", "/usr/bin/crio", 0, "");
        std::fs::remove_file(root.join("13/status")).unwrap();
        std::fs::remove_file(root.join("13/limits")).unwrap();
        let collector =
            LaunchersCollector::new(Roots { procfs: root.clone(), sysfs: root.clone() }, config(&DEFAULT_LAUNCHERS));
        let mut errors = Vec::new();
        let stats = collector.read(&mut errors);
        assert!(stats.launchers.is_empty(), "{stats:?}");
        let paths: Vec<String> = errors.iter().map(|e| e.path().display().to_string()).collect();
        assert_eq!(errors.len(), 3, "{errors:?}");
        for (pid, file) in [(10, "limits"), (11, "limits"), (12, "status")] {
            assert!(paths.iter().any(|p| p.ends_with(&format!("{pid}/{file}"))), "{pid}/{file} in {paths:?}");
        }
    }

    #[test]
    fn real_uid_is_the_first_field() {
        assert_eq!(real_uid("Name:\tsshd\nUid:\t0\t1000\t0\t0\nGid:\t0\n"), Ok(0));
        assert!(real_uid("Name:\tsshd\n").is_err());
        assert!(real_uid("Uid:\t-1\n").is_err());
    }
}
