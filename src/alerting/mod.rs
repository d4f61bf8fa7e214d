//! The fast path: alert rules evaluated on every new snapshot (1 s samples) and pushed straight
//! to Alertmanager's API v2, so a steep rise pages before a scrape-and-evaluate cycle could.
//!
//! Three parts, so that sampling never waits on the network:
//! - [`evaluate`]: pure; which alerts the snapshot's trend points call for.
//! - [`AlertBook`]: the state machine; when alerts start, resolve and must be (re)sent.
//! - [`run`]: an async task reading snapshots from the sampler's watch channel and delivering
//!   with retries and backoff. The sampler only ever replaces the latest snapshot.

pub mod failures;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use prometheus::{IntCounterVec, IntGauge};
use serde::Serialize;
use tokio::sync::watch;

use crate::config::{AlertingConfig, Endpoint};
use crate::scopes::{Wording, EXHAUSTION_HEADROOM_STEPS};
use crate::snapshot::Snapshot;
use crate::timefmt::rfc3339_millis;
use crate::trend::{Scope, TrendPoint};
use crate::units::bytes;

pub type Labels = BTreeMap<String, String>;

/// An alert the rules call for right now.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub labels: Labels,
    pub annotations: Labels,
    /// How urgent its scope is ([`Charge::urgency`](crate::charge::Charge::urgency)): when more alerts of one
    /// name are called for than [`MAX_PER_NAME`], the most urgent are sent one by one.
    pub urgency: f64,
}

fn urgency(point: &TrendPoint) -> f64 {
    point.charge.urgency().unwrap_or(-1.0)
}

/// Whether a predicted exhaustion is a page: the prediction alone reads one step as a ramp for
/// a whole trend window (issue 23: 1 MiB held, one step of 2 MiB, flat at 37.5 % of the limit,
/// paged critical for 30 s). The rise must continue in the newest samples
/// ([`crate::trend::Recent::continues`]), and the scope must be high enough that the rise
/// matters: at its scope's floor ([`ScopeDef::page_min_ratio`](crate::scopes::ScopeDef::page_min_ratio)) of
/// its limit, or with fewer than [`EXHAUSTION_HEADROOM_STEPS`] of its newest steps left (a large limit
/// approached in large steps).
pub fn exhaustion_pages(point: &TrendPoint, seconds: f64, config: &AlertingConfig) -> bool {
    if seconds > config.exhaustion_critical.as_secs_f64() || !point.recent.continues() {
        return false;
    }
    let high = point.charge.enforced_ratio().is_some_and(|r| r >= point.scope.def().page_min_ratio);
    let close = point
        .charge
        .headroom_bytes()
        .is_some_and(|h| (h as f64) < EXHAUSTION_HEADROOM_STEPS * point.recent.largest_step);
    high || close
}

/// Which alerts a snapshot calls for.
pub fn evaluate(snapshot: &Snapshot, config: &AlertingConfig) -> Vec<Candidate> {
    let mut out = Vec::new();
    for point in snapshot.trends() {
        if let Some(seconds) = point.exhaustion {
            if exhaustion_pages(point, seconds, config) {
                out.push(exhaustion_alert(point, seconds, config));
            }
        }
        if let Some(alertname) = point.scope.def().near_limit_alert {
            if let Some(ratio) = point.charge.enforced_ratio() {
                if ratio >= config.usage_ratio_warning {
                    out.push(near_limit_alert(alertname, point, ratio, config));
                }
            }
        }
    }
    out.extend(failures::candidates(snapshot, config, Instant::now()));
    out
}

fn base_labels(alertname: &str, severity: &str, point: &TrendPoint, config: &AlertingConfig) -> Labels {
    let mut labels = Labels::new();
    labels.insert("alertname".into(), alertname.into());
    labels.insert("severity".into(), severity.into());
    labels.insert("instance".into(), config.instance.clone());
    labels.insert("scope".into(), point.scope.as_str().into());
    labels.insert("source".into(), "memlock-exporter".into());
    for (key, value) in &point.labels {
        // Bounded as the scrape bounds it: the Prometheus rules' alerts carry the same labels.
        labels.insert((*key).into(), crate::exposition::label_value(value).into_owned());
    }
    labels
}

