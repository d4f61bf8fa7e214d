//! How the job's ranks get their RLIMIT_MEMLOCK, and the one fix that belongs to that path.
//!
//! A rank inherits its limits from whatever forked it, up to the launcher that set them: the
//! process ancestry (`PPid` in `/proc/PID/status`), each ancestor identified by
//! [`memlock_kernel::launchers`] (expected executable and uid, never the comm alone), the cgroup
//! (`/proc/PID/cgroup`: a Kubernetes pod, a Docker container, a systemd service) and the
//! launchers running on the node, whose own `/proc/PID/limits` is what they hand on. Without
//! `--pid` the checker's own ancestry is an operator's shell, so the node's launchers decide.
//!
//! Where the limit is set, per path:
//! - Slurm: slurmd forks slurmstepd, which forks the tasks: both inherit slurmd's limits (its
//!   unit's `LimitMEMLOCK`), then slurmstepd applies the submit host's soft limit when
//!   `PropagateResourceLimits` covers MEMLOCK, its default `ALL` included
//!   (src/slurmd/slurmstepd/ulimits.c, `set_user_limits()` and `_set_limit()`).
//! - Docker: rlimits in the container's OCI spec are `docker run --ulimit` merged with dockerd's
//!   `default-ulimits` from daemon.json (moby daemon/oci_linux.go, `WithRlimits()` and
//!   `mergeUlimits()`); without either, runc sets none and the container inherits its shim's,
//!   which containerd started (docker.service's limit when dockerd runs its own containerd).
//! - Kubernetes: a pod spec has no ulimit field and containerd's default spec sets RLIMIT_NOFILE
//!   only (containerd oci/spec.go, `populateDefaultUnixSpec()`), so pods inherit the shim's
//!   limit, containerd's unit's `LimitMEMLOCK`. CRI-O sets `default_ulimits` from crio.conf and
//!   crio.conf.d.
//! - ssh (mpirun, orted, prted, Hydra): the session's limits are set at login by pam_limits
//!   from /etc/security/limits.conf and limits.d, when sshd runs with `UsePAM yes` and its PAM
//!   session stack has pam_limits; else the session keeps sshd's own. A session that started
//!   before a change keeps the old ones, as do the daemons it started.
//!
//! The launchers' files are read as they read them: [`super::launcher_config`].
//! - a systemd service: its own `LimitMEMLOCK`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use memlock_core::units::bytes as human;
use memlock_kernel::fsroot::{self, SourceError};
use memlock_kernel::launchers::{self, Identity, Kind};
use memlock_kernel::pid_limits::{self, Limit, MemlockLimits};

use super::launcher_config::{self, UnitLimit};
use memlock_kernel::{pid_cgroup, pid_creds};

/// Ancestors followed at most: a real chain is a handful deep; a longer one is a cycle or a
/// hostile tree.
const MAX_DEPTH: usize = 64;
/// Process directories looked at for the node's launchers.
const MAX_SCAN: usize = 200_000;

/// One process as read for the walk.
#[derive(Debug, Clone, PartialEq)]
pub struct Proc {
    pub pid: u32,
    pub ppid: Option<u32>,
    pub uid: Option<u32>,
    pub comm: String,
    pub identity: Identity,
    pub limits: Option<MemlockLimits>,
}

impl Proc {
    fn kind(&self) -> Option<Kind> {
        self.identity.launcher().map(|l| l.kind)
    }
    fn name(&self) -> Option<&'static str> {
        self.identity.launcher().map(|l| l.name)
    }
    fn shown(&self) -> String {
        format!("{} ({})", self.comm, self.figures())
    }
    fn figures(&self) -> String {
        format!("pid {}, memlock {}", self.pid, show_limits(self.limits))
    }
}

/// How the ranks are launched, as far as it could be told.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LaunchPath {
    Slurm { slurmd: Option<Proc> },
    Docker { engine: Option<Proc>, shim: Option<Proc>, containerd_under_dockerd: bool },
    Kubernetes { runtime: Option<Proc> },
    Containerd { engine: Option<Proc> },
    Ssh { mpi: Option<String>, session: Option<Proc> },
    Service { unit: String },
    Login,
    Unknown,
}

/// What was found: the path, the remedy for it first, and the files that could not be read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Diagnosis {
    pub path: LaunchPath,
    /// How the path was told, for the report.
    pub(crate) evidence: String,
    pub first: String,
    pub verify: String,
    pub others: Vec<String>,
    /// Files that vanished or would not parse, each naming the file: reported, never fatal.
    pub errors: Vec<String>,
}

