//! The fast path against trend points of every scope: what pages and what stays quiet, the
//! alert texts, the book's folding and resolving, the log limit and the endpoints.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::book::{PostableAlert, MAX_PER_NAME};
use super::deliver::{LogLimiter, LogLine, LOG_BURST, LOG_WINDOW};
use super::*;
use crate::charge::Charge;
use crate::config::Endpoint;
use crate::snapshot::Report;
use crate::trend::Recent;

const MIB: f64 = 1048576.0;

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

fn snapshot(points: Vec<TrendPoint>) -> Snapshot {
    Snapshot::new(vec![Report {
        collector: "process",
        success: true,
        duration: Duration::ZERO,
        interval: Duration::from_secs(1),
        finished: Instant::now(),
        data: None,
        trends: Arc::new(points),
    }])
}

fn process(value: f64, limit: f64, rise: Option<f64>, exhaustion: Option<f64>) -> TrendPoint {
    counter("pinned", value, limit, rise, exhaustion)
}

fn counter(name: &str, value: f64, limit: f64, rise: Option<f64>, exhaustion: Option<f64>) -> TrendPoint {
    TrendPoint {
        scope: Scope::Process,
        id: format!("4242/python/{name}"),
        labels: vec![
            ("pid", "4242".into()),
            ("comm", "python".into()),
            ("cgroup", "/slurm/job_1870".into()),
            ("counter", name.into()),
        ],
        charge: Charge::enforced(value as u64, Some(limit as u64)),
        rise,
        exhaustion,
        recent: ramping(rise.unwrap_or(0.0)),
    }
}

/// The newest samples of a ramp rising `per_second` every second.
fn ramping(per_second: f64) -> Recent {
    if per_second <= 0.0 {
        return Recent::default();
    }
    Recent {
        rising_steps: 6,
        since_last_rise: Some(0.0),
        step_interval: 1.0,
        spread: 6.0,
        largest_step: per_second,
        fallen: 0.0,
    }
}

#[test]
fn predicted_exhaustion_within_the_threshold_is_critical() {
    let alerts = evaluate(&snapshot(vec![process(5.0 * MIB, 8.0 * MIB, Some(0.5 * MIB), Some(6.0))]), &config());
    assert_eq!(alerts.len(), 1);
    let a = &alerts[0];
    assert_eq!(a.labels["alertname"], "MemlockProcessLimitExhaustionImminent");
    assert_eq!(a.labels["severity"], "critical");
    assert_eq!(a.labels["instance"], "gpu-node-17");
    assert_eq!(a.labels["pid"], "4242");
    assert_eq!(a.labels["cgroup"], "/slurm/job_1870");
    assert!(
        a.annotations["description"].contains("5.0 MiB") && a.annotations["description"].contains("512.0 KiB/s"),
        "{a:?}"
    );
    assert_eq!(
        a.annotations["runbook_url"],
        "https://example.invalid/runbooks.md#memlockprocesslimitexhaustionimminent"
    );
}

/// The fast path's labels are bounded as the scrape's are, so that
/// Alertmanager groups and inhibits them with the rules' alerts on the same series.
#[test]
fn alert_labels_and_texts_are_bounded_as_the_scrape_bounds_them() {
    let mut point = process(5.0 * MIB, 8.0 * MIB, Some(0.5 * MIB), Some(6.0));
    let long = format!("/attack/{}\u{1b}[2J", "d".repeat(4000));
    point.labels[1].1 = long.clone(); // comm, in the summary and description
    point.labels[2].1 = long.clone(); // cgroup
    let alerts = evaluate(&snapshot(vec![point]), &config());
    assert_eq!(alerts.len(), 1);
    let exported = crate::exposition::label_value(&long);
    assert_eq!(alerts[0].labels["cgroup"], exported);
    assert_eq!(alerts[0].labels["comm"], exported);
    assert!(alerts[0].annotations["summary"].contains(exported.as_ref()), "{:?}", alerts[0].annotations);
    assert_eq!(exported.len(), crate::exposition::MAX_LABEL_VALUE_BYTES);
    for text in alerts[0].annotations.values() {
        assert!(text.len() < 2048 && !text.contains('\u{1b}'), "{text}");
    }
}

