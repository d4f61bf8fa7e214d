//! The daemon: configuration, sampler, HTTP server, signals, reloads and systemd notification.
//!
//! A reload (SIGHUP, or a change to the configuration file, the web configuration or its
//! certificates) validates everything first: the layered configuration, the web configuration
//! with its certificates and keys. Only then does it swap, so a bad file keeps the old
//! configuration running, logs the error (which names the key) and sets
//! `memlock_exporter_config_last_reload_successful` to 0. What can change at run time:
//! collectors, their intervals, filters and roots, trend settings, fast-path alerting, the
//! telemetry path, `web.max_requests`, TLS certificates, client CAs, basic auth users and the
//! log level. A new sampler is started and the site swapped once it has its first complete
//! sample, so scrapes never see a gap; the trend windows then start again. What needs a restart
//! (logged as such): the listen address and the log format.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use prometheus::{Gauge, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use thiserror::Error;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::alerting::{self, AlertMetrics};
use crate::cli::ServeArgs;
use crate::config::{self, Config, ConfigError, Sources};
use crate::reload::{self, FileWatch};
use crate::sampler::Sampler;
use crate::sdnotify::{self, Notifier};
use crate::server::{self, AppState, Site};
use crate::snapshot::Snapshot;
use crate::web::{self, WebConfig, WebConfigError};

/// How long in-flight scrapes may take to finish after SIGTERM.
const DRAIN: Duration = Duration::from_secs(5);
/// How long to wait for collector threads to stop. A collector blocked in a read (a hung NFS
/// mount, a FIFO) never returns; its thread is left behind rather than holding up a reload or
/// the exit.
const SAMPLER_STOP: Duration = Duration::from_secs(2);
/// The longest a reload waits for the new sampler's first complete sample before swapping.
const FIRST_SAMPLE_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    WebConfig(#[from] WebConfigError),
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
            ServeError::Config(_) | ServeError::WebConfig(_) => crate::exit::USAGE,
            _ => crate::exit::RUNTIME,
        }
    }
}

/// The configuration layers of `serve`: the file, the environment and these flags. A reload
/// reads the same layers again, so flags keep overriding the file.
pub fn sources(args: &ServeArgs) -> Sources {
    Sources { file: args.config_file.clone(), env: None, flags: args.overrides() }
}

pub fn load_config(args: &ServeArgs) -> Result<Config, ConfigError> {
    config::load(&sources(args))
}

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
        };
        registry.register(Box::new(alerts.sent.clone()))?;
        registry.register(Box::new(alerts.failures.clone()))?;
        registry.register(Box::new(alerts.active.clone()))?;
        let reload_successful = IntGauge::new(
            "memlock_exporter_config_last_reload_successful",
            "1 if the latest configuration load (start or reload) succeeded, 0 if it failed and the previous \
                configuration is still in use.",
        )?;
        let reload_success_timestamp = Gauge::new(
            "memlock_exporter_config_last_reload_success_timestamp_seconds",
            "Unix time of the latest successful configuration load (start or reload).",
        )?;
        registry.register(Box::new(reload_successful.clone()))?;
        registry.register(Box::new(reload_success_timestamp.clone()))?;
        Ok(Self { registry, collector_errors, alerts, reload_successful, reload_success_timestamp })
    }

    fn loaded(&self, ok: bool) {
        self.reload_successful.set(i64::from(ok));
        if ok {
            self.reload_success_timestamp
                .set(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()));
        }
    }
}

pub fn run(config: Config, args: &ServeArgs) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("memlock-http")
        .enable_all()
        .build()
        .map_err(|source| ServeError::Io { context: "starting the async runtime", source })?;
    let result = runtime.block_on(serve(config, sources(args)));
    // Blocking work still running (a bcrypt check) must not hold up the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// What the current configuration has running.
