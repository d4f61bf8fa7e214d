//! Which processes hand a job its RLIMIT_MEMLOCK: the launchers a rank descends from. A rank
//! inherits its limits across fork and exec from whatever started it, so the limit it will get
//! is the one its launcher holds (or sets: slurmstepd and a runtime's shim apply their own).
//!
//! Pure: a process is told from three facts the caller read (`/proc/PID/comm`, the target of
//! `/proc/PID/exe`, the real uid from `/proc/PID/status`). The comm alone proves nothing, since
//! any user may name a process `slurmd` (`prctl(PR_SET_NAME)`, or a copied binary): a launcher
//! is the expected executable run by the expected uid. The daemon's launcher gauge and
//! `check`'s ancestry walk share this one table.

/// The role a launcher plays between the node and a job's ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A service manager (systemd as PID 1 or a user's manager): a unit's `LimitMEMLOCK`.
    ServiceManager,
    /// slurmd: the job's steps inherit its limits unless Slurm propagates the submit host's.
    SlurmDaemon,
    /// slurmstepd: the step's parent; applies propagated limits before it execs the tasks.
    SlurmStep,
    /// containerd, dockerd, CRI-O: a container's limits come from the engine's own unless the
    /// container asks for others (`docker run --ulimit`, OCI `process.rlimits`).
    ContainerEngine,
    /// A runtime's shim or monitor (containerd-shim-*, conmon): the container's parent.
    ContainerShim,
    /// kubelet: starts nothing itself (the CRI runtime does); a pod has no ulimit field.
    NodeAgent,
    /// sshd: a session's limits are set by pam_limits at login.
    RemoteLogin,
    /// mpirun, orted, prted, Hydra: run as the user, started by a login or a batch script.
    MpiLauncher,
}

impl Kind {
    /// The label value for this kind.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ServiceManager => "service_manager",
            Kind::SlurmDaemon => "slurm_daemon",
            Kind::SlurmStep => "slurm_step",
            Kind::ContainerEngine => "container_engine",
            Kind::ContainerShim => "container_shim",
            Kind::NodeAgent => "node_agent",
            Kind::RemoteLogin => "remote_login",
            Kind::MpiLauncher => "mpi_launcher",
        }
    }
}

/// Which real uid the launcher runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UidRule {
    /// Only root: a node daemon that must be able to switch to the job's user. A rootless
    /// engine (rootless Docker or containerd) runs as its user and is not taken for the node's.
    Root,
    /// Any uid: launchers a user runs (mpirun), or that run as the session's user (a session's
    /// sshd after privilege separation, a user's systemd manager).
    Any,
}

/// One launcher: how to recognise it and where its limit is usually set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launcher {
    /// Short name, as a label value (`launcher="slurmd"`).
    pub name: &'static str,
    pub kind: Kind,
    /// File names its executable is installed under (the directory varies by distribution and
    /// site: /usr/sbin, /usr/local/bin, /opt/slurm/sbin).
    pub(crate) executables: &'static [&'static str],
    pub uid: UidRule,
    /// The systemd units it usually runs as, whose `LimitMEMLOCK=` is its limit; empty when it
    /// is not a service of its own.
    pub units: &'static [&'static str],
}

