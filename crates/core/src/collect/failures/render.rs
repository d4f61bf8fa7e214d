//! The failures collector's series.

use crate::budget::{Claim, Grants, Tier};
use crate::exposition::{Exposition, Kind};

use super::cause::SeriesKey;
use super::series::{Book, Series, MAX_SERIES};
use super::FailuresStats;

/// The budget's class of the per-process failure series.
pub(crate) const CLASS: &str = "registration_failures";

impl FailuresStats {
    /// The series in the order they are granted: the latest failure first.
    pub fn ordered(&self) -> Vec<(&SeriesKey, &Series)> {
        let mut series: Vec<_> = self.book.series.iter().collect();
        series.sort_by(|a, b| b.1.last_at.cmp(&a.1.last_at).then_with(|| a.0.cmp(b.0)));
        series
    }

    pub fn render(&self, out: &mut Exposition, grants: &Grants) {
        out.family(
            "memlock_failures_supported",
            "1 when the failures collector traces refusals, 0 with the reason it cannot.",
            Kind::Gauge,
        );
        match self.unsupported {
            None => out.sample(&[("reason", "")], 1u64),
            Some(reason) => out.sample(&[("reason", reason.as_str())], 0u64),
        };
        out.family(
            "memlock_failures_probed",
            "1 per kernel function the failures collector probes, 0 when the kernel lacks it.",
            Kind::Gauge,
        );
        for (call, probed) in &self.probed {
            out.sample(&[("call", call)], u64::from(*probed));
        }
        out.family(
            "memlock_failures_pairing",
            "1 with how the failures collector pairs a refusal with its size: kernel or userspace.",
            Kind::Gauge,
        );
        if let Some(mode) = self.mode {
            out.sample(&[("mode", mode.as_str())], 1u64);
        }
        out.family(
            "memlock_node_registration_failures_total",
            "Refused registrations and locks on the node by call, errno and cause.",
            Kind::Counter,
        );
        for ((call, errno, cause), count) in &self.book.totals {
            out.sample(&[("call", call), ("errno", errno), ("cause", cause.as_str())], *count);
        }
        let granted = grants.get(CLASS);
        let ordered = self.ordered();
        let shown = &ordered[..granted.min(ordered.len())];
        out.family(
            "memlock_registration_failures_total",
            "Refused registrations and locks per process by call, errno and cause (at most 64 series).",
            Kind::Counter,
        );
        let mut pids = Vec::with_capacity(shown.len());
        for (key, _) in shown {
            pids.push(key.pid.to_string());
        }
        for ((key, series), pid) in shown.iter().zip(&pids) {
            out.sample(&labels(key, pid), series.count);
        }
        out.family(
            "memlock_registration_failure_requested_bytes",
            "The size the series' last refused request asked for (0 when unknown).",
            Kind::Gauge,
        );
        for ((key, series), pid) in shown.iter().zip(&pids) {
            out.sample(&labels(key, pid), series.requested_bytes);
        }
        out.family(
            "memlock_registration_failure_last_timestamp_seconds",
            "Unix time of the series' last refusal.",
            Kind::Gauge,
        );
        for ((key, series), pid) in shown.iter().zip(&pids) {
            out.sample(&labels(key, pid), (series.last_unix_seconds * 1000.0).round() / 1000.0);
        }
        out.family(
            "memlock_registration_failures_overflow_total",
            "Refusals not given a series because 64 were already exported.",
            Kind::Counter,
        );
        out.sample(&[], self.book.overflow);
        out.family(
            "memlock_failures_trace_lost_events_total",
            "Trace events the kernel dropped before the failures collector read them.",
            Kind::Counter,
        );
        out.sample(&[], self.book.lost_events);
        out.family(
            "memlock_failures_trace_unparsed_lines_total",
            "Trace lines the failures collector could not parse.",
            Kind::Counter,
        );
        out.sample(&[], self.book.unparsed_lines);
        out.family(
            "memlock_failures_forgotten_entries_total",
            "Traced call entries dropped before their return was seen.",
            Kind::Counter,
        );
        out.sample(&[], self.book.forgotten_entries);
        out.family(
            "memlock_failures_pending_tasks",
            "Traced calls whose return the failures collector is waiting for.",
            Kind::Gauge,
        );
        out.sample(&[], self.book.pending);
    }
}