/// The files the remedies look at (slurm.conf, daemon.json, limits.conf, units) under `etc`.
pub struct Sources<'a> {
    pub procfs: &'a Path,
    pub etc: &'a Path,
    /// The root of /usr, /lib and /run: the vendors' units and drop-ins.
    pub rootfs: &'a Path,
}

/// Reads one process: status (PPid, Uid), comm, the exe link and limits. `None` when it
/// vanished or its status cannot be read; the reason goes to `errors`. A process may exit
/// between any two of these reads: what was read stays, what was not is absent, and only a
/// launcher's missing limits are worth an error.
pub(crate) fn read_proc(procfs: &Path, pid: u32, errors: &mut Vec<String>) -> Option<Proc> {
    let mut proc_ = read_identity(procfs, pid, errors)?;
    let mut own = Vec::new();
    read_limits(procfs, &mut proc_, &mut own);
    if proc_.identity.launcher().is_some() {
        errors.extend(own);
    }
    Some(proc_)
}

/// The first reads of [`read_proc`]: status, comm and the exe link, without the limits.
pub(crate) fn read_identity(procfs: &Path, pid: u32, errors: &mut Vec<String>) -> Option<Proc> {
    let dir = procfs.join(pid.to_string());
    let creds = match fsroot::read_parsed(&dir.join("status"), pid_creds::parse) {
        Ok(creds) => creds,
        Err(err) => {
            errors.push(err.to_string());
            return None;
        }
    };
    let comm = fsroot::read_string(&dir.join("comm")).map(|c| c.trim_end_matches('\n').to_owned()).unwrap_or_default();
    let exe = std::fs::read_link(dir.join("exe")).ok().map(|p| p.to_string_lossy().into_owned());
    let identity = match creds.uid {
        Some(uid) => launchers::identify(&comm, exe.as_deref(), uid),
        None => Identity::Other,
    };
    Some(Proc { pid, ppid: creds.ppid, uid: creds.uid, comm, identity, limits: None })
}

/// The last read of [`read_proc`]: `/proc/PID/limits`, each failure an error naming the file
/// (gone since the status was read, too large, torn or malformed).
pub fn read_limits(procfs: &Path, proc_: &mut Proc, errors: &mut Vec<String>) {
    let file = procfs.join(proc_.pid.to_string()).join("limits");
    match fsroot::read_parsed(&file, pid_limits::parse) {
        Ok(limits) => proc_.limits = Some(limits),
        Err(err) => {
            proc_.limits = None;
            errors.push(err.to_string());
        }
    }
}

/// The process and its ancestors, nearest first, stopping at pid 1, a cycle, a vanished
/// process or [`MAX_DEPTH`].
pub fn ancestry(procfs: &Path, pid: u32, errors: &mut Vec<String>) -> Vec<Proc> {
    let mut chain = Vec::new();
    let mut seen = HashSet::new();
    let mut next = Some(pid);
    while let Some(pid) = next {
        if pid == 0 || chain.len() >= MAX_DEPTH {
            break;
        }
        if !seen.insert(pid) {
            errors
                .push(format!("{}: the parent chain loops back to pid {pid}", procfs.join(pid.to_string()).display()));
            break;
        }
        let Some(proc_) = read_proc(procfs, pid, errors) else { break };
        next = proc_.ppid.filter(|_| pid != 1);
        chain.push(proc_);
    }
    chain
}

/// The real launchers running on the node (processes named like one but not one are left out).
pub(crate) fn node_launchers(procfs: &Path, errors: &mut Vec<String>) -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir(procfs) else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.take(MAX_SCAN).flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(memlock_kernel::name_number::<u32>) else { continue };
        let comm = fsroot::read_string(&entry.path().join("comm")).unwrap_or_default();
        if launchers::by_comm(comm.trim_end_matches('\n')).is_none() {
            continue;
        }
        let mut own = Vec::new();
        if let Some(p) = read_proc(procfs, pid, &mut own) {
            if p.identity.launcher().is_some() {
                errors.extend(own);
                found.push(p);
            }
        }
    }
    found.sort_by_key(|p| p.pid);
    found
}

