//! Trend analysis over 1 s samples: how fast a scope's locked/pinned/used memory is rising and,
//! at that rate, how long until its limit is reached.
//!
//! Pure code: the caller feeds timestamped observations; nothing here reads files or clocks.
//!
//! The rise is a least-squares slope, fitted twice: over the whole window (steady, resists
//! noise) and over the last few samples (reacts within seconds when a ramp starts after a flat
//! stretch, which a 30 s fit would dilute). The larger *significant* slope wins: for an early
//! warning a late alarm costs more than an early one. A slope is significant when it is at
//! least `min_rise_bytes_per_second` and its t-statistic is at least `min_t_statistic` (a
//! perfect line has zero error and is always significant).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::charge::Charge;

/// What a trend is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    Node,
    Cgroup,
    Process,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Node => "node",
            Scope::Cgroup => "cgroup",
            Scope::Process => "process",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TrendConfig {
    pub window: Duration,
    /// Samples in the short fit.
    pub(crate) short_samples: usize,
    pub min_rise_bytes_per_second: f64,
    pub(crate) min_t_statistic: f64,
    /// Scopes tracked at most (bounded memory); past it a new scope evicts the least urgent
    /// ([`Tracker::observe`]).
    pub(crate) max_scopes: usize,
    /// The node scope's limit: MemAvailable at this fraction of MemTotal. Below a few percent
    /// the kernel reclaims hard, allocations stall and the OOM killer is near.
    pub node_memory_available_floor_ratio: f64,
}

impl Default for TrendConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(30),
            short_samples: 5,
            min_rise_bytes_per_second: 4096.0,
            min_t_statistic: 3.0,
            max_scopes: 20_000,
            node_memory_available_floor_ratio: 0.05,
        }
    }
}

/// One reading of one scope.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub scope: Scope,
    /// Identifies the scope within its kind: "" for the node, the cgroup path, the pid.
    pub id: String,
    /// Labels the trend series carry (besides `scope`).
    pub labels: Vec<(&'static str, String)>,
    /// Seconds on a monotonic clock.
    pub at: f64,
    /// The rising quantity (`used_bytes`) against the scope's limit.
    pub charge: Charge,
}

/// The analysis of one scope after an observation.
#[derive(Debug, Clone, PartialEq)]
pub struct TrendPoint {
    pub scope: Scope,
    pub id: String,
    pub labels: Vec<(&'static str, String)>,
    pub charge: Charge,
    /// Bytes per second; `None` until there are enough samples to fit.
    pub rise: Option<f64>,
    /// Seconds until the limit at the current rise; `None` when not rising significantly or
    /// without a limit. 0 when the limit is already reached and the value still rises.
    pub exhaustion: Option<f64>,
    /// What the newest samples say about the rise (the fast path's guard against a step).
    pub recent: Recent,
}

/// The share of the trend window whose steps [`Recent`] counts (15 s of the default 30 s): a
/// fixed count of samples would hold too few steps of a slow staircase to see the rise
/// continue before the kernel refuses it. Half the window holds three steps of a staircase
/// stepping every 5 s with room for the newest to age.
pub(crate) const RECENT_WINDOW_SHARE: f64 = 0.5;

/// Seconds the rising intervals must spread over (the oldest one's start to the newest one's
/// end): at a short sampling interval a burst of registrations within a second makes several
/// rising intervals, and a burst is a step.
pub(crate) const RECENT_MIN_SPREAD: f64 = 2.0;

/// A drop counts as memory given back when it is more than this share of what the scope rose
/// across the recent samples (and more than the noise floor): page-cache jitter on a node or
/// cgroup working set that is smaller than the ramp is not a deregistration.
pub(crate) const GIVEN_BACK_SHARE: f64 = 1.0 / 3.0;

/// The steps of the newest samples, those within [`RECENT_WINDOW_SHARE`] of the trend window.
/// A least-squares slope cannot tell a ramp from one step (a registration of a second
/// communicator, then flat): both fit a rising line for a whole window. Steps can: a ramp
/// keeps stepping, a step does not.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Recent {
    /// Intervals that rose by more than the noise floor (`min_rise_bytes_per_second` times the
    /// interval).
    pub(crate) rising_steps: usize,
    /// Seconds since the newest rising interval ended (0: the newest interval rose); `None`
    /// without one.
    pub(crate) since_last_rise: Option<f64>,
    /// Mean seconds between the ends of consecutive rising intervals (0 with fewer than two):
    /// a staircase's step interval.
    pub(crate) step_interval: f64,
    /// Seconds from the start of the oldest rising interval to the end of the newest.
    pub spread: f64,
    /// The largest rise of one interval, in bytes.
    pub(crate) largest_step: f64,
    /// Bytes the value fell from its running highest at most, beyond the tolerance
    /// ([`GIVEN_BACK_SHARE`] of the recent rise, at least the noise floor of one second):
    /// memory given back (a deregistration, a register/deregister cycle).
    pub(crate) fallen: f64,
}

