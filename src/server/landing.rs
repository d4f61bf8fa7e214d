//! The landing page's status list, under its collectors table: whether the fast path pages and
//! where to, and whether the failures collector traces refusals. The memlock limit new jobs will
//! get on this node (the launcher limits) is to join this list as its third item.

use crate::collect::failures::FailuresStats;
use crate::snapshot::Snapshot;

/// The collector whose state the page shows; off unless `--collector.failures`.
const FAILURES: &str = "failures";

/// The `<h2>Status</h2>` section: `alertmanagers` as the fast path was configured, `enabled` the
/// running collectors, `snapshot` the latest sample.
pub fn status(alertmanagers: &[String], enabled: &[&str], snapshot: &Snapshot) -> String {
    let fast_path = if alertmanagers.is_empty() {
        "off (<code>--alertmanager.url</code> turns it on)".to_owned()
    } else {
        // Shown as configured: the configuration refuses a URL with credentials in it.
        let endpoints: Vec<String> =
            alertmanagers.iter().map(|url| format!("<code>{}</code>", super::html_escape(url))).collect();
        format!("on, to {}", endpoints.join(", "))
    };
    let failures = if !enabled.contains(&FAILURES) {
        "off (<code>--collector.failures</code> turns it on; it needs root)".to_owned()
    } else {
        match snapshot.report(FAILURES).and_then(|r| r.data.as_ref()) {
            None => "not run yet".to_owned(),
            Some(data) => match data.as_any().downcast_ref::<FailuresStats>() {
                Some(FailuresStats { unsupported: Some(reason), .. }) => {
                    format!("not tracing: <code>{}</code>", reason.as_str())
                }
                Some(FailuresStats { mode, .. }) => {
                    format!(
                        "tracing refused registrations and locks (pairing: {})",
                        mode.map_or("starting", |m| m.as_str())
                    )
                }
                None => "not run yet".to_owned(),
            },
        }
    };
    format!(
        "<h2>Status</h2>\n<ul><li>Fast path to Alertmanager: {fast_path}</li>\n\
         <li>Failures collector: {failures}</li></ul>\n"
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::collect::failures::{Mode, Unsupported};
    use crate::snapshot::Report;

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

    #[test]
    fn the_fast_path_lists_its_alertmanagers() {
        let page = status(&["http://am:9093".into(), "http://am2:9093/<x>".into()], &[], &Snapshot::empty());
        assert!(page.contains("on, to <code>http://am:9093</code>, <code>http://am2:9093/&lt;x&gt;</code>"), "{page}");
    }

    #[test]
    fn the_fast_path_and_the_failures_collector_say_when_they_are_off() {
        let page = status(&[], &["node", "process"], &Snapshot::empty());
        assert!(page.contains("Fast path to Alertmanager: off"), "{page}");
        assert!(page.contains("Failures collector: off"), "{page}");
    }

    #[test]
    fn the_failures_collector_says_whether_it_traces_and_why_not() {
        let enabled = ["node", FAILURES];
        assert!(status(&[], &enabled, &Snapshot::empty()).contains("Failures collector: not run yet"));
        let page = status(&[], &enabled, &with_failures(stats(Some(Unsupported::NoPermission), None)));
        assert!(page.contains("not tracing: <code>no_permission</code>"), "{page}");
        let page = status(&[], &enabled, &with_failures(stats(None, Some(Mode::Kernel))));
        assert!(page.contains("tracing refused registrations and locks (pairing: kernel)"), "{page}");
    }
}
