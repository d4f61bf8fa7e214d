//! The sampled state: the latest report of every collector, immutable once published. A
//! scrape renders a snapshot at most once (the text is cached), so scrape cost does not grow
//! with the number of scrapers or with the number of processes scanned.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use std::sync::Arc;

use crate::collect::Data;
use crate::exposition::{Exposition, Kind};
use crate::trend::TrendPoint;

/// The outcome of a collector's latest run.
#[derive(Debug, Clone)]
pub struct Report {
    pub collector: &'static str,
    pub success: bool,
    pub duration: Duration,
    pub finished: Instant,
    pub data: Option<Data>,
    /// The interval the collector runs at now: its own, or longer while runs take longer.
    pub interval: Duration,
    /// The trend analysis of the scopes in `data`, made when the report was posted.
    pub trends: Arc<Vec<TrendPoint>>,
}

fn trend_labels(point: &TrendPoint) -> Vec<(&str, &str)> {
    let mut labels = vec![("scope", point.scope.as_str())];
    labels.extend(point.labels.iter().map(|(k, v)| (*k, v.as_str())));
    labels
}

#[derive(Debug)]
pub struct Snapshot {
    /// Reports in collector order; a collector appears once it has run.
    pub reports: Vec<Report>,
    /// Shared with every response that serves it (see [`Snapshot::text_bytes`]).
    rendered: OnceLock<Arc<String>>,
}

/// The rendered text as the owner of a `Bytes`: responses reference it instead of copying it.
struct SharedText(Arc<String>);

impl AsRef<[u8]> for SharedText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl Snapshot {
    pub fn new(reports: Vec<Report>) -> Self {
        Self { reports, rendered: OnceLock::new() }
    }

    pub fn empty() -> Self {
        Self::new(Vec::new())
    }

    pub fn report(&self, collector: &str) -> Option<&Report> {
        self.reports.iter().find(|r| r.collector == collector)
    }

    /// Whether [`Snapshot::text`] is rendered already (so serving it costs nothing).
    pub fn is_rendered(&self) -> bool {
        self.rendered.get().is_some()
    }

    /// The sampled series in exposition format, rendered on first use.
    pub fn text(&self) -> &str {
        self.shared_text()
    }

    /// The same text as `Bytes` that share this snapshot's copy: a scrape in flight holds a
    /// reference, not a copy (with 10,000 cgroups the text is tens of MiB).
    pub fn text_bytes(&self) -> hyper::body::Bytes {
        hyper::body::Bytes::from_owner(SharedText(self.shared_text().clone()))
    }

    fn shared_text(&self) -> &Arc<String> {
        self.rendered.get_or_init(|| Arc::new(self.render()))
    }

    fn render(&self) -> String {
        let mut out = Exposition::new();
        for report in &self.reports {
            if let Some(data) = &report.data {
                data.render(&mut out);
            }
        }
        self.render_trends(&mut out);
        out.family(
            "memlock_scrape_collector_success",
            "1 if the collector's latest run read all its sources, 0 if any failed (see the log and \
                memlock_exporter_collector_errors_total).",
            Kind::Gauge,
        );
        for report in &self.reports {
            out.sample(&[("collector", report.collector)], report.success);
        }
        out.family(
            "memlock_scrape_collector_duration_seconds",
            "Wall time of the collector's latest run.",
            Kind::Gauge,
        );
        for report in &self.reports {
            out.sample(&[("collector", report.collector)], report.duration.as_secs_f64());
        }
        out.family(
            "memlock_exporter_collector_interval_seconds",
            "The interval the collector runs at now: its configured interval, or twice its latest run while a run \
                takes longer than that (a host too large for the interval; the log says so).",
            Kind::Gauge,
        );
        for report in &self.reports {
            out.sample(&[("collector", report.collector)], report.interval.as_secs_f64());
        }
        // Last, so that it counts every label value above.
        let rewritten = out.rewritten_label_values();
        out.family(
            "memlock_exporter_label_values_rewritten",
            "Label values in this sample that were longer than 512 bytes or held control characters: they are \
                exported with control characters as \\xNN, cut to 512 bytes and ending in ~ and 16 hex digits of \
                the SHA-256 of the original value.",
            Kind::Gauge,
        );
        out.sample(&[], rewritten);
        out.finish()
    }

    /// Every trend point, across collectors.
    pub fn trends(&self) -> impl Iterator<Item = &TrendPoint> {
        self.reports.iter().flat_map(|r| r.trends.iter())
    }

    fn render_trends(&self, out: &mut Exposition) {
        out.family(
            "memlock_trend_rise_bytes_per_second",
            "How fast the scope's watched memory rises, by least squares over the trend window of 1 s samples (node: \
                memory in use, MemTotal - MemAvailable; cgroup: working set, usage where memory.stat is unreadable; \
                process: VmPin or VmLck, by counter).",
            Kind::Gauge,
        );
        for point in self.trends() {
            if let Some(rise) = point.rise {
                out.sample(&trend_labels(point), rise);
            }
        }
        out.family(
            "memlock_trend_exhaustion_seconds",
            "At the current rise, seconds until the scope's limit is reached (node: MemAvailable falling to \
                memlock_node_memory_available_floor_bytes; cgroup: its effective limit; process: its soft memlock \
                limit, for each counter). Absent when not rising significantly or without a limit.",
            Kind::Gauge,
        );
        for point in self.trends() {
            if let Some(seconds) = point.exhaustion {
                out.sample(&trend_labels(point), seconds);
            }
        }
    }

    /// Series that depend on the moment of the scrape, not of the sample.
    pub fn render_ages(&self, now: Instant) -> String {
        let mut out = Exposition::new();
        out.family(
            "memlock_exporter_collector_sample_age_seconds",
            "Seconds since the collector's latest run finished, at scrape time. Grows without bound when a collector \
                is stuck.",
            Kind::Gauge,
        );
        for report in &self.reports {
            out.sample(
                &[("collector", report.collector)],
                now.saturating_duration_since(report.finished).as_secs_f64(),
            );
        }
        out.finish()
    }
}