fn label<'a>(point: &'a TrendPoint, key: &str) -> Option<&'a str> {
    point.labels.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str())
}

fn subject(point: &TrendPoint) -> String {
    // Bounded as in the labels: a 4 KiB cgroup path is not a summary.
    let shown = |key: &str| label(point, key).map(crate::exposition::label_value).unwrap_or("?".into());
    match point.scope {
        Scope::Node => "the node".into(),
        Scope::Cgroup => format!("cgroup {}", shown("cgroup")),
        Scope::Process => {
            format!("process {} ({})", shown("pid"), shown("comm"))
        }
    }
}

/// The alert words of the point's scope ([`crate::scopes`]), by its `counter` label.
fn watched(point: &TrendPoint) -> Wording {
    point.scope.def().wording(label(point, "counter"))
}

fn headroom(point: &TrendPoint) -> String {
    point.charge.headroom_bytes().map_or_else(|| "?".into(), |h| bytes(h as f64))
}

fn exhaustion_alert(point: &TrendPoint, seconds: f64, config: &AlertingConfig) -> Candidate {
    let alertname = point.scope.def().exhaustion_alert;
    let w = watched(point);
    let rise = point.rise.unwrap_or(0.0);
    let mut annotations = Labels::new();
    annotations.insert("summary".into(), format!("{} reaches {} in about {seconds:.0}s", subject(point), w.limit));
    annotations.insert(
        "description".into(),
        format!(
            "{} of {} is {} and rising {}/s; {} left before {}. At this rate it is reached in {seconds:.0}s: {}.",
            w.quantity,
            subject(point),
            bytes(point.charge.used_bytes as f64),
            bytes(rise),
            headroom(point),
            w.limit,
            w.consequence,
        ),
    );
    annotations.insert("runbook_url".into(), runbook(config, alertname));
    Candidate { labels: base_labels(alertname, "critical", point, config), annotations, urgency: urgency(point) }
}

fn near_limit_alert(alertname: &'static str, point: &TrendPoint, ratio: f64, config: &AlertingConfig) -> Candidate {
    let w = watched(point);
    let mut annotations = Labels::new();
    annotations.insert("summary".into(), format!("{} uses {:.0}% of {}", subject(point), ratio * 100.0, w.limit));
    annotations.insert(
        "description".into(),
        format!(
            "{} of {} is {}, {:.1}% of {} ({} left): {}.",
            w.quantity,
            subject(point),
            bytes(point.charge.used_bytes as f64),
            ratio * 100.0,
            w.limit,
            headroom(point),
            w.consequence,
        ),
    );
    annotations.insert("runbook_url".into(), runbook(config, alertname));
    Candidate { labels: base_labels(alertname, "warning", point, config), annotations, urgency: urgency(point) }
}

/// One alert for the candidates of `name` beyond [`MAX_PER_NAME`]: the labels they share
/// (alertname, severity, instance, source, scope when they agree) and `aggregated="true"`.
fn aggregate(name: &str, rest: Vec<Candidate>) -> Candidate {
    let mut labels = Labels::new();
    for key in ["alertname", "severity", "instance", "source", "scope"] {
        let first = rest.first().and_then(|c| c.labels.get(key));
        if let Some(value) = first.filter(|v| rest.iter().all(|c| c.labels.get(key) == Some(v))) {
            labels.insert(key.into(), value.clone());
        }
    }
    labels.insert("alertname".into(), name.into());
    labels.insert("aggregated".into(), "true".into());
    let named: Vec<&str> =
        rest.iter().take(AGGREGATE_NAMED).filter_map(|c| c.annotations.get("summary").map(String::as_str)).collect();
    let mut annotations = Labels::new();
    annotations.insert(
        "summary".into(),
        format!("{} more alerts of {name} (the {MAX_PER_NAME} most urgent are sent one by one)", rest.len()),
    );
    annotations.insert(
        "description".into(),
        format!(
            "{} scopes call for {name} beyond the {MAX_PER_NAME} sent one by one; the first {}: {}.",
            rest.len(),
            named.len(),
            named.join("; ")
        ),
    );
    if let Some(url) = rest.first().and_then(|c| c.annotations.get("runbook_url")) {
        annotations.insert("runbook_url".into(), url.clone());
    }
    let urgency = rest.iter().map(|c| c.urgency).fold(f64::NEG_INFINITY, f64::max);
    Candidate { labels, annotations, urgency }
}