/// Runs a counter's VmPin series (bytes per 1 s sample) under an 8 MiB limit through the real
/// trend tracker and returns the sample indices at which a critical page is called for.
fn pages_of(series: &[f64]) -> Vec<usize> {
    let mut tracker = crate::trend::Tracker::new(crate::trend::TrendConfig::default());
    let mut pages = Vec::new();
    for (i, &value) in series.iter().enumerate() {
        let point = tracker.observe(crate::trend::Observation {
            scope: Scope::Process,
            id: "4242/python/pinned".into(),
            labels: vec![("pid", "4242".into()), ("comm", "python".into()), ("counter", "pinned".into())],
            at: i as f64,
            charge: Charge::enforced(value as u64, Some(8 << 20)),
        });
        let alerts = evaluate(&snapshot(vec![point]), &config());
        if alerts.iter().any(|a| a.labels["severity"] == "critical") {
            pages.push(i);
        }
    }
    pages
}

/// The healthy patterns page nothing, the ramps still page in time. Each healthy pattern
/// pages critical without the guards (checked); the live version is scripts/e2e/fast_alert.sh.
#[test]
fn healthy_steps_do_not_page_and_ramps_still_do() {
    let flat = |v: f64, n: usize| std::iter::repeat_n(v, n);
    let mut healthy: Vec<(&str, Vec<f64>)> = Vec::new();
    // The case: 1 MiB, 10 s later one step of 2 MiB, flat at 37.5 %.
    healthy.push(("one step then flat", flat(MIB, 10).chain(flat(3.0 * MIB, 40)).collect()));
    // Four steps of 0.5 MiB within one second, straddling a sample: two rising intervals.
    healthy.push(("a burst of four steps", flat(MIB, 10).chain([2.0 * MIB]).chain(flat(3.0 * MIB, 40)).collect()));
    // A step to 5 MiB (62.5 %, above the level) on top of 4 MiB held.
    healthy.push(("a step on memory held", flat(4.0 * MIB, 10).chain(flat(5.0 * MIB, 40)).collect()));
    // Register 3 MiB for 2 s, deregister for 1 s, over and over, on top of 2 MiB.
    let cycle = [5.0 * MIB, 5.0 * MIB, 2.0 * MIB];
    healthy.push(("register/deregister cycles", cycle.iter().copied().cycle().take(60).collect()));
    // Steps every 2 s that give the memory back in between (a sawtooth up to 6 MiB).
    let saw: Vec<f64> = (0..60).map(|i| [2.0, 4.0, 6.0, 3.0][i % 4] * MIB).collect();
    healthy.push(("a sawtooth", saw));
    for (name, series) in &healthy {
        assert_eq!(pages_of(series), Vec::<usize>::new(), "{name} paged");
    }
    // Two ramps: 1 MiB/s to 8 MiB (refused at the 8th step, t = 8 s) and 1 MiB
    // every 2 s (refused at t = 16 s); both page at half the limit, 4 s and 8 s ahead.
    let ramp: Vec<f64> = (0..8).map(|i| i as f64 * MIB).collect();
    assert_eq!(pages_of(&ramp).first(), Some(&4), "{:?}", pages_of(&ramp));
    let slow: Vec<f64> = (0..16).map(|i| (i / 2) as f64 * MIB).collect();
    assert_eq!(pages_of(&slow).first(), Some(&8), "{:?}", pages_of(&slow));
    // A ramp that stopped (refused, or done) stops paging within three samples.
    let stopped: Vec<f64> = (0..8).map(|i| i as f64 * MIB).chain(flat(7.0 * MIB, 10)).collect();
    assert!(pages_of(&stopped).iter().all(|&i| i <= 9), "{:?}", pages_of(&stopped));
}

/// "The rise continues" counts steps in a share of the trend window, not among a fixed count of
/// samples: seven samples hold two steps of a staircase stepping every 3 s, and 1 MiB every
/// 3 s (or 4 s) to an 8 MiB limit would not page before the kernel refuses it (t = 24 s,
/// 32 s), while the Prometheus rule needs 5 minutes of history. Both page at half of the limit.
#[test]
fn staircases_every_few_seconds_page_before_the_refusal() {
    for every in [3usize, 4] {
        let refused = 8 * every;
        let stairs: Vec<f64> = (0..refused).map(|i| (i / every) as f64 * MIB).collect();
        let pages = pages_of(&stairs);
        assert_eq!(pages.first(), Some(&(4 * every)), "every {every} s: {pages:?}");
        assert!((4 * every..refused).all(|i| pages.contains(&i)), "every {every} s: {pages:?}");
        // Stopped at 7 MiB: the pages end within one step interval.
        let stopped: Vec<f64> = stairs.iter().copied().chain(std::iter::repeat_n(7.0 * MIB, 20)).collect();
        let pages = pages_of(&stopped);
        assert!(pages.iter().all(|&i| i <= 7 * every + every), "every {every} s: {pages:?}");
    }
}