impl Recent {
    /// Whether the rise continues in the newest samples: at least three rising intervals spread
    /// over [`RECENT_MIN_SPREAD`] at least, the newest of them no older than two seconds or one
    /// step interval (a staircase between its steps), and nothing given back.
    pub fn continues(&self) -> bool {
        self.rising_steps >= 3
            && self.spread >= RECENT_MIN_SPREAD
            && self.since_last_rise.is_some_and(|age| age <= self.step_interval.max(2.0))
            && self.fallen <= 0.0
    }
}

#[derive(Debug, Default)]
struct Series {
    samples: VecDeque<(f64, f64)>,
    last_seen: f64,
    /// The analysis of `samples` as they are: a reading observed again (a process a pass did
    /// not re-read, at the time of its reading) changes nothing, and is not analysed again.
    analysis: Option<(Option<Fit>, Recent)>,
    /// [`eviction_key`] as of the latest observation.
    urgency: f64,
}

/// How much a scope's trend is worth keeping when the tracker is full: rising significantly
/// first, then by [`Charge::urgency`](crate::charge::Charge::urgency) (the enforced usage ratio up to 1; at or
/// over a limit while holding little, 0), scopes without an enforced limit last.
fn eviction_key(charge: &Charge, rising: bool) -> f64 {
    charge.urgency().unwrap_or(-1.0) + if rising { 2.0 } else { 0.0 }
}

/// A least-squares fit: slope and its t-statistic (infinite for an exact line).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    pub(crate) slope: f64,
    pub(crate) t_statistic: f64,
}

/// Fits value = a + slope * time over the samples; `None` with fewer than 3 samples or no
/// spread in time.
pub fn fit(samples: impl Iterator<Item = (f64, f64)> + Clone) -> Option<Fit> {
    let (mut n, mut sum_t, mut sum_v) = (0.0f64, 0.0f64, 0.0f64);
    for (t, v) in samples.clone() {
        n += 1.0;
        sum_t += t;
        sum_v += v;
    }
    if n < 3.0 {
        return None;
    }
    let (mean_t, mean_v) = (sum_t / n, sum_v / n);
    let (mut stt, mut stv) = (0.0, 0.0);
    for (t, v) in samples.clone() {
        stt += (t - mean_t) * (t - mean_t);
        stv += (t - mean_t) * (v - mean_v);
    }
    if stt <= f64::EPSILON {
        return None;
    }
    let slope = stv / stt;
    let intercept = mean_v - slope * mean_t;
    let residual: f64 = samples.map(|(t, v)| (v - intercept - slope * t).powi(2)).sum();
    let stderr = (residual / (n - 2.0) / stt).sqrt();
    // Relative to the slope: floating-point residue on an exact line is not noise.
    let t_statistic = if stderr <= slope.abs() * 1e-9 { f64::INFINITY.copysign(slope) } else { slope / stderr };
    Some(Fit { slope, t_statistic })
}

pub(crate) struct Tracker {
    config: TrendConfig,
    series: HashMap<(Scope, String), Series>,
    evicted: u64,
    /// When the last eviction was logged (the `at` clock), so a crowd logs once a minute.
    logged_at: Option<f64>,
}

/// Evictions are logged at most this often (seconds on the observations' clock).
const EVICTION_LOG_INTERVAL: f64 = 60.0;

impl Tracker {
    pub fn new(config: TrendConfig) -> Self {
        Self { config, series: HashMap::new(), evicted: 0, logged_at: None }
    }

    /// Scopes evicted since the start to make room for new ones.
    pub(crate) fn evicted_total(&self) -> u64 {
        self.evicted
    }

