//! The fast path's page for a refusal the failures collector traced
//! ([`crate::collect::failures`]): `MemlockRegistrationFailed`, at the first refusal, for
//! [`HOLD`] after the last one of its series. Kept apart from [`super`]'s trend rules,
//! which [`super::evaluate`] calls it beside: a refusal is an event, not a trend.

use std::time::{Duration, Instant};

use super::{Candidate, Labels};
use crate::collect::failures::{Cause, Figures, Series, SeriesKey};
use crate::config::AlertingConfig;
use crate::snapshot::Snapshot;
use crate::units::bytes;
use memlock_kernel::Limit;

/// How long a series pages after its last refusal: long enough to be seen and acted on (drain
/// the node), short enough that a fixed job stops paging on its own. The Prometheus rule
/// `MemlockKernelRefusedRegistration` (alerts/memlock-exporter.rules.yml) holds the same.
pub(crate) const HOLD: Duration = crate::collect::failures::SERIES_HOLD;

pub(crate) const ALERTNAME: &str = "MemlockRegistrationFailed";

/// One candidate per failure series refused within [`HOLD`] of `now`.
pub fn candidates(snapshot: &Snapshot, config: &AlertingConfig, now: Instant) -> Vec<Candidate> {
    snapshot
        .reports
        .iter()
        .filter_map(|r| r.data.as_ref()?.refusals())
        .flat_map(|book| book.series.iter())
        .filter(|(_, s)| now.saturating_duration_since(s.last_at) <= HOLD)
        .map(|(key, series)| candidate(key, series, config))
        .collect()
}

fn candidate(key: &SeriesKey, series: &Series, config: &AlertingConfig) -> Candidate {
    let shown = |v: &str| crate::exposition::label_value(v).into_owned();
    let mut labels = Labels::new();
    labels.insert("alertname".into(), ALERTNAME.into());
    labels.insert("severity".into(), severity(key).into());
    labels.insert("instance".into(), config.instance.clone());
    labels.insert("scope".into(), "process".into());
    labels.insert("source".into(), "memlock-exporter".into());
    labels.insert("pid".into(), key.pid.to_string());
    labels.insert("comm".into(), shown(&key.comm));
    labels.insert("cgroup".into(), shown(&key.cgroup));
    labels.insert("call".into(), key.call.into());
    labels.insert("errno".into(), key.errno.clone());
    labels.insert("cause".into(), key.cause.as_str().into());
    let subject = format!("process {} ({})", key.pid, shown(&key.comm));
    let asked = if series.requested_bytes > 0 { bytes(series.requested_bytes as f64) } else { "?".into() };
    let times = if series.count == 1 { "once".to_owned() } else { format!("{} times", series.count) };
    let mut annotations = Labels::new();
    annotations.insert(
        "summary".into(),
        format!("the kernel refused {} of {subject} with {} ({})", key.call, key.errno, key.cause.as_str()),
    );
    annotations.insert(
        "description".into(),
        format!(
            "{} refused {asked} to {subject} in cgroup {} with {}, {times} (the kernel's own answer, traced): {}",
            key.call,
            shown(&key.cgroup),
            key.errno,
            explain(key, series.requested_bytes, &series.figures),
        ),
    );
    annotations.insert("runbook_url".into(), format!("{}#{}", config.runbook_url, ALERTNAME.to_ascii_lowercase()));
    // A refusal has happened: nothing is more urgent when alerts of this name are folded.
    Candidate { labels, annotations, urgency: 1.0 }
}

/// Critical only for what stops a job and a node change fixes: ENOMEM from the memlock limit or
/// the memory cgroup. Any user can make `mlock` fail on a range it never mapped (ENOMEM, cause
/// other) or be interrupted (EINTR), and `ib_umem_get` answers EFAULT or EINVAL to a bad
/// buffer: those are the process's own doing, worth a warning, not a page at night.
fn severity(key: &SeriesKey) -> &'static str {
    match (key.errno.as_str(), key.cause) {
        ("ENOMEM", Cause::Memlock | Cause::CgroupMemory) => "critical",
        _ => "warning",
    }
}

