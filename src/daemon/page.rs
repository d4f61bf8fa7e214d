//! The sampler's snapshots as the HTTP server's pages.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use memlock_core::snapshot::Snapshot;
use memlock_http::page::{Compressed, Page, Pages};
use tokio::sync::watch;

/// A snapshot served at the telemetry path, with the compressed form of its text beside it.
struct SnapshotPage {
    snapshot: Arc<Snapshot>,
    compressed: Compressed,
    landing: Arc<Landing>,
}

/// What the landing page says beside the snapshot's own states.
struct Landing {
    /// The fast path's Alertmanagers, as configured; empty: off.
    alertmanagers: Vec<String>,
    /// Whether the failures collector runs (off unless `--collector.failures`).
    failures_enabled: bool,
}

/// The collector whose state the landing page shows.
const FAILURES: &str = "failures";

impl Page for SnapshotPage {
    fn text(&self) -> &Arc<String> {
        self.snapshot.shared_text()
    }

    fn is_rendered(&self) -> bool {
        self.snapshot.is_rendered()
    }

    fn compressed_cache(&self) -> &Compressed {
        &self.compressed
    }

    fn moment(&self, now: Instant) -> String {
        self.snapshot.render_ages(now)
    }

    fn last_run(&self, name: &str) -> Option<(bool, Instant)> {
        self.snapshot.report(name).map(|r| (r.success, r.finished))
    }

    fn status(&self) -> Vec<(String, String)> {
        let fast_path = match &self.landing.alertmanagers[..] {
            [] => "off (--alertmanager.url turns it on)".to_owned(),
            // As configured: the configuration refuses a URL with credentials in it.
            urls => format!("on, to {}", urls.join(", ")),
        };
        let failures = if !self.landing.failures_enabled {
            "off (--collector.failures turns it on; it needs root)".to_owned()
        } else {
            let data = self.snapshot.report(FAILURES).and_then(|r| r.data.as_ref());
            data.and_then(|d| d.state()).unwrap_or_else(|| "not run yet".to_owned())
        };
        vec![("Fast path to Alertmanager".into(), fast_path), ("Failures collector".into(), failures)]
    }
}

/// The latest snapshot as a page: one page per snapshot, so that its text is rendered and
/// compressed once however many requests serve it. `alertmanagers` and `collectors` (the
/// enabled ones) are what the landing page says of the fast path and the failures collector.
pub fn pages(
    snapshots: watch::Receiver<Arc<Snapshot>>,
    alertmanagers: &[String],
    collectors: &[(&'static str, Duration)],
) -> Pages {
    let landing = Arc::new(Landing {
        alertmanagers: alertmanagers.to_vec(),
        failures_enabled: collectors.iter().any(|(name, _)| *name == FAILURES),
    });
    let last: Mutex<Option<Arc<SnapshotPage>>> = Mutex::new(None);
    Box::new(move || {
        let current = snapshots.borrow().clone();
        let mut last = last.lock().unwrap_or_else(PoisonError::into_inner);
        match &*last {
            Some(page) if Arc::ptr_eq(&page.snapshot, &current) => page.clone(),
            _ => {
                let page = Arc::new(SnapshotPage {
                    snapshot: current,
                    compressed: Compressed::default(),
                    landing: landing.clone(),
                });
                *last = Some(page.clone());
                page
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use memlock_core::collect::failures::{FailuresStats, Mode, Unsupported};
    use memlock_core::snapshot::Report;

    use super::*;

    fn with_failures(stats: FailuresStats) -> Snapshot {
        Snapshot::new(vec![Report {
            collector: FAILURES,
            success: true,
            duration: Duration::ZERO,
            finished: Instant::now(),
            data: Some(Arc::new(stats)),
            interval: Duration::from_secs(1),
            trends: Arc::default(),
        }])
    }

    fn stats(unsupported: Option<Unsupported>, mode: Option<Mode>) -> FailuresStats {
        FailuresStats { unsupported, mode, probed: Vec::new(), book: Default::default() }
    }

    fn status(snapshot: Snapshot, alertmanagers: &[String], collectors: &[&'static str]) -> Vec<(String, String)> {
        let collectors: Vec<_> = collectors.iter().map(|name| (*name, Duration::from_secs(1))).collect();
        let (_keep, snapshots) = watch::channel(Arc::new(snapshot));
        (pages(snapshots, alertmanagers, &collectors))().status()
    }

    #[test]
    fn the_fast_path_lists_its_alertmanagers() {
        let lines = status(Snapshot::empty(), &["http://am:9093".into(), "http://am2:9093".into()], &[]);
        assert_eq!(lines[0].1, "on, to http://am:9093, http://am2:9093");
    }

    #[test]
    fn the_fast_path_and_the_failures_collector_say_when_they_are_off() {
        let lines = status(Snapshot::empty(), &[], &["node", "process"]);
        assert!(lines[0].1.starts_with("off"), "{lines:?}");
        assert!(lines[1].1.starts_with("off"), "{lines:?}");
    }

    #[test]
    fn the_failures_collector_says_whether_it_traces_and_why_not() {
        let enabled = ["node", FAILURES];
        assert_eq!(status(Snapshot::empty(), &[], &enabled)[1].1, "not run yet");
        let lines = status(with_failures(stats(Some(Unsupported::NoPermission), None)), &[], &enabled);
        assert_eq!(lines[1].1, "not tracing: no_permission");
        let lines = status(with_failures(stats(None, Some(Mode::Kernel))), &[], &enabled);
        assert_eq!(lines[1].1, "tracing refused registrations and locks (pairing: kernel)");
    }

    #[test]
    fn one_page_per_snapshot() {
        let (send, snapshots) = watch::channel(Arc::new(Snapshot::empty()));
        let pages = pages(snapshots, &[], &[]);
        let (first, again) = (pages(), pages());
        assert!(Arc::ptr_eq(&first, &again), "the same snapshot, the same page: rendered and compressed once");
        send.send_replace(Arc::new(Snapshot::empty()));
        assert!(!Arc::ptr_eq(&first, &pages()), "a new snapshot, a new page");
    }
}
