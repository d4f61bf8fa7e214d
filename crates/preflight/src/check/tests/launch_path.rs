//! Fixture hosts with the real launch chain of each path, under tests/fixtures/hosts/NAME: /proc
//! trees in the kernel's formats (status, comm, the exe link, limits, cgroup, meminfo) and the
//! /etc files the remedies read. Each test works on a copy; the hostile trees are built here.

use super::*;
use std::path::Path;

const MIB: u64 = 1 << 20;
const CAPTURE: &str = include_str!("../../../../../tests/fixtures/captures/proc_self_limits");
const ROOT_CAPS: &str = "CapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n\
    CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n";
const USER_CAPS: &str = "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n\
    CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n";

pub(crate) struct Host {
    pub dir: PathBuf,
    // Removes the copy when the test drops the host.
    _tmp: tempfile::TempDir,
}

impl Host {
    pub fn new(name: &str) -> Host {
        // Tests run in parallel, several on one fixture: each gets its own copy.
        let tmp = tempfile::Builder::new().prefix(&format!("memlock-launch-{name}-")).tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        std::fs::create_dir_all(dir.join("proc")).unwrap();
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        Host { dir, _tmp: tmp }
    }
    /// A copy of tests/fixtures/hosts/NAME, the exe links kept as links.
    pub fn fixture(name: &str) -> Host {
        let host = Host::new(name);
        let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hosts").join(name);
        copy_tree(&from, &host.dir);
        host
    }
    pub fn procfs(&self) -> PathBuf {
        self.dir.join("proc")
    }
    pub fn etc(&self) -> PathBuf {
        self.dir.join("etc")
    }
    /// One process as the kernel shows it; `memlock` in bytes, `None` for unlimited.
    #[allow(clippy::too_many_arguments)]
    pub fn process(&self, pid: u32, ppid: u32, uid: u32, comm: &str, exe: &str, memlock: Option<u64>, cgroup: &str) {
        let dir = self.procfs().join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let caps = if uid == 0 { ROOT_CAPS } else { USER_CAPS };
        let status = format!(
            "Name:\t{comm}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t{ppid}\n\
                TracerPid:\t0\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n\
                {caps}NoNewPrivs:\t0\n"
        );
        std::fs::write(dir.join("status"), status).unwrap();
        std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        let _ = std::fs::remove_file(dir.join("exe"));
        std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        std::fs::write(dir.join("limits"), limits_text(memlock)).unwrap();
        std::fs::write(dir.join("cgroup"), format!("12:memory:{cgroup}\n0::{cgroup}\n")).unwrap();
    }
    pub(crate) fn etc_file(&self, path: &str, text: &str) {
        let file = self.etc().join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }
    pub(crate) fn diagnose(&self, pid: u32, own: bool) -> Diagnosis {
        let (procfs, etc) = (self.procfs(), self.etc());
        diagnose(&Sources { procfs: &procfs, etc: &etc, rootfs: &self.dir }, &pid.to_string(), own)
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (source, dest) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&source).unwrap(), dest).unwrap();
        } else if kind.is_dir() {
            copy_tree(&source, &dest);
        } else {
            std::fs::copy(&source, dest).unwrap();
        }
    }
}

pub(crate) fn limits_text(memlock: Option<u64>) -> String {
    let value = memlock.map_or("unlimited".to_owned(), |b| b.to_string());
    CAPTURE.replace(
        "Max locked memory         8388608              8388608              bytes     ",
        &format!("Max locked memory         {value:<21}{value:<21}bytes     "),
    )
}

/// systemd as PID 1, and an operator's ssh login (pid 5001) on the node.
pub(crate) fn base(host: &Host) {
    host.process(1, 0, 0, "systemd", "/usr/lib/systemd/systemd", Some(8 * MIB), "/init.scope");
    host.process(700, 1, 0, "sshd", "/usr/sbin/sshd", Some(8 * MIB), "/system.slice/ssh.service");
    host.process(5000, 700, 0, "sshd", "/usr/sbin/sshd", Some(8 * MIB), "/user.slice/user-0.slice/session-3.scope");
    host.process(5001, 5000, 0, "bash", "/usr/bin/bash", Some(8 * MIB), "/user.slice/user-0.slice/session-3.scope");
}