/// Tells the path from the target's ancestry and cgroup and the node's launchers.
/// `own` is true when the target is the checker itself (no `--pid`): its ancestry is then an
/// operator's session unless it runs inside a launcher's (`check --exec` in a job).
pub(crate) fn diagnose(src: &Sources, target: &str, own: bool) -> Diagnosis {
    let mut errors = Vec::new();
    let pid = match target {
        "self" => std::fs::read_link(src.procfs.join("self"))
            .ok()
            .and_then(|p| p.to_str().and_then(memlock_kernel::name_number::<u32>)),
        pid => pid.parse().ok(),
    };
    let chain = pid.map(|p| ancestry(src.procfs, p, &mut errors)).unwrap_or_default();
    let cgroup = fsroot::read_string(&src.procfs.join(target).join("cgroup"))
        .ok()
        .and_then(|t| pid_cgroup::memory_path(&t).ok().flatten().map(str::to_owned))
        .unwrap_or_default();
    let node = node_launchers(src.procfs, &mut errors);
    let (path, evidence) = tell(&chain, &cgroup, &node, own);
    let (first, verify, others) = remedy(&path, src, &mut errors);
    Diagnosis { path, evidence, first, verify, others, errors }
}

fn on_node<'a>(node: &'a [Proc], name: &str) -> Option<&'a Proc> {
    node.iter().find(|p| p.name() == Some(name))
}

fn tell(chain: &[Proc], cgroup: &str, node: &[Proc], own: bool) -> (LaunchPath, String) {
    let in_chain = |kind: Kind| chain.iter().find(|p| p.kind() == Some(kind));
    let ancestors = chain.get(1..).unwrap_or(&[]);
    let ancestor = |kind: Kind| ancestors.iter().find(|p| p.kind() == Some(kind));
    let shown: Vec<String> = chain.iter().take(8).map(|p| format!("{}({})", p.comm, p.pid)).collect();
    let chain_text = format!("ancestry {}", shown.join(" <- "));
    // The job's own launcher in the ancestry decides.
    if let Some(step) = ancestor(Kind::SlurmStep) {
        let slurmd = on_node(node, "slurmd").cloned();
        return (LaunchPath::Slurm { slurmd }, format!("{chain_text}: under slurmstepd (pid {})", step.pid));
    }
    let containerd_under_dockerd = on_node(node, "containerd")
        .zip(on_node(node, "dockerd"))
        .is_some_and(|(containerd, dockerd)| containerd.ppid == Some(dockerd.pid));
    let container_engine = || on_node(node, "containerd").or_else(|| on_node(node, "dockerd")).cloned();
    let in_container = ancestor(Kind::ContainerShim).is_some() || is_container_cgroup(cgroup);
    if in_container {
        let evidence = format!("{chain_text}, cgroup {cgroup}");
        if cgroup.contains("kubepods") {
            let runtime = on_node(node, "crio").or_else(|| on_node(node, "containerd")).cloned();
            return (LaunchPath::Kubernetes { runtime }, evidence);
        }
        if cgroup.contains("docker") || on_node(node, "dockerd").is_some() {
            let engine = on_node(node, "dockerd").cloned();
            let shim = ancestor(Kind::ContainerShim).cloned();
            return (LaunchPath::Docker { engine, shim, containerd_under_dockerd }, evidence);
        }
        return (LaunchPath::Containerd { engine: container_engine() }, evidence);
    }
    // An MPI launcher sets no limit: its ranks have what it was started with. Under a session's
    // sshd that is pam_limits'; in a service's cgroup with no sshd above (mpirun in a batch job of
    // a scheduler that runs as a systemd service, such as Torque's pbs_mom) it is the service's.
    let service = service_unit(cgroup).filter(|u| !u.starts_with("user@"));
    let mpi_in_service = ancestor(Kind::RemoteLogin).is_none() && service.is_some();
    if let Some(mpi) =
        ancestor(Kind::MpiLauncher).or_else(|| in_chain(Kind::MpiLauncher).filter(|_| !own)).filter(|_| !mpi_in_service)
    {
        let session = ancestor(Kind::RemoteLogin).cloned();
        let how = if session.is_some() { "started over ssh" } else { "started by a login" };
        return (LaunchPath::Ssh { mpi: mpi.name().map(str::to_owned), session }, format!("{chain_text}: {how}"));
    }
    if let Some(unit) = service_unit(cgroup).filter(|_| ancestor(Kind::RemoteLogin).is_none()) {
        if !own || !unit.starts_with("user@") {
            return (LaunchPath::Service { unit: unit.clone() }, format!("{chain_text}, cgroup {cgroup}"));
        }
    }
    // The checker's own session says nothing of the jobs: the node's launchers do.
    if let Some(slurmd) = on_node(node, "slurmd") {
        return (
            LaunchPath::Slurm { slurmd: Some(slurmd.clone()) },
            format!("slurmd runs on this node (pid {})", slurmd.pid),
        );
    }
    if let Some(kubelet) = on_node(node, "kubelet") {
        let runtime = on_node(node, "crio").or_else(|| on_node(node, "containerd")).cloned();
        return (LaunchPath::Kubernetes { runtime }, format!("kubelet runs on this node (pid {})", kubelet.pid));
    }
    if let Some(dockerd) = on_node(node, "dockerd") {
        let engine = Some(dockerd.clone());
        let evidence = format!("dockerd runs on this node (pid {})", dockerd.pid);
        return (LaunchPath::Docker { engine, shim: None, containerd_under_dockerd }, evidence);
    }
    if let Some(containerd) = on_node(node, "containerd") {
        let engine = Some(containerd.clone());
        return (LaunchPath::Containerd { engine }, format!("containerd runs on this node (pid {})", containerd.pid));
    }
    if let Some(session) = ancestor(Kind::RemoteLogin) {
        return (
            LaunchPath::Ssh { mpi: None, session: Some(session.clone()) },
            format!("{chain_text}: an ssh login, no job launcher on this node"),
        );
    }
    if chain.iter().any(|p| p.comm == "login") {
        return (LaunchPath::Login, format!("{chain_text}: a console login"));
    }
    (LaunchPath::Unknown, chain_text)
}