    /// Makes room for a new scope: evicts the least urgent tracked scopes, a 64th of the cap at
    /// once so that a crowd arriving costs one pass over the table per 64th, not one per scope.
    /// Never the newcomer: a full tracker that left every new scope without a trend would give
    /// a job starting on a busy node no critical page.
    fn evict(&mut self, at: f64) {
        let batch = (self.config.max_scopes / 64).max(1).min(self.series.len());
        if batch == 0 {
            return;
        }
        let mut keys: Vec<(f64, f64, (Scope, String))> =
            self.series.iter().map(|(k, s)| (s.urgency, s.last_seen, k.clone())).collect();
        let least = |a: &(f64, f64, (Scope, String)), b: &(f64, f64, (Scope, String))| {
            a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1))
        };
        if batch < keys.len() {
            keys.select_nth_unstable_by(batch - 1, least);
        }
        let most_urgent_evicted = keys[..batch].iter().map(|k| k.0).fold(f64::NEG_INFINITY, f64::max);
        for (_, _, key) in keys.drain(..batch) {
            self.series.remove(&key);
        }
        self.evicted += batch as u64;
        if self.logged_at.is_none_or(|t| at - t >= EVICTION_LOG_INTERVAL) {
            self.logged_at = Some(at);
            tracing::warn!(
                evicted = batch,
                evicted_total = self.evicted,
                max_scopes = self.config.max_scopes,
                most_urgent_evicted,
                "trend tracker full: evicted the least urgent scopes to track new ones \
                    (memlock_trend_scopes_evicted_total)"
            );
        }
    }

    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// Records an observation and returns the scope's analysis.
    pub(crate) fn observe(&mut self, obs: Observation) -> TrendPoint {
        let key = (obs.scope, obs.id.clone());
        if !self.series.contains_key(&key) && self.series.len() >= self.config.max_scopes {
            self.evict(obs.at);
        }
        let (rise, recent) = if self.config.max_scopes > 0 {
            let config = &self.config;
            let series = self.series.entry(key).or_default();
            let value = obs.charge.used_bytes as f64;
            let again = series.samples.back() == Some(&(obs.at, value));
            let (rise, recent) = match series.analysis {
                Some(analysis) if again => analysis,
                _ => {
                    record(series, config, obs.at, value);
                    let analysis = (rise(series, config), recent(series, config));
                    series.analysis = Some(analysis);
                    analysis
                }
            };
            series.last_seen = series.last_seen.max(obs.at);
            let rising = rise.is_some_and(|r| {
                r.slope >= config.min_rise_bytes_per_second && r.t_statistic >= config.min_t_statistic
            });
            series.urgency = eviction_key(&obs.charge, rising);
            (rise, recent)
        } else {
            (None, Recent::default())
        };
        let exhaustion = match (rise, obs.charge.headroom_bytes()) {
            (Some(r), Some(headroom)) if self.significant(r) => Some((headroom as f64 / r.slope).max(0.0)),
            _ => None,
        };
        TrendPoint {
            scope: obs.scope,
            id: obs.id,
            labels: obs.labels,
            charge: obs.charge,
            rise: rise.map(|r| r.slope),
            exhaustion,
            recent,
        }
    }

    fn significant(&self, fit: Fit) -> bool {
        fit.slope >= self.config.min_rise_bytes_per_second && fit.t_statistic >= self.config.min_t_statistic
    }

    /// Forgets the scopes of a kind that were not observed at or after `seen_since`, so vanished
    /// processes and cgroups do not hold memory.
    pub(crate) fn forget_unseen(&mut self, scope: Scope, seen_since: f64) {
        self.series.retain(|(s, _), series| *s != scope || series.last_seen >= seen_since);
    }
}

/// Samples a series keeps beyond its short tail, whatever the window and the interval: a 1 h
/// window at 100 ms would otherwise hold 36,000 per scope (576 KB each, times `max_scopes`).
/// The default 30 s at 1 s keeps 30.
pub(crate) const MAX_SAMPLES_PER_SERIES: usize = 120;

fn record(series: &mut Series, config: &TrendConfig, at: f64, value: f64) {
    if let Some(&(last_at, last_value)) = series.samples.back() {
        if at <= last_at {
            // Out of order or duplicate: keep the newest reading only.
            series.samples.pop_back();
        } else if value < last_value * 0.5 && last_value - value > config.min_rise_bytes_per_second {
            // A reset (the process restarted, the pid was reused, the cgroup was recreated): the
            // history no longer describes this scope.
            series.samples.clear();
        }
    }
    series.samples.push_back((at, value));
    series.last_seen = at;
    thin(&mut series.samples, config);
    let horizon = at - config.window.as_secs_f64();
    while series.samples.front().is_some_and(|&(t, _)| t < horizon) {
        series.samples.pop_front();
    }
}