/// Every launcher known. Order matters only for display.
pub const LAUNCHERS: &[Launcher] = &[
    Launcher { name: "systemd", kind: Kind::ServiceManager, executables: &["systemd"], uid: UidRule::Any, units: &[] },
    Launcher {
        name: "slurmd",
        kind: Kind::SlurmDaemon,
        executables: &["slurmd"],
        uid: UidRule::Root,
        units: &["slurmd.service"],
    },
    Launcher {
        name: "slurmstepd",
        kind: Kind::SlurmStep,
        executables: &["slurmstepd"],
        uid: UidRule::Root,
        units: &["slurmd.service"],
    },
    Launcher {
        name: "containerd",
        kind: Kind::ContainerEngine,
        executables: &["containerd"],
        uid: UidRule::Root,
        units: &["containerd.service"],
    },
    Launcher {
        name: "dockerd",
        kind: Kind::ContainerEngine,
        executables: &["dockerd"],
        uid: UidRule::Root,
        units: &["docker.service"],
    },
    Launcher {
        name: "crio",
        kind: Kind::ContainerEngine,
        executables: &["crio"],
        uid: UidRule::Root,
        units: &["crio.service"],
    },
    Launcher {
        name: "containerd-shim",
        kind: Kind::ContainerShim,
        executables: &["containerd-shim-runc-v2", "containerd-shim-runc-v1", "containerd-shim"],
        uid: UidRule::Root,
        units: &[],
    },
    Launcher { name: "conmon", kind: Kind::ContainerShim, executables: &["conmon"], uid: UidRule::Root, units: &[] },
    Launcher {
        name: "kubelet",
        kind: Kind::NodeAgent,
        executables: &["kubelet"],
        uid: UidRule::Root,
        units: &["kubelet.service"],
    },
    // OpenSSH 9.8 moved the per-session code into sshd-session (10.0 adds sshd-auth); before,
    // every session process is sshd too, the unprivileged child running as the session's user.
    Launcher {
        name: "sshd",
        kind: Kind::RemoteLogin,
        executables: &["sshd", "sshd-session"],
        uid: UidRule::Any,
        units: &["ssh.service", "sshd.service"],
    },
    Launcher {
        name: "mpirun",
        kind: Kind::MpiLauncher,
        executables: &["mpirun", "mpiexec", "orterun", "prterun", "prte", "mpiexec.hydra"],
        uid: UidRule::Any,
        units: &[],
    },
    Launcher { name: "orted", kind: Kind::MpiLauncher, executables: &["orted"], uid: UidRule::Any, units: &[] },
    Launcher { name: "prted", kind: Kind::MpiLauncher, executables: &["prted"], uid: UidRule::Any, units: &[] },
    Launcher {
        name: "hydra_pmi_proxy",
        kind: Kind::MpiLauncher,
        executables: &["hydra_pmi_proxy"],
        uid: UidRule::Any,
        units: &[],
    },
];

/// The kernel keeps a task's comm in 16 bytes with the terminating NUL (`TASK_COMM_LEN`,
/// include/linux/sched.h), so `containerd-shim-runc-v2` shows as `containerd-shim`.
const COMM_MAX: usize = 15;

/// What a process is, as far as launchers go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// The launcher. `exe_verified` is false when the caller could not read the executable
    /// (`/proc/PID/exe` needs ptrace access: another user's process, or a vanished one) and
    /// the comm and uid matched: likely, not proven.
    Launcher { launcher: &'static Launcher, exe_verified: bool },
    /// Named like a launcher but not one: the executable or the uid is wrong.
    NamedLike { launcher: &'static Launcher, mismatch: Mismatch },
    /// Nothing to do with launchers.
    Other,
}

/// Why a process named like a launcher is not taken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// Its executable is another file (`/usr/bin/python3` calling itself `slurmd`).
    Executable,
    /// The right executable, but run by a uid the launcher never runs as (a user's own copy).
    Uid { uid: u32 },
}

impl Identity {
    /// The launcher, when the process is one (verified or not).
    pub fn launcher(&self) -> Option<&'static Launcher> {
        match self {
            Identity::Launcher { launcher, .. } => Some(launcher),
            _ => None,
        }
    }
}