fn is_container_cgroup(cgroup: &str) -> bool {
    cgroup.contains("kubepods")
        || cgroup.contains("/docker-")
        || cgroup.starts_with("/docker/")
        || cgroup.contains("/cri-containerd-")
        || cgroup.contains("/crio-")
}

/// `system.slice/NAME.service` (or a user's `user@UID.service`): the unit whose limits apply.
fn service_unit(cgroup: &str) -> Option<String> {
    cgroup.split('/').rfind(|part| part.ends_with(".service")).map(str::to_owned)
}

fn show_limits(limits: Option<MemlockLimits>) -> String {
    match limits {
        Some(MemlockLimits { soft, hard }) if soft == hard => show(soft),
        Some(MemlockLimits { soft, hard }) => format!("{} soft, {} hard", show(soft), show(hard)),
        None => "unknown".into(),
    }
}

fn show(limit: Limit) -> String {
    match limit {
        Limit::Unlimited => "unlimited".into(),
        Limit::Bytes(bytes) => human(bytes as f64),
    }
}

/// A systemd drop-in that sets the unit's limit, for a unit whose files were not read.
fn dropin(unit: &str) -> String {
    format!("/etc/systemd/system/{unit}.d/memlock.conf: `[Service]` then `LimitMEMLOCK=infinity`")
}

/// Where to set `LimitMEMLOCK=infinity` for `unit` given what its files set now, and those lines.
/// Drop-ins apply by file name, the last winning, and one in /etc masks a same-named one below
/// (systemd.unit(5), "drop-in"): the fix is an /etc drop-in whose name sorts at or after every
/// drop-in that sets the limit; when none of the two names does, the line in force is the one to
/// change.
fn unit_fix(unit: &str, found: &UnitLimit) -> String {
    let now = match found.lines.as_slice() {
        [] => String::new(),
        [one] => format!(" (now: {})", one.at()),
        lines => format!(
            " (now: {}; the last applies)",
            lines.iter().map(launcher_config::Setting::at).collect::<Vec<_>>().join(", ")
        ),
    };
    let name = ["memlock.conf", "zz-memlock.conf"]
        .into_iter()
        .find(|name| found.dropin_names.iter().all(|d| d.as_str() <= *name));
    match (name, found.effective()) {
        (None, Some(line)) => format!("change {} to `LimitMEMLOCK=infinity`{now}", line.at()),
        (name, _) => format!(
            "/etc/systemd/system/{unit}.d/{}: `[Service]` then `LimitMEMLOCK=infinity`{now}",
            name.unwrap_or("memlock.conf")
        ),
    }
}

/// The unit already grants an unlimited limit but the running daemon holds a finite one: it
/// started before the change, and a restart (after daemon-reload) is the fix.
fn unit_grants_but_daemon_holds(found: &UnitLimit, daemon: Option<&Proc>) -> Option<String> {
    let line = found.effective().filter(|l| l.value == "infinity" || l.value == "unlimited")?;
    let limits = daemon?.limits?;
    (limits.soft != Limit::Unlimited).then(|| line.at())
}