fn assert_first(d: &Diagnosis, wants: &[&str], never: &[&str]) {
    for want in wants {
        assert!(d.first.contains(want), "first remedy lacks {want:?}: {d:#?}");
    }
    for wrong in never {
        assert!(!d.first.contains(wrong), "first remedy names {wrong:?}: {d:#?}");
    }
}

#[test]
fn slurm_under_systemd_names_slurmds_unit() {
    let host = Host::fixture("slurm");
    let d = host.diagnose(4010, false);
    assert!(matches!(&d.path, LaunchPath::Slurm { slurmd: Some(p) } if p.pid == 800), "{d:#?}");
    assert_first(
        &d,
        &["slurmd.service.d/memlock.conf", "LimitMEMLOCK=infinity", "64.0 KiB", "slurmd.service:7 `LimitMEMLOCK=64K`"],
        &["limits.conf", "docker", "containerd", "PropagateResourceLimitsExcept"],
    );
    assert!(d.verify.contains("srun"), "{}", d.verify);
    // slurm.conf leaves propagation at ALL: the next fix on the same path, before the other paths.
    assert!(
        d.others[0].starts_with("then, same path:") && d.others[0].contains("PropagateResourceLimitsExcept=MEMLOCK")
    );
    assert!(d.others[1..].iter().all(|o| o.starts_with(OTHER) && !o.contains("Slurm:")), "{:#?}", d.others);
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    // The operator's own shell on the node: the node's slurmd decides, not the ssh login.
    let own = host.diagnose(5001, true);
    assert!(matches!(own.path, LaunchPath::Slurm { .. }), "{own:#?}");
    assert_first(&own, &["slurmd.service.d"], &["limits.d"]);
}

#[test]
fn slurm_with_an_unlimited_slurmd_blames_propagation() {
    let host = Host::fixture("slurm");
    host.process(800, 1, 0, "slurmd", "/usr/sbin/slurmd", None, "/system.slice/slurmd.service");
    host.etc_file("slurm/slurm.conf", "ClusterName=c\nPropagateResourceLimits=MEMLOCK,NOFILE  # from login nodes\n");
    let d = host.diagnose(4010, false);
    assert_first(&d, &["PropagateResourceLimitsExcept=MEMLOCK", "slurm.conf:2"], &["LimitMEMLOCK"]);
    // Excepted: back to slurmd's unit.
    host.etc_file("slurm/slurm.conf", "PropagateResourceLimitsExcept=MEMLOCK\n");
    let d = host.diagnose(4010, false);
    assert_first(&d, &["LimitMEMLOCK=infinity"], &["PropagateResourceLimitsExcept"]);
}

#[test]
fn docker_at_the_kernel_default_names_daemon_json() {
    let host = Host::fixture("docker-8mib");
    let d = host.diagnose(3010, false);
    assert!(matches!(d.path, LaunchPath::Docker { containerd_under_dockerd: false, .. }), "{d:#?}");
    assert_first(&d, &["/etc/docker/daemon.json", "default-ulimits", "unset", "8.0 MiB"], &["slurm", "limits.d"]);
    assert!(d.verify.starts_with("`docker exec"), "{}", d.verify);
    assert!(d.others.iter().any(|o| o.contains("containerd.service.d") && o.starts_with("also, same path")));
    assert!(d.others.iter().any(|o| o.contains("--ulimit memlock=-1:-1")));
}

