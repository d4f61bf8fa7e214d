//! What keeps a half-written file from being loaded, and what says a reload may be a mistake.
//!
//! A file written in place (truncate, then write) is seen by the watch between the writes: a
//! writer that pauses, or dies, midway leaves a torn file whose every line may still parse (a
//! number cut short, `exhaustion_critical_seconds = 1` for `= 120`). Such a file reloaded as a
//! success: the critical page then came 1.1 s before ENOMEM instead of 9.2 s. So a reload reads
//! the watched files twice, [`STABLE`] apart, and loads only when both reads agree and the load
//! itself read the same again; otherwise it waits for the next change
//! (`serve::daemon::Daemon::reload`). A file that arrived by rename (an editor's save, a
//! Kubernetes ConfigMap's `..data` swap) with no write seen in place is whole at once and is
//! loaded without the wait ([`Arrivals`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};

use memlock_core::config::Config;

/// How long the watched files' contents must stay the same before a reload loads them.
pub const STABLE: Duration = Duration::from_secs(1);

/// A change of a paging threshold by this factor or more, either way, is logged as a warning
/// naming the key: a torn or mistyped number looks like this, a deliberate tuning seldom does.
pub const JUMP_FACTOR: f64 = 10.0;

/// How the watched files changed since the last reload took note: by rename, by writes in
/// place, or both.
#[derive(Debug, Default)]
pub struct Arrivals {
    renamed: AtomicBool,
    written: AtomicBool,
}

impl Arrivals {
    /// Notes one event about a watched file (`None`: the watch failed, what happened is unknown).
    pub fn note(&self, kind: Option<&EventKind>) {
        match kind {
            Some(EventKind::Modify(ModifyKind::Name(_))) => self.renamed.store(true, Ordering::Relaxed),
            // Creation, removal and metadata say nothing of the contents; data written in place
            // follows a creation as its own events.
            Some(EventKind::Create(_) | EventKind::Remove(_) | EventKind::Modify(ModifyKind::Metadata(_))) => {}
            Some(EventKind::Access(kind)) if !matches!(kind, AccessKind::Close(AccessMode::Write)) => {}
            _ => self.written.store(true, Ordering::Relaxed),
        }
    }

    /// Whether everything since the last call arrived by rename (and something did); resets.
    pub fn take_whole(&self) -> bool {
        let renamed = self.renamed.swap(false, Ordering::Relaxed);
        let written = self.written.swap(false, Ordering::Relaxed);
        renamed && !written
    }
}

/// The thresholds that decide when the fast path pages, with their values in `old` and `new`,
/// for those that changed by [`JUMP_FACTOR`] or more (a value of 0 against a non-zero one too).
pub fn threshold_jumps(old: &Config, new: &Config) -> Vec<(&'static str, f64, f64)> {
    let values = |c: &Config| {
        [
            ("alerting.exhaustion_critical_seconds", c.alerting.exhaustion_critical.as_secs_f64()),
            ("alerting.usage_ratio_warning", c.alerting.usage_ratio_warning),
            ("alerting.resolve_after", c.alerting.resolve_after.as_secs_f64()),
            ("trend.window", c.trend.window.as_secs_f64()),
            ("trend.min_rise_bytes_per_second", c.trend.min_rise_bytes_per_second),
            ("trend.node_memory_available_floor_ratio", c.trend.node_memory_available_floor_ratio),
        ]
    };
    values(old)
        .into_iter()
        .zip(values(new))
        .filter(|((_, before), (_, after))| jumped(*before, *after))
        .map(|((key, before), (_, after))| (key, before, after))
        .collect()
}

fn jumped(before: f64, after: f64) -> bool {
    let (low, high) = if before <= after { (before, after) } else { (after, before) };
    if high <= 0.0 {
        return false;
    }
    low <= 0.0 || high / low >= JUMP_FACTOR
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlock_core::config::{self, Sources};

    fn load(flags: Vec<(String, ::config::Value)>) -> Config {
        config::load(&Sources { file: None, env: Some(Default::default()), flags }).unwrap()
    }

    #[test]
    fn only_a_rename_without_writes_in_place_is_whole() {
        use notify::event::{CreateKind, DataChange, RenameMode};
        let arrivals = Arrivals::default();
        assert!(!arrivals.take_whole(), "nothing arrived");
        arrivals.note(Some(&EventKind::Create(CreateKind::File)));
        arrivals.note(Some(&EventKind::Modify(ModifyKind::Name(RenameMode::To))));
        assert!(arrivals.take_whole());
        assert!(!arrivals.take_whole(), "taken");
        arrivals.note(Some(&EventKind::Modify(ModifyKind::Name(RenameMode::Both))));
        arrivals.note(Some(&EventKind::Modify(ModifyKind::Data(DataChange::Any))));
        assert!(!arrivals.take_whole(), "written in place too");
        arrivals.note(Some(&EventKind::Modify(ModifyKind::Name(RenameMode::To))));
        arrivals.note(None);
        assert!(!arrivals.take_whole(), "the watch failed: unknown");
        arrivals.note(Some(&EventKind::Access(AccessKind::Close(AccessMode::Write))));
        assert!(!arrivals.take_whole());
    }

    #[test]
    fn a_tenfold_change_of_a_paging_threshold_is_named() {
        let base = load(vec![]);
        let torn = load(vec![("alerting.exhaustion_critical_seconds".into(), 12u64.into())]);
        assert_eq!(threshold_jumps(&base, &torn), vec![("alerting.exhaustion_critical_seconds", 120.0, 12.0)]);
        assert_eq!(threshold_jumps(&torn, &base), vec![("alerting.exhaustion_critical_seconds", 12.0, 120.0)]);
        let tuned = load(vec![
            ("alerting.exhaustion_critical_seconds".into(), 13u64.into()),
            ("alerting.usage_ratio_warning".into(), 0.8.into()),
        ]);
        assert_eq!(threshold_jumps(&base, &tuned), vec![], "a change under tenfold is tuning");
        let floor = load(vec![("trend.node_memory_available_floor_ratio".into(), 0.0.into())]);
        assert_eq!(threshold_jumps(&base, &floor), vec![("trend.node_memory_available_floor_ratio", 0.05, 0.0)]);
        assert_eq!(threshold_jumps(&base, &base), vec![]);
    }
}
