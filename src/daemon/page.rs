//! The sampler's snapshots as the HTTP server's pages.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

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
pub struct Landing {
    /// The fast path's Alertmanagers, as configured; empty: off.
    pub alertmanagers: Vec<String>,
    /// Unix time of the last delivery to each, by URL (the fast path's own gauge).
    pub last_success: Option<prometheus::GaugeVec>,
    /// Whether the failures collector runs (off unless `--collector.failures`).
    pub failures_enabled: bool,
}

impl Landing {
    /// Each Alertmanager and how long ago it last took a delivery.
    fn fast_path(&self, now_unix: f64) -> String {
        if self.alertmanagers.is_empty() {
            return "off (--alertmanager.url turns it on)".to_owned();
        }
        let shown: Vec<String> = self
            .alertmanagers
            .iter()
            .map(|url| {
                let at = self.last_success.as_ref().map_or(0.0, |g| g.with_label_values(&[url]).get());
                // As configured: the configuration refuses a URL with credentials in it.
                if at > 0.0 {
                    format!("{url} (last delivery {:.0} s ago)", (now_unix - at).max(0.0))
                } else {
                    format!("{url} (no delivery yet)")
                }
            })
            .collect();
        format!("on, to {}", shown.join(", "))
    }
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
        let now_unix =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let mut lines = vec![("Fast path to Alertmanager".to_owned(), self.landing.fast_path(now_unix))];
        if !self.landing.failures_enabled {
            lines.push(("Failures collector".into(), "off (--collector.failures turns it on; it needs root)".into()));
        } else if self.snapshot.report(FAILURES).and_then(|r| r.data.as_ref()).is_none() {
            lines.push(("Failures collector".into(), "not run yet".into()));
        }
        // Every collector with a state of its own: whether the failures collector traces, the
        // memlock limit each launcher would hand a job started now.
        for report in &self.snapshot.reports {
            if let Some(state) = report.data.as_ref().and_then(|d| d.state()) {
                let what = match report.collector {
                    FAILURES => "Failures collector".to_owned(),
                    "launchers" => "Memlock limit new jobs get".to_owned(),
                    name => format!("{name} collector"),
                };
                lines.push((what, state));
            }
        }
        lines
    }
}

/// The latest snapshot as a page: one page per snapshot, so that its text is rendered and
/// compressed once however many requests serve it; `landing` is what the landing page says of
/// the fast path and the failures collector beside the snapshot.
pub fn pages(snapshots: watch::Receiver<Arc<Snapshot>>, landing: Landing) -> Pages {
    let landing = Arc::new(landing);
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

    fn landing(alertmanagers: &[String], collectors: &[&str]) -> Landing {
        Landing {
            alertmanagers: alertmanagers.to_vec(),
            last_success: None,
            failures_enabled: collectors.contains(&FAILURES),
        }
    }

    fn status(snapshot: Snapshot, alertmanagers: &[String], collectors: &[&'static str]) -> Vec<(String, String)> {
        let (_keep, snapshots) = watch::channel(Arc::new(snapshot));
        (pages(snapshots, landing(alertmanagers, collectors)))().status()
    }

    #[test]
    fn the_fast_path_lists_its_alertmanagers() {
        let lines = status(Snapshot::empty(), &["http://am:9093".into(), "http://am2:9093".into()], &[]);
        assert_eq!(lines[0].1, "on, to http://am:9093 (no delivery yet), http://am2:9093 (no delivery yet)");
        let gauge = prometheus::GaugeVec::new(prometheus::Opts::new("t", "t"), &["alertmanager"]).unwrap();
        gauge.with_label_values(&["http://am:9093"]).set(1000.0);
        let shown = Landing { last_success: Some(gauge), ..landing(&["http://am:9093".into()], &[]) }.fast_path(1012.4);
        assert_eq!(shown, "on, to http://am:9093 (last delivery 12 s ago)");
    }

    #[test]
    fn the_launchers_say_what_limit_new_jobs_get() {
        use memlock_core::collect::launchers::{LauncherLimit, LaunchersStats};
        use memlock_kernel::pid_limits::{Limit, MemlockLimits};
        let limits = |soft| MemlockLimits { soft, hard: Limit::Unlimited };
        let stats = LaunchersStats {
            launchers: vec![
                LauncherLimit { launcher: "slurmd", pid: 812, limits: limits(Limit::Bytes(64 << 10)) },
                LauncherLimit { launcher: "containerd", pid: 905, limits: limits(Limit::Unlimited) },
            ],
            dropped: 0,
        };
        let snapshot = Snapshot::new(vec![Report {
            collector: "launchers",
            success: true,
            duration: Duration::ZERO,
            finished: Instant::now(),
            data: Some(Arc::new(stats)),
            interval: Duration::from_secs(15),
            trends: Arc::default(),
        }]);
        let lines = status(snapshot, &[], &["launchers"]);
        let line = lines.iter().find(|(what, _)| what == "Memlock limit new jobs get").expect("a launchers line");
        assert_eq!(line.1, "slurmd (pid 812) hands jobs 64.0 KiB; containerd (pid 905) hands jobs unlimited");
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
        let pages = pages(snapshots, landing(&[], &[]));
        let (first, again) = (pages(), pages());
        assert!(Arc::ptr_eq(&first, &again), "the same snapshot, the same page: rendered and compressed once");
        send.send_replace(Arc::new(Snapshot::empty()));
        assert!(!Arc::ptr_eq(&first, &pages()), "a new snapshot, a new page");
    }
}
