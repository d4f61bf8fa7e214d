//! Judging for the job: the rank's capability sets and the three memlock levels.

use super::super::launch_path::tests::Host;
use super::*;
use crate::check::evaluate;
use crate::nccl::model::{self, Inputs};
use memlock_kernel::pid_limits::{Limit, MemlockLimits};

const MIB: u64 = 1 << 20;

fn cap_finding() -> Vec<Finding> {
    vec![Finding::new("memlock.cap_ipc_lock", Status::Pass, "not held: the memlock limit applies", "")]
}

#[test]
fn a_non_root_pod_given_ipc_lock_holds_it_in_bounding_only() {
    // Pid 3010 runs with securityContext.capabilities.add: [IPC_LOCK] and runAsUser 1000: the
    // default bounding set plus bit 14 (00000000a80465fb), permitted and effective cleared at the
    // exec.
    let host = Host::fixture("kubernetes");
    assert!(std::fs::read_to_string(host.procfs().join("3010/status")).unwrap().contains("CapBnd:\t00000000a80465fb"));
    let roots = Roots { procfs: host.procfs(), sysfs: host.dir.join("sys") };
    let mut m = Machine { ipc_lock: Some(false), ..Default::default() };
    let judged = judge_capability(&roots, "3010", true, false, &mut m);
    assert!(judged.bounding_only_in_container && !judged.left_out, "{judged:?}");
    let mut findings = cap_finding();
    explain_capability(&judged, &mut findings);
    assert_eq!(findings[0].status, Status::Warn);
    assert!(
        findings[0].measured.starts_with("CAP_IPC_LOCK effective no, permitted no, bounding yes, ambient no"),
        "{findings:?}"
    );
    assert!(findings[0].measured.contains("cap_bprm_creds_from_file"), "{findings:?}");
    assert!(findings[0].fix.contains("does nothing"));
    // A host process of a normal user has every capability in bounding: no trap to report.
    let judged = judge_capability(&roots, "3000", true, false, &mut m);
    let judged_user = judge_capability(&roots, "5001", true, false, &mut m);
    assert!(!judged.bounding_only_in_container && !judged_user.bounding_only_in_container);
}

#[test]
fn root_is_judged_without_its_capability_unless_as_root_or_a_pid() {
    let host = Host::fixture("kubernetes");
    let roots = Roots { procfs: host.procfs(), sysfs: host.dir.join("sys") };
    // pid 5001 is root's shell: CapEff holds CAP_IPC_LOCK.
    let mut m = Machine { ipc_lock: Some(true), ..Default::default() };
    let judged = judge_capability(&roots, "5001", false, false, &mut m);
    assert!(judged.left_out);
    assert_eq!(m.ipc_lock, Some(false), "the memlock findings are judged without it");
    let mut findings = cap_finding();
    explain_capability(&judged, &mut findings);
    assert!(findings[0].measured.contains("left out") && findings[0].measured.contains("--as-root"), "{findings:?}");
    for (given_pid, as_root) in [(false, true), (true, false)] {
        let mut m = Machine { ipc_lock: Some(true), ..Default::default() };
        let judged = judge_capability(&roots, "5001", given_pid, as_root, &mut m);
        assert!(!judged.left_out);
        assert_eq!(m.ipc_lock, Some(true), "--pid {given_pid} --as-root {as_root}");
    }
}

fn memlock_status(soft: Limit, communicators: u64) -> Finding {
    let mut inputs = Inputs::new(2, 8, 8);
    inputs.communicators = communicators;
    let e = model::estimate(&inputs);
    let m = Machine {
        limits: Some(MemlockLimits { soft, hard: soft }),
        ipc_lock: Some(false),
        initial_user_ns: Some(true),
        ..Default::default()
    };
    evaluate(&m, &e, 2.0).into_iter().find(|f| f.id == "memlock.soft").unwrap()
}

#[test]
fn memlock_has_three_levels_and_the_floor_is_the_rules() {
    // One communicator of case A needs 76.4 MiB; four, four times that.
    assert_eq!(memlock_status(Limit::Bytes(8 * MIB), 1).status, Status::Fail);
    assert_eq!(memlock_status(Limit::Bytes(100 * MIB), 1).status, Status::Warn);
    let four = memlock_status(Limit::Bytes(100 * MIB), 4);
    assert_eq!(four.status, Status::Fail, "{four:?}");
    assert!(four.measured.contains("(4 communicator(s))"), "{four:?}");
    let warn = memlock_status(Limit::Bytes(512 * MIB), 4);
    assert_eq!(warn.status, Status::Warn, "{warn:?}");
    assert!(warn.measured.contains("policy floor 1.0 GiB") && warn.measured.contains("UCX"), "{warn:?}");
    let floor = policy::PROCESS_LIMIT_TOO_LOW_BYTES;
    assert_eq!(memlock_status(Limit::Bytes(floor - 1), 1).status, Status::Warn);
    assert_eq!(memlock_status(Limit::Bytes(floor), 1).status, Status::Pass, "at the floor the rule is silent");
    assert_eq!(memlock_status(Limit::Unlimited, 64).status, Status::Pass);
}