#[test]
fn docker_with_a_64_mib_default_names_the_line_that_sets_it() {
    let host = Host::fixture("docker-64mib");
    let d = host.diagnose(3010, false);
    assert_first(&d, &["daemon.json", "now:", "67108864"], &["unset", "slurm"]);
    // A daemon.json that is not JSON: said, naming the file, and the fix still given.
    host.etc_file("docker/daemon.json", "{\"default-ulimits\": ");
    let d = host.diagnose(3010, false);
    assert!(d.errors.iter().any(|e| e.contains("daemon.json: not JSON")), "{:?}", d.errors);
    assert_first(&d, &["default-ulimits"], &[]);
}

#[test]
fn kubernetes_with_containerd_names_containerds_unit() {
    let host = Host::fixture("kubernetes");
    let d = host.diagnose(3010, false);
    assert!(matches!(&d.path, LaunchPath::Kubernetes { runtime: Some(r) } if r.pid == 600), "{d:#?}");
    assert_first(
        &d,
        &["pods have no ulimit field", "containerd.service.d/memlock.conf", "LimitMEMLOCK=infinity", "recreated"],
        &["daemon.json", "limits.d", "slurm"],
    );
    assert!(d.verify.contains("kubectl exec"));
    // From the operator's shell: kubelet on the node.
    let own = host.diagnose(5001, true);
    assert!(matches!(own.path, LaunchPath::Kubernetes { .. }), "{own:#?}");
}

#[test]
fn mpirun_over_ssh_before_a_new_login_says_log_in_again() {
    let host = Host::fixture("mpirun-ssh");
    let d = host.diagnose(6010, false);
    assert!(matches!(&d.path, LaunchPath::Ssh { mpi: Some(m), session: Some(_) } if m == "orted"), "{d:#?}");
    assert_first(
        &d,
        &["started before pam_limits granted it", "90-rdma.conf:1", "new login"],
        &["LimitMEMLOCK", "docker"],
    );
    assert!(d.verify.contains("ssh"));
    // Before anyone granted it: the pam_limits line to add.
    std::fs::remove_file(host.etc().join("security/limits.d/90-rdma.conf")).unwrap();
    let d = host.diagnose(6010, false);
    assert_first(&d, &["/etc/security/limits.d/memlock.conf", "memlock unlimited"], &["started before"]);
}

#[test]
fn over_ssh_without_pam_limits_says_limits_conf_has_no_effect() {
    let host = Host::fixture("mpirun-ssh");
    // pam_limits granted unlimited, but sshd does not run it: a new login would not help.
    host.etc_file("ssh/sshd_config", "Include /etc/ssh/sshd_config.d/*.conf\nPort 22\n");
    host.etc_file("ssh/sshd_config.d/50-site.conf", "UsePAM no\n");
    host.etc_file("pam.d/sshd", "@include common-session\nsession required pam_limits.so\n");
    host.etc_file("pam.d/common-session", "session required pam_unix.so\n");
    let d = host.diagnose(6010, false);
    assert_first(
        &d,
        &["without PAM", "50-site.conf:1 `UsePAM no`", "limits.conf has no effect over ssh", "`UsePAM yes`"],
        &["started before", "new login (and restart"],
    );
    // sshd's own limit is what the sessions get: its unit, named as it is installed.
    host.etc_file("systemd/system/ssh.service", "[Service]\nExecStart=/usr/sbin/sshd -D\n");
    let d = host.diagnose(6010, false);
    assert_first(&d, &["ssh.service.d/memlock.conf"], &[]);
    // PAM on, but the session stack has no pam_limits (Red Hat's layout, through an include).
    host.etc_file("ssh/sshd_config.d/50-site.conf", "UsePAM yes\n");
    host.etc_file("pam.d/sshd", "auth substack password-auth\nsession include password-auth\n");
    host.etc_file("pam.d/password-auth", "session required pam_unix.so\n");
    let d = host.diagnose(6010, false);
    assert_first(
        &d,
        &["pam_limits is not in sshd's PAM session stack", "session required pam_limits.so", "no effect over ssh"],
        &["started before"],
    );
    // With pam_limits in the stack, the granted limit needs a new login, and the others say
    // what was checked.
    host.etc_file("pam.d/password-auth", "session required pam_unix.so\n-session optional pam_limits.so\n");
    let d = host.diagnose(6010, false);
    assert_first(&d, &["started before pam_limits granted it", "new login"], &["without PAM"]);
    assert!(d.others.iter().any(|o| o.starts_with("checked, same path:") && o.contains("password-auth:2")), "{d:#?}");
}

