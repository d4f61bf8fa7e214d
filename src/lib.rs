//! memlock-exporter: samples locked and pinned memory against every limit that can make an RDMA
//! registration (`ibv_reg_mr`) or `mlock` fail, and exports it to Prometheus.
//!
//! Layout:
//! - [`kernel`]: pure parsers over the text of kernel files; no I/O, no metrics.
//! - [`fsroot`]: the thin I/O layer; every path is built from an injected procfs or sysfs root.
//! - [`collect`]: one collector per source, each producing typed data.
//! - [`snapshot`]: the sampled state and its rendering to the Prometheus text format.
//! - [`sampler`]: runs collectors on their intervals and publishes immutable snapshots.
//! - [`server`]: the HTTP endpoints.
//! - [`serve`]: the daemon (its own metrics, reload, systemd watchdog).
//! - [`config`] and [`cli`]: flags, environment and the optional TOML file, validated once.

pub mod alerting;
pub mod budget;
pub mod charge;
pub mod check;
pub mod cli;
pub mod collect;
pub mod config;
pub mod drill;
pub mod estimate;
pub mod exposition;
pub mod fsroot;
pub mod job_context;
pub mod kernel;
pub mod logging;
pub mod nccl;
pub mod reload;
pub mod sampler;
pub mod sdnotify;
pub mod serve;
pub mod server;
pub mod snapshot;
pub mod timefmt;
pub mod trend;
pub mod units;
pub mod web;

/// Exit codes of the binary, documented in the README.
pub mod exit {
    /// Clean shutdown, or a command that succeeded.
    pub const OK: u8 = 0;
    /// The daemon failed at run time (for example the listen address is taken).
    pub const RUNTIME: u8 = 1;
    /// Bad flags or configuration: nothing was started.
    pub const USAGE: u8 = 2;
}
