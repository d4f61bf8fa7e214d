//! The daemon's core: collectors over the kernel's files, the sampler and its snapshots, their
//! rendering to the Prometheus text format, the series budget, trends, the fast path to
//! Alertmanager and the configuration.
//!
//! - [`collect`]: one collector per source (its registry, `collect::REGISTRY`, derives the
//!   flags and configuration keys), each producing typed data behind the `Stats` trait.
//! - [`charge`]: one charge against one limit (used, limit, enforced): headroom and ratios for
//!   metrics, trends, the fast path and `check` alike.
//! - [`budget`]: the per-node series budget that keeps the most urgent series.
//! - [`snapshot`] and [`exposition`]: the sampled state and its rendering to the Prometheus
//!   text format, once per snapshot.
//! - [`sampler`] and [`trend`]: runs collectors on their intervals ([`stop`]: the signal their
//!   threads sleep on), keeps the trends and publishes immutable snapshots; [`scopes`]: what each
//!   trend scope follows, its floor, HELP and alert words, once.
//! - [`alerting`]: the fast path to Alertmanager ([`alerting::failures`]: its page for a refusal
//!   the failures collector traced).
//! - [`gdr`]: which GPUDirect charging mode a node is in, for `check` and the software
//!   collector alike.
//! - [`config`]: flags, environment and the optional TOML file, validated once (each
//!   collector's own settings are defined in its module, `collect::settings`); [`values`]: the
//!   durations and regexes written in settings and how errors quote them; [`units`] formats sizes
//!   and [`timefmt`] times for every command.

pub mod alerting;
pub mod budget;
pub mod charge;
pub mod collect;
pub mod config;
pub mod exposition;
pub mod fair;
pub mod gdr;
pub mod sampler;
pub mod scopes;
pub mod snapshot;
pub mod stop;
pub mod timefmt;
pub mod trend;
pub mod units;
pub mod values;
pub mod verbs;

/// Exit codes of the binary, documented in the README.
pub mod exit {
    /// Clean shutdown, or a command that succeeded.
    pub const OK: u8 = 0;
    /// The daemon failed at run time (for example the listen address is taken).
    pub const RUNTIME: u8 = 1;
    /// Bad flags or configuration: nothing was started.
    pub const USAGE: u8 = 2;
}