fn limit(l: Option<Limit>) -> String {
    match l {
        Some(Limit::Bytes(b)) => bytes(b as f64),
        Some(Limit::Unlimited) => "unlimited".into(),
        None => "?".into(),
    }
}

fn figure(v: Option<u64>) -> String {
    v.map_or_else(|| "?".into(), |b| bytes(b as f64))
}

fn explain(key: &SeriesKey, requested: u64, f: &Figures) -> String {
    let held = if key.call == "do_mlock" { ("VmLck", f.locked_bytes) } else { ("VmPin", f.pinned_bytes) };
    match key.cause {
        Cause::Memlock if key.call == "__io_account_mem" || key.call == "user_shm_lock" => format!(
            "the user's locked memory plus the request passes the soft memlock limit {} (charged per user); raise \
                LimitMEMLOCK / ulimit -l or lock less.",
            limit(f.soft_limit)
        ),
        Cause::Memlock => format!(
            "{} {} + {} asked > soft memlock limit {}; the job needs a higher LimitMEMLOCK / ulimit -l (unlimited for \
                RDMA) or fewer registered buffers. Drain the node until it is fixed.",
            held.0,
            figure(held.1),
            bytes(requested as f64),
            limit(f.soft_limit)
        ),
        Cause::CgroupMemory => format!(
            "its memory cgroup uses {} of {}: the pages could not be charged. {} {} is under its memlock limit {}.",
            figure(f.cgroup_usage),
            limit(f.cgroup_limit),
            held.0,
            figure(held.1),
            limit(f.soft_limit)
        ),
        Cause::Other => format!(
            "neither the memlock limit ({} {}, limit {}) nor the memory cgroup ({} of {}) explains it: see the kernel \
                log (dmesg) and the node's free memory.",
            held.0,
            figure(held.1),
            limit(f.soft_limit),
            figure(f.cgroup_usage),
            limit(f.cgroup_limit)
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::collect::failures::{Book, FailuresStats, CALLS};
    use crate::snapshot::Report;

    fn config() -> AlertingConfig {
        AlertingConfig {
            alertmanager_urls: vec!["http://127.0.0.1:9093".into()],
            instance: "node1".into(),
            exhaustion_critical: Duration::from_secs(120),
            usage_ratio_warning: 0.9,
            resend_interval: Duration::from_secs(30),
            resolve_after: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
            runbook_url: "https://runbooks/memlock".into(),
        }
    }

    fn snapshot(book: Book) -> Snapshot {
        let stats = FailuresStats {
            unsupported: None,
            mode: None,
            probed: CALLS.iter().map(|c| (c.function, true)).collect(),
            book,
        };
        Snapshot::new(vec![Report {
            collector: "failures",
            success: true,
            duration: Duration::ZERO,
            finished: Instant::now(),
            data: Some(Arc::new(stats)),
            interval: Duration::from_secs(1),
            trends: Arc::new(Vec::new()),
        }])
    }

    fn key() -> SeriesKey {
        SeriesKey {
            pid: 612,
            comm: "ib_reg_mr".into(),
            cgroup: "/job".into(),
            call: "ib_umem_get",
            errno: "ENOMEM".into(),
            cause: Cause::Memlock,
        }
    }

    #[test]
    fn only_enomem_from_a_limit_pages_critical() {
        let at = Instant::now();
        let mut book = Book::default();
        book.record(key(), 1 << 20, Figures::default(), at);
        book.record(SeriesKey { cause: Cause::CgroupMemory, ..key() }, 1 << 20, Figures::default(), at);
        book.record(SeriesKey { cause: Cause::Other, ..key() }, 1 << 20, Figures::default(), at);
        book.record(SeriesKey { errno: "EFAULT".into(), cause: Cause::Other, ..key() }, 1, Figures::default(), at);
        book.record(SeriesKey { errno: "EINTR".into(), ..key() }, 1 << 20, Figures::default(), at);
        let out = candidates(&snapshot(book), &config(), at);
        let severity = |errno: &str, cause: &str| {
            out.iter()
                .find(|c| c.labels["errno"] == errno && c.labels["cause"] == cause)
                .map(|c| c.labels["severity"].clone())
                .unwrap()
        };
        assert_eq!(severity("ENOMEM", "memlock"), "critical");
        assert_eq!(severity("ENOMEM", "cgroup_memory"), "critical");
        assert_eq!(severity("ENOMEM", "other"), "warning");
        assert_eq!(severity("EFAULT", "other"), "warning");
        assert_eq!(severity("EINTR", "memlock"), "warning");
    }

    #[test]
    fn old_refusals_give_way_to_a_new_one_when_the_table_is_full() {
        let start = Instant::now();
        let mut book = Book::default();
        for pid in 0..crate::collect::failures::MAX_SERIES as u32 {
            book.record(SeriesKey { pid, ..key() }, 1 << 20, Figures::default(), start);
        }
        // Within the hold a newcomer is counted apart and pushes out no page still held...
        book.record(SeriesKey { pid: 7000, ..key() }, 1 << 20, Figures::default(), start + HOLD / 2);
        assert_eq!(book.overflow, 1);
        assert_eq!(candidates(&snapshot(book.clone()), &config(), start + HOLD / 2).len(), 64);
        // ...past it, the oldest gives way and the new refusal pages.
        let later = start + HOLD + Duration::from_secs(60);
        book.record(SeriesKey { pid: 777, ..key() }, 1 << 20, Figures::default(), later);
        let out = candidates(&snapshot(book), &config(), later);
        assert_eq!(out.len(), 1, "only the new refusal pages");
        assert_eq!(out[0].labels["pid"], "777");
    }

    #[test]
    fn the_first_refusal_pages_with_the_call_the_cause_and_the_figures() {
        let mut book = Book::default();
        let figures =
            Figures { pinned_bytes: Some(8 << 20), soft_limit: Some(Limit::Bytes(8 << 20)), ..Figures::default() };
        let at = Instant::now();
        book.record(key(), 1 << 20, figures, at);
        let out = candidates(&snapshot(book), &config(), at);
        assert_eq!(out.len(), 1);
        let alert = &out[0];
        assert_eq!(alert.labels["alertname"], ALERTNAME);
        assert_eq!(alert.labels["severity"], "critical");
        for (k, v) in [("pid", "612"), ("call", "ib_umem_get"), ("errno", "ENOMEM"), ("cause", "memlock")] {
            assert_eq!(alert.labels[k], v, "{k}");
        }
        let description = &alert.annotations["description"];
        assert!(
            description.starts_with("ib_umem_get refused 1.0 MiB to process 612 (ib_reg_mr) in cgroup /job"),
            "{description}"
        );
        assert!(description.contains("VmPin 8.0 MiB + 1.0 MiB asked > soft memlock limit 8.0 MiB"), "{description}");
        assert!(alert.annotations["runbook_url"].ends_with("#memlockregistrationfailed"));
        // Held for 10 minutes after the last one, then gone.
        assert_eq!(candidates(&snapshot_at(at), &config(), at + HOLD).len(), 1);
        assert!(candidates(&snapshot_at(at), &config(), at + HOLD + Duration::from_secs(1)).is_empty());
    }

    fn snapshot_at(at: Instant) -> Snapshot {
        let mut book = Book::default();
        book.record(key(), 1, Figures::default(), at);
        snapshot(book)
    }

    #[test]
    fn no_refusal_no_page() {
        assert!(candidates(&snapshot(Book::default()), &config(), Instant::now()).is_empty());
        assert!(candidates(&Snapshot::empty(), &config(), Instant::now()).is_empty());
        // Through the fast path's evaluation too.
        assert!(crate::alerting::evaluate(&snapshot(Book::default()), &config()).is_empty());
        let at = Instant::now();
        assert_eq!(crate::alerting::evaluate(&snapshot_at(at), &config()).len(), 1);
    }
}
