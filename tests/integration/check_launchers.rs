//! `check --pid` through the binary on the fixture hosts of tests/fixtures/hosts, each with a real
//! launch chain: /proc trees in the kernel's formats (status, comm, the exe link, limits, cgroup,
//! meminfo) and the /etc files the fix is read from. The first remedy is the launcher's own; the
//! wrong causes are absent.

use std::path::PathBuf;
use std::process::Command;

use crate::util::{binary, fixtures};

const MIB: u64 = 1 << 20;

struct Host {
    dir: PathBuf,
    // Removes the copy when the test drops the host.
    _tmp: tempfile::TempDir,
}

impl Host {
    /// A copy of tests/fixtures/hosts/NAME, the exe links kept as links.
    fn fixture(name: &str) -> Host {
        let tmp = tempfile::Builder::new().prefix(&format!("memlock-check-launchers-{name}-")).tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        copy_tree(&fixtures().join("hosts").join(name), &dir);
        std::fs::create_dir_all(dir.join("sys")).unwrap();
        Host { dir, _tmp: tmp }
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
            .arg("--path.rootfs")
            .arg(path(""))
            .output()
            .expect("run check");
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
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

fn soft_fix(report: &serde_json::Value) -> String {
    let findings = report["findings"].as_array().unwrap();
    let soft = findings.iter().find(|f| f["id"] == "memlock.soft").unwrap();
    assert_eq!(soft["status"], "FAIL", "{soft}");
    soft["fix"].as_str().unwrap().to_owned()
}

#[test]
fn slurm_under_systemd_at_64_kib_names_slurmds_unit() {
    let host = Host::fixture("slurm");
    let report = host.check(4010);
    let fix = soft_fix(&report);
    assert!(fix.starts_with("slurmd (pid 800, memlock 64.0 KiB) hands every step its limit"), "{fix}");
    assert!(fix.contains("slurmd.service.d/memlock.conf") && fix.contains("srun"), "{fix}");
    for wrong in ["limits.conf", "limits.d", "daemon.json", "docker", "PropagateResourceLimitsExcept"] {
        assert!(!fix.contains(wrong), "{wrong}: {fix}");
    }
    assert_eq!(report["launch"]["path"], "Slurm (slurmd, slurmstepd)");
    // slurm.conf leaves PropagateResourceLimits at ALL: the next fix on the same path, then the
    // other paths, each marked.
    let others: Vec<&str> = report["launch"]["others"].as_array().unwrap().iter().filter_map(|o| o.as_str()).collect();
    assert!(others[0].starts_with("then, same path:") && others[0].contains("PropagateResourceLimitsExcept=MEMLOCK"));
    assert!(others[1..].iter().all(|o| o.starts_with("other path") && !o.contains("Slurm")), "{others:?}");
    // The RDMA user space, from the node's files: the libibverbs the loader resolves, the
    // MLNX_OFED installer's ofed_info.
    let fact = |name: &str| {
        report["facts"].as_array().unwrap().iter().find(|f| f["name"] == name).unwrap()["value"].as_str().unwrap()
    };
    assert_eq!(fact("rdma-core"), "2410mlnx54.0 (/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.2410mlnx54.0)");
    assert_eq!(fact("OFED"), "MLNX_OFED_LINUX-24.10-1.1.4.0 (/usr/bin/ofed_info)");
    // Another host has neither: not found, and the check still runs.
    let docker = Host::fixture("docker-8mib").check(3010);
    let value = |r: &serde_json::Value, name: &str| {
        r["facts"].as_array().unwrap().iter().find(|f| f["name"] == name).unwrap()["value"].as_str().unwrap().to_owned()
    };
    assert!(value(&docker, "rdma-core").starts_with("not found"), "{docker}");
    assert!(value(&docker, "OFED").starts_with("not found"), "{docker}");
}

#[test]
fn docker_with_a_64_mib_default_names_daemon_json_and_the_line() {
    let host = Host::fixture("docker-64mib");
    // A user's process calling itself slurmd is not a Slurm node.
    host.process(900, 1, 1000, "slurmd", "/usr/bin/python3", 8 * MIB, "/user.slice");
    let report = host.check(3010);
    let fix = soft_fix(&report);
    assert!(fix.starts_with("dockerd's default for every container"), "{fix}");
    assert!(fix.contains("67108864") && fix.contains("docker exec"), "{fix}");
    for wrong in ["slurm", "limits.d", "kubectl"] {
        assert!(!fix.contains(wrong), "{wrong}: {fix}");
    }
    assert!(report["launch"]["errors"].as_array().unwrap().is_empty(), "{}", report["launch"]);
}

#[test]
fn hostile_trees_through_the_binary_are_named_errors_not_a_crash() {
    let host = Host::fixture("slurm");
    // A ppid cycle for the checked process, a user's process named like dockerd, and slurmd's own
    // limits file grown past the bound, then malformed.
    host.process(7000, 7001, 1000, "python3", "/usr/bin/python3", 8 * MIB, "/user.slice");
    host.process(7001, 7000, 1000, "bash", "/usr/bin/bash", 8 * MIB, "/user.slice");
    host.process(900, 1, 1000, "dockerd", "/home/alice/dockerd", 8 * MIB, "/user.slice");
    let limits = host.dir.join("proc/800/limits");
    std::fs::write(&limits, vec![b'7'; 3 << 20]).unwrap();
    let report = host.check(7000);
    let errors: Vec<&str> = report["launch"]["errors"].as_array().unwrap().iter().filter_map(|e| e.as_str()).collect();
    assert!(errors.iter().any(|e| e.contains("loops back to pid 7000")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("800/limits") && e.contains("larger than")), "{errors:?}");
    assert_eq!(report["launch"]["path"], "Slurm (slurmd, slurmstepd)", "the named-like dockerd is not dockerd");
    std::fs::write(&limits, "Limit Soft Limit Hard Limit Units\nMax locked memory 65536 lots bytes\n").unwrap();
    let report = host.check(7000);
    let errors = report["launch"]["errors"].to_string();
    assert!(errors.contains("800/limits") && errors.contains("lots"), "{errors}");
    assert!(soft_fix(&report).contains("slurmd (pid 800, memlock unknown)"), "{}", soft_fix(&report));
}