/// The same guard for the cgroup and node scopes: one step then flat (a job loading a
/// second model into its cgroup; a large allocation on the node) pages neither, their ramps do.
#[test]
fn cgroup_and_node_steps_do_not_page_and_their_ramps_do() {
    let pages = scope_pages;
    let gib = 1024.0 * MIB;
    for scope in [Scope::Cgroup, Scope::Node] {
        let step: Vec<f64> = std::iter::repeat_n(5.0 * gib, 10).chain(std::iter::repeat_n(7.5 * gib, 40)).collect();
        assert_eq!(pages(scope, &step, 10 << 30), Vec::<usize>::new(), "{scope:?}: one step paged");
        // 256 MiB a second from 4 GiB: at 5 GiB, half of the limit, by the 4th sample.
        let ramp: Vec<f64> = (0..30).map(|i| 4.0 * gib + f64::from(i) * 256.0 * MIB).collect();
        assert_eq!(pages(scope, &ramp, 10 << 30).first(), Some(&4), "{scope:?}");
    }
}

/// The critical pages of a cgroup or node series (1 s samples) through the real tracker.
fn scope_pages(scope: Scope, series: &[f64], limit: u64) -> Vec<usize> {
    let mut tracker = crate::trend::Tracker::new(crate::trend::TrendConfig::default());
    let labels = if scope == Scope::Cgroup { vec![("cgroup", "/slurm/job_1".into())] } else { vec![] };
    let mut out = Vec::new();
    for (i, &value) in series.iter().enumerate() {
        let point = tracker.observe(crate::trend::Observation {
            scope,
            id: String::new(),
            labels: labels.clone(),
            at: i as f64,
            charge: Charge::enforced(value as u64, Some(limit)),
        });
        if evaluate(&snapshot(vec![point]), &config()).iter().any(|a| a.labels["severity"] == "critical") {
            out.push(i);
        }
    }
    out
}

/// "Nothing given back" cannot allow a fixed 4 KiB of drops for every scope: page cache moves
/// MemTotal - MemAvailable and a working set by more than a ramp adds per second, so a node at
/// 9 of 10 GiB rising 8 MiB/s with 16 MiB of jitter must page. Jitter smaller than the ramp is
/// not memory given back; flat jitter still pages nothing.
#[test]
fn page_cache_jitter_does_not_hide_a_ramp_nor_make_one() {
    let gib = 1024.0 * MIB;
    // Deterministic uniform jitter in [-16, 16) MiB.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut jitter = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 * 32.0 * MIB - 16.0 * MIB
    };
    let ramp: Vec<f64> = (0..120).map(|i| 9.0 * gib + f64::from(i) * 8.0 * MIB + jitter()).collect();
    let flat: Vec<f64> = (0..120).map(|_| 9.0 * gib + jitter()).collect();
    for scope in [Scope::Node, Scope::Cgroup] {
        let pages = scope_pages(scope, &ramp, 10 << 30);
        // 1 GiB left at 8 MiB/s: within the 120 s horizon from t = 8 s; the limit at 128 s.
        assert!(pages.first().is_some_and(|&i| i <= 20), "{scope:?}: {pages:?}");
        assert!(pages.len() >= 90, "{scope:?}: {} of 120 samples paged: {pages:?}", pages.len());
        assert_eq!(scope_pages(scope, &flat, 10 << 30), Vec::<usize>::new(), "{scope:?}: flat jitter paged");
    }
}

/// A large limit approached in large steps pages on the headroom: fewer than three steps left,
/// although far below half of the limit.
#[test]
fn few_steps_of_headroom_left_page_below_the_level() {
    let mut point = process(90.0 * MIB, 200.0 * MIB, Some(40.0 * MIB), Some(2.7));
    point.recent = Recent {
        rising_steps: 3,
        since_last_rise: Some(0.0),
        step_interval: 1.0,
        spread: 3.0,
        largest_step: 40.0 * MIB,
        fallen: 0.0,
    };
    assert_eq!(evaluate(&snapshot(vec![point.clone()]), &config()).len(), 1, "110 MiB left < 3 x 40 MiB");
    point.recent.largest_step = 30.0 * MIB;
    assert!(evaluate(&snapshot(vec![point.clone()]), &config()).is_empty(), "110 MiB left > 3 x 30 MiB");
    point.charge.used_bytes = 100 << 20;
    point.recent.since_last_rise = Some(3.0);
    assert!(evaluate(&snapshot(vec![point]), &config()).is_empty(), "half the limit, but the rise stopped");
}

