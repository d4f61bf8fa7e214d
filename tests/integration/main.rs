//! One integration-test binary (fewer link steps): each module is one area.
//!
//! Live tests touch the real /proc, cgroups and rlimits of this machine; they need root and are
//! serialised with [`util::live_lock`] so that one test's memory does not move another's figures.

mod attacks;
mod cgroup_fixtures;
mod check_exec;
mod check_launchers;
mod faults;
mod golden;
mod hostile_input;
mod landing;
mod lifecycle;
mod live_cgroup;
mod live_check;
mod live_drill;
mod live_failures;
mod live_launchers;
mod live_nccl;
mod live_node;
mod live_process;
mod live_rdma;
mod live_rdma_caps;

mod monitoring;
mod nccl_log;
mod nccl_variables_script;
mod process_fixtures;
mod reload;
mod scale;
/// Synthetic hosts, shared with the benchmarks.
#[path = "../synthetic/mod.rs"]
mod synthetic;
mod systemd_notify;
mod trend_cap;
mod util;
mod web_security;
mod workspace_layers;
