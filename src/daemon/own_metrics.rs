//! The exporter's own metrics: build info, collector errors, fast-path deliveries, reload
//! status, the `process_*` series of this process and its heap in use.

use std::time::SystemTime;

use prometheus::{Gauge, GaugeVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use memlock_core::alerting::AlertMetrics;

/// The exporter's own metrics: build info, error counters, reload status and the process_*
/// series of this process (CPU, resident memory, file descriptors).
pub struct SelfMetrics {
    pub registry: Registry,
    pub collector_errors: IntCounterVec,
    pub alerts: AlertMetrics,
    pub reload_successful: IntGauge,
    pub reload_success_timestamp: Gauge,
}

impl SelfMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let build_info = IntGaugeVec::new(
            Opts::new("memlock_exporter_build_info", "Always 1; labels say which build is running."),
            &["version", "revision", "rustc"],
        )?;
        build_info
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                env!("MEMLOCKEXP_BUILD_REVISION"),
                env!("MEMLOCKEXP_BUILD_RUSTC"),
            ])
            .set(1);
        registry.register(Box::new(build_info))?;
        let collector_errors = IntCounterVec::new(
            Opts::new(
                "memlock_exporter_collector_errors_total",
                "Errors met by collectors, by kind (io, not_found, permission, parse, too_large).",
            ),
            &["collector", "kind"],
        )?;
        registry.register(Box::new(collector_errors.clone()))?;
        registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;
        if let Some(heap) = crate::heap::HeapCollector::new() {
            registry.register(Box::new(heap))?;
        }
        registry.register(Box::new(crate::logging::DroppedLinesCollector::new()?))?;
        let alerts = AlertMetrics {
            sent: IntCounterVec::new(
                Opts::new(
                    "memlock_exporter_alerts_sent_total",
                    "Alerts (firing and resolved) delivered to Alertmanager by the fast path.",
                ),
                &["alertmanager"],
            )?,
            failures: IntCounterVec::new(
                Opts::new(
                    "memlock_exporter_alert_send_failures_total",
                    "Failed deliveries to Alertmanager (each is retried with backoff).",
                ),
                &["alertmanager"],
            )?,
            active: IntGauge::new("memlock_exporter_alerts_active", "Alerts the fast path currently holds as firing.")?,
            resolutions_dropped: IntCounterVec::new(
                Opts::new(
                    "memlock_exporter_alert_resolutions_dropped_total",
                    "Resolved alerts dropped from the fast path's full queue, by severity.",
                ),
                &["severity"],
            )?,
            last_success: GaugeVec::new(
                Opts::new(
                    "memlock_exporter_alertmanager_last_success_timestamp_seconds",
                    "Unix time of the latest successful delivery to this Alertmanager, 0 before the first.",
                ),
                &["alertmanager"],
            )?,
        };
        registry.register(Box::new(alerts.sent.clone()))?;
        registry.register(Box::new(alerts.failures.clone()))?;
        registry.register(Box::new(alerts.active.clone()))?;
        registry.register(Box::new(alerts.resolutions_dropped.clone()))?;
        registry.register(Box::new(alerts.last_success.clone()))?;
        for severity in ["warning", "critical"] {
            alerts.resolutions_dropped.with_label_values(&[severity]);
        }
        let reload_successful = IntGauge::new(
            "memlock_exporter_config_last_reload_successful",
            "1 if the last configuration reload succeeded, else 0.",
        )?;
        let reload_success_timestamp = Gauge::new(
            "memlock_exporter_config_last_reload_success_timestamp_seconds",
            "Unix time of the latest successful configuration load (start or reload).",
        )?;
        registry.register(Box::new(reload_successful.clone()))?;
        registry.register(Box::new(reload_success_timestamp.clone()))?;
        Ok(Self { registry, collector_errors, alerts, reload_successful, reload_success_timestamp })
    }

    pub fn loaded(&self, ok: bool) {
        self.reload_successful.set(i64::from(ok));
        if ok {
            self.reload_success_timestamp
                .set(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reload_metrics_start_as_successful() {
        let own = SelfMetrics::new().unwrap();
        own.loaded(true);
        assert_eq!(own.reload_successful.get(), 1);
        assert!(own.reload_success_timestamp.get() > 1.6e9);
        let stamp = own.reload_success_timestamp.get();
        own.loaded(false);
        assert_eq!(own.reload_successful.get(), 0);
        assert_eq!(own.reload_success_timestamp.get(), stamp, "a failure keeps the time of the last success");
    }
}
