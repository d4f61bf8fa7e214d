//! Delivery to Alertmanager: the task that evaluates every new snapshot and posts the book's
//! payload with retries and backoff, and the limit on its log lines.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use prometheus::{GaugeVec, IntCounterVec, IntGauge};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

use super::{evaluate_for, AlertBook};
use crate::config::{AlertingConfig, Endpoint};
use crate::snapshot::Snapshot;

/// Log lines of fast-path transitions per alert name: at most [`LOG_BURST`] started and
/// [`LOG_BURST`] resolved per [`LOG_WINDOW`], then one line with what was left out.
pub(crate) const LOG_BURST: u64 = 10;
pub(crate) const LOG_WINDOW: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub(crate) struct LogLimiter {
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
pub(crate) enum LogLine {
    /// This transition, on its own line.
    One,
    /// Nothing now (counted for the summary).
    Suppressed,
}

/// A summary of transitions left out of the log: (alertname, started, resolved, seconds).
pub(crate) type Suppressed = (String, u64, u64, f64);

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
    pub(crate) fn roll(&mut self, now: Instant) -> Vec<Suppressed> {
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

/// Counters of the fast path, registered by the daemon.
#[derive(Clone)]
pub struct AlertMetrics {
    pub sent: IntCounterVec,
    pub failures: IntCounterVec,
    pub active: IntGauge,
    /// Resolutions the full queue dropped, by `severity` ("critical", or "warning" for the rest).
    pub resolutions_dropped: IntCounterVec,
    /// Unix time of each endpoint's latest successful POST (0 until its first), by `alertmanager`.
    pub last_success: GaugeVec,
}

/// The longest wait between two attempts at one endpoint.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A payload for the endpoints: the book's whole state when it was built (active alerts and
/// every resolution not yet delivered everywhere), so the newest one replaces any older one.
struct Outgoing {
    generation: u64,
    body: Bytes,
    alerts: usize,
}

/// One endpoint's task: its own latest payload, timeout and backoff. Alertmanager's HA guidance
/// is to send to every replica; with one task per replica, a replica refusing or hanging holds
/// back only its own deliveries (before, the replicas were posted one after the other with one
/// shared backoff, and a new page waited for the broken replica's retry, up to 30 s).
async fn deliver_to(
    endpoint: Endpoint,
    client: HttpClient,
    mut payloads: watch::Receiver<Option<Arc<Outgoing>>>,
    delivered: Arc<AtomicU64>,
    acked: Arc<Notify>,
    timeout: Duration,
    metrics: AlertMetrics,
) {
    let mut backoff = Duration::ZERO;
    loop {
        if payloads.changed().await.is_err() {
            return;
        }
        // The newest payload, also after a failure: it holds everything an older one did.
        loop {
            let latest = payloads.borrow_and_update().clone();
            let Some(outgoing) = latest else { break };
            match post(&client, &endpoint, outgoing.body.clone(), timeout).await {
                Ok(()) => {
                    metrics.sent.with_label_values(&[&endpoint.base]).inc_by(outgoing.alerts as u64);
                    metrics.last_success.with_label_values(&[&endpoint.base]).set(unix_now());
                    delivered.store(outgoing.generation, Ordering::Release);
                    acked.notify_one();
                    backoff = Duration::ZERO;
                    break;
                }
                Err(err) => {
                    metrics.failures.with_label_values(&[&endpoint.base]).inc();
                    backoff = (backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
                    tracing::warn!(alertmanager = %endpoint.base, error = %err, retry_in = ?backoff,
                        "sending alerts failed; will retry");
                    tokio::time::sleep(backoff).await;
                }
            }
        }
    }
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// Evaluates every new snapshot and delivers until the snapshot channel closes.
pub async fn run(mut snapshots: watch::Receiver<Arc<Snapshot>>, config: AlertingConfig, metrics: AlertMetrics) {
    let endpoints: Vec<Endpoint> = config.alertmanager_urls.iter().filter_map(|u| Endpoint::parse(u).ok()).collect();
    if endpoints.is_empty() {
        return;
    }
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    // Dropped with this task (a reload aborts it): the endpoints' tasks end with it.
    let mut tasks = JoinSet::new();
    let mut outboxes = Vec::new();
    let mut acks = Vec::new();
    let acked = Arc::new(Notify::new());
    for endpoint in endpoints {
        // From the start, so that the rule's increase() sees the first failure.
        metrics.last_success.with_label_values(&[&endpoint.base]);
        metrics.failures.with_label_values(&[&endpoint.base]);
        let (outbox, payloads) = watch::channel(None);
        let delivered = Arc::new(AtomicU64::new(0));
        let (client, ack, acked) = (client.clone(), delivered.clone(), acked.clone());
        tasks.spawn(deliver_to(endpoint, client, payloads, ack, acked, config.timeout, metrics.clone()));
        outboxes.push(outbox);
        acks.push(delivered);
    }
    let mut book = AlertBook::new(config.resolve_after, config.resend_interval);
    let mut limiter = LogLimiter::default();
    let mut last_built: Option<Instant> = None;
    let mut generation = 0u64;
    // Something started or resolved since the last payload was built.
    let mut changed = false;
    loop {
        // Wake on a new snapshot, an endpoint's delivery, or when a resend is due.
        let wake = last_built.filter(|_| book.has_work()).map(|at| at + config.resend_interval);
        let sleep = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let mut transitions = None;
        tokio::select! {
            update = snapshots.changed() => {
                if update.is_err() {
                    return;
                }
                let snapshot = snapshots.borrow_and_update().clone();
                let now = Instant::now();
                let (candidates, left_out) = evaluate_for(&snapshot, &config, Some(&book));
                let t = book.update_counted(candidates, left_out, now, SystemTime::now());
                changed |= !t.started.is_empty() || !t.resolved.is_empty();
                transitions = Some((t, now));
            }
            () = acked.notified() => {}
            () = sleep => {}
        }
        let now = Instant::now();
        let resend_due = book.has_work() && last_built.is_none_or(|t| now.duration_since(t) >= config.resend_interval);
        // Post before logging: the log may block or drop, a page must not wait for it.
        if changed || resend_due {
            let payload = book.payload(SystemTime::now());
            match serde_json::to_vec(&payload) {
                Ok(body) => {
                    generation += 1;
                    let outgoing = Arc::new(Outgoing { generation, alerts: payload.len(), body: Bytes::from(body) });
                    for outbox in &outboxes {
                        outbox.send_replace(Some(outgoing.clone()));
                    }
                    last_built = Some(now);
                    changed = false;
                }
                Err(err) => tracing::error!(error = %err, "encoding alerts failed"),
            }
        }
        // Resolutions are done once every endpoint took a payload built after the last change.
        if !changed && generation > 0 && acks.iter().all(|a| a.load(Ordering::Acquire) == generation) {
            book.delivered();
        }
        if let Some((transitions, now)) = transitions {
            log_transitions(&transitions, &mut limiter, now);
            for (severity, dropped) in ["warning", "critical"].into_iter().zip(transitions.dropped) {
                if dropped > 0 {
                    metrics.resolutions_dropped.with_label_values(&[severity]).inc_by(dropped);
                }
            }
            metrics.active.set(book.active_count() as i64);
        }
    }
}
/// One line per change, so an operator can line up the page with the sample; at most LOG_BURST
/// per name and kind in LOG_WINDOW, then a count (process churn).
fn log_transitions(transitions: &super::Transitions, limiter: &mut LogLimiter, now: Instant) {
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
}

async fn post(client: &HttpClient, endpoint: &Endpoint, body: Bytes, timeout: Duration) -> Result<(), String> {
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