/// Identifies a process from its comm (the text of `/proc/PID/comm`, trailing newline
/// allowed), the target of `/proc/PID/exe` when it could be read, and its real uid.
///
/// The executable decides when known: its file name, with the ` (deleted)` the kernel appends
/// once the file was replaced (a package upgrade under a running daemon), must be one of the
/// launcher's. The comm is only a hint, since a process may rename itself; a launcher whose
/// exe says so but whose comm was changed is still that launcher.
pub fn identify(comm: &str, exe: Option<&str>, uid: u32) -> Identity {
    let comm = comm.strip_suffix('\n').unwrap_or(comm);
    let by_exe = exe.and_then(executable_name).and_then(|name| by_executable(name));
    if let Some(launcher) = by_exe {
        return judge_uid(launcher, uid, true);
    }
    let Some(launcher) = by_comm(comm) else { return Identity::Other };
    match exe {
        // A path we could read that is not the launcher's executable.
        Some(path) if !path.is_empty() => Identity::NamedLike { launcher, mismatch: Mismatch::Executable },
        _ => judge_uid(launcher, uid, false),
    }
}

fn judge_uid(launcher: &'static Launcher, uid: u32, exe_verified: bool) -> Identity {
    match launcher.uid {
        UidRule::Root if uid != 0 => Identity::NamedLike { launcher, mismatch: Mismatch::Uid { uid } },
        _ => Identity::Launcher { launcher, exe_verified },
    }
}

/// The file name of an exe link's target: an absolute path, ` (deleted)` dropped.
fn executable_name(path: &str) -> Option<&str> {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    if !path.starts_with('/') {
        return None;
    }
    path.rsplit('/').next().filter(|name| !name.is_empty())
}

/// The launcher installed under this file name.
pub(crate) fn by_executable(name: &str) -> Option<&'static Launcher> {
    LAUNCHERS.iter().find(|l| l.executables.contains(&name))
}

/// The launcher whose executable, cut to the kernel's comm length, is this comm.
pub fn by_comm(comm: &str) -> Option<&'static Launcher> {
    if comm.is_empty() {
        return None;
    }
    LAUNCHERS.iter().find(|l| l.executables.iter().any(|exe| comm_of(exe) == comm))
}

/// The launcher with this short name (`slurmd`).
pub fn by_name(name: &str) -> Option<&'static Launcher> {
    LAUNCHERS.iter().find(|l| l.name == name)
}