/// Keeps the samples older than the short tail at least `window / MAX_SAMPLES_PER_SERIES`
/// apart; the tail stays at full resolution so the short fit still reacts within seconds.
/// Each push moves one sample out of the tail, so checking that one keeps the invariant.
fn thin(samples: &mut VecDeque<(f64, f64)>, config: &TrendConfig) {
    let spacing = config.window.as_secs_f64() / MAX_SAMPLES_PER_SERIES as f64;
    let len = samples.len();
    if len < config.short_samples + 3 {
        return;
    }
    let left_tail = len - config.short_samples - 1;
    if let (Some(&(older, _)), Some(&(leaving, _))) = (samples.get(left_tail - 1), samples.get(left_tail)) {
        if leaving - older < spacing {
            samples.remove(left_tail);
        }
    }
}

fn recent(series: &Series, config: &TrendConfig) -> Recent {
    let mut out = Recent::default();
    let Some(&(now, last)) = series.samples.back() else {
        return out;
    };
    let since = now - config.window.as_secs_f64() * RECENT_WINDOW_SHARE;
    let newest: Vec<(f64, f64)> = series.samples.iter().filter(|&&(t, _)| t >= since).copied().collect();
    let (mut first_start, mut first_end, mut last_end) = (None, None, None);
    for pair in newest.windows(2) {
        let ((t0, v0), (t1, v1)) = (pair[0], pair[1]);
        let step = v1 - v0;
        if step > config.min_rise_bytes_per_second * (t1 - t0) {
            out.rising_steps += 1;
            first_start.get_or_insert(t0);
            first_end.get_or_insert(t1);
            last_end = Some(t1);
            out.largest_step = out.largest_step.max(step);
        }
    }
    if let (Some(start), Some(first), Some(end)) = (first_start, first_end, last_end) {
        out.since_last_rise = Some(now - end);
        out.spread = end - start;
        if out.rising_steps > 1 {
            out.step_interval = (end - first) / (out.rising_steps - 1) as f64;
        }
    }
    let (mut highest, mut drop) = (f64::NEG_INFINITY, 0.0f64);
    for &(_, v) in &newest {
        highest = highest.max(v);
        drop = drop.max(highest - v);
    }
    let rose = newest.first().map_or(0.0, |&(_, first)| (last - first).max(0.0));
    let tolerance = (GIVEN_BACK_SHARE * rose).max(config.min_rise_bytes_per_second);
    out.fallen = (drop - tolerance).max(0.0);
    out
}

