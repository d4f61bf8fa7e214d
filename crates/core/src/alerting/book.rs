//! The fast path's state machine: which alerts are active, which resolved and must still be
//! delivered, and which of one name are sent one by one or folded into one.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::{Candidate, Labels};
use crate::timefmt::rfc3339_millis;

/// One alert for the candidates of `name` beyond [`MAX_PER_NAME`]: the labels they share
/// (alertname, severity, instance, source, scope when they agree) and `aggregated="true"`.
fn aggregate(name: &str, rest: Vec<Candidate>, omitted: usize) -> Candidate {
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
        format!("{} more alerts of {name} (the {MAX_PER_NAME} most urgent are sent one by one)", rest.len() + omitted),
    );
    annotations.insert(
        "description".into(),
        format!(
            "{} scopes call for {name} beyond the {MAX_PER_NAME} sent one by one; the first {}: {}.",
            rest.len() + omitted,
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
pub(crate) struct PostableAlert {
    pub labels: Labels,
    pub(crate) annotations: Labels,
    #[serde(rename = "startsAt")]
    pub(crate) starts_at: String,
    #[serde(rename = "endsAt")]
    pub(crate) ends_at: String,
}

/// Resolved alerts kept for delivery at most (bounded while Alertmanager is down); past it the
/// oldest warnings go first, critical resolutions last.
pub(super) const MAX_RESOLVED: usize = 1000;

/// Alerts of one name sent one by one at most; the rest are folded into one alert of that name
/// with `aggregated="true"`, which says how many and names the first: process churn
/// (short-lived processes each over a limit) would otherwise flood Alertmanager and the log
/// with thousands of alerts and make each POST large.
pub(crate) const MAX_PER_NAME: usize = 20;

/// Subjects named in an aggregated alert's description at most.
const AGGREGATE_NAMED: usize = 10;

/// Candidates of one name and cgroup the fold considers at most, beyond those already sent one
/// by one: it sends at most twice [`MAX_PER_NAME`] one by one, in turns by cgroup, the most
/// urgent first, and names [`AGGREGATE_NAMED`] of the rest, so the others of a crowd can only
/// be counted. Without the bound, each evaluation of an 8,000-process crowd cost the fast path
/// more than its interval, and a job's page waited behind it.
pub(super) const PER_CGROUP: usize = 2 * MAX_PER_NAME + AGGREGATE_NAMED;

/// Alerts that started or resolved in one update, for the log.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Transitions {
    pub started: Vec<Labels>,
    pub resolved: Vec<Labels>,
    /// Resolutions dropped from the full queue, by severity: (warning and folded, critical).
    pub dropped: [u64; 2],
}

/// Tracks active and resolved alerts and decides what to send.
pub(crate) struct AlertBook {
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

    pub(crate) fn active_count(&self) -> usize {
        self.active.len()
    }

    #[cfg(test)]
    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Keeps at most [`MAX_PER_NAME`] candidates of each alert name one by one and folds the
    /// rest of that name into one.
    ///
    /// An alert sent one by one keeps its place for as long as it is called for: folded, its own
    /// labels would no longer be seen and it would be sent as resolved while its condition
    /// holds (a crowd arriving while a job's warning fired turned it into a resolution within
    /// 6 s, the job at 93 % of its limit). Newcomers get the places left, the most urgent first,
    /// in turns by cgroup (`cgroup` label, [`crate::fair`]), so that one cgroup's crowd takes
    /// only its own places.
    ///
    /// Alerts still active but no longer called for (a process that exited, inside
    /// `resolve_after`) are "held". They give up their places first: while the candidates of a
    /// name fit in [`MAX_PER_NAME`], every one is sent one by one however many are held, so 20
    /// ended pages of short-lived processes cannot fold a job's first page into an aggregated
    /// alert whose labels never change (Alertmanager would hear nothing new). Only against a
    /// live crowd beyond [`MAX_PER_NAME`] does a held alert keep its place, and then only against
    /// newcomers no more urgent than it: otherwise churn starts new alerts every sample. A
    /// newcomer more urgent than every alert of its name sent one by one is never folded while
    /// fewer than twice [`MAX_PER_NAME`] are sent one by one, so alerts keeping their places
    /// cannot keep a more urgent job out; the set sent one by one stays within that bound.
    fn fold(&self, candidates: Vec<Candidate>, omitted: &BTreeMap<String, usize>) -> Vec<Candidate> {
        let mut by_name: BTreeMap<String, Vec<Candidate>> = BTreeMap::new();
        for candidate in candidates {
            let name = candidate.labels.get("alertname").cloned().unwrap_or_default();
            by_name.entry(name).or_default().push(candidate);
        }
        let mut out = Vec::new();
        for (name, group) in by_name {
            if group.len() <= MAX_PER_NAME && !omitted.contains_key(&name) {
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
            let (mut kept, mut newcomers): (Vec<Candidate>, Vec<Candidate>) =
                group.into_iter().partition(|c| self.active.contains_key(&c.labels));
            let above_all = |c: &Candidate| c.urgency > top;
            newcomers.sort_by(|a, b| above_all(b).cmp(&above_all(a)).then(b.urgency.total_cmp(&a.urgency)));
            let above: Vec<bool> = newcomers.iter().map(above_all).collect();
            let cgroup = |i: usize| newcomers[i].labels.get("cgroup").map(String::as_str);
            // The more urgent than all first, then the others holding a share of a limit, then
            // the rest; in turns by cgroup within each.
            let tier = |i: usize| (!above[i], newcomers[i].urgency <= 0.0);
            let order = crate::fair::order(newcomers.len(), tier, |_| (), cgroup);
            let mut slots: Vec<Option<Candidate>> = newcomers.into_iter().map(Some).collect();
            let mut rest = Vec::new();
            for candidate in order.into_iter().filter_map(|i| slots[i].take()) {
                let holding = held.iter().filter(|&&h| h >= candidate.urgency).count();
                // Past the places, only a newcomer more urgent than the alerts keeping theirs.
                let room = kept.len() + holding < MAX_PER_NAME
                    || (above_all(&candidate)
                        && (kept.len() < MAX_PER_NAME || (top.is_finite() && kept.len() < 2 * MAX_PER_NAME)));
                if room {
                    kept.push(candidate);
                } else {
                    rest.push(candidate);
                }
            }
            out.extend(kept);
            let omitted = omitted.get(&name).copied().unwrap_or(0);
            if !rest.is_empty() || omitted > 0 {
                out.push(aggregate(&name, rest, omitted));
            }
        }
        out
    }

    /// Keeps, of each name and cgroup, the [`PER_CGROUP`] most urgent candidates (the given
    /// order among equals) and those sent one by one now; the others are only counted, by
    /// name. What the fold sends is the same as without the bound; its cost no longer grows
    /// with a crowd.
    fn trim(&self, candidates: Vec<Candidate>) -> (Vec<Candidate>, BTreeMap<String, usize>) {
        let mut omitted = BTreeMap::new();
        if candidates.len() <= PER_CGROUP {
            return (candidates, omitted);
        }
        let key = |c: &Candidate| {
            let get = |k: &str| c.labels.get(k).map_or("", String::as_str);
            (get("alertname").to_owned(), get("cgroup").to_owned())
        };
        let mut groups: std::collections::HashMap<(String, String), Vec<usize>> = std::collections::HashMap::new();
        for (i, c) in candidates.iter().enumerate() {
            groups.entry(key(c)).or_default().push(i);
        }
        if groups.values().all(|g| g.len() <= PER_CGROUP) {
            return (candidates, omitted);
        }
        // Sent one by one now: found by (alertname, pid) first, which is cheap to compare.
        let sent = self.sent_one_by_one();
        let mut keep = vec![false; candidates.len()];
        for ((name, _), mut group) in groups {
            if group.len() > PER_CGROUP {
                group.sort_by(|&a, &b| candidates[b].urgency.total_cmp(&candidates[a].urgency));
            }
            for (rank, &i) in group.iter().enumerate() {
                let c = &candidates[i];
                let pid = c.labels.get("pid").map_or("", String::as_str);
                keep[i] =
                    rank < PER_CGROUP || (sent.contains(&(name.as_str(), pid)) && self.active.contains_key(&c.labels));
                if !keep[i] {
                    *omitted.entry(name.clone()).or_insert(0) += 1;
                }
            }
        }
        let kept = candidates.into_iter().zip(keep).filter_map(|(c, k)| k.then_some(c)).collect();
        (kept, omitted)
    }

    /// Applies an evaluation made at `now`; returns the alerts that started and resolved.
    #[cfg(test)]
    pub fn update(&mut self, candidates: Vec<Candidate>, now: Instant, wall: SystemTime) -> Transitions {
        self.update_counted(candidates, BTreeMap::new(), now, wall)
    }

    /// (alertname, pid) of the alerts sent one by one now: [`super::evaluate_for`] builds them
    /// whatever their place, so that one is never taken for resolved while it is called for.
    pub(crate) fn sent_one_by_one(&self) -> std::collections::HashSet<(&str, &str)> {
        self.active
            .keys()
            .filter(|l| !l.contains_key("aggregated"))
            .map(|l| (l.get("alertname").map_or("", String::as_str), l.get("pid").map_or("", String::as_str)))
            .collect()
    }

    /// [`AlertBook::update`] with candidates left out of the evaluation and only counted, by
    /// name ([`super::evaluate_for`]): the folded alert counts them.
    pub(crate) fn update_counted(
        &mut self,
        candidates: Vec<Candidate>,
        left_out: BTreeMap<String, usize>,
        now: Instant,
        wall: SystemTime,
    ) -> Transitions {
        let mut transitions = Transitions::default();
        let (candidates, mut omitted) = self.trim(candidates);
        for (name, n) in left_out {
            *omitted.entry(name).or_insert(0) += n;
        }
        let candidates = self.fold(candidates, &omitted);
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
                        transitions.dropped[usize::from(pass_critical)] += 1;
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

    pub(crate) fn has_work(&self) -> bool {
        !self.active.is_empty() || !self.resolved.is_empty()
    }
}
