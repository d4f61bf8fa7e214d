//! `check` and `estimate` on this machine: an unprivileged process with the default 8 MiB
//! memlock limit fails the memlock check; root (CAP_IPC_LOCK) passes it. Also on the fixture
//! node, with model flags no job can have, and with a stdout nobody reads (drill included).

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::{binary, binary_runnable_by, fixtures, is_root};

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
    let out = Command::new(binary())
        .args(["estimate", "--nodes", "2", "--qp-ring-bytes", "0", "--json"])
        .env_remove("NCCL_BUFFSIZE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 32 channels x (9633792 + 9633792) bytes plus 6 control pages (reference §8.3).
    assert_eq!(report["estimate"]["per_process_bytes"], 616_562_688u64 + 6 * 4096);
}

fn finding<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    let findings = report["findings"].as_array().expect("findings");
    findings.iter().find(|f| f["id"] == id).unwrap_or_else(|| panic!("{id} missing: {report}"))
}

/// `check` against the fixture roots: pid 4100 sits in a pod with 640 MiB of its 1 GiB free, and
/// the fixture has no environ files.
fn fixture_check(extra: &[&str]) -> Command {
    let root = fixtures();
    let mut cmd = Command::new(binary());
    cmd.arg("check")
        .arg("--path.procfs")
        .arg(root.join("proc"))
        .arg("--path.sysfs")
        .arg(root.join("sys"))
        .args(["--pid", "4100"])
        .args(extra);
    cmd
}

#[test]
fn the_fixture_node_fails_on_its_cgroup_with_the_fix() {
    let out = fixture_check(&["--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cgroup = finding(&report, "cgroup.memory");
    assert_eq!(cgroup["status"], "FAIL");
    assert!(cgroup["fix"].as_str().unwrap().starts_with("registered buffers are charged to the cgroup"), "{cgroup}");
    let env = finding(&report, "nccl.environment");
    assert_eq!(env["status"], "WARN");
    assert!(env["measured"].as_str().unwrap().contains("4100/environ"), "{env}");
    assert_eq!(env["fix"], "run the check as the job's user (or root) to see its NCCL_* variables");
    assert!(
        !report["findings"].as_array().unwrap().iter().any(|f| f["id"] == "nccl.debug"),
        "no environment, no NCCL_DEBUG verdict"
    );
}

#[test]
fn model_inputs_no_job_can_have_are_usage_errors() {
    for (flags, message) in [
        (&["--nodes", "0"][..], "--nodes 0: must be at least 1"),
        (&["--qps-per-connection", "0"][..], "--qps-per-connection 0: NCCL takes 1 to 128"),
        (&["--ranks-per-node", "0"][..], "--ranks-per-node 0: must be at least 1"),
        (&["--channels", "0"][..], "--channels 0: must be at least 1"),
    ] {
        for command in ["estimate", "check"] {
            let out = Command::new(binary()).arg(command).args(flags).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} {flags:?}: {stderr}");
            assert!(
                stderr.starts_with(&format!("memlock-exporter {command}: {message}")),
                "{command} {flags:?}: {stderr}"
            );
            assert!(out.stdout.is_empty(), "nothing is checked or estimated");
        }
    }
}

/// The write end of a pipe whose read end is already closed: every write fails with EPIPE, as
/// after `| head` has exited.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    assert_eq!(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) },
        0,
        "pipe2: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

/// Runs `cmd` with stdout closed and its stderr captured, killing it after 60 s.
fn run_into_closed_stdout(cmd: &mut Command) -> Output {
    let mut child = cmd.stdin(Stdio::null()).stdout(closed_pipe()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{cmd:?} still running 60 s after its stdout closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = Vec::new();
    child.stderr.take().unwrap().read_to_end(&mut stderr).unwrap();
    Output { status, stdout: Vec::new(), stderr }
}

#[test]
fn a_reader_that_went_away_ends_every_command_quietly_with_its_usual_status() {
    let estimate = || {
        let mut cmd = Command::new(binary());
        cmd.arg("estimate").env_remove("NCCL_BUFFSIZE");
        cmd
    };
    let drill = || {
        let mut cmd = Command::new(binary());
        // A drill that carried on would hold its memory for ten minutes.
        cmd.args(["drill", "--mode", "lock", "--step-mib", "1", "--max-mib", "1", "--hold-seconds", "600"]);
        cmd
    };
    let mut cases: Vec<(Command, i32)> = Vec::new();
    cases.push((estimate(), 0));
    let mut json = estimate();
    json.arg("--json");
    cases.push((json, 0));
    // The verdict survives the closed output: the fixture node FAILs, exit 1.
    cases.push((fixture_check(&[]), 1));
    cases.push((fixture_check(&["--json"]), 1));
    cases.push((drill(), 0));
    let mut help = Command::new(binary());
    help.args(["check", "--help"]);
    cases.push((help, 0));
    for (mut cmd, code) in cases {
        let out = run_into_closed_stdout(&mut cmd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{cmd:?}: {stderr}");
        assert_eq!(stderr, "", "{cmd:?}: nothing to say about a reader that left");
        assert_eq!(out.status.code(), Some(code), "{cmd:?}: {stderr}");
    }

    // The report from the issue: `estimate --json | head -c 400`.
    let mut child = estimate().arg("--json").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut head = [0u8; 400];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
}
