//! The generated policy constants against their home, alerts/thresholds.yml: an edit there
//! without `python3 alerts/generate.py` fails here, so `check` never judges by another policy
//! than the rules.

use super::policy;

const THRESHOLDS: &str = include_str!("../../../alerts/thresholds.yml");

fn threshold(name: &str) -> f64 {
    let line = THRESHOLDS
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("alerts/thresholds.yml has no {name}"));
    let value = line.split(" #").next().unwrap_or("").trim();
    value.parse().unwrap_or_else(|_| panic!("alerts/thresholds.yml: {name}: {value:?} is not a number"))
}

#[test]
fn the_generated_constants_are_the_thresholds_files() {
    assert_eq!(policy::PROCESS_LIMIT_TOO_LOW_BYTES as f64, threshold("process_limit_too_low_bytes"));
    assert_eq!(policy::NODE_AVAILABLE_LOW_RATIO, threshold("node_available_low_ratio"));
    assert_eq!(policy::HUGEPAGES_MIN_POOL_RATIO, threshold("hugepages_min_pool_ratio"));
    assert_eq!(policy::HUGEPAGES_UNUSED_RATIO, threshold("hugepages_unused_ratio"));
    assert_eq!(policy::CGROUP_NEAR_LIMIT_RATIO, threshold("cgroup_near_limit_ratio"));
    assert_eq!(policy::OVERCOMMIT_HEADROOM_LOW_RATIO, threshold("overcommit_headroom_low_ratio"));
    assert_eq!(policy::RDMA_MR_NEAR_CAP_RATIO, threshold("rdma_mr_near_cap_ratio"));
}

#[test]
fn every_generated_constant_is_checked_here() {
    let generated = include_str!("policy.rs");
    let constants = generated.lines().filter(|l| l.starts_with("pub const ")).count();
    let checked =
        include_str!("policy_drift.rs").lines().filter(|l| l.trim_start().starts_with("assert_eq!(policy::")).count();
    assert_eq!(constants, checked, "a constant of crates/preflight/src/policy.rs has no drift assertion");
}