#[test]
fn a_vendor_unit_and_its_drop_ins_decide_the_file_to_write() {
    let host = Host::fixture("kubernetes");
    // containerd's vendor unit under /usr/lib, and an /etc drop-in that sorts after memlock.conf.
    let vendor = host.dir.join("usr/lib/systemd/system/containerd.service");
    std::fs::create_dir_all(vendor.parent().unwrap()).unwrap();
    std::fs::write(&vendor, "[Service]\nExecStart=/usr/bin/containerd\nLimitMEMLOCK=8M\n").unwrap();
    let d = host.diagnose(3010, false);
    assert_first(&d, &["containerd.service.d/memlock.conf", "usr/lib/systemd/system/containerd.service:3"], &[]);
    host.etc_file("systemd/system/containerd.service.d/override.conf", "[Service]\nLimitMEMLOCK=16M\n");
    let d = host.diagnose(3010, false);
    assert_first(
        &d,
        &["containerd.service.d/zz-memlock.conf", "override.conf:2 `LimitMEMLOCK=16M`", "the last applies"],
        &["containerd.service.d/memlock.conf"],
    );
    // The unit already grants it and containerd (8 MiB) did not restart: restart it.
    host.etc_file("systemd/system/containerd.service.d/override.conf", "[Service]\nLimitMEMLOCK=infinity\n");
    let d = host.diagnose(3010, false);
    assert_first(&d, &["started before the change", "systemctl restart containerd", "override.conf:2"], &["zz-"]);
}

#[test]
fn cri_o_names_default_ulimits_where_it_is_set() {
    let host = Host::new("crio");
    base(&host);
    let pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f6f4e2a.slice/crio-4f2b6c1d.scope";
    host.process(650, 1, 0, "crio", "/usr/bin/crio", Some(8 * MIB), "/system.slice/crio.service");
    host.process(620, 1, 0, "kubelet", "/usr/bin/kubelet", Some(8 * MIB), "/system.slice/kubelet.service");
    host.process(3000, 1, 0, "conmon", "/usr/libexec/crio/conmon", Some(8 * MIB), "/system.slice/crio-conmon-4f.scope");
    host.process(3010, 3000, 1000, "python3", "/usr/bin/python3", Some(8 * MIB), pod);
    let d = host.diagnose(3010, false);
    assert!(matches!(&d.path, LaunchPath::Kubernetes { runtime: Some(r) } if r.pid == 650), "{d:#?}");
    assert_first(&d, &["crio.conf.d/99-memlock.conf", "memlock=-1:-1", "unset now"], &["containerd", "limits.d"]);
    host.etc_file("crio/crio.conf", "[crio.runtime]\ndefault_ulimits = [\"memlock=8388608:8388608\"]\n");
    host.etc_file("crio/crio.conf.d/10-site.conf", "[crio.runtime]\ndefault_ulimits = [\"nofile=65536:65536\"]\n");
    let d = host.diagnose(3010, false);
    assert_first(&d, &["10-site.conf:2", "without memlock", "keeping its other entries"], &["99-memlock.conf"]);
    assert!(d.others.iter().any(|o| o.contains("crio.service.d/memlock.conf")), "{d:#?}");
}