#[test]
fn far_exhaustion_and_low_usage_do_not_alert() {
    let alerts = evaluate(&snapshot(vec![process(1.0 * MIB, 8.0 * MIB, Some(1024.0), Some(7000.0))]), &config());
    assert!(alerts.is_empty(), "{alerts:?}");
}

#[test]
fn usage_at_the_ratio_is_a_warning_even_when_flat() {
    let alerts = evaluate(&snapshot(vec![process(7.5 * MIB, 8.0 * MIB, Some(0.0), None)]), &config());
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].labels["alertname"], "MemlockProcessNearLimitFast");
    assert_eq!(alerts[0].labels["severity"], "warning");
}

/// The fast path and the exported metric share one ratio (crate::charge): a process at twice
/// its soft limit (an exempt one that lost CAP_IPC_LOCK, or a limit lowered under it)
/// pages 200 %, not "100 %, 0 B left".
#[test]
fn over_the_limit_the_fast_path_says_so() {
    let alerts = evaluate(&snapshot(vec![process(16.0 * MIB, 8.0 * MIB, Some(0.0), None)]), &config());
    assert_eq!(alerts.len(), 1);
    assert!(alerts[0].annotations["summary"].contains("200% of its soft memlock limit"), "{:?}", alerts[0]);
    assert!(alerts[0].annotations["description"].contains("0 B left"), "{:?}", alerts[0]);
}

/// Each counter pages on its own, labelled, naming the call the kernel will refuse.
#[test]
fn counters_page_apart_and_name_the_call_that_fails() {
    let points = vec![
        counter("pinned", 7.5 * MIB, 8.0 * MIB, Some(MIB), Some(0.5)),
        counter("locked", 6.0 * MIB, 8.0 * MIB, Some(0.0), None),
    ];
    let alerts = evaluate(&snapshot(points), &config());
    let names: Vec<(&str, &str)> =
        alerts.iter().map(|a| (a.labels["alertname"].as_str(), a.labels["counter"].as_str())).collect();
    assert_eq!(
        names,
        [("MemlockProcessLimitExhaustionImminent", "pinned"), ("MemlockProcessNearLimitFast", "pinned")],
        "the flat 75 % VmLck is below the warning ratio"
    );
    assert!(alerts[0].annotations["description"].starts_with("VmPin of process 4242 (python)"), "{alerts:?}");
    assert!(alerts[0].annotations["description"].contains("RDMA registration (ibv_reg_mr)"), "{alerts:?}");
    let locked = evaluate(&snapshot(vec![counter("locked", 7.6 * MIB, 8.0 * MIB, Some(0.0), None)]), &config());
    assert!(locked[0].annotations["description"].starts_with("VmLck of"), "{locked:?}");
    assert!(locked[0].annotations["description"].contains("next mlock"), "{locked:?}");
}

/// An exempt process (CAP_IPC_LOCK in the initial user namespace) is never refused.
#[test]
fn an_exempt_process_does_not_page() {
    let mut point = process(16.0 * MIB, 8.0 * MIB, Some(MIB), None);
    point.charge.enforced = false;
    assert!(evaluate(&snapshot(vec![point]), &config()).is_empty());
}

#[test]
fn cgroup_alerts_name_the_working_set() {
    let point = TrendPoint {
        scope: Scope::Cgroup,
        id: "/kubepods/pod1".into(),
        labels: vec![("cgroup", "/kubepods/pod1".into()), ("pod_uid", "1".into())],
        charge: Charge::enforced(60 << 20, Some(64 << 20)),
        rise: Some(2.0 * MIB),
        exhaustion: Some(2.0),
        recent: ramping(2.0 * MIB),
    };
    let alerts = evaluate(&snapshot(vec![point]), &config());
    let names: Vec<&str> = alerts.iter().map(|a| a.labels["alertname"].as_str()).collect();
    assert_eq!(names, ["MemlockCgroupMemoryExhaustionImminent", "MemlockCgroupNearMemoryLimitFast"]);
    for alert in &alerts {
        assert_eq!((alert.labels["scope"].as_str(), alert.labels["pod_uid"].as_str()), ("cgroup", "1"));
        assert!(
            alert.annotations["description"]
                .starts_with("working set (usage minus inactive page cache) of cgroup /kubepods/pod1 is 60.0 MiB"),
            "{alert:?}"
        );
    }
    assert!(alerts[1].annotations["summary"].contains("94% of its memory limit"), "{:?}", alerts[1]);
}

