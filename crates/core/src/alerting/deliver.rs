//! Delivery to Alertmanager: the task that evaluates every new snapshot and posts the book's
//! payload with retries and backoff, and the limit on its log lines.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use prometheus::{IntCounterVec, IntGauge};
use tokio::sync::watch;

use super::{evaluate, AlertBook};
use crate::config::{AlertingConfig, Endpoint};
use crate::snapshot::Snapshot;

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

/// Counters of the fast path, registered by the daemon.
#[derive(Clone)]
pub struct AlertMetrics {
    pub sent: IntCounterVec,
    pub failures: IntCounterVec,
    pub active: IntGauge,
    /// Resolutions the full queue dropped, by `severity` ("critical", or "warning" for the rest).
    pub resolutions_dropped: IntCounterVec,
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
                for (severity, dropped) in ["warning", "critical"].into_iter().zip(transitions.dropped) {
                    if dropped > 0 {
                        metrics.resolutions_dropped.with_label_values(&[severity]).inc_by(dropped);
                    }
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
