//! The sampled state: the latest report of every collector, immutable once published. A
//! scrape renders a snapshot at most once (the text is cached), so scrape cost does not grow
//! with the number of scrapers or with the number of processes scanned.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use std::sync::Arc;

use crate::budget::{self, Allocation, Grants};
use crate::collect::Data;
use crate::exposition::{Exposition, Kind};
use crate::trend::{Scope, TrendPoint};

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

/// The series limit of a snapshot (`series.limit`), and the exporter's own registry, whose series
/// are served beside the snapshot's and count against it; [`crate::budget`] grants what is left.
#[derive(Clone, Default)]
pub struct SeriesLimit {
    /// 0: no limit.
    pub limit: usize,
    pub registry: Option<prometheus::Registry>,
}

impl std::fmt::Debug for SeriesLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeriesLimit").field("limit", &self.limit).finish_non_exhaustive()
    }
}

impl SeriesLimit {
    pub fn unlimited() -> Self {
        Self::default()
    }

    /// Series of the registry now.
    fn registry_series(&self) -> usize {
        self.registry.as_ref().map_or(0, |r| r.gather().iter().map(|family| family.get_metric().len()).sum())
    }
}

#[derive(Debug)]
pub struct Snapshot {
    /// Reports in collector order; a collector appears once it has run.
    pub reports: Vec<Report>,
    series_limit: SeriesLimit,
    /// The trend tracker's scopes and evictions, when a sampler made the snapshot.
    tracker: Option<TrackerStats>,
    /// Shared with every response that serves it (see [`Snapshot::shared_text`]).
    rendered: OnceLock<Arc<String>>,
}

/// The trend tracker's size when the snapshot was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TrackerStats {
    pub scopes: usize,
    pub(crate) evicted_total: u64,
}

impl Snapshot {
    /// A snapshot without a series limit.
    pub fn new(reports: Vec<Report>) -> Self {
        Self::with_series_limit(reports, SeriesLimit::unlimited())
    }

    pub fn with_series_limit(reports: Vec<Report>, series_limit: SeriesLimit) -> Self {
        Self { reports, series_limit, tracker: None, rendered: OnceLock::new() }
    }