fn rise(series: &Series, config: &TrendConfig) -> Option<Fit> {
    let n = series.samples.len();
    // Times relative to the newest sample keep the sums small and exact.
    let origin = series.samples.back()?.0;
    let all = series.samples.iter().map(move |&(t, v)| (t - origin, v));
    let long = fit(all.clone());
    let short = if n > config.short_samples { fit(all.skip(n - config.short_samples)) } else { None };
    let significant = |f: &Fit| f.slope >= config.min_rise_bytes_per_second && f.t_statistic >= config.min_t_statistic;
    match (long, short) {
        (Some(l), Some(s)) if significant(&s) && (!significant(&l) || s.slope > l.slope) => Some(s),
        (Some(l), _) => Some(l),
        (None, s) => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1048576.0;

    fn obs(at: f64, value: f64, limit: Option<f64>) -> Observation {
        let charge = Charge::enforced(value as u64, limit.map(|l| l as u64));
        Observation { scope: Scope::Process, id: "42".into(), labels: vec![("pid", "42".into())], at, charge }
    }

    fn run(tracker: &mut Tracker, values: impl IntoIterator<Item = (f64, f64)>, limit: f64) -> TrendPoint {
        let mut last = None;
        for (at, v) in values {
            last = Some(tracker.observe(obs(at, v, Some(limit))));
        }
        last.unwrap()
    }

    #[test]
    fn a_steady_ramp_predicts_the_time_to_the_limit() {
        let mut t = Tracker::new(TrendConfig::default());
        // 1 MiB/s from 0, limit 64 MiB: at t=9 the value is 9 MiB, 55 MiB left, 55 s to go.
        let p = run(&mut t, (0..10).map(|i| (i as f64, i as f64 * MIB)), 64.0 * MIB);
        assert!((p.rise.unwrap() - MIB).abs() < 1.0);
        assert!((p.exhaustion.unwrap() - 55.0).abs() < 1e-6, "{p:?}");
    }

    #[test]
    fn too_few_samples_say_nothing() {
        let mut t = Tracker::new(TrendConfig::default());
        let p = run(&mut t, [(0.0, 0.0), (1.0, MIB)], 8.0 * MIB);
        assert_eq!(p.rise, None);
        assert_eq!(p.exhaustion, None);
    }

    #[test]
    fn a_flat_series_is_not_rising() {
        let mut t = Tracker::new(TrendConfig::default());
        let p = run(&mut t, (0..30).map(|i| (i as f64, 5.0 * MIB)), 8.0 * MIB);
        assert_eq!(p.rise, Some(0.0));
        assert_eq!(p.exhaustion, None);
    }

    #[test]
    fn noise_without_a_trend_is_not_significant() {
        let mut t = Tracker::new(TrendConfig::default());
        // A deterministic zig-zag of +-2 MiB around 100 MiB.
        let p = run(
            &mut t,
            (0..30).map(|i| (i as f64, 100.0 * MIB + if i % 2 == 0 { 2.0 } else { -2.0 } * MIB)),
            200.0 * MIB,
        );
        assert_eq!(p.exhaustion, None, "{p:?}");
    }

    #[test]
    fn a_noisy_ramp_is_still_found() {
        let mut t = Tracker::new(TrendConfig::default());
        let p = run(
            &mut t,
            (0..30).map(|i| (i as f64, i as f64 * MIB + if i % 2 == 0 { 0.2 } else { -0.2 } * MIB)),
            100.0 * MIB,
        );
        let e = p.exhaustion.unwrap();
        assert!((e - 71.0).abs() < 3.0, "{e}");
    }

    #[test]
    fn a_falling_series_has_a_negative_rise_and_no_exhaustion() {
        let mut t = Tracker::new(TrendConfig::default());
        let p = run(&mut t, (0..10).map(|i| (i as f64, (100 - i) as f64 * MIB)), 200.0 * MIB);
        assert!(p.rise.unwrap() < 0.0);
        assert_eq!(p.exhaustion, None);
    }

    #[test]
    fn a_ramp_after_a_long_flat_stretch_is_seen_within_seconds() {
        let mut t = Tracker::new(TrendConfig::default());
        let flat = (0..25).map(|i| (i as f64, 0.0));
        let ramp = (25..29).map(|i| (i as f64, (i - 24) as f64 * 0.5 * MIB));
        let p = run(&mut t, flat.chain(ramp), 8.0 * MIB);
        // The short fit sees ~0.5 MiB/s; the 30 s fit alone would see a fraction of it.
        let rise = p.rise.unwrap();
        assert!(rise > 0.3 * MIB, "{rise}");
        assert!(p.exhaustion.unwrap() < 20.0, "{p:?}");
    }

    #[test]
    fn a_reset_clears_the_history() {
        let mut t = Tracker::new(TrendConfig::default());
        run(&mut t, (0..10).map(|i| (i as f64, (i + 1) as f64 * MIB)), 64.0 * MIB);
        // The process restarts: back to zero, then flat.
        let p = run(&mut t, (10..13).map(|i| (i as f64, 0.0)), 64.0 * MIB);
        assert_eq!(p.exhaustion, None, "{p:?}");
        assert_eq!(p.rise, Some(0.0));
    }

    #[test]
    fn already_over_the_limit_and_rising_means_zero_seconds() {
        let mut t = Tracker::new(TrendConfig::default());
        let p = run(&mut t, (0..10).map(|i| (i as f64, (10 + i) as f64 * MIB)), 8.0 * MIB);
        assert_eq!(p.exhaustion, Some(0.0));
    }

    #[test]
    fn no_limit_means_no_exhaustion() {
        let mut t = Tracker::new(TrendConfig::default());
        let mut last = None;
        for i in 0..10 {
            last = Some(t.observe(obs(i as f64, i as f64 * MIB, None)));
        }
        let p = last.unwrap();
        assert!(p.rise.unwrap() > 0.0);
        assert_eq!(p.exhaustion, None);
    }

    #[test]
    fn old_samples_leave_the_window() {
        let mut t = Tracker::new(TrendConfig { window: Duration::from_secs(10), ..TrendConfig::default() });
        // A ramp long ago, then flat for longer than the window.
        let ramp = (0..10).map(|i| (i as f64, i as f64 * MIB));
        let flat = (10..40).map(|i| (i as f64, 9.0 * MIB));
        let p = run(&mut t, ramp.chain(flat), 64.0 * MIB);
        assert_eq!(p.rise, Some(0.0));
    }

    #[test]
    fn memory_is_bounded_when_scopes_come_and_go() {
        let mut t = Tracker::new(TrendConfig { max_scopes: 100, ..TrendConfig::default() });
        for round in 0..50 {
            let at = round as f64;
            for pid in 0..50 {
                let id = (round * 50 + pid).to_string();
                t.observe(Observation { id, ..obs(at, MIB, None) });
            }
            t.forget_unseen(Scope::Process, at);
            assert!(t.len() <= 100);
        }
        assert_eq!(t.len(), 50, "only the scopes seen in the last round remain");
        // Beyond the bound a new scope evicts the least urgent: the tracker stays at the bound.
        let mut full = Tracker::new(TrendConfig { max_scopes: 1, ..TrendConfig::default() });
        full.observe(Observation { id: "a".into(), ..obs(0.0, 0.0, None) });
        let p = full.observe(Observation { id: "b".into(), ..obs(0.0, 0.0, None) });
        assert_eq!(p.rise, None);
        assert_eq!(full.len(), 1);
        assert_eq!(full.evicted_total(), 1);
    }

    /// Past the cap a new scope still gets a trend, so a job starting on a node whose tracker is
    /// full of idle scopes can page: the least urgent scopes go, never the newcomer nor a scope
    /// near its limit, and evictions are counted.
    #[test]
    fn a_full_tracker_evicts_the_least_urgent_scope_not_the_newcomer() {
        let max = 640;
        let mut t = Tracker::new(TrendConfig { max_scopes: max, ..TrendConfig::default() });
        let id = |obs: Observation, id: String| Observation { id, ..obs };
        // A scope at 90 % of its limit, and a crowd of idle ones (4 KiB over a 4 KiB limit, or
        // at 1 % of 8 MiB) filling the tracker.
        for at in 0..3 {
            let at = f64::from(at);
            t.observe(id(obs(at, 7.2 * MIB, Some(8.0 * MIB)), "near".into()));
            for i in 0..max {
                let crowd =
                    if i % 2 == 0 { obs(at, 8192.0, Some(4096.0)) } else { obs(at, 0.08 * MIB, Some(8.0 * MIB)) };
                t.observe(id(crowd, format!("crowd{i}")));
            }
        }
        assert!(t.len() <= max && t.len() >= max - max / 64, "{}", t.len());
        let evicted_before = t.evicted_total();
        assert!(evicted_before > 0, "the crowd filled the tracker");
        assert!(t.series.contains_key(&(Scope::Process, "near".into())), "the scope near its limit stays");
        // A job arrives and ramps 1 MiB/s under 8 MiB: it is tracked from its first sample.
        let mut last = None;
        for at in 3..8 {
            let at = f64::from(at);
            last = Some(t.observe(id(obs(at, (at - 3.0) * MIB, Some(8.0 * MIB)), "job".into())));
            for i in 0..max {
                t.observe(id(obs(at, 8192.0, Some(4096.0)), format!("late{at}-{i}")));
            }
        }
        let job = last.unwrap();
        assert!((job.rise.unwrap() - MIB).abs() < 1.0, "{job:?}");
        assert!(job.exhaustion.is_some(), "{job:?}");
        assert!(t.series.contains_key(&(Scope::Process, "near".into())));
        assert!(t.len() <= max);
        assert!(t.evicted_total() > evicted_before + 5 * max as u64 - 64, "{}", t.evicted_total());
    }

    /// At a short sampling interval a burst of registrations within a second makes several
    /// rising intervals: RECENT_MIN_SPREAD keeps it a step, and a ramp still continues.
    #[test]
    fn a_burst_sampled_every_100_ms_is_a_step_and_a_ramp_continues() {
        let mut t = Tracker::new(TrendConfig::default());
        let flat = (0..50).map(|i| (f64::from(i) * 0.1, MIB));
        let burst = (50..54).map(|i| (f64::from(i) * 0.1, MIB + f64::from(i - 49) * 0.5 * MIB));
        let after = (54..100).map(|i| (f64::from(i) * 0.1, 3.0 * MIB));
        let mut continued = Vec::new();
        for (at, v) in flat.chain(burst).chain(after) {
            let p = t.observe(obs(at, v, Some(8.0 * MIB)));
            if p.recent.continues() {
                continued.push(at);
            }
            if (at - 5.3).abs() < 1e-9 {
                assert_eq!(p.recent.rising_steps, 4, "{p:?}");
            }
        }
        assert!(continued.is_empty(), "{continued:?}");
        let mut ramp = Tracker::new(TrendConfig::default());
        let p = run(&mut ramp, (0..=25).map(|i| (f64::from(i) * 0.1, f64::from(i) * 0.1 * MIB)), 8.0 * MIB);
        assert!(p.recent.continues(), "{:?}", p.recent);
    }

    #[test]
    fn fit_handles_degenerate_input() {
        assert_eq!(fit([(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)].into_iter()), None);
        let exact = fit([(0.0, 0.0), (1.0, 2.0), (2.0, 4.0)].into_iter()).unwrap();
        assert_eq!(exact.slope, 2.0);
        assert!(exact.t_statistic.is_infinite());
        let mut t = Tracker::new(TrendConfig::default());
        // Out-of-order timestamps replace the newest sample rather than corrupting the fit.
        let p = run(
            &mut t,
            [(0.0, 0.0), (1.0, MIB), (1.0, MIB), (0.5, MIB), (2.0, 2.0 * MIB), (3.0, 3.0 * MIB)],
            64.0 * MIB,
        );
        assert!(p.rise.unwrap() > 0.0);
        assert_eq!(p.charge.used_bytes, 3 << 20, "the newest reading");
    }

    #[test]
    fn a_long_window_at_a_short_interval_keeps_a_bounded_number_of_samples() {
        for window in [30u64, 3600] {
            for interval in [0.05, 0.1, 0.13, 0.2, 0.5, 1.0, 16.0] {
                let config = TrendConfig { window: Duration::from_secs(window), ..TrendConfig::default() };
                let short = config.short_samples;
                let mut tracker = Tracker::new(config);
                // Two windows' worth, rising 1 MiB/s: the slope must survive the thinning.
                let steps = (2.0 * window as f64 / interval) as u32;
                let mut last = None;
                for step in 0..steps {
                    let at = f64::from(step) * interval;
                    last = Some(tracker.observe(obs(at, 100.0 * MIB + at * MIB, Some(1e15))));
                }
                let series = tracker.series.values().next().unwrap();
                let kept = series.samples.len();
                let whole = (window as f64 / interval) as usize + 1;
                let case = format!("window {window} s, interval {interval} s: {kept} samples kept");
                assert!(kept <= MAX_SAMPLES_PER_SERIES + short + 2, "{case}");
                // Thinned samples are at most one interval more than the spacing apart.
                let spacing = window as f64 / MAX_SAMPLES_PER_SERIES as f64;
                assert!(kept >= whole.min((window as f64 / (spacing + interval)) as usize), "{case}: thinned too much");
                // The short tail keeps every sample.
                let tail: Vec<f64> = series.samples.iter().rev().take(short).map(|s| s.0).collect();
                assert!(tail.windows(2).all(|w| (w[0] - w[1] - interval).abs() < 1e-9), "{case}: tail {tail:?}");
                // A fit needs three samples in the window.
                if whole >= 3 {
                    let rise = last.and_then(|p| p.rise).unwrap_or(0.0);
                    assert!((rise - MIB).abs() < MIB * 1e-6, "{case}: rise {rise}");
                }
            }
        }
    }

    #[test]
    fn the_default_window_keeps_every_sample() {
        let mut tracker = Tracker::new(TrendConfig::default());
        for step in 0..100u32 {
            tracker.observe(obs(f64::from(step), MIB, None));
        }
        let kept = tracker.series.values().map(|s| s.samples.len()).max().unwrap_or(0);
        assert_eq!(kept, 31, "a 30 s window at 1 s holds both ends");
    }
}