#[test]
fn dockerds_default_ulimit_flag_is_changed_where_it_is_set_not_in_daemon_json() {
    let host = Host::fixture("docker-8mib");
    let d = host.diagnose(3010, false);
    assert_first(&d, &["/etc/docker/daemon.json", "default-ulimits"], &["command line"]);
    // The distribution starts dockerd with the flag (Amazon Linux's /etc/sysconfig/docker OPTIONS):
    // default-ulimits in daemon.json too would stop dockerd from starting.
    std::fs::write(
        host.procfs().join("610/cmdline"),
        "/usr/bin/dockerd\0--default-ulimit\0nofile=32768:65536\0-H\0fd://\0",
    )
    .unwrap();
    let d = host.diagnose(3010, false);
    assert_first(
        &d,
        &[
            "command line",
            "`--default-ulimit nofile=32768:65536`",
            "add `--default-ulimit memlock=-1:-1`",
            "not in daemon.json",
        ],
        &["`\"default-ulimits\""],
    );
    std::fs::write(
        host.procfs().join("610/cmdline"),
        "/usr/bin/dockerd\0--default-ulimit=nofile=1024:4096\0--default-ulimit\0memlock=65536:65536\0",
    )
    .unwrap();
    let d = host.diagnose(3010, false);
    assert_first(&d, &["change `--default-ulimit memlock=65536:65536` to `--default-ulimit memlock=-1:-1`"], &[]);
    // A huge command line is an error naming it; the remedy falls back to daemon.json.
    std::fs::write(host.procfs().join("610/cmdline"), vec![b'x'; 2 << 20]).unwrap();
    let d = host.diagnose(3010, false);
    assert!(d.errors.iter().any(|e| e.contains("610/cmdline")), "{:?}", d.errors);
    assert_first(&d, &["/etc/docker/daemon.json"], &[]);
}

#[test]
fn mpirun_inside_a_service_launchers_job_is_the_services_limit_not_pam() {
    // Intel MPI's Hydra started in a Torque interactive job: pbs_mom, a systemd service, hands
    // the job its limit; no sshd above, so pam_limits plays no part.
    let host = Host::new("torque");
    base(&host);
    host.etc_file("security/limits.d/90-memlock.conf", "* soft memlock unlimited\n* hard memlock unlimited\n");
    let cg = "/system.slice/pbs_mom.service";
    host.process(960, 1, 0, "pbs_mom", "/usr/local/sbin/pbs_mom", Some(64 << 10), cg);
    host.process(4005, 960, 1000, "bash", "/usr/bin/bash", Some(64 << 10), cg);
    host.process(4006, 4005, 1000, "mpiexec.hydra", "/opt/intel/bin/mpiexec.hydra", Some(64 << 10), cg);
    host.process(4007, 4006, 1000, "hydra_pmi_proxy", "/opt/intel/bin/hydra_pmi_proxy", Some(64 << 10), cg);
    host.process(4010, 4007, 1000, "IMB-MPI1", "/opt/intel/imb/IMB-MPI1", Some(64 << 10), cg);
    let d = host.diagnose(4010, false);
    assert_eq!(d.path, LaunchPath::Service { unit: "pbs_mom.service".into() }, "{d:#?}");
    assert_first(&d, &["pbs_mom.service.d/memlock.conf", "LimitMEMLOCK=infinity"], &["limits.d", "new login"]);
    // The same ranks under a session's sshd are the ssh path, whatever the cgroup says.
    let d = Host::fixture("mpirun-ssh").diagnose(6010, false);
    assert!(matches!(d.path, LaunchPath::Ssh { .. }), "{d:#?}");
}

#[test]
fn a_systemd_unit_names_its_own_limit() {
    let host = Host::fixture("systemd-unit");
    let d = host.diagnose(3000, false);
    assert_eq!(d.path, LaunchPath::Service { unit: "trainer.service".into() });
    assert_first(&d, &["trainer.service.d/memlock.conf", "limits.conf:2 `LimitMEMLOCK=8M`"], &["slurmd", "docker"]);
}

#[test]
fn nothing_to_tell_by_lists_every_path() {
    let host = Host::new("unknown");
    host.process(1, 0, 0, "init", "/sbin/init", Some(8 * MIB), "/");
    host.process(50, 1, 1000, "python3", "/usr/bin/python3", Some(8 * MIB), "/");
    let d = host.diagnose(50, false);
    assert_eq!(d.path, LaunchPath::Unknown);
    assert!(d.first.starts_with("could not tell"), "{}", d.first);
    assert_eq!(d.others.len(), 5);
    assert!(d.others.iter().all(|o| o.starts_with("possible path:")));
}

