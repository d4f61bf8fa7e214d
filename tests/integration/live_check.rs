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
    crate::require!(is_root(), "live tests run as root");
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
    let cap = cap["measured"].as_str().unwrap();
    assert!(cap.starts_with("CAP_IPC_LOCK effective no, permitted no,"), "{cap}");
    assert!(cap.ends_with("not held: the memlock limit applies"), "{cap}");
}

/// An operator's `check` as root after a crash judges the job's ranks, which do not hold root's
/// CAP_IPC_LOCK: at this machine's limit (at most 8 MiB) memlock is not PASS, and it says once
/// that the capability was left out.
#[test]
fn root_without_pid_judges_a_normal_users_rank() {
    crate::require!(is_root(), "live tests run as root");
    let out = Command::new("prlimit")
        .args(["--memlock=8388608:8388608", binary(), "check", "--json", "--nodes", "2"])
        .env("NCCL_DEBUG", "WARN")
        .output()
        .expect("run check");
    assert_eq!(out.status.code(), Some(1), "stdout: {}", String::from_utf8_lossy(&out.stdout));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = report["findings"].as_array().unwrap();
    let soft = findings.iter().find(|f| f["id"] == "memlock.soft").unwrap();
    assert_eq!(soft["status"], "FAIL", "{soft}");
    assert!(!soft["measured"].as_str().unwrap().contains("not enforced"), "{soft}");
    let cap = findings.iter().find(|f| f["id"] == "memlock.cap_ipc_lock").unwrap();
    let cap = cap["measured"].as_str().unwrap();
    assert!(cap.starts_with("CAP_IPC_LOCK effective yes, permitted yes, bounding yes"), "{cap}");
    assert!(cap.contains("left out") && cap.contains("--as-root"), "{cap}");
    assert_eq!(findings.iter().filter(|f| f["measured"].as_str().unwrap().contains("left out")).count(), 1);
    // The launcher's path is reported with its first fix, whatever this machine turns out to be.
    let launch = &report["launch"];
    assert!(launch["first"].as_str().is_some_and(|f| !f.is_empty()), "{launch}");
    assert_eq!(
        soft["fix"].as_str().unwrap(),
        format!("{} (verify: {})", launch["first"].as_str().unwrap(), launch["verify"].as_str().unwrap())
    );
    // The checklist: verdict first, the facts, the assumptions last.
    let out = Command::new("prlimit")
        .args(["--memlock=8388608:8388608", binary(), "check", "--nodes", "2"])
        .env("NCCL_DEBUG", "WARN")
        .output()
        .expect("run check");
    let text = String::from_utf8_lossy(&out.stdout);
    let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle:?} missing:\n{text}"));
    assert!(text.starts_with("memlock-exporter check (pid self): FAIL: "), "{text}");
    assert!(at("FAIL  memlock.soft") < at("\nfacts:\n"), "{text}");
    for fact in ["job shape", "MemTotal", "MemAvailable", "Mlocked", "pinned", "hugepages", "overcommit", "kernel"] {
        assert!(at("\nfacts:\n") < at(&format!("  {fact}")), "{fact}: {text}");
    }
    assert!(at("\nfacts:\n") < at("PASS  ") && at("PASS  ") < at("\nmodel: "), "{text}");
    assert!(at("\nmodel: ") < at("assumed (pass the real figures):"), "{text}");
    assert!(text.contains("4 communicators per rank"), "{text}");
    // --summary stays one line.
    let out = Command::new("prlimit")
        .args(["--memlock=8388608:8388608", binary(), "check", "--summary", "--nodes", "2"])
        .output()
        .expect("run check");
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_eq!(summary.lines().count(), 1, "{summary}");
    assert!(summary.starts_with("memlock.soft 8.0 MiB"), "{summary}");
}

#[test]
fn root_with_cap_ipc_lock_passes_memlock_and_a_bogus_nccl_variable_warns() {
    crate::require!(is_root(), "live tests run as root");
    let out = Command::new(binary())
        .args(["check", "--as-root", "--nodes", "2"])
        .env("NCCL_DEBUG", "INFO")
        .env("NCCL_IB_MR_RANGE", "1")
        .output()
        .expect("run check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("PASS  memlock.soft"), "{text}");
    assert!(text.contains("WARN  nccl.env.NCCL_IB_MR_RANGE"), "{text}");
    assert_eq!(out.status.code(), Some(0), "WARN alone does not fail: {text}");
    let strict =
        Command::new(binary()).args(["check", "--as-root", "--strict"]).env("NCCL_IB_MR_RANGE", "1").output().unwrap();
    assert_eq!(strict.status.code(), Some(1));
    // estimate applies the same rule: root's 8 MiB soft limit is not enforced, so not too low.
    let out = nccl_clean(Command::new(binary()).args(["estimate", "--json", "--nics", "8"])).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verdict"]["cap_ipc_lock_exempt"], true, "{}", report["verdict"]);
    assert_eq!(report["verdict"]["fits_memlock_limit"], true);
    let out = nccl_clean(Command::new(binary()).args(["estimate", "--nics", "8"])).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("not enforced (CAP_IPC_LOCK in the initial user namespace)"));
}