/// Log lines of fast-path transitions per alert name: at most [`LOG_BURST`] started and
/// [`LOG_BURST`] resolved per [`LOG_WINDOW`], then one line with what was left out.
pub const LOG_BURST: u64 = 10;
pub const LOG_WINDOW: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub struct LogLimiter {
    windows: BTreeMap<String, LogWindow>,
}

#[derive(Debug)]
struct LogWindow {
    since: Instant,
    logged: [u64; 2],
    suppressed: [u64; 2],
}

/// What to log for one transition.
#[derive(Debug, PartialEq)]
pub enum LogLine {
    /// This transition, on its own line.
    One,
    /// Nothing now (counted for the summary).
    Suppressed,
}

/// A summary of transitions left out of the log: (alertname, started, resolved, seconds).
pub type Suppressed = (String, u64, u64, f64);

impl LogLimiter {
    /// Whether a transition of `alertname` (`resolved` or started) is logged at `now`.
    pub fn admit(&mut self, alertname: &str, resolved: bool, now: Instant) -> LogLine {
        let window = self.windows.entry(alertname.to_owned()).or_insert(LogWindow {
            since: now,
            logged: [0; 2],
            suppressed: [0; 2],
        });
        let kind = usize::from(resolved);
        if window.logged[kind] < LOG_BURST {
            window.logged[kind] += 1;
            LogLine::One
        } else {
            window.suppressed[kind] += 1;
            LogLine::Suppressed
        }
    }

    /// Closes the windows older than [`LOG_WINDOW`]; returns the suppressed counts to log.
    pub fn roll(&mut self, now: Instant) -> Vec<Suppressed> {
        let mut out = Vec::new();
        self.windows.retain(|name, w| {
            let age = now.saturating_duration_since(w.since);
            if age < LOG_WINDOW {
                return true;
            }
            if w.suppressed != [0, 0] {
                out.push((name.clone(), w.suppressed[0], w.suppressed[1], age.as_secs_f64()));
            }
            false
        });
        out
    }
}