#[test]
fn hostile_trees_give_errors_naming_the_file_not_a_crash() {
    let host = Host::new("hostile");
    base(&host);
    // A user's process named like slurmd, and a user's copy of the real binary: no Slurm path.
    host.process(900, 1, 1000, "slurmd", "/usr/bin/python3", Some(8 * MIB), "/user.slice");
    host.process(901, 1, 1000, "slurmd", "/home/alice/slurmd", Some(8 * MIB), "/user.slice");
    let d = host.diagnose(5001, true);
    assert!(matches!(d.path, LaunchPath::Ssh { .. }), "named like slurmd is not slurmd: {d:#?}");
    // A ppid cycle.
    host.process(7000, 7001, 1000, "a", "/usr/bin/a", Some(8 * MIB), "/");
    host.process(7001, 7000, 1000, "b", "/usr/bin/b", Some(8 * MIB), "/");
    let d = host.diagnose(7000, false);
    assert!(d.errors.iter().any(|e| e.contains("loops back to pid 7000")), "{:?}", d.errors);
    // An ancestor that vanished mid-walk: its status is gone; the walk stops there.
    host.process(7100, 7101, 1000, "python3", "/usr/bin/python3", Some(8 * MIB), "/");
    let d = host.diagnose(7100, false);
    assert!(d.errors.iter().any(|e| e.contains("7101/status")), "{:?}", d.errors);
    // A launcher whose limits file is huge or malformed: named, and the walk goes on.
    host.process(610, 1, 0, "dockerd", "/usr/sbin/dockerd", Some(8 * MIB), "/system.slice/docker.service");
    std::fs::write(host.procfs().join("610/limits"), vec![b'x'; 3 << 20]).unwrap();
    host.process(600, 1, 0, "containerd", "/usr/bin/containerd", Some(8 * MIB), "/system.slice/containerd.service");
    std::fs::write(host.procfs().join("600/limits"), "Max locked memory         lots                 8 bytes\n")
        .unwrap();
    let d = host.diagnose(5001, true);
    assert!(d.errors.iter().any(|e| e.contains("610/limits") && e.contains("larger than")), "{:?}", d.errors);
    assert!(d.errors.iter().any(|e| e.contains("600/limits") && e.contains("lots")), "{:?}", d.errors);
    assert!(matches!(&d.path, LaunchPath::Docker { engine: Some(e), .. } if e.limits.is_none()), "{d:#?}");
    // Garbage status and an exe link to nowhere.
    std::fs::write(host.procfs().join("5000/status"), "PPid:\tzz\n").unwrap();
    let d = host.diagnose(5001, true);
    assert!(d.errors.iter().any(|e| e.contains("5000/status")), "{:?}", d.errors);
    // A target that does not exist at all.
    let d = host.diagnose(99999, false);
    assert!(d.errors.iter().any(|e| e.contains("99999/status")), "{:?}", d.errors);
}