/// `PropagateResourceLimits` as slurm.conf sets it: whether the submit host's MEMLOCK is
/// applied to the tasks. Unset means `ALL` (slurm.conf(5)). `None` when slurm.conf is not
/// readable.
fn slurm_propagates_memlock(etc: &Path, errors: &mut Vec<String>) -> Option<(bool, String)> {
    let file = etc.join("slurm/slurm.conf");
    let text = match fsroot::read_string(&file) {
        Ok(text) => text,
        Err(SourceError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => return None,
        Err(err) => {
            errors.push(err.to_string());
            return None;
        }
    };
    let mut propagates = (true, format!("{}: PropagateResourceLimits unset (ALL)", file.display()));
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some((key, value)) = line.split_once('=') else { continue };
        let listed = value.split(',').any(|v| v.trim().eq_ignore_ascii_case("MEMLOCK"));
        let all = value.split(',').any(|v| v.trim().eq_ignore_ascii_case("ALL"));
        let at = format!("{}:{} `{line}`", file.display(), number + 1);
        match key.trim().to_ascii_lowercase().as_str() {
            "propagateresourcelimits" => propagates = (listed || all, at),
            "propagateresourcelimitsexcept" => propagates = (!(listed || all), at),
            _ => {}
        }
    }
    Some(propagates)
}

/// dockerd's `default-ulimits` memlock entry in daemon.json, as written.
fn docker_default_memlock(etc: &Path, errors: &mut Vec<String>) -> Option<String> {
    let file = etc.join("docker/daemon.json");
    let text = match fsroot::read_string(&file) {
        Ok(text) => text,
        Err(SourceError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => return None,
        Err(err) => {
            errors.push(err.to_string());
            return None;
        }
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(json) => {
            json.get("default-ulimits")?.get("memlock").map(|m| format!("{}: \"memlock\": {m}", file.display()))
        }
        Err(err) => {
            errors.push(format!("{}: not JSON: {err}", file.display()));
            None
        }
    }
}

/// memlock lines of pam_limits' files: limits.conf, then limits.d/*.conf in order.
fn pam_memlock_lines(etc: &Path, errors: &mut Vec<String>) -> Vec<String> {
    let mut files = vec![etc.join("security/limits.conf")];
    if let Ok(entries) = std::fs::read_dir(etc.join("security/limits.d")) {
        let mut more: Vec<PathBuf> =
            entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "conf")).collect();
        more.sort();
        files.extend(more);
    }
    let mut found = Vec::new();
    for file in files {
        match fsroot::read_string(&file) {
            Ok(text) => {
                for (number, line) in text.lines().enumerate() {
                    let fields: Vec<&str> = line.split('#').next().unwrap_or("").split_whitespace().collect();
                    if fields.get(2) == Some(&"memlock") {
                        found.push(format!("{}:{} `{}`", file.display(), number + 1, fields.join(" ")));
                    }
                }
            }
            Err(SourceError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => errors.push(err.to_string()),
        }
    }
    found
}

