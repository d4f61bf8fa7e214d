//! Collectors: one per source. Each reads through [`memlock_kernel::fsroot`], parses with
//! [`memlock_kernel`] and returns typed [`Data`]; rendering lives with the data type.

#[cfg(test)]
mod example;
pub mod hugepages;
pub mod nccl_version;
pub mod rdma_filter;
pub mod settings;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use crate::budget::{Claim, Grants};
use crate::exposition::Exposition;
use crate::trend::{Observation, Scope, TrendConfig};
use memlock_kernel::fsroot::{Roots, SourceError};

use settings::{CollectorConfig, Context};

/// What a collector's run produced, behind one trait so the sampler, the snapshot and the trend
/// analyser need no list of collectors. Cheap to share: snapshots hold it in an `Arc`.
pub trait Stats: std::fmt::Debug + Send + Sync + 'static {
    /// Writes the fixed series and, of each class this data claims, the granted entities.
    fn render(&self, out: &mut Exposition, grants: &Grants);

    /// What grows with the host, entity by entity, for the series budget ([`crate::budget`]).
    fn claims(&self) -> Vec<Claim> {
        Vec::new()
    }

    /// The ids of the trend points (see [`Observation::id`]) exported under `grants`: those of the
    /// granted entities. `None`: every point.
    fn exported_trends(&self, _grants: &Grants) -> Option<std::collections::HashSet<String>> {
        None
    }

    /// What the trend analyser watches in this data, observed at `at` (monotonic seconds).
    fn observations(&self, _at: f64) -> Vec<Observation> {
        Vec::new()
    }

    /// [`Stats::observations`] for data that holds readings older than its run (a pass that
    /// re-read only part of a crowd): those are observed when they were read, `epoch` being the
    /// instant `at` counts from, so a reading is never taken for a new sample.
    fn observations_read(&self, at: f64, _epoch: std::time::Instant) -> Vec<Observation> {
        self.observations(at)
    }

    /// The trend scopes this data covers completely: scopes of that kind missing from it have
    /// gone (the process exited, the cgroup was removed) and their history is dropped.
    fn trend_scopes(&self) -> &'static [Scope] {
        &[]
    }

    /// The refusals the kernel gave registrations and locks, by series (the failures collector's
    /// data): what the fast path pages on.
    fn refusals(&self) -> Option<&failures::Book> {
        None
    }

    /// The collector's state in a few words, when it has one worth showing beside "ok" (the
    /// landing page): the failures collector says whether it traces, and why not.
    fn state(&self) -> Option<String> {
        None
    }

    /// For readers that need the collector's own type (tests).
    fn as_any(&self) -> &dyn Any;
}

/// The typed result of one collection, shared by every snapshot that holds it.
pub type Data = Arc<dyn Stats>;

/// A collector the exporter knows: the one list from which the `--collector.<name>` flags, the
/// `[collector.<name>]` sections of the configuration and the sampler's threads are derived (as
/// node_exporter's registerCollector). A collector with settings of its own defines them in its
/// module ([`settings::Configured`]); its entry here names it with [`settings::of`].
pub struct Registration {
    pub name: &'static str,
    /// What it reads, for the flag's help.
    pub reads: &'static str,
    pub(crate) default_interval: &'static str,
    /// Off for the opt-in collectors (`--collector.<name>` enables them).
    pub default_enabled: bool,
    /// Its own settings and how it is built from them.
    pub settings: &'static dyn settings::Section,
}

/// Every collector, in output order: each line declares a collector's module and lists its
/// `REGISTRATION`, so a new collector is one file (its module, with its settings) and one line
/// here (docs/collectors.md).
macro_rules! collectors {
    ($($name:ident),* $(,)?) => {
        $(pub mod $name;)*

        /// Every collector, in output order.
        pub const REGISTRY: &[Registration] = &[$($name::REGISTRATION),*];
    };
}

collectors! {
    node,
    numa,
    process,
    cgroup,
    rdma_sysfs,
    rdma_netlink,
    rdma_caps,
    software,
    launchers,
    failures,
}

/// One source of metrics.
pub trait Collector: Send {
    fn name(&self) -> &'static str;

    /// Runs one collection. Problems that make the result incomplete or wrong are pushed to
    /// `errors` (the collector then reports failure) while whatever was read is still returned.
    /// Expected absences (a process that exited, an optional file) are not errors.
    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data>;
}

/// Builds the enabled collectors of a configuration, in its order (the registry's).
pub fn build(
    collectors: &[CollectorConfig],
    roots: &Roots,
    trend: &TrendConfig,
) -> Vec<(Box<dyn Collector>, Duration)> {
    collectors
        .iter()
        .filter(|c| c.enabled)
        .map(|c| (c.settings.build(&Context { roots, interval: c.interval, trend }), c.interval))
        .collect()
}

/// Reads an optional file: `Ok(None)` when it does not exist.
pub(crate) fn optional<T>(result: Result<T, SourceError>) -> Result<Option<T>, SourceError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Keeps the value and records the error, so one bad file does not hide the others.
pub(crate) fn keep<T>(result: Result<Option<T>, SourceError>, errors: &mut Vec<SourceError>) -> Option<T> {
    match result {
        Ok(v) => v,
        Err(e) => {
            errors.push(e);
            None
        }
    }
}