struct Running {
    config: Config,
    sampler: Sampler,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    /// The collectors the sampler runs, with their intervals.
    collectors: Vec<(&'static str, Duration)>,
    alert_task: Option<JoinHandle<()>>,
}

/// Everything that decides what the sampler does; a reload restarts it only when this changes.
fn sampling_settings(config: &Config) -> String {
    format!(
        "{:?}",
        (
            &config.collectors,
            &config.roots,
            &config.process,
            &config.cgroup,
            &config.rdma_sysfs,
            &config.rdma_netlink,
            &config.trend
        )
    )
}

type Sampling = (Sampler, watch::Receiver<Arc<Snapshot>>, Vec<(&'static str, Duration)>);

fn start_sampler(config: &Config, own: &SelfMetrics) -> Result<Sampling, ServeError> {
    let collectors = crate::collect::build(config);
    let enabled: Vec<(&'static str, Duration)> = collectors.iter().map(|(c, interval)| (c.name(), *interval)).collect();
    let budget = crate::snapshot::Budget { limit: config.series_limit, registry: Some(own.registry.clone()) };
    let (sampler, snapshots) = Sampler::start(collectors, config.trend.clone(), own.collector_errors.clone(), budget)
        .map_err(|source| ServeError::Io { context: "starting the sampler threads", source })?;
    Ok((sampler, snapshots, enabled))
}

fn start_alerting(
    config: &Config,
    snapshots: &watch::Receiver<Arc<Snapshot>>,
    own: &SelfMetrics,
) -> Option<JoinHandle<()>> {
    if config.alerting.alertmanager_urls.is_empty() {
        return None;
    }
    let mut alerting = config.alerting.clone();
    if alerting.instance.is_empty() {
        alerting.instance = hostname(config);
    }
    tracing::info!(alertmanagers = %alerting.alertmanager_urls.join(","), instance = %alerting.instance, "fast-path \
        alerting on");
    Some(tokio::spawn(alerting::run(snapshots.clone(), alerting, own.alerts.clone())))
}

fn site(
    config: &Config,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    collectors: Vec<(&'static str, Duration)>,
    web: Arc<WebConfig>,
) -> Site {
    Site {
        snapshots,
        telemetry_path: config.telemetry_path.clone(),
        collectors,
        web,
        max_requests: config.max_requests,
    }
}

fn names(collectors: &[(&'static str, Duration)]) -> String {
    collectors.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(",")
}

/// Stops collector threads without waiting on one that is stuck for good.
async fn stop_sampler(sampler: Sampler) {
    let (done, stopped) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new().name("sampler-stop".into()).spawn(move || {
        sampler.shutdown();
        let _ = done.send(());
    });
    if spawned.is_err() {
        tracing::warn!("cannot start a thread to stop the old sampler; its threads keep running");
        return;
    }
    if tokio::time::timeout(SAMPLER_STOP, stopped).await.is_err() {
        tracing::warn!(timeout = ?SAMPLER_STOP, "a collector did not stop in time (blocked in a read?); leaving its \
            thread behind");
    }
}

async fn serve(config: Config, sources: Sources) -> Result<(), ServeError> {
    let own = SelfMetrics::new()?;
    // Handle SIGHUP, SIGTERM and SIGINT before anything can send them: their default action
    // ends the process at once, and a supervisor may stop us while we are still starting.
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|source| ServeError::Io { context: "installing the SIGHUP handler", source })?;
    let stop_signals = StopSignals::install()?;
    tracing::debug!("signal handlers installed");
    // The files as they were when loaded: a change made before the watch below is in place
    // would otherwise go unnoticed until the next one.
    let loaded_files: Vec<std::path::PathBuf> =
        config.file.iter().chain(config.web_config_file.iter()).cloned().collect();
    let loaded_fingerprint = reload::fingerprint(&loaded_files);
    let web = Arc::new(web::load(config.web_config_file.as_deref())?);
    let listener = server::bind(&config.listen_address)
        .await
        .map_err(|source| ServeError::Bind { address: config.listen_address.clone(), source })?;
    let (sampler, snapshots, enabled) = start_sampler(&config, &own)?;
    let address = server::local_address(&listener).map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(
        address = %address,
        telemetry_path = %config.telemetry_path,
        collectors = %names(&enabled),
        procfs = %config.roots.procfs.display(),
        sysfs = %config.roots.sysfs.display(),
        web = %web.summary(),
        version = env!("CARGO_PKG_VERSION"),
        "listening"
    );
    let alert_task = start_alerting(&config, &snapshots, &own);
    own.loaded(true);
    let state =
        Arc::new(AppState::new(site(&config, snapshots.clone(), enabled.clone(), web.clone()), own.registry.clone()));

    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let server_task = tokio::spawn(server::serve(
        listener,
        state.clone(),
        async move {
            let _ = server_stopped.await;
        },
        DRAIN,
    ));

    let notifier = Notifier::from_env().map(Arc::new);
    let supervisor = notifier.clone().map(|n| tokio::spawn(supervise(state.clone(), n, sdnotify::watchdog_timeout())));

    let (file_events_tx, mut file_events) = mpsc::unbounded_channel();
    let mut daemon = Daemon {
        sources,
        own,
        state,
        running: Running { config, sampler, snapshots, collectors: enabled, alert_task },
        watch_files: Vec::new(),
        watch: None,
        file_events_tx,
        fingerprint: Vec::new(),
    };
    daemon.rewatch(&web);
    daemon.fingerprint = reload::fingerprint(&daemon.watch_files);
    if reload::fingerprint(&loaded_files) != loaded_fingerprint {
        tracing::info!("configuration files changed while starting, reloading");
        daemon.reload(notifier.as_deref()).await;
    }

    let shutdown = stop_signals.received();
    tokio::pin!(shutdown);
    loop {
        let reload = tokio::select! {
            () = &mut shutdown => break,
            Some(()) = hangups.recv() => {
                tracing::info!("SIGHUP received, reloading the configuration");
                true
            }
            Some(()) = file_events.recv() => {
                tokio::time::sleep(reload::SETTLE).await;
                while file_events.try_recv().is_ok() {}
                let changed = reload::fingerprint(&daemon.watch_files) != daemon.fingerprint;
                if changed {
                    tracing::info!("configuration files changed, reloading");
                }
                changed
            }
        };
        // A stop signal is handled while a reload runs (issue 15 item 7: SIGTERM waited for an
        // 80 s parse). The files are parsed off this loop (off_the_event_loop); a stop abandons
        // the reload, whose outcome the stopping daemon would not use.
        if reload {
            tokio::select! {
                () = daemon.reload(notifier.as_deref()) => {}
                () = &mut shutdown => break,
            }
        }
    }

    if let Some(notifier) = &notifier {
        notifier.notify("STOPPING=1");
    }
    let _ = stop_server.send(());
    let _ = server_task.await;
    if let Some(task) = supervisor {
        task.abort();
    }
    let Running { sampler, alert_task, .. } = daemon.running;
    stop_sampler(sampler).await;
    if let Some(task) = alert_task {
        task.abort();
    }
    tracing::info!("stopped");
    Ok(())
}

struct Daemon {
    sources: Sources,
    own: SelfMetrics,
    state: Arc<AppState>,
    running: Running,
    /// The files whose changes trigger a reload, and the digest of their last loaded contents.
    watch_files: Vec<std::path::PathBuf>,
    watch: Option<FileWatch>,
    file_events_tx: mpsc::UnboundedSender<()>,
    fingerprint: Vec<Option<[u8; 32]>>,
}

impl Daemon {
    /// Watches the configuration file and every file of the web configuration.
    fn rewatch(&mut self, web: &WebConfig) {
        let mut files: Vec<std::path::PathBuf> = self.running.config.file.iter().cloned().collect();
        files.extend(web.sources.iter().cloned());
        if self.watch.is_some() && files == self.watch_files {
            return;
        }
        self.watch = Some(FileWatch::new(files.clone(), self.file_events_tx.clone()));
        self.watch_files = files;
    }

    async fn reload(&mut self, notifier: Option<&Notifier>) {
        if let Some(n) = notifier {
            n.notify(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
        }
        // The digest is taken before reading, so a change made while loading triggers again.
        let fingerprint = reload::fingerprint(&self.watch_files);
        let result = self.try_reload().await;
        self.fingerprint = fingerprint;
        match result {
            Ok(changes) => {
                self.own.loaded(true);
                tracing::info!(changes = %changes, "configuration reloaded");
            }
            Err(err) => {
                self.own.loaded(false);
                tracing::error!(error = %err, "configuration reload failed; keeping the previous configuration");
            }
        }
        if let Some(n) = notifier {
            n.notify("READY=1");
        }
    }

    /// Loads and validates everything, then swaps; returns what changed.
    async fn try_reload(&mut self) -> Result<String, ServeError> {
        let sources = self.sources.clone();
        let (config, web) = off_the_event_loop(move || -> Result<_, ServeError> {
            let config = config::load(&sources)?;
            let web = web::load(config.web_config_file.as_deref())?;
            Ok((config, Arc::new(web)))
        })
        .await
        .map_err(|source| ServeError::Io { context: "loading the configuration", source })??;
        let old = &self.running.config;
        for (key, changed) in [
            ("web.listen_address", config.listen_address != old.listen_address),
            ("log.format", config.log_format != old.log_format),
        ] {
            if changed {
                tracing::warn!(key, "this setting changed but takes effect only after a restart");
            }
        }
        let mut changes = Vec::new();
        if config.log_level != old.log_level {
            if crate::logging::set_level(config.log_level) {
                changes.push(format!("log.level={:?}", config.log_level));
            } else {
                tracing::warn!(key = "log.level", "this setting changed but takes effect only after a restart");
            }
        }
        let resample = sampling_settings(&config) != sampling_settings(old);
        if resample {
            let (sampler, mut snapshots, enabled) = start_sampler(&config, &self.own)?;
            let deadline = tokio::time::Instant::now() + FIRST_SAMPLE_WAIT;
            loop {
                let complete = sdnotify::all_reported(&snapshots.borrow_and_update(), &enabled);
                if complete {
                    break;
                }
                if tokio::time::timeout_at(deadline, snapshots.changed()).await.is_err() {
                    tracing::warn!(collectors = %names(&enabled), "not every collector has a first sample yet; \
                        swapping anyway");
                    break;
                }
            }
            let old_sampler = std::mem::replace(&mut self.running.sampler, sampler);
            self.running.snapshots = snapshots;
            changes.push(format!("collectors={}", names(&enabled)));
            self.running.collectors = enabled;
            self.state.replace_site(site(
                &config,
                self.running.snapshots.clone(),
                self.running.collectors.clone(),
                web.clone(),
            ));
            stop_sampler(old_sampler).await;
        } else {
            self.state.replace_site(site(
                &config,
                self.running.snapshots.clone(),
                self.running.collectors.clone(),
                web.clone(),
            ));
        }
        if resample || config.alerting != old.alerting {
            if let Some(task) = self.running.alert_task.take() {
                task.abort();
            }
            self.running.alert_task = start_alerting(&config, &self.running.snapshots, &self.own);
            changes.push(format!("alerting={}", if self.running.alert_task.is_some() { "on" } else { "off" }));
        }
        changes.push(format!("web: {}", web.summary()));
        self.running.config = config;
        self.rewatch(&web);
        Ok(changes.join(" "))
    }
}

/// Runs `work` (reading and parsing configuration files) on a thread of its own, so that the
/// event loop keeps handling signals and requests meanwhile. The thread is not joined: if the
/// daemon stops first, it ends with the process.
async fn off_the_event_loop<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> std::io::Result<T> {
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name("config-load".into()).spawn(move || {
        let _ = done.send(work());
    })?;
    result.await.map_err(|_| std::io::Error::other("the loading thread ended without a result (it panicked)"))
}

/// Tells systemd when the first sample is in, then pings the watchdog while every collector
/// keeps finishing its runs; stops pinging (so systemd restarts the service) when one is stuck.
async fn supervise(state: Arc<AppState>, notifier: Arc<Notifier>, watchdog: Option<Duration>) {
    let started = Instant::now();
    loop {
        let site = state.site();
        if sdnotify::all_reported(&site.snapshots.borrow(), &site.collectors) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    notifier.notify(&format!("READY=1\nSTATUS=Serving; first sample after {:.1}s", started.elapsed().as_secs_f64()));
    tracing::debug!("notified systemd: ready");
    let Some(timeout) = watchdog else { return };
    let grace = sdnotify::stall_grace(timeout);
    let mut tick = tokio::time::interval(timeout / 2);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported: Vec<String> = Vec::new();
    loop {
        tick.tick().await;
        let site = state.site();
        let snapshot = site.snapshots.borrow().clone();
        let stalled: Vec<String> = sdnotify::stalled(&snapshot, &site.collectors, started, Instant::now(), grace)
            .into_iter()
            .map(str::to_owned)
            .collect();
        if stalled.is_empty() {
            notifier.notify("WATCHDOG=1");
        } else if stalled != reported {
            tracing::error!(collectors = %stalled.join(","), ?grace, "collectors are stuck; no longer pinging the \
                systemd watchdog");
            notifier.notify(&format!("STATUS=Stuck collectors: {}", stalled.join(",")));
        }
        if stalled != reported {
            if stalled.is_empty() && !reported.is_empty() {
                tracing::info!("collectors are running again; watchdog pings resume");
                notifier.notify("STATUS=Serving");
            }
            reported = stalled;
        }
    }
}

fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000).saturating_add(ts.tv_nsec as u64 / 1000)
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

/// SIGTERM and SIGINT, watched from the start (a signal that arrives before the main loop
/// waits is kept, not lost).
struct StopSignals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> Result<Self, ServeError> {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate())
            .map_err(|source| ServeError::Io { context: "installing the SIGTERM handler", source })?;
        let interrupt = signal(SignalKind::interrupt())
            .map_err(|source| ServeError::Io { context: "installing the SIGINT handler", source })?;
        Ok(Self { term, interrupt })
    }

    async fn received(mut self) {
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM received, shutting down"),
            _ = self.interrupt.recv() => tracing::info!("SIGINT received, shutting down"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a runtime of one thread, as the event loop would be if the load ran on it: a load
    /// that never ends does not keep a timer (a signal, a request) from being handled.
    #[tokio::test(flavor = "current_thread")]
    async fn a_slow_load_does_not_hold_the_event_loop() {
        let (release, held) = std::sync::mpsc::channel::<()>();
        let started = std::time::Instant::now();
        tokio::select! {
            _ = off_the_event_loop(move || held.recv_timeout(Duration::from_secs(60))) => {
                panic!("the load cannot finish first")
            }
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        drop(release);
        let panicked = off_the_event_loop(|| -> u32 { panic!("a parser bug") }).await.unwrap_err();
        assert!(panicked.to_string().contains("panicked"), "{panicked}");
    }

    fn load(flags: Vec<(String, ::config::Value)>) -> Config {
        config::load(&Sources { file: None, env: Some(Default::default()), flags }).unwrap()
    }

    #[test]
    fn only_sampling_settings_restart_the_sampler() {
        let base = load(vec![]);
        let other_web =
            load(vec![("web.max_requests".into(), 3u64.into()), ("web.telemetry_path".into(), "/m".into())]);
        assert_eq!(sampling_settings(&base), sampling_settings(&other_web));
        let no_numa = load(vec![("collector.numa.enabled".into(), false.into())]);
        assert_ne!(sampling_settings(&base), sampling_settings(&no_numa));
        let other_root = load(vec![("path.procfs".into(), "/host/proc".into())]);
        assert_ne!(sampling_settings(&base), sampling_settings(&other_root));
    }

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