#[test]
fn a_process_that_does_not_exist_cannot_be_checked() {
    let out = Command::new(binary()).args(["check", "--pid", "999999999"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("999999999"));
}

/// Case A of docs/check.md through the binary: 2 nodes x 8 GPUs x 8 NICs, GPUDirect off.
#[test]
fn estimate_prints_worked_case_a() {
    let out =
        nccl_clean(Command::new(binary()).args(["estimate", "--nodes", "2", "--nics", "8", "--gdr", "off", "--json"]))
            .output()
            .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = &report["estimate"];
    // 16 channels (S = 8). Per rank 4 sends x 9949184 B + 4 receives x 10084352 B + two doorbell
    // pages: 2 ring sends and 2 ring receives, 2 tree sends and 2 tree receives of its own (the
    // tree's peers are not the ring's).
    assert_eq!(e["inputs"]["channels"]["count"], 16u64);
    assert_eq!(e["inputs"]["channels"]["search"], 8u64);
    assert_eq!(e["per_rank_max_bytes"], 80_142_336u64);
    assert_eq!(e["per_node_bytes"], 8 * 80_142_336u64);
    assert_eq!(e["per_node_host_bytes"], 8 * 80_142_336u64);
    assert_eq!(e["scenarios"][0]["algorithms"], "ring");
    assert_eq!(e["scenarios"][1]["algorithms"], "ring + tree");
    let ranks = e["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 8);
    let terms = ranks[0]["terms"].as_array().unwrap();
    for alg in ["ring", "tree"] {
        let data = terms.iter().find(|t| t["algorithm"] == alg && t["name"] == "data buffers").unwrap();
        assert_eq!(data["memlock_bytes"], 4 * 9_633_792u64, "{data}");
    }
    assert_eq!(e["gdr"]["mode"], "off");
    assert_eq!(e["nccl_version"], "2.30.7");
    // The text shows the same figures and what each assumes.
    let out = nccl_clean(Command::new(binary()).args(["estimate", "--nics", "8", "--gdr", "off"])).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ring + tree                    76.4 MiB"), "{text}");
    assert!(text.contains("busiest rank: local rank 0 of node 0 (80142336 B)"), "{text}");
    assert!(text.contains("not modelled:"), "{text}");
    // What was assumed, and the flag for the real figure.
    assert!(text.contains("assumed (pass the real figures):\n  - channels C = 16 and S = 8"), "{text}");
    assert!(text.contains("--search-channels S from its \"Pattern 4, crossNic 0, nChannels S\" line"), "{text}");
    assert_eq!(e["assumed"].as_array().unwrap().len(), 1, "--gdr and --nics were given: {}", e["assumed"]);
    let out = nccl_clean(Command::new(binary()).args(["check", "--json", "--nics", "8"])).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let assumed = report["model"]["assumed"].as_array().unwrap();
    assert_eq!(assumed.len(), 3, "{assumed:?}");
    assert!(assumed[1].as_str().unwrap().starts_with("GPUDirect off as detected on this node: pass --gdr"));
    assert!(assumed[2].as_str().unwrap().starts_with("4 communicators per rank"), "{assumed:?}");
    assert_eq!(report["model"]["search_channels"], 8u64);
    let out = nccl_clean(Command::new(binary()).args(["check", "--nics", "8"])).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("assumed (pass the real figures):\n  - channels C = 16 and S = 8"), "{text}");
}

/// A command without the NCCL_* variables of whoever runs the tests.
fn nccl_clean(cmd: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"NCCL_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("HOME", "/nonexistent")
}

/// A variable that is not UTF-8 (`env FOO=$'\xff' memlock-exporter check`) must not abort `check`
/// (std::env::vars panics on one). The environment is bytes: a foreign variable is not NCCL's
/// business, an NCCL buffer size NCCL reads as 0 is a FAIL naming it, and the exit codes stay
/// 0/1/2.
#[test]
fn a_variable_that_is_not_utf8_is_read_not_fatal() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let check = |name: &[u8], value: &[u8]| {
        let mut cmd = Command::new(binary());
        nccl_clean(&mut cmd).args(["check", "--json"]).env("NCCL_DEBUG", "WARN");
        cmd.env(OsStr::from_bytes(name), OsStr::from_bytes(value)).output().unwrap()
    };
    let out = check(b"FOO", b"\xff");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(matches!(out.status.code(), Some(0 | 1)), "a verdict, not a crash: {:?} {stderr}", out.status);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!report["findings"].as_array().unwrap().iter().any(|f| f["id"].as_str().unwrap().contains("FOO")));

    let out = check(b"NCCL_BUFFSIZE", b"\xff");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = finding(&report, "nccl.env.NCCL_BUFFSIZE");
    assert_eq!(f["status"], "FAIL");
    assert!(f["measured"].as_str().unwrap().starts_with("NCCL_BUFFSIZE=\\xff: no number, so NCCL reads 0"), "{f}");

    // A name that is not UTF-8 either.
    let out = check(b"NCCL_\xfe", b"1");
    assert!(matches!(out.status.code(), Some(0 | 1)), "{:?}", out.status);

    // estimate reads it too, and says so instead of ignoring it.
    let mut cmd = Command::new(binary());
    nccl_clean(&mut cmd).args(["estimate", "--nics", "8", "--gdr", "off"]);
    let out = cmd.env("NCCL_BUFFSIZE", OsStr::from_bytes(b"\xff")).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("warning: NCCL_BUFFSIZE=\\xff: no number, so NCCL reads 0"), "{text}");
    assert!(text.contains("from the environment: NCCL_BUFFSIZE=\\xff (read as 0)"), "{text}");
    assert!(text.contains("Simple 0 B"), "the model takes what NCCL reads: {text}");
}

