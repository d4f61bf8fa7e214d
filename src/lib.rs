//! memlock-exporter: samples locked and pinned memory against every limit that can make an RDMA
//! registration (`ibv_reg_mr`) or `mlock` fail, and exports it to Prometheus.
//!
//! Layout, from the kernel's files up:
//! - [`kernel`]: pure parsers over the text of kernel files; no I/O, no metrics.
//! - [`fsroot`]: the thin I/O layer; every path is built from an injected procfs or sysfs root,
//!   and every file is read through one bounded, non-blocking, regular-file-only reader.
//! - [`collect`]: one collector per source (its registry, `collect::REGISTRY`, derives the
//!   flags and configuration keys), each producing typed data behind the `Stats` trait.
//! - [`charge`]: one charge against one limit (used, limit, enforced): headroom and ratios for
//!   metrics, trends, the fast path and `check` alike.
//! - [`budget`]: the per-node series budget that keeps the most urgent series.
//! - [`snapshot`] and [`exposition`]: the sampled state and its rendering to the Prometheus
//!   text format; [`gzip`] compresses a snapshot's text once for every scrape.
//! - [`sampler`] and [`trend`]: runs collectors on their intervals ([`stop`]: the signal their
//!   threads sleep on), keeps the trends and publishes immutable snapshots; [`scopes`]: what each
//!   trend scope follows, its floor, HELP and alert words, once.
//! - [`alerting`]: the fast path to Alertmanager ([`alerting::failures`]: its page for a refusal
//!   the failures collector traced).
//! - [`server`] and [`web`]: the HTTP endpoints and their TLS, authentication and limits.
//! - [`serve`]: the daemon (its own metrics, reload, systemd watchdog); [`reload`] watches the
//!   configuration files, [`sdnotify`] speaks systemd's notify protocol, [`logging`] sets up
//!   tracing, [`heap`] counts the heap in use for `memlock_exporter_heap_allocated_bytes`.
//! - [`preflight`]: the commands a job launcher or an operator runs (`check`, `estimate`,
//!   `drill`) and NCCL's registrations modelled from its source. It stands on the layers above
//!   and only [`cli`] imports it: the daemon's modules never do (scripts/modcycles.py says so).
//! - [`gdr`]: which GPUDirect charging mode a node is in, for `check` and the software
//!   collector alike.
//! - [`config`] and [`cli`]: flags, environment and the optional TOML file, validated once (each
//!   collector's own settings are defined in its module, `collect::settings`); [`values`]: the
//!   durations and regexes written in settings and how errors quote them; [`units`] formats sizes
//!   and [`timefmt`] times for every command.

pub mod alerting;
pub mod budget;
pub mod charge;
pub mod cli;
pub mod collect;
pub mod config;
pub mod exposition;
pub mod fair;
pub mod fsroot;
pub mod gdr;
pub mod gzip;
pub mod heap;
pub mod kernel;
pub mod logging;
pub mod preflight;
pub mod reload;
pub mod sampler;
pub mod scopes;
pub mod sdnotify;
pub mod serve;
pub mod server;
pub mod snapshot;
pub mod stop;
pub mod timefmt;
pub mod trend;
pub mod units;
pub mod values;
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