#[test]
fn alerts_start_once_resolve_after_the_hold_and_payloads_say_so() {
    let cfg = config();
    let mut book = AlertBook::new(cfg.resolve_after, cfg.resend_interval);
    let t0 = Instant::now();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let firing = evaluate(&snapshot(vec![process(5.0 * MIB, 8.0 * MIB, Some(MIB), Some(3.0))]), &cfg);
    let started = book.update(firing.clone(), t0, wall);
    assert_eq!(started.started.len(), 1);
    assert!(book.is_dirty());
    assert_eq!(book.active_count(), 1);
    book.delivered();
    book.update(firing, t0 + Duration::from_secs(1), wall + Duration::from_secs(1));
    assert!(!book.is_dirty(), "a continuing alert is not news");
    // Gone, but not for long enough yet.
    book.update(vec![], t0 + Duration::from_secs(3), wall + Duration::from_secs(3));
    assert_eq!(book.active_count(), 1);
    let ended = book.update(vec![], t0 + Duration::from_secs(7), wall + Duration::from_secs(7));
    assert_eq!(ended.resolved.len(), 1);
    assert_eq!(book.active_count(), 0);
    assert!(book.is_dirty());
    let payload = book.payload(wall + Duration::from_secs(7));
    assert_eq!(payload.len(), 1);
    assert_eq!(payload[0].starts_at, "2027-01-15T08:00:00.000Z");
    assert_eq!(payload[0].ends_at, "2027-01-15T08:00:07.000Z");
    book.delivered();
    assert!(book.payload(wall).is_empty());
    assert!(!book.has_work());
}

#[test]
fn active_alerts_carry_an_expiry_and_json_matches_the_api() {
    let cfg = config();
    let mut book = AlertBook::new(cfg.resolve_after, cfg.resend_interval);
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    book.update(
        evaluate(&snapshot(vec![process(5.0 * MIB, 8.0 * MIB, Some(MIB), Some(3.0))]), &cfg),
        Instant::now(),
        wall,
    );
    let payload = book.payload(wall);
    assert_eq!(payload[0].ends_at, "2027-01-15T08:02:00.000Z", "4 x 30 s resend interval");
    let json = serde_json::to_value(&payload).unwrap();
    assert!(json[0]["labels"]["alertname"].is_string());
    assert!(json[0]["startsAt"].is_string() && json[0]["endsAt"].is_string());
}

#[test]
fn resolved_alerts_are_bounded_while_undelivered() {
    let mut book = AlertBook::new(Duration::ZERO, Duration::from_secs(30));
    let cfg = config();
    let t0 = Instant::now();
    for i in 0..(MAX_RESOLVED + 50) {
        let mut p = process(5.0 * MIB, 8.0 * MIB, Some(MIB), Some(3.0));
        p.labels[0].1 = i.to_string();
        book.update(evaluate(&snapshot(vec![p]), &cfg), t0, SystemTime::now());
        book.update(vec![], t0 + Duration::from_secs(1), SystemTime::now());
    }
    assert!(book.payload(SystemTime::now()).len() <= MAX_RESOLVED);
}

/// 500 short-lived processes each over a 4 KiB limit they lowered call
/// for 500 warnings at once. At most MAX_PER_NAME go one by one, the job's among them, and
/// the rest as one aggregated alert; the POST stays small.
#[test]
fn a_churning_crowd_is_folded_and_the_job_stays_one_by_one() {
    let cfg = config();
    let mut book = AlertBook::new(cfg.resolve_after, cfg.resend_interval);
    let t0 = Instant::now();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let crowd = |round: usize| -> Vec<TrendPoint> {
        (0..500)
            .map(|i| {
                let mut p = counter("locked", 65536.0, 4096.0, Some(0.0), None);
                p.labels[0].1 = (10_000 + round * 500 + i).to_string();
                p
            })
            .collect()
    };
    let job = counter("pinned", 7.5 * MIB, 8.0 * MIB, Some(0.0), None);
    let mut points = crowd(0);
    points.push(job.clone());
    let started = book.update(evaluate(&snapshot(points), &cfg), t0, wall);
    assert_eq!(started.started.len(), MAX_PER_NAME + 1, "{:?}", started.started.len());
    let payload = book.payload(wall);
    assert!(payload.iter().any(|a| a.labels.get("pid").is_some_and(|p| p == "4242")), "the job is sent one by one");
    let folded: Vec<&PostableAlert> = payload.iter().filter(|a| a.labels.contains_key("aggregated")).collect();
    assert_eq!(folded.len(), 1);
    assert!(folded[0].annotations["summary"].starts_with("481 more alerts of MemlockProcessNearLimitFast"));
    let body = serde_json::to_vec(&payload).unwrap();
    assert!(body.len() < 40_000, "{} bytes", body.len());
    // The crowd churns: every second 500 new pids. The job keeps its place, nothing else
    // starts but the slots the dead free after resolve_after.
    book.delivered();
    let mut resolved_job = false;
    let mut started_total = 0;
    for round in 1..20 {
        let mut points = crowd(round);
        points.push(job.clone());
        let at = t0 + Duration::from_secs(round as u64);
        let t = book.update(evaluate(&snapshot(points), &cfg), at, wall + Duration::from_secs(round as u64));
        resolved_job |= t.resolved.iter().any(|l| l.get("pid").is_some_and(|p| p == "4242"));
        started_total += t.started.len();
        let sent = book.payload(wall).len();
        assert!(sent <= MAX_PER_NAME + 1 + t.resolved.len(), "{sent}");
        book.delivered();
    }
    assert!(!resolved_job, "the job's warning holds while its condition holds");
    // The dead crowd's slots free after resolve_after (5 s): a few dozen starts, not 9,500.
    assert!(started_total <= 4 * MAX_PER_NAME, "{started_total}");
}