/// What NCCL accepts is never flagged; what it reads otherwise, or not at all, is; values come
/// from NCCL's configuration file too.
#[test]
fn nccl_variables_are_judged_as_nccl_reads_them() {
    let conf = std::env::temp_dir().join(format!("memlock-check-nccl-{}.conf", std::process::id()));
    std::fs::write(&conf, "NCCL_LL_BUFFSIZE=512K\nNCCL_IB_TIMEOUT=22\n").unwrap();
    let mut cmd = Command::new(binary());
    nccl_clean(&mut cmd).args(["check", "--json"]).envs([
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_IB_GID_INDEX", "-1"),
        ("NCCL_BUFFSIZE", "0x400000"),
        ("NCCL_MIN_NRINGS", "4"),
        ("NCCL_IB_PKEY", "0x8001"),
        ("NCCL_GDR_FLUSH_DISABLE", "1"),
        ("NCCL_WORK_FIFO_DEPTH", "4"),
        ("NCCL_IB_QPS_PER_CONNECTION", "129"),
    ]);
    let out = cmd.env("NCCL_CONF_FILE", &conf).output().unwrap();
    std::fs::remove_file(&conf).unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let nccl: Vec<&serde_json::Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"].as_str().unwrap().starts_with("nccl.env."))
        .collect();
    let mut ids: Vec<&str> = nccl.iter().map(|f| f["id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(
        ids,
        ["nccl.env.NCCL_IB_QPS_PER_CONNECTION", "nccl.env.NCCL_LL_BUFFSIZE", "nccl.env.NCCL_WORK_FIFO_DEPTH"],
        "{report}"
    );
    let by_id = |id: &str| *nccl.iter().find(|f| f["id"] == id).unwrap();
    let removed = by_id("nccl.env.NCCL_WORK_FIFO_DEPTH");
    assert_eq!(removed["status"], "WARN");
    assert!(removed["fix"].as_str().unwrap().contains("last read by NCCL v2.21.5-1"), "{removed}");
    assert_eq!(by_id("nccl.env.NCCL_IB_QPS_PER_CONNECTION")["status"], "FAIL");
    let from_file = by_id("nccl.env.NCCL_LL_BUFFSIZE");
    assert_eq!(from_file["status"], "WARN", "NCCL reads 512: said, not failed");
    let measured = from_file["measured"].as_str().unwrap();
    assert!(
        measured.starts_with(&format!("NCCL_LL_BUFFSIZE=512K (from {}): NCCL reads 512", conf.display())),
        "{measured}"
    );
    assert_eq!(out.status.code(), Some(1));
}

fn finding<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    let findings = report["findings"].as_array().expect("findings");
    findings.iter().find(|f| f["id"] == id).unwrap_or_else(|| panic!("{id} missing: {report}"))
}

