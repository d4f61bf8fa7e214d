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

/// An alert one trend point calls for, before its labels and texts are built.
#[derive(Debug, Clone, Copy)]
enum Call {
    /// Exhaustion predicted in this many seconds.
    Exhaustion(f64),
    /// At this ratio of the limit.
    NearLimit(&'static str, f64),
}

impl Call {
    fn alertname(self, point: &TrendPoint) -> &'static str {
        match self {
            Call::Exhaustion(_) => point.scope.def().exhaustion_alert,
            Call::NearLimit(alertname, _) => alertname,
        }
    }

    fn candidate(self, point: &TrendPoint, config: &AlertingConfig) -> Candidate {
        match self {
            Call::Exhaustion(seconds) => exhaustion_alert(point, seconds, config),
            Call::NearLimit(alertname, ratio) => near_limit_alert(alertname, point, ratio, config),
        }
    }
}

/// The alerts `point` calls for.
fn calls(point: &TrendPoint, config: &AlertingConfig) -> impl Iterator<Item = Call> {
    let exhaustion = point.exhaustion.filter(|&seconds| exhaustion_pages(point, seconds, config)).map(Call::Exhaustion);
    let near = point.scope.def().near_limit_alert.and_then(|alertname| {
        let ratio = point.charge.enforced_ratio()?;
        (ratio >= config.usage_ratio_warning).then_some(Call::NearLimit(alertname, ratio))
    });
    exhaustion.into_iter().chain(near)
}

/// Which alerts a snapshot calls for.
pub fn evaluate(snapshot: &Snapshot, config: &AlertingConfig) -> Vec<Candidate> {
    evaluate_for(snapshot, config, None).0
}

/// [`evaluate`] for `book`: of each alert name and cgroup, only the candidates the book's fold
/// can send or name ([`AlertBook::considers`]) are built; the others are counted by name. A
/// crowd of thousands of processes over their limits then costs an evaluation a count, not
/// thousands of alerts built and dropped on every snapshot while a job's page waits. Without
/// a book, every candidate.
pub(crate) fn evaluate_for(
    snapshot: &Snapshot,
    config: &AlertingConfig,
    book: Option<&AlertBook>,
) -> (Vec<Candidate>, BTreeMap<String, usize>) {
    let called: Vec<(&TrendPoint, Call)> =
        snapshot.trends().flat_map(|point| calls(point, config).map(move |call| (point, call))).collect();
    let mut keep = vec![true; called.len()];
    let mut omitted = BTreeMap::new();
    if let Some(book) = book {
        let mut groups: std::collections::HashMap<(&str, Option<&str>), Vec<usize>> = Default::default();
        for (i, (point, call)) in called.iter().enumerate() {
            groups.entry((call.alertname(point), label(point, "cgroup"))).or_default().push(i);
        }
        let sent = book.sent_one_by_one();
        for ((alertname, _), mut group) in groups {
            if group.len() <= book::PER_CGROUP {
                continue;
            }
            group.sort_by(|&a, &b| urgency(called[b].0).total_cmp(&urgency(called[a].0)));
            for &i in &group[book::PER_CGROUP..] {
                let pid = label(called[i].0, "pid").unwrap_or("");
                if !sent.contains(&(alertname, pid)) {
                    keep[i] = false;
                    *omitted.entry(alertname.to_owned()).or_insert(0) += 1;
                }
            }
        }
    }
    let mut out: Vec<Candidate> = called
        .iter()
        .zip(keep)
        .filter(|(_, keep)| *keep)
        .map(|(&(point, call), _)| call.candidate(point, config))
        .collect();
    out.extend(failures::candidates(snapshot, config, Instant::now()));
    out.extend(unwatched::candidates(snapshot, config));
    (out, omitted)
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