    pub(crate) fn with_tracker(mut self, tracker: TrackerStats) -> Self {
        self.tracker = Some(tracker);
        self
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

    /// The same text, to share: a scrape in flight holds a reference, not a copy (with 10,000
    /// cgroups the text is tens of MiB).
    pub fn shared_text(&self) -> &Arc<String> {
        self.rendered.get_or_init(|| Arc::new(self.render()))
    }

    /// Grants the series budget within the series limit: the fixed series (counted by the render
    /// with no entity granted, into an exposition that writes nothing), the exporter's own series
    /// and the sample ages are counted first, then [`budget::allocate`] hands out the rest.
    pub fn allocation(&self) -> Allocation {
        let claims: Vec<budget::Claim> =
            self.reports.iter().filter_map(|r| r.data.as_ref()).flat_map(|d| d.claims()).collect();
        if self.series_limit.limit == 0 {
            let dropped = claims.iter().map(|c| (c.class, 0)).collect();
            return Allocation { grants: Grants::all(), dropped, granted_series: 0 };
        }
        let placeholder = Allocation {
            grants: Grants::none(),
            dropped: claims.iter().map(|c| (c.class, 0)).collect(),
            granted_series: 0,
        };
        let fixed = self.render_into(Exposition::counting(), &placeholder).samples();
        let outside = self.reports.len() + self.series_limit.registry_series() + budget::HEADROOM;
        budget::allocate(&claims, self.series_limit.limit.saturating_sub(fixed + outside))
    }

    fn render(&self) -> String {
        self.render_into(Exposition::new(), &self.allocation()).finish()
    }

    fn render_into(&self, mut out: Exposition, allocation: &Allocation) -> Exposition {
        let grants = &allocation.grants;
        for report in &self.reports {
            if let Some(data) = &report.data {
                data.render(&mut out, grants);
            }
        }
        self.render_trends(&mut out, grants);
        out.family(
            "memlock_scrape_collector_success",
            "1 if the collector's latest run read all its sources, 0 if any failed.",
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
            "The interval the collector runs at now, raised while runs take longer.",
            Kind::Gauge,
        );
        for report in &self.reports {
            out.sample(&[("collector", report.collector)], report.interval.as_secs_f64());
        }
        if self.series_limit.limit > 0 {
            out.family("memlock_exporter_series_limit", "series.limit: the most series a scrape carries.", Kind::Gauge)
                .sample(&[], self.series_limit.limit as u64);
        }
        out.family(
            "memlock_exporter_series_dropped_entities",
            "Entities by class left out to stay within series.limit.",
            Kind::Gauge,
        );
        for (class, dropped) in &allocation.dropped {
            out.sample(&[("class", class)], *dropped as u64);
        }
        // Last, so that it counts every label value above.
        let rewritten = out.rewritten_label_values();
        out.family(
            "memlock_exporter_label_values_rewritten",
            "Label values in this sample cut or escaped for length or control characters.",
            Kind::Gauge,
        );
        out.sample(&[], rewritten);
        out
    }

    /// Every trend point, across collectors.
    pub fn trends(&self) -> impl Iterator<Item = &TrendPoint> {
        self.reports.iter().flat_map(|r| r.trends.iter())
    }

    /// The trend points of the exported scopes: the node's, and those of the processes and
    /// cgroups whose series the budget granted.
    fn exported_trends(&self, grants: &Grants) -> Vec<&TrendPoint> {
        let mut points = Vec::new();
        for report in &self.reports {
            let ids = report.data.as_ref().and_then(|d| d.exported_trends(grants));
            points.extend(
                report
                    .trends
                    .iter()
                    .filter(|p| p.scope == Scope::Node || ids.as_ref().is_none_or(|ids| ids.contains(&p.id))),
            );
        }
        points
    }

    fn render_trends(&self, out: &mut Exposition, grants: &Grants) {
        let points = self.exported_trends(grants);
        out.family("memlock_trend_rise_bytes_per_second", &crate::scopes::RISE_HELP, Kind::Gauge);
        for point in &points {
            if let Some(rise) = point.rise {
                out.sample(&trend_labels(point), rise);
            }
        }
        out.family("memlock_trend_exhaustion_seconds", &crate::scopes::EXHAUSTION_HELP, Kind::Gauge);
        for point in &points {
            if let Some(seconds) = point.exhaustion {
                out.sample(&trend_labels(point), seconds);
            }
        }
        if let Some(tracker) = self.tracker {
            out.family("memlock_trend_scopes", "Scopes whose trend is tracked, at most 20,000.", Kind::Gauge)
                .sample(&[], tracker.scopes as u64);
            out.family(
                "memlock_trend_scopes_evicted_total",
                "Trend scopes evicted to make room for new ones once 20,000 were tracked.",
                Kind::Counter,
            )
            .sample(&[], tracker.evicted_total);
        }
    }

    /// Series that depend on the moment of the scrape, not of the sample.
    pub fn render_ages(&self, now: Instant) -> String {
        let mut out = Exposition::new();
        out.family(
            "memlock_exporter_collector_sample_age_seconds",
            "Seconds since the collector's latest run finished, at scrape time.",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{Claim, Tier};

    /// A collector's data with 3 fixed series and `entities` entities of 4 series each.
    #[derive(Debug)]
    struct Many {
        entities: usize,
    }

    impl crate::collect::Stats for Many {
        fn render(&self, out: &mut Exposition, grants: &Grants) {
            out.family("m_fixed", "Fixed.", Kind::Gauge);
            for i in 0..3u64 {
                out.sample(&[("i", &i.to_string())], i);
            }
            out.family("m_entity", "Per entity.", Kind::Gauge);
            for e in 0..self.entities.min(grants.get("many")) {
                for k in ["a", "b", "c", "d"] {
                    out.sample(&[("e", &e.to_string()), ("k", k)], 1u64);
                }
            }
        }

        fn claims(&self) -> Vec<Claim> {
            let entities = (0..self.entities).map(|e| (4, 1.0 - e as f64 / 1e4)).collect();
            vec![Claim { class: "many", tier: Tier::Page, floor: 0, cap: usize::MAX, entities }]
        }

        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    fn report(entities: usize) -> Report {
        Report {
            collector: "many",
            success: true,
            duration: Duration::ZERO,
            finished: Instant::now(),
            data: Some(Arc::new(Many { entities })),
            interval: Duration::from_secs(1),
            trends: Arc::new(Vec::new()),
        }
    }

    fn series(text: &str) -> usize {
        text.lines().filter(|l| !l.starts_with('#')).count()
    }

    /// Everything the scrape serves counts: the snapshot, the sample ages and the registry.
    #[test]
    fn the_whole_scrape_stays_within_the_limit() {
        let registry = prometheus::Registry::new();
        let own = prometheus::IntGauge::new("own", "own").unwrap();
        registry.register(Box::new(own)).unwrap();
        let limit = 100;
        let snapshot =
            Snapshot::with_series_limit(vec![report(1000)], SeriesLimit { limit, registry: Some(registry.clone()) });
        let text = snapshot.text();
        let ages = snapshot.render_ages(Instant::now());
        let own_series = 1;
        let total = series(text) + series(&ages) + own_series;
        assert!(total + budget::HEADROOM <= limit, "{total} series:\n{text}");
        // Fixed: 3, success/duration/interval 3, limit 1, dropped 1, rewritten 1; age 1; own 1;
        // headroom 8: 81 left, 20 entities of 4.
        assert_eq!(text.matches("m_entity{").count(), 20 * 4, "{text}");
        assert!(text.contains("memlock_exporter_series_dropped_entities{class=\"many\"} 980\n"), "{text}");
        assert!(text.contains("memlock_exporter_series_limit 100\n"), "{text}");
        // Without a limit: every entity, nothing dropped.
        let text = Snapshot::new(vec![report(1000)]).text().to_owned();
        assert_eq!(text.matches("m_entity{").count(), 4000);
        assert!(text.contains("memlock_exporter_series_dropped_entities{class=\"many\"} 0\n"));
        assert!(!text.contains("memlock_exporter_series_limit"));
        // A limit below the fixed series exports those and nothing else.
        let snapshot = Snapshot::with_series_limit(vec![report(1000)], SeriesLimit { limit: 5, registry: None });
        assert_eq!(snapshot.text().matches("m_entity{").count(), 0);
        assert_eq!(snapshot.text().matches("m_fixed{").count(), 3);
    }
}