/// `check` against the fixture roots: pid 4100 sits in a pod with 654 MiB of its 1 GiB free, and
/// the fixture has no environ files. The job: 4 nodes of 8 GPUs on 8 NICs, GPUDirect off, 1.6 GiB
/// of host memory per node.
fn fixture_check(extra: &[&str]) -> Command {
    let root = fixtures();
    let mut cmd = Command::new(binary());
    cmd.arg("check")
        .arg("--path.procfs")
        .arg(root.join("proc"))
        .arg("--path.sysfs")
        .arg(root.join("sys"))
        .args(["--pid", "4100", "--nodes", "4", "--nics", "8", "--gdr", "off"])
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
        (&["--nodes", "65537"], "--nodes 65537: NCCL takes at most 65536"),
        (&["--ranks-per-node", "0"], "--ranks-per-node 0: must be at least 1"),
        (&["--ranks-per-node", "73"], "--ranks-per-node 73: NCCL takes at most 72"),
        (&["--nics", "0"], "--nics 0: must be at least 1"),
        (&["--nics", "33"], "--nics 33: NCCL takes at most 32"),
        (&["--channels", "0"], "--channels 0: must be at least 1"),
        (&["--channels", "65"], "--channels 65: NCCL takes at most 64"),
        (&["--communicators", "0"], "--communicators 0: must be at least 1"),
        (&["--p2p-channels", "0"], "--p2p-channels 0: must be at least 1"),
        (&["--devices-per-connection", "9"], "--devices-per-connection 9: NCCL takes at most 8"),
        (&["--qps-per-connection", "0"], "--qps-per-connection 0: must be at least 1"),
        (&["--qps-per-connection", "129"], "--qps-per-connection 129: NCCL takes at most 128"),
        (&["--buffsize", "0"], "--buffsize 0: NCCL takes 1 to 2147483647 bytes"),
        (&["--ll-buffsize", "2147483648"], "--ll-buffsize 2147483648: NCCL takes 1 to"),
        (&["--ll128-buffsize", "0"], "--ll128-buffsize 0: NCCL takes 1 to"),
        (&["--gdr", "both"], "--gdr \"both\": expected off, dmabuf or peermem"),
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
    // Values clap cannot parse, and flags that no longer exist, name the flag too.
    for flags in [&["--nics", "eight"][..], &["--channels", "x"], &["--qp-ring-bytes", "0"]] {
        for command in ["estimate", "check"] {
            let out = Command::new(binary()).arg(command).args(flags).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{command} {flags:?}");
            assert!(String::from_utf8_lossy(&out.stderr).contains(flags[0]), "{command} {flags:?}");
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

/// `check` finds the variable getenv sees without comparing every variable with every earlier one.
/// Ten times the variables must cost at most about twenty times the time (linear with headroom for
/// a loaded machine), measured against a baseline of the same run; half the variables are NCCL_*
/// names NCCL does not read, so every one is also judged and reported.
#[test]
fn check_time_grows_linearly_with_the_environment() {
    let run = |n: usize| {
        let mut cmd = Command::new(binary());
        nccl_clean(cmd.args(["check", "--json"]));
        for k in 0..n {
            let name = if k % 2 == 0 { format!("NCCL_MEMLOCK_TEST_{k}") } else { format!("MEMLOCK_TEST_{k}") };
            cmd.env(name, "1");
        }
        // The fastest of three: a run slowed by another job on the machine is not the code's cost.
        let mut best = Duration::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            let out = cmd.output().unwrap();
            best = best.min(start.elapsed());
            assert!(matches!(out.status.code(), Some(0 | 1)), "{}", String::from_utf8_lossy(&out.stderr));
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let reported = report["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["id"].as_str().is_some_and(|id| id.starts_with("nccl.env.NCCL_MEMLOCK_TEST_")))
                .count();
            assert_eq!(reported, n / 2, "every unknown NCCL_* variable is a finding");
        }
        best
    };
    let small = run(4_000);
    let large = run(40_000);
    eprintln!("check: 4,000 variables {small:?}, 40,000 variables {large:?}");
    assert!(large <= small * 20, "10x the variables took {:.1}x the time", large.as_secs_f64() / small.as_secs_f64());
}