fn labels<'a>(key: &'a SeriesKey, pid: &'a str) -> [(&'static str, &'a str); 6] {
    [
        ("pid", pid),
        ("comm", &key.comm),
        ("cgroup", &key.cgroup),
        ("call", key.call),
        ("errno", &key.errno),
        ("cause", key.cause.as_str()),
    ]
}

impl crate::collect::Stats for FailuresStats {
    fn render(&self, out: &mut Exposition, grants: &Grants) {
        FailuresStats::render(self, out, grants)
    }

    fn claims(&self) -> Vec<Claim> {
        vec![Claim {
            class: CLASS,
            tier: Tier::Page,
            floor: MAX_SERIES,
            cap: MAX_SERIES,
            entities: self.book.series.iter().map(|_| (3, 1.0)).collect(),
        }]
    }

    fn refusals(&self) -> Option<&Book> {
        Some(&self.book)
    }

    fn state(&self) -> Option<String> {
        Some(match (&self.unsupported, self.mode) {
            (Some(reason), _) => format!("not tracing: {}", reason.as_str()),
            (None, mode) => {
                let pairing = mode.map_or("starting", |m| m.as_str());
                format!("tracing refused registrations and locks (pairing: {pairing})")
            }
        })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::{Cause, Figures, Mode, Unsupported, CALLS};
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
    fn unsupported_renders_the_reason_and_no_failure() {
        let stats = FailuresStats {
            unsupported: Some(Unsupported::NoKprobeEvents),
            mode: None,
            probed: CALLS.iter().map(|c| (c.function, false)).collect(),
            book: Book::default(),
        };
        let mut out = Exposition::new();
        stats.render(&mut out, &Grants::all());
        let text = out.finish();
        assert!(text.contains("memlock_failures_supported{reason=\"no_kprobe_events\"} 0\n"), "{text}");
        assert!(text.contains("memlock_failures_probed{call=\"ib_umem_get\"} 0\n"), "{text}");
        assert!(!text.contains("memlock_registration_failures_total{"), "{text}");
        assert!(!text.contains("memlock_failures_pairing{"), "{text}");
    }

    #[test]
    fn a_recorded_failure_renders_with_its_labels() {
        let mut book = Book::default();
        book.record(key(42), 1 << 20, Figures::default(), Instant::now());
        let stats =
            FailuresStats { unsupported: None, mode: Some(Mode::Kernel), probed: vec![("ib_umem_get", true)], book };
        let mut out = Exposition::new();
        stats.render(&mut out, &Grants::all());
        let text = out.finish();
        let labels = "{pid=\"42\",comm=\"c\",cgroup=\"/\",call=\"ib_umem_get\",errno=\"ENOMEM\",cause=\"memlock\"}";
        assert!(text.contains(&format!("memlock_registration_failures_total{labels} 1\n")), "{text}");
        assert!(text.contains(&format!("memlock_registration_failure_requested_bytes{labels} 1048576\n")), "{text}");
        let stamp = format!("memlock_registration_failure_last_timestamp_seconds{labels} ");
        let stamp: f64 = text.split(&stamp).nth(1).and_then(|t| t.lines().next()).unwrap().parse().unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        // Rounded to the millisecond, possibly up.
        assert!((now - 60.0..=now + 0.001).contains(&stamp), "{stamp} against {now}");
        assert!(text.contains("memlock_failures_supported{reason=\"\"} 1\n"), "{text}");
        assert!(text.contains("memlock_failures_pairing{mode=\"kernel\"} 1\n"), "{text}");
        let mut out = Exposition::new();
        stats.render(&mut out, &Grants::none());
        assert!(!out.finish().contains("memlock_registration_failures_total{pid"));
    }
}