/// 20 recently ended pages of one name (short-lived processes, inside resolve_after) must not
/// hold every place so that a job's first page is folded into the aggregated alert that already
/// exists, and Alertmanager hears nothing new; nor may 20 active crowd alerts keep a job more
/// urgent than any of them out.
#[test]
fn ended_or_sticky_crowd_pages_do_not_fold_a_jobs_first_page() {
    let cfg = config();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let t0 = Instant::now();
    let page = |pid: usize, used: f64| {
        let mut p = counter("pinned", used, 8.0 * MIB, Some(MIB), Some(1.0));
        p.labels[0].1 = pid.to_string();
        p
    };
    let crowd =
        |from: usize, n: usize, used: f64| -> Vec<TrendPoint> { (from..from + n).map(|i| page(i, used)).collect() };
    let job_sent = |book: &AlertBook, t: &Transitions| {
        let job = |l: &Labels| l.get("pid").is_some_and(|p| p == "4242") && !l.contains_key("aggregated");
        t.started.iter().any(job) && book.payload(wall).iter().any(|a| job(&a.labels))
    };
    // 25 pages near the limit that end; a second later the job's first page, less urgent.
    let mut book = AlertBook::new(cfg.resolve_after, cfg.resend_interval);
    let first = book.update(evaluate(&snapshot(crowd(10_000, 25, 7.0 * MIB)), &cfg), t0, wall);
    assert_eq!(first.started.len(), MAX_PER_NAME + 1);
    book.delivered();
    let job = page(4242, 4.5 * MIB);
    let t = book.update(evaluate(&snapshot(vec![job.clone()]), &cfg), t0 + Duration::from_secs(1), wall);
    assert!(job_sent(&book, &t), "{t:?}");
    // Ended pages and a live crowd beyond the budget: the crowd's newcomers stay folded, the
    // job more urgent than all of them is sent.
    let mut book = AlertBook::new(cfg.resolve_after, cfg.resend_interval);
    book.update(evaluate(&snapshot(crowd(10_000, 25, 4.0 * MIB)), &cfg), t0, wall);
    let mut points = crowd(20_000, 30, 4.0 * MIB);
    points.push(job.clone());
    let t = book.update(evaluate(&snapshot(points), &cfg), t0 + Duration::from_secs(1), wall);
    assert!(job_sent(&book, &t), "{t:?}");
    assert_eq!(t.started.len(), 1, "no newcomer of the crowd: {t:?}");
    // 25 active crowd pages at 50 %, still called for; the job at 53 % (more urgent than all) is sent.
    let mut book = AlertBook::new(cfg.resolve_after, cfg.resend_interval);
    book.update(evaluate(&snapshot(crowd(10_000, 25, 4.0 * MIB)), &cfg), t0, wall);
    let mut points = crowd(10_000, 25, 4.0 * MIB);
    points.push(page(4242, 4.25 * MIB));
    let t = book.update(evaluate(&snapshot(points), &cfg), t0 + Duration::from_secs(1), wall);
    assert!(job_sent(&book, &t), "{t:?}");
}

