//! The daemon: configuration, sampler, HTTP server, signals.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use thiserror::Error;

use crate::alerting::{self, AlertMetrics};
use crate::cli::ServeArgs;
use crate::config::{self, Config, ConfigError, Sources};
use crate::sampler::Sampler;
use crate::server::{self, AppState};

/// How long in-flight scrapes may take to finish after SIGTERM.
const DRAIN: Duration = Duration::from_secs(5);

#[derive(Debug, Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("listening on {address}: {source}")]
    Bind { address: String, source: std::io::Error },
    #[error("{context}: {source}")]
    Io { context: &'static str, source: std::io::Error },
    #[error("metrics registry: {0}")]
    Registry(#[from] prometheus::Error),
}

impl ServeError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ServeError::Config(_) => crate::exit::USAGE,
            _ => crate::exit::RUNTIME,
        }
    }
}

pub fn load_config(args: &ServeArgs) -> Result<Config, ConfigError> {
    config::load(&Sources { file: args.config_file.clone(), env: None, flags: args.overrides() })
}

/// The exporter's own metrics: build info, error counters and the process_* series of this
/// process (CPU, resident memory, file descriptors).
pub struct SelfMetrics {
    pub registry: Registry,
    pub collector_errors: IntCounterVec,
    pub alerts: AlertMetrics,
}

impl SelfMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let build_info = IntGaugeVec::new(
            Opts::new("memlock_exporter_build_info", "Always 1; labels say which build is running."),
            &["version", "revision", "rustc"],
        )?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), env!("MEMLOCKEXP_BUILD_REVISION"), env!("MEMLOCKEXP_BUILD_RUSTC")])
            .set(1);
        registry.register(Box::new(build_info))?;
        let collector_errors = IntCounterVec::new(
            Opts::new("memlock_exporter_collector_errors_total", "Errors met by collectors, by kind (io, not_found, permission, parse, too_large)."),
            &["collector", "kind"],
        )?;
        registry.register(Box::new(collector_errors.clone()))?;
        registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;
        let alerts = AlertMetrics {
            sent: IntCounterVec::new(
                Opts::new("memlock_exporter_alerts_sent_total", "Alerts (firing and resolved) delivered to Alertmanager by the fast path."),
                &["alertmanager"],
            )?,
            failures: IntCounterVec::new(
                Opts::new("memlock_exporter_alert_send_failures_total", "Failed deliveries to Alertmanager (each is retried with backoff)."),
                &["alertmanager"],
            )?,
            active: IntGauge::new("memlock_exporter_alerts_active", "Alerts the fast path currently holds as firing.")?,
        };
        registry.register(Box::new(alerts.sent.clone()))?;
        registry.register(Box::new(alerts.failures.clone()))?;
        registry.register(Box::new(alerts.active.clone()))?;
        Ok(Self { registry, collector_errors, alerts })
    }
}

pub fn run(config: Config) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("memlock-http")
        .enable_all()
        .build()
        .map_err(|source| ServeError::Io { context: "starting the async runtime", source })?;
    runtime.block_on(serve(config))
}

async fn serve(config: Config) -> Result<(), ServeError> {
    let own = SelfMetrics::new()?;
    let listener = server::bind(&config.listen_address)
        .await
        .map_err(|source| ServeError::Bind { address: config.listen_address.clone(), source })?;
    let collectors = crate::collect::build(&config);
    let enabled: Vec<&'static str> = collectors.iter().map(|(c, _)| c.name()).collect();
    let (sampler, snapshots) = Sampler::start(collectors, config.trend.clone(), own.collector_errors.clone())
        .map_err(|source| ServeError::Io { context: "starting the sampler threads", source })?;
    let address = server::local_address(&listener).map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(
        address = %address,
        telemetry_path = %config.telemetry_path,
        collectors = %enabled.join(","),
        procfs = %config.roots.procfs.display(),
        sysfs = %config.roots.sysfs.display(),
        version = env!("CARGO_PKG_VERSION"),
        "listening"
    );
    let alert_task = if config.alerting.alertmanager_urls.is_empty() {
        None
    } else {
        let mut alerting = config.alerting.clone();
        if alerting.instance.is_empty() {
            alerting.instance = hostname(&config);
        }
        tracing::info!(alertmanagers = %alerting.alertmanager_urls.join(","), instance = %alerting.instance, "fast-path alerting on");
        Some(tokio::spawn(alerting::run(snapshots.clone(), alerting, own.alerts.clone())))
    };
    let state = Arc::new(AppState { snapshots, registry: own.registry, telemetry_path: config.telemetry_path.clone(), collectors: enabled });
    server::serve(listener, state, shutdown_signal(), DRAIN).await;
    tokio::task::spawn_blocking(move || sampler.shutdown()).await.ok();
    if let Some(task) = alert_task {
        task.abort();
    }
    tracing::info!("stopped");
    Ok(())
}

/// The node's name for the `instance` label of fast-path alerts: the host's, read through the
/// procfs root (so a container reports the node, not the pod).
fn hostname(config: &Config) -> String {
    crate::fsroot::read_string(&config.roots.proc("sys/kernel/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(err) => {
            tracing::error!(error = %err, "cannot watch SIGTERM; only SIGINT will stop the exporter");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
    }
}