/// The values of dockerd's `--default-ulimit` flags (`memlock=65536:65536`), from its command
/// line (`/proc/PID/cmdline`, NUL-separated): `--default-ulimit VALUE` or `--default-ulimit=VALUE`.
fn dockerd_ulimit_flags(procfs: &Path, pid: u32, errors: &mut Vec<String>) -> Vec<String> {
    let file = procfs.join(pid.to_string()).join("cmdline");
    let bytes = match fsroot::read_regular(&file, 1 << 20) {
        Ok(bytes) => bytes,
        Err(SourceError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(err) => {
            errors.push(err.to_string());
            return Vec::new();
        }
    };
    let args: Vec<String> = bytes.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < args.len() && found.len() < 32 {
        if let Some(value) = args[i].strip_prefix("--default-ulimit=") {
            found.push(value.to_owned());
        } else if args[i] == "--default-ulimit" {
            if let Some(value) = args.get(i + 1) {
                found.push(value.clone());
                i += 1;
            }
        }
        i += 1;
    }
    found
}

/// dockerd's setting for every new container (dockerd(8), "Default ulimits").
const DOCKER_DEFAULT_ULIMITS: &str = r#""default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1}}"#;

const OTHER: &str = "other path, if the ranks are started otherwise:";

fn all_paths() -> Vec<String> {
    vec![
        format!(
            "{OTHER} Slurm: {} (systemctl restart slurmd); verify `srun sh -c 'ulimit -l'`",
            dropin("slurmd.service")
        ),
        format!(
            "{OTHER} Docker: /etc/docker/daemon.json `{DOCKER_DEFAULT_ULIMITS}` (systemctl restart docker) or \
                `docker run --ulimit memlock=-1:-1`"
        ),
        format!("{OTHER} Kubernetes with containerd: {} (systemctl restart containerd)", dropin("containerd.service")),
        format!("{OTHER} ssh, mpirun: /etc/security/limits.d/memlock.conf `* - memlock unlimited`, then a new login"),
        format!("{OTHER} a systemd service: {}", dropin("NAME.service")),
    ]
}

fn remedy(path: &LaunchPath, src: &Sources, errors: &mut Vec<String>) -> (String, String, Vec<String>) {
    let etc = src.etc;
    let unit = |name: &str, errors: &mut Vec<String>| launcher_config::unit_limit(etc, src.rootfs, name, errors);
    let restart = |name: &str, at: String, daemon: &str| {
        format!(
            "{daemon} holds a finite limit although its unit grants it ({at}): it started before the change; \
                `systemctl daemon-reload && systemctl restart {name}`"
        )
    };
    let mut others = Vec::new();
    let (first, verify) = match path {
        LaunchPath::Slurm { slurmd } => {
            let propagation = slurm_propagates_memlock(etc, errors);
            let found = unit("slurmd.service", errors);
            // slurmd's limit unread (gone, unreadable, malformed): its unit says what it gets, and
            // a unit that does not grant infinity leaves it the manager's finite default.
            let slurmd_low = match slurmd.as_ref().and_then(|p| p.limits) {
                Some(l) => l.soft != Limit::Unlimited || l.hard != Limit::Unlimited,
                None => !found.effective().is_some_and(|l| l.value == "infinity" || l.value == "unlimited"),
            };
            let shown = slurmd.as_ref().map(|p| format!(" ({})", p.figures())).unwrap_or_default();
            let fix_unit = match unit_grants_but_daemon_holds(&found, slurmd.as_ref()) {
                Some(at) => format!("slurmd{shown} hands every step its limit, and {}", restart("slurmd", at, "it")),
                None => format!(
                    "slurmd{shown} hands every step its limit: {}, then `systemctl daemon-reload && systemctl \
                        restart slurmd`",
                    unit_fix("slurmd.service", &found)
                ),
            };
            let fix_propagation = |at: &str| {
                format!(
                    "the tasks get the submit host's soft limit ({at}): set `PropagateResourceLimitsExcept=MEMLOCK` \
                        in slurm.conf, then `scontrol reconfigure`"
                )
            };
            let first = match propagation {
                Some((true, at)) if !slurmd_low => fix_propagation(&at),
                Some((true, at)) => {
                    others.push(format!("then, same path: {}", fix_propagation(&at)));
                    fix_unit
                }
                _ => fix_unit,
            };
            (first, "`srun -w $(hostname) sh -c 'ulimit -l'` prints unlimited".to_owned())
        }
        LaunchPath::Docker { engine, shim, containerd_under_dockerd } => {
            let current = docker_default_memlock(etc, errors);
            let now = current.map(|c| format!(" (now: {c})")).unwrap_or_else(|| {
                format!(
                    " (unset: containers inherit the limit of the containerd-shim that starts them, {})",
                    shim.as_ref().or(engine.as_ref()).map(|p| p.shown()).unwrap_or_else(|| "unknown".into())
                )
            });
            let name = if *containerd_under_dockerd { "docker.service" } else { "containerd.service" };
            let found = unit(name, errors);
            others
                .push(format!("also, same path: {} for new shims (systemctl restart {name})", unit_fix(name, &found)));
            others.push("also, same path, per container: `docker run --ulimit memlock=-1:-1`".into());
            let flags = engine.as_ref().map(|e| dockerd_ulimit_flags(src.procfs, e.pid, errors)).unwrap_or_default();
            let first = if flags.is_empty() {
                format!(
                    "dockerd's default for every container: /etc/docker/daemon.json `{DOCKER_DEFAULT_ULIMITS}`{now}, \
                        then `systemctl restart docker` and recreate the containers"
                )
            } else {
                // dockerd refuses to start when a flag and daemon.json both set a directive (moby
                // daemon/config/config.go `findConfigurationConflicts`): default-ulimits set on the
                // command line is changed there, never added to daemon.json.
                let memlock = flags.iter().find(|f| f.starts_with("memlock="));
                let change = match memlock {
                    Some(flag) => format!("change `--default-ulimit {flag}` to `--default-ulimit memlock=-1:-1`"),
                    None => "add `--default-ulimit memlock=-1:-1` beside them".to_owned(),
                };
                format!(
                    "dockerd's default for every container is set on its command line ({}: `--default-ulimit {}`): \
                        {change} where docker.service starts it (its ExecStart, or the EnvironmentFile it reads, such \
                        as /etc/sysconfig/docker OPTIONS), then `systemctl daemon-reload && systemctl restart docker` \
                        and recreate the containers; not in daemon.json as well, or dockerd refuses to start",
                    engine.as_ref().map(|e| format!("pid {}", e.pid)).unwrap_or_default(),
                    flags.join("`, `--default-ulimit ")
                )
            };
            (first, "`docker exec CONTAINER sh -c 'ulimit -l'` prints unlimited".to_owned())
        }
        LaunchPath::Kubernetes { runtime } => {
            let runtime_name = runtime.as_ref().and_then(|r| r.name()).unwrap_or("containerd");
            let shown = runtime.as_ref().map(|r| format!(" ({})", r.figures())).unwrap_or_default();
            if runtime_name == "crio" {
                let set = launcher_config::crio_default_memlock(etc, errors);
                let line = r#"`default_ulimits = ["memlock=-1:-1"]`"#;
                let target = match &set {
                    Some(s) if s.value.is_empty() => format!(
                        "add \"memlock=-1:-1\" to {} (it sets default_ulimits without memlock, so containers inherit \
                            conmon's limit, crio's), keeping its other entries",
                        s.at()
                    ),
                    Some(s) => {
                        format!("change {} to {line} (the file sorted last wins; keep its other entries)", s.at())
                    }
                    None => format!(
                        "/etc/crio/crio.conf.d/99-memlock.conf: `[crio.runtime]` then {line} (unset now: containers \
                            inherit conmon's limit, crio's)"
                    ),
                };
                let found = unit("crio.service", errors);
                others.push(format!(
                    "also, same path, for containers without default_ulimits: {} (systemctl restart crio)",
                    unit_fix("crio.service", &found)
                ));
                (
                    format!(
                        "pods have no ulimit field; CRI-O{shown} sets every container's from default_ulimits: \
                            {target}, then `systemctl restart crio` and recreate the pods"
                    ),
                    "`kubectl exec POD -- sh -c 'ulimit -l'` prints unlimited".to_owned(),
                )
            } else {
                let found = unit("containerd.service", errors);
                others.push(
                    "also, same path, per container: containerd's NRI ulimit-adjuster plugin and its pod annotation \
                        `ulimits.noderesource.dev/container.NAME`"
                        .to_owned(),
                );
                let fix = match unit_grants_but_daemon_holds(&found, runtime.as_ref()) {
                    Some(at) => restart("containerd", at, "containerd"),
                    None => format!(
                        "{}, then `systemctl daemon-reload && systemctl restart containerd`",
                        unit_fix("containerd.service", &found)
                    ),
                };
                (
                    format!(
                        "pods have no ulimit field and inherit the containerd-shim's limit, which is containerd's\
                            {shown}: {fix}; running pods keep their shim's limit until recreated"
                    ),
                    "`kubectl exec POD -- sh -c 'ulimit -l'` prints unlimited".to_owned(),
                )
            }
        }
        LaunchPath::Containerd { engine } => {
            let shown = engine.as_ref().map(|e| format!(" ({})", e.figures())).unwrap_or_default();
            let found = unit("containerd.service", errors);
            let fix = match unit_grants_but_daemon_holds(&found, engine.as_ref()) {
                Some(at) => restart("containerd", at, "containerd"),
                None => format!(
                    "{}, then `systemctl daemon-reload && systemctl restart containerd`",
                    unit_fix("containerd.service", &found)
                ),
            };
            (
                format!("containers inherit the limit of containerd's shims{shown}: {fix}"),
                "`ctr task exec --exec-id check CONTAINER sh -c 'ulimit -l'` prints unlimited".to_owned(),
            )
        }
        LaunchPath::Ssh { mpi, session } => {
            let lines = pam_memlock_lines(etc, errors);
            let granted = lines.iter().any(|l| l.contains("unlimited"));
            let held = session.as_ref().map(|s| format!(" (the session's sshd {})", s.shown())).unwrap_or_default();
            let launcher = mpi.as_deref().map(|m| format!("{m} and its ranks")).unwrap_or_else(|| "the ranks".into());
            let use_pam = launcher_config::sshd_use_pam(etc, errors);
            let pam_limits = launcher_config::sshd_pam_limits(etc, errors);
            let sshd_unit = ["ssh.service", "sshd.service"]
                .into_iter()
                .find(|u| unit(u, &mut Vec::new()).unit_file.is_some())
                .unwrap_or("sshd.service");
            let own_limit = format!(
                "{launcher} get sshd's own limit{held}, its unit's ({} would raise it)",
                unit_fix(sshd_unit, &unit(sshd_unit, errors))
            );
            match (&use_pam, &pam_limits) {
                (Some((true, use_at)), Some(Some(limits_at))) => others.push(format!(
                    "checked, same path: sshd uses PAM ({use_at}) and its session stack runs pam_limits ({})",
                    limits_at.at()
                )),
                _ => others.push(
                    "also, same path: sshd must run with `UsePAM yes` and /etc/pam.d/sshd include \
                    `session required pam_limits.so`"
                        .to_owned(),
                ),
            }
            let first = if let Some((false, at)) = &use_pam {
                format!(
                    "sshd runs its sessions without PAM ({at}), so pam_limits never runs and \
                        /etc/security/limits.conf has no effect over ssh: {own_limit}; set `UsePAM yes` in \
                        /etc/ssh/sshd_config (before any Match block), `systemctl reload {sshd_unit}`, then a new \
                        login"
                )
            } else if let Some(None) = &pam_limits {
                format!(
                    "pam_limits is not in sshd's PAM session stack (/etc/pam.d/sshd and the files it includes), so \
                        /etc/security/limits.conf has no effect over ssh: {own_limit}; add `session required \
                        pam_limits.so` to /etc/pam.d/sshd, then a new login"
                )
            } else if granted {
                format!(
                    "{launcher} run in an ssh session that started before pam_limits granted it ({}){held}: start a \
                        new login (and restart the MPI daemons it started)",
                    lines.join(", ")
                )
            } else {
                let now = if lines.is_empty() { String::new() } else { format!(" (now: {})", lines.join(", ")) };
                format!(
                    "{launcher} get the limit pam_limits sets at ssh login{held}: /etc/security/limits.d/memlock.conf \
                        `* - memlock unlimited`{now}, then a new login"
                )
            };
            (first, "`ssh $(hostname) sh -c 'ulimit -l'` prints unlimited".to_owned())
        }
        LaunchPath::Service { unit: name } => {
            let found = unit(name, errors);
            let unit = name;
            (
                format!(
                    "the service's own limit: {}, then `systemctl daemon-reload && systemctl restart {unit}`",
                    unit_fix(unit, &found)
                ),
                format!("`systemctl show -p LimitMEMLOCK {unit}` prints infinity"),
            )
        }
        LaunchPath::Login => (
            "a login's limit comes from pam_limits: /etc/security/limits.d/memlock.conf `* - memlock unlimited`, \
                then a new login"
                .to_owned(),
            "`ulimit -l` in a new login prints unlimited".to_owned(),
        ),
        LaunchPath::Unknown => {
            return (
                "could not tell how the ranks are launched (no launcher in the ancestry or on this node): the fix \
                    depends on the path; run `check --pid RANK` or `check --exec` inside the job, or apply the one \
                    that fits"
                    .to_owned(),
                "`ulimit -l` inside the job prints unlimited".to_owned(),
                all_paths().into_iter().map(|p| p.replacen(OTHER, "possible path:", 1)).collect(),
            );
        }
    };
    others.extend(all_paths().into_iter().filter(|p| !covers(path, p)));
    (first, verify, others)
}

fn covers(path: &LaunchPath, other: &str) -> bool {
    let label = match path {
        LaunchPath::Slurm { .. } => "Slurm:",
        LaunchPath::Docker { .. } => "Docker:",
        LaunchPath::Kubernetes { .. } | LaunchPath::Containerd { .. } => "Kubernetes",
        LaunchPath::Ssh { .. } | LaunchPath::Login => "ssh, mpirun:",
        LaunchPath::Service { .. } => "a systemd service:",
        LaunchPath::Unknown => return false,
    };
    other.contains(label)
}

#[cfg(test)]
#[path = "tests/launch_path.rs"]
pub(crate) mod tests;