/// The bounded resolved queue must not drop a page's resolution when churn resolves more than
/// it holds while Alertmanager is unreachable.
#[test]
fn a_flood_of_resolved_warnings_does_not_push_out_a_resolved_page() {
    let cfg = config();
    let mut book = AlertBook::new(Duration::ZERO, cfg.resend_interval);
    let t0 = Instant::now();
    let page = process(7.0 * MIB, 8.0 * MIB, Some(MIB), Some(1.0));
    book.update(evaluate(&snapshot(vec![page]), &cfg), t0, SystemTime::now());
    book.update(vec![], t0 + Duration::from_secs(1), SystemTime::now());
    let mut dropped = [0; 2];
    for i in 0..(MAX_RESOLVED + 200) {
        let mut p = counter("locked", 7.5 * MIB, 8.0 * MIB, Some(0.0), None);
        p.labels[0].1 = (100_000 + i).to_string();
        for t in [
            book.update(evaluate(&snapshot(vec![p]), &cfg), t0 + Duration::from_secs(2), SystemTime::now()),
            book.update(vec![], t0 + Duration::from_secs(3), SystemTime::now()),
        ] {
            dropped = [dropped[0] + t.dropped[0], dropped[1] + t.dropped[1]];
        }
    }
    let payload = book.payload(SystemTime::now());
    assert!(payload.len() <= MAX_RESOLVED);
    assert_eq!(dropped, [201, 0], "the page and 1,200 warnings resolved: 201 warnings dropped, counted");
    assert!(
        payload.iter().any(|a| a.labels["alertname"] == "MemlockProcessLimitExhaustionImminent"),
        "the page's resolution is still to be sent"
    );
}

#[test]
fn log_lines_are_limited_per_name_and_summed_up() {
    let mut limiter = LogLimiter::default();
    let t0 = Instant::now();
    let admitted = (0..100).filter(|_| limiter.admit("A", false, t0) == LogLine::One).count();
    assert_eq!(admitted, LOG_BURST as usize);
    assert_eq!(limiter.admit("A", true, t0), LogLine::One, "resolutions have their own allowance");
    assert_eq!(limiter.admit("B", false, t0), LogLine::One, "and every name");
    assert!(limiter.roll(t0 + Duration::from_secs(5)).is_empty());
    let rolled = limiter.roll(t0 + LOG_WINDOW);
    assert_eq!(rolled.len(), 1);
    assert_eq!((rolled[0].0.as_str(), rolled[0].1, rolled[0].2), ("A", 90, 0));
    assert_eq!(limiter.admit("A", false, t0 + LOG_WINDOW), LogLine::One, "a new window");
}

#[test]
fn endpoints() {
    assert_eq!(Endpoint::parse("http://127.0.0.1:9093/").unwrap().alerts_url(), "http://127.0.0.1:9093/api/v2/alerts");
    assert_eq!(
        Endpoint::parse("http://am.example:9093/prefix").unwrap().alerts_url(),
        "http://am.example:9093/prefix/api/v2/alerts"
    );
    assert!(Endpoint::parse("https://am:9093").is_err());
    assert!(Endpoint::parse("am:9093").is_err());
    assert!(Endpoint::parse("http://").is_err());
    assert!(Endpoint::parse("http://user:pw@am:9093").is_err());
}

/// A crowd of processes, each at its (lowered) limit, arriving while a job's warning fires must
/// not take its place one by one, fold its labels away and have it sent as resolved while the
/// job still holds its memory: a warning sent one by one keeps its place while called for, and
/// the crowd's newcomers fold, in turns by cgroup.
#[test]
fn a_crowd_arriving_while_a_jobs_warning_fires_never_resolves_it() {
    let cfg = config();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let t0 = Instant::now();
    let mut book = AlertBook::new(cfg.resolve_after, cfg.resend_interval);
    let job = counter("locked", 7.44 * MIB, 8.0 * MIB, Some(0.0), None);
    let t = book.update(evaluate(&snapshot(vec![job.clone()]), &cfg), t0, wall);
    assert_eq!(t.started.len(), 1);
    book.delivered();
    // 40 crowd processes at 100 % of 2 MiB limits, 20 in one cgroup and one in each of 20 others.
    let crowd: Vec<TrendPoint> = (0..40)
        .map(|i| {
            let mut p = counter("locked", 2.0 * MIB, 2.0 * MIB, Some(0.0), None);
            p.labels[0].1 = (20_000 + i).to_string();
            p.labels[2].1 = if i < 20 { "/crowd".into() } else { format!("/crowd-{i}") };
            p
        })
        .collect();
    for second in 1..=12u64 {
        let mut points = crowd.clone();
        points.push(job.clone());
        let at = t0 + Duration::from_secs(second);
        let t = book.update(evaluate(&snapshot(points), &cfg), at, wall + Duration::from_secs(second));
        let is_job = |l: &Labels| l.get("pid").is_some_and(|p| p == "4242");
        assert!(!t.resolved.iter().any(is_job), "second {second}: the job's warning resolved: {t:?}");
        let payload = book.payload(wall);
        assert!(payload.iter().any(|a| is_job(&a.labels) && a.ends_at > a.starts_at), "second {second}");
        assert!(payload.len() <= 2 * MAX_PER_NAME + 1, "{}", payload.len());
        book.delivered();
    }
}

