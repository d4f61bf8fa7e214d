//! `estimate --nccl-log` and `check --nccl-log` through the binary, on the written and public
//! logs of tests/fixtures/nccl-logs: the `nccl_log` key scripts read, and exit 2 for a file that
//! is not an NCCL log.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use crate::util::{binary, fixtures};

fn log(name: &str) -> String {
    fixtures().join("nccl-logs").join(name).display().to_string()
}

/// The job's flags only: none of this machine's NCCL variables or configuration files.
fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(binary());
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"NCCL_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("HOME", "/nonexistent").args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run the binary");
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.unwrap_or_default()).expect("write stdin");
    }
    child.wait_with_output().expect("wait")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

#[test]
fn estimate_reads_each_process_from_the_log() {
    let path = log("2x8x8-ring-tree-v2.21.log");
    let out = run(&["estimate", "--json", "--nics", "8", "--gdr", "off", "--nccl-log", &path], None);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report = json(&out);
    let l = &report["nccl_log"];
    assert_eq!(l["nccl_version"], "2.21.5+cuda12.4");
    let ranks = l["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 16);
    for r in ranks {
        for key in ["host", "pid", "cuda_dev", "net_send", "net_recv", "gdr"] {
            assert!(r.get(key).is_some(), "{key} missing: {r}");
        }
        assert_eq!(
            (r["net_send"].as_u64(), r["net_recv"].as_u64(), r["gdr"].as_bool()),
            (Some(4), Some(4), Some(false))
        );
    }
    assert_eq!(l["failures"], serde_json::json!([]));
    assert_eq!(l["per_rank_max_bytes"], report["estimate"]["per_rank_max_bytes"], "the log and the model agree");
    // One communicator: its 16 processes, every connection of theirs set up in it.
    let comms = l["per_communicator"].as_array().unwrap();
    assert_eq!(comms.len(), 1);
    let c = &comms[0];
    assert_eq!((c["nranks"].as_u64(), c["members"].as_array().map(Vec::len)), (Some(16), Some(16)));
    assert_eq!((c["net_send"].as_u64(), c["net_recv"].as_u64(), c["p2p"].as_u64()), (Some(64), Some(64), Some(0)));
    assert!(ranks.iter().all(|r| r["communicators"] == serde_json::json!([c["key"]])), "{ranks:?}");
    // The same from standard input, in the table.
    let text = std::fs::read(&path).unwrap();
    let out = run(&["estimate", "--nics", "8", "--gdr", "off", "--nccl-log", "-"], Some(&text));
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("from the NCCL log (NCCL 2.21.5+cuda12.4, 194 NCCL line(s) of 195"), "{stdout}");
    assert!(stdout.contains("gpu-a02:41105 GPU 5 rank 13: 4 send(s), 4 receive(s), no GDR"), "{stdout}");
}

#[test]
fn the_logs_variables_are_read_as_the_jobs_environment() {
    // ncclLoadParam's "%s set by environment to %lld." and net_ib.cc's "NCCL_IB_HCA set to %s".
    let text = b"\
h:1:2 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 8388608.
h:1:2 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0
h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0
h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM
";
    let out = run(&["estimate", "--json", "--nccl-log", "-"], Some(text));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report = json(&out);
    let read: Vec<&str> =
        report["estimate"]["environment"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert!(read.contains(&"NCCL_BUFFSIZE=8388608 from the NCCL log"), "{read:?}");
    let l = &report["nccl_log"];
    assert_eq!(l["env"]["NCCL_IB_HCA"], "mlx5_0");
    let r = &l["ranks"][0];
    assert_eq!((r["net_send"].as_u64(), r["p2p"].as_u64()), (Some(1), Some(1)), "{r}");
    assert!(l["per_communicator"].as_array().is_some_and(|c| c.is_empty()), "no communicator line");
}

#[test]
fn a_file_that_is_not_an_nccl_log_exits_2_and_says_so() {
    for command in ["estimate", "check"] {
        let out = run(&[command, "--nccl-log", "-"], Some(b"epoch 1/10 loss 0.31\n\x00\xff\n"));
        assert_eq!(out.status.code(), Some(2), "{command}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--nccl-log standard input: not an NCCL log: none of its 2 line(s)"),
            "{command}: {stderr}"
        );
        let out = run(&[command, "--nccl-log", "/nonexistent/nccl.log"], None);
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--nccl-log /nonexistent/nccl.log: No such file"));
    }
}

#[test]
fn check_explains_each_failure() {
    let path = log("2x8x8-enomem-v2.21.log");
    let out = run(&["check", "--json", "--nodes", "2", "--nics", "8", "--gdr", "off", "--nccl-log", &path], None);
    assert_eq!(out.status.code(), Some(1), "a failure in the log is a FAIL");
    let report = json(&out);
    let failures = report["nccl_log"]["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1);
    let f = &failures[0];
    assert_eq!((&f["host"], &f["pid"], &f["call"]), (&"gpu-a02".into(), &41105.into(), &"ibv_reg_mr_iova2".into()));
    assert_eq!(f["error"], "Cannot allocate memory");
    let finding = report["findings"].as_array().unwrap().iter().find(|x| x["id"] == "nccl.log.ibv_reg_mr_iova2");
    let finding = finding.expect("a finding for the failed call");
    assert_eq!(finding["status"], "FAIL");
    assert!(finding["measured"].as_str().unwrap().contains("rank 13 (gpu-a02:41105, GPU 5"), "{finding}");
    assert!(finding["fix"].as_str().unwrap().contains("ulimit -l unlimited"), "{finding}");
    // A public log: aws-ofi-nccl's registration failure (NVIDIA/nccl issue 563).
    let out = run(&["check", "--json", "--nccl-log", &log("public-nccl-563-ofi-enomem.log")], None);
    let report = json(&out);
    assert_eq!(report["nccl_log"]["failures"][0]["call"], "fi_mr_regattr");
    assert_eq!(report["nccl_log"]["nccl_version"], serde_json::Value::Null);
}
