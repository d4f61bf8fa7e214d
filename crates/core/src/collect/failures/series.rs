//! The failure series the reader records, bounded, and the node totals.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use super::cause::{Cause, Figures, SeriesKey};

/// Failure series (one per process, call, errno and cause) kept at most; later ones are only
/// counted in the node totals and `memlock_registration_failures_overflow_total`.
pub(crate) const MAX_SERIES: usize = 64;
/// How long a series pages after its last refusal (the fast path's `MemlockRegistrationFailed`
/// and the Prometheus rule hold it as long); past it, a full table gives the series' place to
/// a new one.
pub(crate) const SERIES_HOLD: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub count: u64,
    /// The size of the last refused request (0 when its entry was not seen).
    pub requested_bytes: u64,
    /// When the last one happened (for the fast path's page).
    pub(crate) last_at: Instant,
    /// The same in Unix seconds, exported: what the Prometheus rule holds its page on, so a
    /// gap in Prometheus's samples cannot make an old refusal look new.
    pub(crate) last_unix_seconds: f64,
    /// The figures the cause was judged on, for the page's description.
    pub figures: Figures,
}

/// What the reader has seen, shared with the collector.
#[derive(Debug, Clone, Default)]
pub struct Book {
    pub series: BTreeMap<SeriesKey, Series>,
    /// By (call, errno, cause): every failure, series or not.
    pub(crate) totals: BTreeMap<(&'static str, String, Cause), u64>,
    pub overflow: u64,
    pub(crate) lost_events: u64,
    pub(crate) unparsed_lines: u64,
    pub(crate) forgotten_entries: u64,
    /// Tasks with entries waiting for their return.
    pub pending: u64,
}

impl Book {
    pub fn record(&mut self, key: SeriesKey, requested: u64, figures: Figures, at: Instant) {
        let last_unix_seconds = unix_seconds(at);
        *self.totals.entry((key.call, key.errno.clone(), key.cause)).or_default() += 1;
        if let Some(series) = self.series.get_mut(&key) {
            series.count += 1;
            series.requested_bytes = requested;
            series.last_at = at;
            series.last_unix_seconds = last_unix_seconds;
            series.figures = figures;
        } else {
            if self.series.len() >= MAX_SERIES {
                // Full: the series refused longest ago gives way once it no longer pages
                // (SERIES_HOLD), so 64 old refusals cannot keep a new one from paging; a
                // series that still pages is never pushed out by a newcomer.
                let oldest = self.series.iter().min_by_key(|(_, s)| s.last_at).map(|(k, s)| (k.clone(), s.last_at));
                match oldest {
                    Some((old, last_at)) if at.saturating_duration_since(last_at) > SERIES_HOLD => {
                        self.series.remove(&old);
                    }
                    _ => {
                        self.overflow += 1;
                        return;
                    }
                }
            }
            let series = Series { count: 1, requested_bytes: requested, last_at: at, last_unix_seconds, figures };
            self.series.insert(key, series);
        }
    }
}

/// The wall clock time of `at`.
fn unix_seconds(at: Instant) -> f64 {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let wall = match now.checked_duration_since(at) {
        Some(ago) => wall.checked_sub(ago),
        None => wall.checked_add(at.saturating_duration_since(now)),
    };
    wall.and_then(|w| w.duration_since(SystemTime::UNIX_EPOCH).ok()).map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(pid: u32) -> SeriesKey {
        SeriesKey {
            pid,
            comm: "c".into(),
            cgroup: "/".into(),
            call: "ib_umem_get",
            errno: "ENOMEM".into(),
            cause: Cause::Memlock,
        }
    }

    #[test]
    fn series_are_bounded_and_totals_complete() {
        let mut book = Book::default();
        let now = Instant::now();
        for pid in 0..(MAX_SERIES as u32 + 10) {
            book.record(key(pid), 1, Figures::default(), now);
        }
        book.record(key(0), 2, Figures::default(), now);
        assert_eq!(book.series.len(), MAX_SERIES);
        assert_eq!(book.overflow, 10);
        assert_eq!(book.series[&key(0)].count, 2);
        assert_eq!(book.totals[&("ib_umem_get", "ENOMEM".to_owned(), Cause::Memlock)], MAX_SERIES as u64 + 11);
    }
}