/// Newcomers beyond the places take turns by cgroup: 60 warnings of one cgroup and one in each
/// of 19 others get one place for the 60 and one for each of the others.
#[test]
fn newcomers_beyond_the_places_take_turns_by_cgroup() {
    let cfg = config();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut book = AlertBook::new(cfg.resolve_after, cfg.resend_interval);
    let points: Vec<TrendPoint> = (0..79)
        .map(|i| {
            // The crowding cgroup's are the most urgent.
            let used = if i < 60 { 7.9 } else { 7.5 };
            let mut p = counter("locked", used * MIB, 8.0 * MIB, Some(0.0), None);
            p.labels[0].1 = (20_000 + i).to_string();
            p.labels[2].1 = if i < 60 { "/crowd".into() } else { format!("/job-{i}") };
            p
        })
        .collect();
    book.update(evaluate(&snapshot(points), &cfg), Instant::now(), wall);
    let one_by_one: Vec<String> = book
        .payload(wall)
        .iter()
        .filter(|a| !a.labels.contains_key("aggregated"))
        .map(|a| a.labels["cgroup"].clone())
        .collect();
    assert_eq!(one_by_one.len(), MAX_PER_NAME);
    assert_eq!(one_by_one.iter().filter(|c| *c == "/crowd").count(), 1, "{one_by_one:?}");
}

/// An 8,192-process crowd over the limits it lowered: an evaluation builds only what the fold
/// can send or name (bounded per cgroup), counts the rest into the folded alert, keeps the job's
/// warning one by one, and never takes an alert sent one by one for resolved because others of
/// its cgroup grew more urgent.
#[test]
fn a_crowd_costs_an_evaluation_a_count_and_resolves_nothing_it_holds() {
    let cfg = config();
    let mut book = AlertBook::new(cfg.resolve_after, cfg.resend_interval);
    let t0 = Instant::now();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let crowd = |ratio: &dyn Fn(usize) -> f64| -> Vec<TrendPoint> {
        (0..8192)
            .map(|i| {
                let mut p = counter("locked", ratio(i) * 8.0 * MIB, 8.0 * MIB, Some(0.0), None);
                p.labels[0].1 = (10_000 + i).to_string();
                p.labels[2].1 = "/crowd".into();
                p
            })
            .collect()
    };
    let mut points = crowd(&|_| 0.95);
    points.push(counter("pinned", 7.5 * MIB, 8.0 * MIB, Some(0.0), None));
    let (candidates, left_out) = evaluate_for(&snapshot(points), &cfg, Some(&book));
    assert!(candidates.len() <= book::PER_CGROUP + 1, "{}", candidates.len());
    assert_eq!(left_out.values().sum::<usize>() + candidates.len(), 8193);
    let t = book.update_counted(candidates, left_out, t0, wall);
    assert!(t.started.iter().any(|l| l.get("pid").is_some_and(|p| p == "4242")), "the job one by one");
    let payload = book.payload(wall);
    let folded = payload.iter().find(|a| a.labels.contains_key("aggregated")).expect("the crowd folded");
    let one_by_one = payload.len() - 2;
    let summary = &folded.annotations["summary"];
    assert!(summary.starts_with(&format!("{} more alerts", 8192 - one_by_one)), "{summary}");
    let sent: Vec<String> =
        payload.iter().filter_map(|a| a.labels.get("pid").filter(|p| *p != "4242").cloned()).collect();
    // The crowd's alerts sent one by one fall below 50 others of their cgroup, still over the
    // warning ratio: they are still called for, and the job's too.
    let mut points = crowd(&|i| if i < 100 { 0.91 } else { 0.99 });
    points.push(counter("pinned", 7.5 * MIB, 8.0 * MIB, Some(0.0), None));
    for round in 1..8 {
        let (candidates, left_out) = evaluate_for(&snapshot(points.clone()), &cfg, Some(&book));
        let t = book.update_counted(candidates, left_out, t0 + Duration::from_secs(round), wall);
        assert!(t.resolved.is_empty(), "round {round}: {:?}", t.resolved);
    }
    let payload = book.payload(wall);
    for pid in &sent {
        assert!(payload.iter().any(|a| a.labels.get("pid") == Some(pid)), "{pid} still sent one by one");
    }
}
