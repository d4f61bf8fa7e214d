//! The fast path's page for processes it does not follow: more processes hold locked or pinned
//! memory than it watches ([`crate::collect::process::MAX_WATCHED`]), so the least urgent, in
//! turns by owner, have no trend and no page. With places shared by owner a crowd blinds only
//! its own user's processes, but those may be a job too; the operator must hear of it from
//! the first sample, not from one log line.

use super::{Candidate, Labels};
use crate::collect::process::{ProcessStats, MAX_WATCHED};
use crate::config::AlertingConfig;
use crate::snapshot::Snapshot;

pub(crate) const ALERTNAME: &str = "MemlockProcessesUnwatchedFast";

/// The page while the latest process sample left processes out of the watched set.
pub fn candidates(snapshot: &Snapshot, config: &AlertingConfig) -> Vec<Candidate> {
    let Some(stats) = snapshot
        .report("process")
        .and_then(|r| r.data.as_ref())
        .and_then(|d| d.as_any().downcast_ref::<ProcessStats>())
    else {
        return Vec::new();
    };
    if stats.unwatched == 0 {
        return Vec::new();
    }
    let mut labels = Labels::new();
    labels.insert("alertname".into(), ALERTNAME.into());
    labels.insert("severity".into(), "critical".into());
    labels.insert("instance".into(), config.instance.clone());
    labels.insert("scope".into(), "node".into());
    labels.insert("source".into(), "memlock-exporter".into());
    let mut annotations = Labels::new();
    annotations.insert(
        "summary".into(),
        format!("{} processes holding memory are not watched by the fast path", stats.unwatched),
    );
    annotations.insert(
        "description".into(),
        format!(
            "{} processes hold locked or pinned memory beyond the {MAX_WATCHED} the exporter's fast path follows \
                (memlock_process_unwatched_processes): they have no trend and page nothing before their ENOMEM. \
                The places are shared by owner, so they are the least urgent of the users with the most \
                processes; find who starts them (runbook).",
            stats.unwatched
        ),
    );
    annotations.insert("runbook_url".into(), format!("{}#{}", config.runbook_url, ALERTNAME.to_ascii_lowercase()));
    // Above any process: one alert, never folded behind a crowd's.
    vec![Candidate { labels, annotations, urgency: 2.0 }]
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::snapshot::Report;

    fn snapshot(unwatched: u64) -> Snapshot {
        let mut stats = ProcessStats::default();
        stats.unwatched = unwatched;
        Snapshot::new(vec![Report {
            collector: "process",
            success: true,
            duration: Duration::ZERO,
            interval: Duration::from_secs(1),
            finished: Instant::now(),
            data: Some(Arc::new(stats)),
            trends: Arc::new(Vec::new()),
        }])
    }

    fn config() -> AlertingConfig {
        AlertingConfig {
            alertmanager_urls: vec![],
            instance: "gpu-node-17".into(),
            exhaustion_critical: Duration::from_secs(120),
            usage_ratio_warning: 0.9,
            resend_interval: Duration::from_secs(30),
            resolve_after: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
            runbook_url: "https://example.invalid/runbooks.md".into(),
        }
    }

    #[test]
    fn processes_left_unwatched_page_and_none_stays_silent() {
        let page = super::super::evaluate(&snapshot(108), &config());
        assert_eq!(page.len(), 1, "{page:?}");
        assert_eq!(page[0].labels["alertname"], ALERTNAME);
        assert_eq!(page[0].labels["severity"], "critical");
        assert!(page[0].annotations["summary"].starts_with("108 processes"), "{:?}", page[0].annotations);
        assert!(page[0].annotations["runbook_url"].ends_with("#memlockprocessesunwatchedfast"));
        assert!(super::super::evaluate(&snapshot(0), &config()).is_empty(), "every process watched: silent");
        assert!(candidates(&Snapshot::new(Vec::new()), &config()).is_empty(), "no process collector: silent");
    }
}