#[test]
fn a_real_process_that_exits_between_the_reads_is_named_not_a_crash() {
    // A real child in the real /proc: its status is read, then it is killed and reaped, then its
    // limits are read: the file is gone, and the error names it.
    let procfs = Path::new("/proc");
    let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id();
    let mut errors = Vec::new();
    // spawn can return before the child's exec has renamed it (it then still has the name of
    // the spawning test thread): wait for the exec.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut p = loop {
        let p = read_identity(procfs, pid, &mut errors).expect("the live child's status");
        if p.comm == "sleep" || std::time::Instant::now() > deadline {
            break p;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert_eq!((p.ppid, p.comm.as_str()), (Some(std::process::id()), "sleep"), "{p:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    read_limits(procfs, &mut p, &mut errors);
    assert_eq!(p.limits, None);
    let named = format!("/proc/{pid}/limits");
    assert!(errors.iter().any(|e| e.starts_with(&named)), "{errors:?}");
    // The walk from it and the whole diagnosis: gone, named, no crash.
    let mut errors = Vec::new();
    assert!(ancestry(procfs, pid, &mut errors).is_empty());
    assert!(errors.iter().any(|e| e.starts_with(&format!("/proc/{pid}/status"))), "{errors:?}");
    let etc = tempfile::tempdir().unwrap();
    let d = diagnose(&Sources { procfs, etc: etc.path(), rootfs: etc.path() }, &pid.to_string(), false);
    assert!(d.errors.iter().any(|e| e.contains(&format!("{pid}/status"))), "{:?}", d.errors);
}

#[test]
fn a_limits_file_rewritten_and_truncated_under_the_reader_is_a_value_or_an_error() {
    // The file changes between the stat and the read, and between reads: rewritten in place
    // (truncate, then write), cut short, emptied, grown past the bound. Every read gives one of
    // the values written or an error naming the file; never a torn value, never a panic.
    let host = Host::new("torn");
    host.process(610, 1, 0, "dockerd", "/usr/sbin/dockerd", Some(64 * MIB), "/system.slice/docker.service");
    let file = host.procfs().join("610/limits");
    let (a, b) = (limits_text(Some(64 * MIB)), limits_text(None));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (file, stop) = (file.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut round = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let text = match round % 5 {
                    0 => a.clone(),
                    1 => b.clone(),
                    2 => a[..a.find("Max locked memory").unwrap() + 40 + round % 30].to_owned(),
                    3 => String::new(),
                    _ => "x".repeat(2 << 20),
                };
                let _ = std::fs::write(&file, text);
                round += 1;
            }
        })
    };
    let (mut values, mut failures) = (0, 0);
    for _ in 0..3000 {
        let mut errors = Vec::new();
        let Some(p) = read_proc(&host.procfs(), 610, &mut errors) else {
            panic!("status is not rewritten: {errors:?}")
        };
        match p.limits {
            Some(l) => {
                assert!(
                    l == MemlockLimits { soft: Limit::Bytes(64 * MIB), hard: Limit::Bytes(64 * MIB) }
                        || l == MemlockLimits { soft: Limit::Unlimited, hard: Limit::Unlimited },
                    "a torn read became a limit: {l:?}"
                );
                values += 1;
            }
            None => {
                assert!(errors.iter().any(|e| e.contains("610/limits")), "{errors:?}");
                failures += 1;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(values + failures == 3000 && failures > 0, "{values} values, {failures} errors");
}

#[test]
fn a_real_users_process_named_like_a_launcher_is_not_taken_for_it() {
    // A real process whose executable is named slurmd, run by a normal user (nobody when the test
    // runs as root): its comm says slurmd, its uid does not, so the node has no slurmd.
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("slurmd");
    std::fs::copy("/bin/sleep", &exe).unwrap();
    let mut command = std::process::Command::new(&exe);
    command.arg("60");
    // SAFETY: geteuid has no preconditions and only reads the caller's credentials.
    if unsafe { libc::geteuid() } == 0 {
        command.uid(65534).gid(65534);
    }
    let mut child = command.spawn().unwrap();
    let pid = child.id();
    let procfs = Path::new("/proc");
    // The exec may not have happened yet: wait for the comm to say slurmd.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_to_string(procfs.join(format!("{pid}/comm"))).unwrap_or_default() != "slurmd\n" {
        assert!(std::time::Instant::now() < deadline, "the child never became slurmd");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut errors = Vec::new();
    let p = read_proc(procfs, pid, &mut errors).expect("the live child");
    let named_like = matches!(p.identity, memlock_kernel::launchers::Identity::NamedLike { .. });
    let on_node = node_launchers(procfs, &mut errors).iter().any(|l| l.pid == pid);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(named_like, "{p:?}");
    assert!(!on_node, "a user's slurmd is not the node's");
}
