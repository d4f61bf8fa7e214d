//! The sampled state: the latest report of every collector, immutable once published. A
//! scrape renders a snapshot at most once (the text is cached), so scrape cost does not grow
//! with the number of scrapers or with the number of processes scanned.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use crate::collect::Data;
use crate::exposition::{Exposition, Kind};

/// The outcome of a collector's latest run.
#[derive(Debug, Clone)]
pub struct Report {
    pub collector: &'static str,
    pub success: bool,
    pub duration: Duration,
    pub finished: Instant,
    pub data: Option<Data>,
}

#[derive(Debug)]
pub struct Snapshot {
    /// Reports in collector order; a collector appears once it has run.
    pub reports: Vec<Report>,
    pub taken: SystemTime,
    rendered: OnceLock<String>,
}

impl Snapshot {
    pub fn new(reports: Vec<Report>) -> Self {
        Self { reports, taken: SystemTime::now(), rendered: OnceLock::new() }
    }

    pub fn empty() -> Self {
        Self::new(Vec::new())
    }

    pub fn report(&self, collector: &str) -> Option<&Report> {
        self.reports.iter().find(|r| r.collector == collector)
    }

    /// The sampled series in exposition format, rendered on first use.
    pub fn text(&self) -> &str {
        self.rendered.get_or_init(|| self.render())
    }

    fn render(&self) -> String {
        let mut out = Exposition::new();
        for report in &self.reports {
            if let Some(data) = &report.data {
                data.render(&mut out);
            }
        }
        out.family(
            "memlock_scrape_collector_success",
            "1 if the collector's latest run read all its sources, 0 if any failed (see the log and memlock_exporter_collector_errors_total).",
            Kind::Gauge,
        );
        for report in &self.reports {
            out.sample(&[("collector", report.collector)], report.success);
        }
        out.family("memlock_scrape_collector_duration_seconds", "Wall time of the collector's latest run.", Kind::Gauge);
        for report in &self.reports {
            out.sample(&[("collector", report.collector)], report.duration.as_secs_f64());
        }
        out.finish()
    }

    /// Series that depend on the moment of the scrape, not of the sample.
    pub fn render_ages(&self, now: Instant) -> String {
        let mut out = Exposition::new();
        out.family(
            "memlock_exporter_collector_sample_age_seconds",
            "Seconds since the collector's latest run finished, at scrape time. Grows without bound when a collector is stuck.",
            Kind::Gauge,
        );
        for report in &self.reports {
            out.sample(&[("collector", report.collector)], now.saturating_duration_since(report.finished).as_secs_f64());
        }
        out.finish()
    }
}
