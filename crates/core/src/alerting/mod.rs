//! The fast path: alert rules evaluated on every new snapshot (1 s samples) and pushed straight
//! to Alertmanager's API v2, so a steep rise pages before a scrape-and-evaluate cycle could.
//!
//! Three parts, so that sampling never waits on the network:
//! - [`evaluate`] (here): pure; which alerts the snapshot's trend points call for, in the words of
//!   [`crate::scopes`].
//! - [`AlertBook`] (`book.rs`): the state machine; when alerts start, resolve and must be (re)sent.
//! - [`run`] (`deliver.rs`): an async task reading snapshots from the sampler's watch channel, and
//!   one task per Alertmanager URL delivering with its own retries, timeout and backoff. The
//!   sampler only ever replaces the latest snapshot.

mod book;
mod deliver;
pub mod failures;
pub mod unwatched;

use std::collections::BTreeMap;
use std::time::Instant;

use crate::config::AlertingConfig;
use crate::scopes::{Wording, EXHAUSTION_HEADROOM_STEPS};
use crate::snapshot::Snapshot;
use crate::trend::{Scope, TrendPoint};
use crate::units::bytes;

#[cfg(test)]
use book::MAX_RESOLVED;
pub(crate) use book::{AlertBook, Transitions};
pub use deliver::{run, AlertMetrics};

pub(crate) type Labels = BTreeMap<String, String>;

/// An alert the rules call for right now.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub labels: Labels,
    pub(crate) annotations: Labels,
    /// How urgent its scope is ([`Charge::urgency`](crate::charge::Charge::urgency)): when more alerts of one
    /// name are called for than [`MAX_PER_NAME`], the most urgent are sent one by one.
    pub(crate) urgency: f64,
}

fn urgency(point: &TrendPoint) -> f64 {
    point.charge.urgency().unwrap_or(-1.0)
}

/// Whether a predicted exhaustion is a page: the prediction alone reads one step as a ramp for
/// a whole trend window, and would page critical for a scope that stepped once and stayed flat
/// far below its limit. The rise must continue in the newest samples
/// ([`crate::trend::Recent::continues`]), and the scope must be high enough that the rise
/// matters: at its scope's floor ([`ScopeDef::page_min_ratio`](crate::scopes::ScopeDef::page_min_ratio)) of
/// its limit, or with fewer than [`EXHAUSTION_HEADROOM_STEPS`] of its newest steps left (a large limit
/// approached in large steps).
pub(crate) fn exhaustion_pages(point: &TrendPoint, seconds: f64, config: &AlertingConfig) -> bool {
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
    out.extend(unwatched::candidates(snapshot, config));
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

fn runbook(config: &AlertingConfig, alertname: &str) -> String {
    format!("{}#{}", config.runbook_url, alertname.to_ascii_lowercase())
}

#[cfg(test)]
mod tests;
