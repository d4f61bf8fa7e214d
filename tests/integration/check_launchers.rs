//! `check --pid` through the binary on fixture hosts with a real launch chain: /proc trees in
//! the kernel's formats (status, comm, the exe link, limits, cgroup, meminfo) and the /etc files
//! the fix is read from. The first remedy is the launcher's own; the wrong causes are absent.

use std::path::PathBuf;
use std::process::Command;

use crate::util::{binary, fixtures};

const MIB: u64 = 1 << 20;
const HEX: &str = "3f2b6c1d8e9a0b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c";

struct Host {
    dir: PathBuf,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Host {
    fn new(name: &str) -> Host {
        let dir = std::env::temp_dir().join(format!("memlock-check-launchers-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("proc/sys/vm")).unwrap();
        std::fs::create_dir_all(dir.join("sys")).unwrap();
        std::fs::copy(fixtures().join("proc/meminfo"), dir.join("proc/meminfo")).unwrap();
        std::fs::write(dir.join("proc/sys/vm/overcommit_memory"), "0\n").unwrap();
        Host { dir }
    }

    /// One process as the kernel shows it: the figures of a row of `ps -o pid,ppid,uid,comm`.
    #[allow(clippy::too_many_arguments)]
    fn process(&self, pid: u32, ppid: u32, uid: u32, comm: &str, exe: &str, memlock: u64, cgroup: &str) {
        let dir = self.dir.join("proc").join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let cap = if uid == 0 { "000001ffffffffff" } else { "0000000000000000" };
        let status = format!(
            "Name:\t{comm}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{ppid}\n\
                Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\nVmLck:\t       0 kB\n\
                VmPin:\t       0 kB\nCapInh:\t0000000000000000\nCapPrm:\t{cap}\nCapEff:\t{cap}\n\
                CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n"
        );
        std::fs::write(dir.join("status"), status).unwrap();
        std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        let limits = std::fs::read_to_string(fixtures().join("captures/proc_self_limits")).unwrap().replace(
            "Max locked memory         8388608              8388608              bytes     ",
            &format!("Max locked memory         {memlock:<21}{memlock:<21}bytes     "),
        );
        std::fs::write(dir.join("limits"), limits).unwrap();
        std::fs::write(dir.join("cgroup"), format!("0::{cgroup}\n")).unwrap();
    }

    fn etc(&self, rel: &str, text: &str) {
        let path = self.dir.join("etc").join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn check(&self, pid: u32) -> serde_json::Value {
        let path = |rel: &str| self.dir.join(rel).into_os_string();
        let out = Command::new(binary())
            .args(["check", "--json", "--nodes", "2", "--pid", &pid.to_string()])
            .arg("--path.procfs")
            .arg(path("proc"))
            .arg("--path.sysfs")
            .arg(path("sys"))
            .arg("--path.etc")
            .arg(path("etc"))
            .output()
            .expect("run check");
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn soft_fix(report: &serde_json::Value) -> String {
    let findings = report["findings"].as_array().unwrap();
    let soft = findings.iter().find(|f| f["id"] == "memlock.soft").unwrap();
    assert_eq!(soft["status"], "FAIL", "{soft}");
    soft["fix"].as_str().unwrap().to_owned()
}

fn base(host: &Host) {
    host.process(1, 0, 0, "systemd", "/usr/lib/systemd/systemd", 8 * MIB, "/init.scope");
    host.process(700, 1, 0, "sshd", "/usr/sbin/sshd", 8 * MIB, "/system.slice/ssh.service");
}

#[test]
fn slurm_under_systemd_at_64_kib_names_slurmds_unit() {
    let host = Host::new("slurm");
    base(&host);
    host.process(800, 1, 0, "slurmd", "/usr/sbin/slurmd", 64 << 10, "/system.slice/slurmd.service");
    let step = "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0";
    host.process(4000, 1, 0, "slurmstepd", "/usr/sbin/slurmstepd", 64 << 10, step);
    host.process(4010, 4000, 1000, "python3", "/usr/bin/python3.11", 64 << 10, step);
    host.etc("slurm/slurm.conf", "ClusterName=c\nPropagateResourceLimitsExcept=MEMLOCK\n");
    let report = host.check(4010);
    let fix = soft_fix(&report);
    assert!(fix.starts_with("slurmd (pid 800, memlock 64.0 KiB) hands every step its limit"), "{fix}");
    assert!(fix.contains("slurmd.service.d/memlock.conf") && fix.contains("srun"), "{fix}");
    for wrong in ["limits.conf", "limits.d", "daemon.json", "docker", "PropagateResourceLimitsExcept"] {
        assert!(!fix.contains(wrong), "{wrong}: {fix}");
    }
    assert_eq!(report["launch"]["path"], "Slurm (slurmd, slurmstepd)");
    let others = report["launch"]["others"].as_array().unwrap();
    assert!(others.iter().all(|o| o.as_str().unwrap().starts_with("other path")), "{others:?}");
}

#[test]
fn docker_with_a_64_mib_default_names_daemon_json_and_the_line() {
    let host = Host::new("docker");
    base(&host);
    host.process(600, 1, 0, "containerd", "/usr/bin/containerd", 8 * MIB, "/system.slice/containerd.service");
    host.process(610, 1, 0, "dockerd", "/usr/sbin/dockerd", 8 * MIB, "/system.slice/docker.service");
    host.process(3000, 1, 0, "containerd-shim", "/usr/bin/containerd-shim-runc-v2", 8 * MIB, "/system.slice");
    host.process(
        3010,
        3000,
        1000,
        "python3",
        "/usr/bin/python3",
        64 * MIB,
        &format!("/system.slice/docker-{HEX}.scope"),
    );
    // A user's process calling itself slurmd is not a Slurm node.
    host.process(900, 1, 1000, "slurmd", "/usr/bin/python3", 8 * MIB, "/user.slice");
    host.etc(
        "docker/daemon.json",
        r#"{"default-ulimits": {"memlock": {"Name": "memlock", "Hard": 67108864, "Soft": 67108864}}}"#,
    );
    let report = host.check(3010);
    let fix = soft_fix(&report);
    assert!(fix.starts_with("dockerd's default for every container"), "{fix}");
    assert!(fix.contains("67108864") && fix.contains("docker exec"), "{fix}");
    for wrong in ["slurm", "limits.d", "kubectl"] {
        assert!(!fix.contains(wrong), "{wrong}: {fix}");
    }
    assert!(report["launch"]["errors"].as_array().unwrap().is_empty(), "{}", report["launch"]);
}