/// An executable's comm: its first 15 bytes (all names in the table are ASCII).
fn comm_of(executable: &str) -> &str {
    executable.get(..COMM_MAX.min(executable.len())).unwrap_or(executable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(identity: Identity) -> Option<&'static str> {
        identity.launcher().map(|l| l.name)
    }

    #[test]
    fn real_daemons_are_their_executable_run_by_root() {
        assert_eq!(name(identify("slurmd\n", Some("/usr/sbin/slurmd"), 0)), Some("slurmd"));
        assert_eq!(name(identify("slurmstepd", Some("/opt/slurm/sbin/slurmstepd"), 0)), Some("slurmstepd"));
        assert_eq!(name(identify("containerd", Some("/usr/bin/containerd"), 0)), Some("containerd"));
        assert_eq!(name(identify("dockerd", Some("/usr/bin/dockerd"), 0)), Some("dockerd"));
        assert_eq!(name(identify("crio", Some("/usr/local/bin/crio"), 0)), Some("crio"));
        assert_eq!(name(identify("kubelet", Some("/usr/bin/kubelet"), 0)), Some("kubelet"));
        assert_eq!(name(identify("conmon", Some("/usr/libexec/crio/conmon"), 0)), Some("conmon"));
        let shim = identify("containerd-shim", Some("/usr/bin/containerd-shim-runc-v2"), 0);
        assert_eq!(shim, Identity::Launcher { launcher: by_name("containerd-shim").unwrap(), exe_verified: true });
        assert_eq!(shim.launcher().map(|l| l.kind), Some(Kind::ContainerShim));
    }

    #[test]
    fn a_replaced_executable_is_still_the_launcher() {
        assert_eq!(name(identify("containerd", Some("/usr/bin/containerd (deleted)"), 0)), Some("containerd"));
    }

    #[test]
    fn the_truncated_comm_of_a_long_name_matches() {
        assert_eq!(by_comm("containerd-shim").map(|l| l.name), Some("containerd-shim"));
        assert_eq!(by_comm("hydra_pmi_proxy").map(|l| l.name), Some("hydra_pmi_proxy"));
        assert_eq!(by_comm("containerd-shim-runc-v2"), None, "the kernel never shows more than 15 bytes");
        assert_eq!(by_comm(""), None);
        // Unreadable exe (another user's process): comm and uid, not proven.
        assert_eq!(
            identify("containerd-shim", None, 0),
            Identity::Launcher { launcher: by_name("containerd-shim").unwrap(), exe_verified: false }
        );
    }

    #[test]
    fn a_users_process_named_like_a_launcher_is_not_one() {
        let slurmd = by_name("slurmd").unwrap();
        assert_eq!(
            identify("slurmd", Some("/usr/bin/python3.11"), 1000),
            Identity::NamedLike { launcher: slurmd, mismatch: Mismatch::Executable }
        );
        // Even as root, another executable is not slurmd.
        assert_eq!(
            identify("slurmd", Some("/usr/bin/bash"), 0),
            Identity::NamedLike { launcher: slurmd, mismatch: Mismatch::Executable }
        );
        // A user's copy of the real binary.
        assert_eq!(
            identify("slurmd", Some("/home/alice/bin/slurmd"), 1000),
            Identity::NamedLike { launcher: slurmd, mismatch: Mismatch::Uid { uid: 1000 } }
        );
        assert_eq!(
            identify("dockerd", None, 1000),
            Identity::NamedLike { launcher: by_name("dockerd").unwrap(), mismatch: Mismatch::Uid { uid: 1000 } }
        );
        assert_eq!(identify("python3", Some("/usr/bin/python3"), 1000), Identity::Other);
        assert_eq!(identify("bash", None, 0), Identity::Other);
    }

    #[test]
    fn user_side_launchers_run_as_any_uid() {
        assert_eq!(name(identify("mpirun", Some("/opt/openmpi/bin/mpirun"), 1000)), Some("mpirun"));
        assert_eq!(name(identify("orted", Some("/usr/bin/orted"), 1000)), Some("orted"));
        assert_eq!(name(identify("prted", Some("/usr/bin/prted"), 1000)), Some("prted"));
        assert_eq!(name(identify("hydra_pmi_proxy", Some("/usr/bin/hydra_pmi_proxy"), 1000)), Some("hydra_pmi_proxy"));
        let session = identify("sshd-session", Some("/usr/lib/openssh/sshd-session"), 1000);
        assert_eq!(session.launcher().map(|l| l.kind), Some(Kind::RemoteLogin));
        assert_eq!(name(identify("sshd", Some("/usr/sbin/sshd"), 0)), Some("sshd"));
    }

    #[test]
    fn hostile_paths_and_comms_identify_nothing_or_say_why() {
        // A relative or empty link target (never printed by the kernel) proves nothing.
        assert_eq!(identify("bash", Some("slurmd"), 0), Identity::Other);
        assert_eq!(identify("bash", Some(""), 0), Identity::Other);
        assert_eq!(identify("bash", Some("/"), 0), Identity::Other);
        assert_eq!(identify("bash", Some("/usr/sbin/"), 0), Identity::Other);
        // A non-UTF-8 or long comm is simply not a launcher.
        assert_eq!(identify(&"x".repeat(100_000), Some(&"/".repeat(10_000)), 0), Identity::Other);
        assert_eq!(identify("slurmd\n\n", None, 0), Identity::Other);
    }

    #[test]
    fn the_table_is_consistent() {
        let mut seen = std::collections::HashSet::new();
        for launcher in LAUNCHERS {
            assert!(!launcher.executables.is_empty(), "{}", launcher.name);
            for exe in launcher.executables {
                assert!(seen.insert(*exe), "{exe} belongs to two launchers");
                assert!(exe.is_ascii() && !exe.contains('/'), "{exe}");
            }
            assert_eq!(by_name(launcher.name), Some(launcher));
            assert!(!launcher.kind.as_str().is_empty());
        }
    }
}