fn runbook(config: &AlertingConfig, alertname: &str) -> String {
    format!("{}#{}", config.runbook_url, alertname.to_ascii_lowercase())
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Active {
    candidate: Candidate,
    starts_at: SystemTime,
    last_seen: Instant,
}

#[derive(Debug, Clone)]
struct Resolved {
    candidate: Candidate,
    starts_at: SystemTime,
    ends_at: SystemTime,
}

/// What Alertmanager's API v2 takes.
#[derive(Debug, Serialize, PartialEq)]
pub struct PostableAlert {
    pub labels: Labels,
    pub annotations: Labels,
    #[serde(rename = "startsAt")]
    pub starts_at: String,
    #[serde(rename = "endsAt")]
    pub ends_at: String,
}

/// Resolved alerts kept for delivery at most (bounded while Alertmanager is down); past it the
/// oldest warnings go first, critical resolutions last.
const MAX_RESOLVED: usize = 1000;

/// Alerts of one name sent one by one at most; the rest are folded into one alert of that name
/// with `aggregated="true"`, which says how many and names the first. Process churn (short-lived
/// processes each over a limit) made 4,000 firing alerts and log lines in 20 s and 0.97 MB
/// POSTs (issue 24 item 10).
pub const MAX_PER_NAME: usize = 20;

/// An alert already sent one by one keeps its place against a newcomer this much more urgent
/// at most, so that the set sent one by one does not change with every sample.
const STICKY: f64 = 0.05;

/// Subjects named in an aggregated alert's description at most.
const AGGREGATE_NAMED: usize = 10;

/// Alerts that started or resolved in one update, for the log.
#[derive(Debug, Default, PartialEq)]
pub struct Transitions {
    pub started: Vec<Labels>,
    pub resolved: Vec<Labels>,
}

/// Tracks active and resolved alerts and decides what to send.
pub struct AlertBook {
    active: BTreeMap<Labels, Active>,
    resolved: Vec<Resolved>,
    resolve_after: Duration,
    resend_interval: Duration,
    /// Something changed since the last successful delivery.
    dirty: bool,
}

impl AlertBook {
    pub fn new(resolve_after: Duration, resend_interval: Duration) -> Self {
        Self { active: BTreeMap::new(), resolved: Vec::new(), resolve_after, resend_interval, dirty: false }
    }

    pub fn active_count(&self) -> usize {
        self.active.len()
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Keeps at most [`MAX_PER_NAME`] candidates of each alert name, the most urgent (those
    /// active already first, within [`STICKY`]), and folds the rest of that name into one.
    ///
    /// Alerts still active but no longer called for (a process that exited, inside
    /// `resolve_after`) are "held". They give up their places first: while the candidates of a
    /// name fit in [`MAX_PER_NAME`], every one is sent one by one however many are held, so 20
    /// ended pages of short-lived processes cannot fold a job's first page into an aggregated
    /// alert whose labels never change (Alertmanager would hear nothing new). Only against a
    /// live crowd beyond [`MAX_PER_NAME`] does a held alert keep its place, and then only against
    /// newcomers no more urgent than it: otherwise churn starts new alerts every sample. A
    /// candidate more urgent than every alert of its name sent one by one is never folded, so
    /// [`STICKY`] cannot keep a crowd ahead of it.
    fn fold(&self, candidates: Vec<Candidate>) -> Vec<Candidate> {
        let mut by_name: BTreeMap<String, Vec<Candidate>> = BTreeMap::new();
        for candidate in candidates {
            let name = candidate.labels.get("alertname").cloned().unwrap_or_default();
            by_name.entry(name).or_default().push(candidate);
        }
        let mut out = Vec::new();
        for (name, mut group) in by_name {
            if group.len() <= MAX_PER_NAME {
                out.extend(group);
                continue;
            }
            let called: std::collections::HashSet<&Labels> = group.iter().map(|c| &c.labels).collect();
            let one_by_one =
                self.active.iter().filter(|(l, _)| l.get("alertname") == Some(&name) && !l.contains_key("aggregated"));
            let mut held = Vec::new();
            let mut top = f64::NEG_INFINITY;
            for (labels, active) in one_by_one {
                top = top.max(active.candidate.urgency);
                if !called.contains(labels) {
                    held.push(active.candidate.urgency);
                }
            }
            let above_all = |c: &Candidate| c.urgency > top;
            let key = |c: &Candidate| c.urgency + if self.active.contains_key(&c.labels) { STICKY } else { 0.0 };
            group.sort_by(|a, b| above_all(b).cmp(&above_all(a)).then(key(b).total_cmp(&key(a))));
            let (mut kept, mut rest) = (Vec::new(), Vec::new());
            for candidate in group {
                let holding = held.iter().filter(|&&h| h >= candidate.urgency).count();
                let room = kept.len() < MAX_PER_NAME && (above_all(&candidate) || kept.len() + holding < MAX_PER_NAME);
                if room {
                    kept.push(candidate);
                } else {
                    rest.push(candidate);
                }
            }
            out.extend(kept);
            if !rest.is_empty() {
                out.push(aggregate(&name, rest));
            }
        }
        out
    }

    /// Applies an evaluation made at `now`; returns the alerts that started and resolved.
    pub fn update(&mut self, candidates: Vec<Candidate>, now: Instant, wall: SystemTime) -> Transitions {
        let mut transitions = Transitions::default();
        let candidates = self.fold(candidates);
        for candidate in candidates {
            match self.active.get_mut(&candidate.labels) {
                Some(active) => {
                    active.candidate.annotations = candidate.annotations;
                    active.last_seen = now;
                }
                None => {
                    self.dirty = true;
                    // Firing again: its earlier resolution is stale.
                    self.resolved.retain(|r| r.candidate.labels != candidate.labels);
                    transitions.started.push(candidate.labels.clone());
                    self.active.insert(candidate.labels.clone(), Active { candidate, starts_at: wall, last_seen: now });
                }
            }
        }
        let resolve_after = self.resolve_after;
        let gone: Vec<Labels> = self
            .active
            .iter()
            .filter(|(_, a)| now.saturating_duration_since(a.last_seen) >= resolve_after)
            .map(|(k, _)| k.clone())
            .collect();
        for labels in gone {
            if let Some(a) = self.active.remove(&labels) {
                self.dirty = true;
                transitions.resolved.push(labels);
                self.resolved.push(Resolved { candidate: a.candidate, starts_at: a.starts_at, ends_at: wall });
            }
        }
        if self.resolved.len() > MAX_RESOLVED {
            // Warnings (and folded alerts) before criticals, the oldest first: a page's
            // resolution is the one an on-call waits for.
            let critical = |r: &Resolved| r.candidate.labels.get("severity").is_some_and(|s| s == "critical");
            let mut excess = self.resolved.len() - MAX_RESOLVED;
            for pass_critical in [false, true] {
                self.resolved.retain(|r| {
                    if excess > 0 && critical(r) == pass_critical {
                        excess -= 1;
                        return false;
                    }
                    true
                });
            }
        }
        transitions
    }

    /// The payload to send: active alerts valid for four resend intervals (so Alertmanager
    /// resolves them by itself if this exporter dies), and resolved alerts with their end time.
    pub fn payload(&self, wall: SystemTime) -> Vec<PostableAlert> {
        let valid_until = rfc3339_millis(wall + self.resend_interval * 4);
        let active = self.active.values().map(|a| PostableAlert {
            labels: a.candidate.labels.clone(),
            annotations: a.candidate.annotations.clone(),
            starts_at: rfc3339_millis(a.starts_at),
            ends_at: valid_until.clone(),
        });
        let resolved = self.resolved.iter().map(|r| PostableAlert {
            labels: r.candidate.labels.clone(),
            annotations: r.candidate.annotations.clone(),
            starts_at: rfc3339_millis(r.starts_at),
            ends_at: rfc3339_millis(r.ends_at),
        });
        active.chain(resolved).collect()
    }

    /// After every Alertmanager took the payload: resolved alerts are done.
    pub fn delivered(&mut self) {
        self.resolved.clear();
        self.dirty = false;
    }

    pub fn has_work(&self) -> bool {
        !self.active.is_empty() || !self.resolved.is_empty()
    }
}

/// Counters of the fast path, registered by the daemon.
#[derive(Clone)]
pub struct AlertMetrics {
    pub sent: IntCounterVec,
    pub failures: IntCounterVec,
    pub active: IntGauge,
}

/// Evaluates every new snapshot and delivers until the snapshot channel closes.
pub async fn run(mut snapshots: watch::Receiver<Arc<Snapshot>>, config: AlertingConfig, metrics: AlertMetrics) {
    let endpoints: Vec<Endpoint> = config.alertmanager_urls.iter().filter_map(|u| Endpoint::parse(u).ok()).collect();
    if endpoints.is_empty() {
        return;
    }
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut book = AlertBook::new(config.resolve_after, config.resend_interval);
    let mut limiter = LogLimiter::default();
    let mut last_sent: Option<Instant> = None;
    let mut backoff = Duration::ZERO;
    let mut retry_at: Option<Instant> = None;
    loop {
        // Wake on a new snapshot, or when a resend or retry is due.
        let wake = match (retry_at, last_sent) {
            (Some(at), _) => Some(at),
            (None, Some(at)) if book.has_work() => Some(at + config.resend_interval),
            _ => None,
        };
        let sleep = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = snapshots.changed() => {
                if changed.is_err() {
                    return;
                }
                let snapshot = snapshots.borrow_and_update().clone();
                let now = Instant::now();
                let transitions = book.update(evaluate(&snapshot, &config), now, SystemTime::now());
                // One line per change, so an operator can line up the page with the sample; at
                // most LOG_BURST per name and kind in LOG_WINDOW, then a count (process churn).
                for (resolved, list) in [(false, &transitions.started), (true, &transitions.resolved)] {
                    for labels in list {
                        let alertname = labels.get("alertname").map_or("", String::as_str);
                        if limiter.admit(alertname, resolved, now) == LogLine::Suppressed {
                            continue;
                        }
                        if resolved {
                            tracing::info!(alertname, labels = ?labels, "fast-path alert resolved");
                        } else {
                            tracing::info!(alertname, labels = ?labels, "fast-path alert firing");
                        }
                    }
                }
                for (alertname, started, resolved, seconds) in limiter.roll(now) {
                    tracing::info!(
                        alertname,
                        started,
                        resolved,
                        seconds,
                        "fast-path alerts not logged one by one (more than {LOG_BURST} per {LOG_WINDOW:?})"
                    );
                }
                metrics.active.set(book.active_count() as i64);
            }
            () = sleep => {}
        }
        let now = Instant::now();
        let resend_due = book.has_work() && last_sent.is_none_or(|t| now.duration_since(t) >= config.resend_interval);
        let retry_due = retry_at.is_some_and(|t| now >= t);
        let waiting_for_retry = retry_at.is_some_and(|t| now < t);
        if waiting_for_retry || !(book.is_dirty() || resend_due || retry_due) {
            continue;
        }
        let payload = book.payload(SystemTime::now());
        let body = match serde_json::to_vec(&payload) {
            Ok(body) => Bytes::from(body),
            Err(err) => {
                tracing::error!(error = %err, "encoding alerts failed");
                continue;
            }
        };
        let mut all_ok = true;
        for endpoint in &endpoints {
            match post(&client, endpoint, body.clone(), config.timeout).await {
                Ok(()) => metrics.sent.with_label_values(&[&endpoint.base]).inc_by(payload.len() as u64),
                Err(err) => {
                    all_ok = false;
                    metrics.failures.with_label_values(&[&endpoint.base]).inc();
                    tracing::warn!(alertmanager = %endpoint.base, error = %err, "sending alerts failed; will retry");
                }
            }
        }
        last_sent = Some(Instant::now());
        if all_ok {
            book.delivered();
            backoff = Duration::ZERO;
            retry_at = None;
        } else {
            backoff = (backoff * 2).clamp(Duration::from_secs(1), Duration::from_secs(30));
            retry_at = Some(Instant::now() + backoff);
        }
    }
}

async fn post(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    endpoint: &Endpoint,
    body: Bytes,
    timeout: Duration,
) -> Result<(), String> {
    let request = Request::builder()
        .method(Method::POST)
        .uri(endpoint.alerts_url())
        .header("content-type", "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let response = tokio::time::timeout(timeout, client.request(request))
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
        .map_err(|e| e.to_string())?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let text = tokio::time::timeout(timeout, response.into_body().collect())
        .await
        .ok()
        .and_then(|r| r.ok())
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).chars().take(200).collect::<String>())
        .unwrap_or_default();
    Err(format!("HTTP {status}: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::charge::Charge;
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

    /// Issue 15 item 6: the fast path's labels are bounded as the scrape's are, so that
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

    /// Issue 23 item 1: the healthy patterns page nothing, the ramps still page in time. Each
    /// healthy pattern paged critical before the guards (checked); the live version is
    /// scripts/e2e/fast_alert.sh.
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
        // The ramps of issue 14: 1 MiB/s to 8 MiB (refused at the 8th step, t = 8 s) and 1 MiB
        // every 2 s (refused at t = 16 s); both page at half the limit, 4 s and 8 s ahead.
        let ramp: Vec<f64> = (0..8).map(|i| i as f64 * MIB).collect();
        assert_eq!(pages_of(&ramp).first(), Some(&4), "{:?}", pages_of(&ramp));
        let slow: Vec<f64> = (0..16).map(|i| (i / 2) as f64 * MIB).collect();
        assert_eq!(pages_of(&slow).first(), Some(&8), "{:?}", pages_of(&slow));
        // A ramp that stopped (refused, or done) stops paging within three samples.
        let stopped: Vec<f64> = (0..8).map(|i| i as f64 * MIB).chain(flat(7.0 * MIB, 10)).collect();
        assert!(pages_of(&stopped).iter().all(|&i| i <= 9), "{:?}", pages_of(&stopped));
    }

    /// Review M1 of issue 23's guard: "the rise continues" counted steps among the newest seven
    /// samples, which hold two steps of a staircase stepping every 3 s: 1 MiB every 3 s (or 4 s)
    /// to an 8 MiB limit never paged before the kernel refused it (t = 24 s, 32 s), and the
    /// Prometheus rule needs 5 minutes of history. Both page at half of the limit now.
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

    /// Review M2 of issue 23's guard: "nothing given back" allowed drops of 4 KiB for every
    /// scope, and page cache moves MemTotal - MemAvailable and a working set by more than a
    /// ramp adds per second: a node at 9 of 10 GiB rising 8 MiB/s with 16 MiB of jitter paged
    /// in none of 120 samples. Jitter smaller than the ramp is not memory given back; flat
    /// jitter still pages nothing.
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

    /// Issue 24 item 10: 500 short-lived processes each over a 4 KiB limit they lowered call
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

    /// Review H2 of issue 24: 20 recently ended pages of one name (short-lived processes, inside
    /// resolve_after) held every place, and a job's first page was folded into the aggregated
    /// alert that already existed: Alertmanager heard nothing new. STICKY kept 20 active crowd
    /// alerts ahead of a job more urgent than any of them the same way.
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
        // 25 active crowd pages at 50 %, still called for; the job at 53 % (within STICKY) is sent.
        let mut book = AlertBook::new(cfg.resolve_after, cfg.resend_interval);
        book.update(evaluate(&snapshot(crowd(10_000, 25, 4.0 * MIB)), &cfg), t0, wall);
        let mut points = crowd(10_000, 25, 4.0 * MIB);
        points.push(page(4242, 4.25 * MIB));
        let t = book.update(evaluate(&snapshot(points), &cfg), t0 + Duration::from_secs(1), wall);
        assert!(job_sent(&book, &t), "{t:?}");
    }

    /// Issue 24 item 10: the bounded resolved queue dropped the oldest, a page's among them,
    /// when churn resolved more than it holds while Alertmanager was unreachable.
    #[test]
    fn a_flood_of_resolved_warnings_does_not_push_out_a_resolved_page() {
        let cfg = config();
        let mut book = AlertBook::new(Duration::ZERO, cfg.resend_interval);
        let t0 = Instant::now();
        let page = process(7.0 * MIB, 8.0 * MIB, Some(MIB), Some(1.0));
        book.update(evaluate(&snapshot(vec![page]), &cfg), t0, SystemTime::now());
        book.update(vec![], t0 + Duration::from_secs(1), SystemTime::now());
        for i in 0..(MAX_RESOLVED + 200) {
            let mut p = counter("locked", 7.5 * MIB, 8.0 * MIB, Some(0.0), None);
            p.labels[0].1 = (100_000 + i).to_string();
            book.update(evaluate(&snapshot(vec![p]), &cfg), t0 + Duration::from_secs(2), SystemTime::now());
            book.update(vec![], t0 + Duration::from_secs(3), SystemTime::now());
        }
        let payload = book.payload(SystemTime::now());
        assert!(payload.len() <= MAX_RESOLVED);
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
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:9093/").unwrap().alerts_url(),
            "http://127.0.0.1:9093/api/v2/alerts"
        );
        assert_eq!(
            Endpoint::parse("http://am.example:9093/prefix").unwrap().alerts_url(),
            "http://am.example:9093/prefix/api/v2/alerts"
        );
        assert!(Endpoint::parse("https://am:9093").is_err());
        assert!(Endpoint::parse("am:9093").is_err());
        assert!(Endpoint::parse("http://").is_err());
        assert!(Endpoint::parse("http://user:pw@am:9093").is_err());
    }

    #[test]
    fn byte_figures() {}
}
