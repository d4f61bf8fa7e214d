//! `check` and `estimate` on this machine: an unprivileged process with the default 8 MiB
//! memlock limit fails the memlock check; root (CAP_IPC_LOCK) passes it.

use std::process::Command;

use crate::util::{binary, binary_runnable_by, is_root};

#[test]
fn unprivileged_with_the_default_limit_fails_on_memlock() {
    assert!(is_root(), "live tests run as root");
    let bin = binary_runnable_by(65534);
    let out = Command::new("prlimit")
        .args(["--memlock=8388608:8388608", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["check", "--json", "--nodes", "2"])
        .env("NCCL_DEBUG", "WARN")
        .output()
        .expect("run check");
    assert_eq!(out.status.code(), Some(1), "stdout: {}", String::from_utf8_lossy(&out.stdout));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let soft = report["findings"].as_array().unwrap().iter().find(|f| f["id"] == "memlock.soft").unwrap();
    assert_eq!(soft["status"], "FAIL");
    assert!(soft["measured"].as_str().unwrap().starts_with("8.0 MiB"), "{soft}");
    let cap = report["findings"].as_array().unwrap().iter().find(|f| f["id"] == "memlock.cap_ipc_lock").unwrap();
    assert_eq!(cap["measured"], "not held: the memlock limit applies");
}

#[test]
fn root_with_cap_ipc_lock_passes_memlock_and_a_bogus_nccl_variable_warns() {
    assert!(is_root(), "live tests run as root");
    let out = Command::new(binary())
        .args(["check", "--nodes", "2"])
        .env("NCCL_DEBUG", "INFO")
        .env("NCCL_IB_MR_RANGE", "1")
        .output()
        .expect("run check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("PASS  memlock.soft"), "{text}");
    assert!(text.contains("WARN  nccl.env.NCCL_IB_MR_RANGE"), "{text}");
    assert_eq!(out.status.code(), Some(0), "WARN alone does not fail: {text}");
    let strict = Command::new(binary()).args(["check", "--strict"]).env("NCCL_IB_MR_RANGE", "1").output().unwrap();
    assert_eq!(strict.status.code(), Some(1));
}

#[test]
fn a_process_that_does_not_exist_cannot_be_checked() {
    let out = Command::new(binary()).args(["check", "--pid", "999999999"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("999999999"));
}

#[test]
fn estimate_prints_the_reference_example() {
    let out = Command::new(binary()).args(["estimate", "--nodes", "2", "--qp-ring-bytes", "0", "--json"]).env_remove("NCCL_BUFFSIZE").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 32 channels x (9633792 + 9633792) bytes plus 6 control pages (reference §8.3).
    assert_eq!(report["estimate"]["per_process_bytes"], 616_562_688u64 + 6 * 4096);
}
