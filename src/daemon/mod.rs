//! The daemon: configuration, sampler, HTTP server, signals, reloads and systemd notification.
//!
//! - `own_metrics.rs`: the exporter's own series (build info, errors, reload status);
//! - `daemon.rs`: what the current configuration runs, and its reload;
//! - `watchdog.rs`: systemd readiness and watchdog pings.
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
//! (logged as such): the listen address and the log format. A reload that would lower security
//! (TLS, basic auth or client certificates turned off or relaxed) is refused like a broken
//! file; lowering it takes a restart.

pub mod args;
mod lifecycle;
mod own_metrics;
mod page;
mod watchdog;

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::mpsc;

use crate::reload;
use crate::sdnotify::{self, Notifier};
use args::ServeArgs;
use lifecycle::{Daemon, Running};
use memlock_core::config::{self, split_listen_address, Config, ConfigError, Sources};
use memlock_http::server::{self, AppState};
use memlock_http::webconfig::{self, WebConfigError};
pub use own_metrics::SelfMetrics;

/// How long in-flight scrapes may take to finish after SIGTERM.
const DRAIN: Duration = Duration::from_secs(5);

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
    /// The configuration files changed between two reads: nothing was loaded.
    #[error("the configuration files changed while they were read")]
    Unsettled,
}

impl ServeError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ServeError::Config(_) | ServeError::WebConfig(_) => memlock_core::exit::USAGE,
            _ => memlock_core::exit::RUNTIME,
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

async fn serve(config: Config, sources: Sources) -> Result<(), ServeError> {
    let own = SelfMetrics::new()?;
    // Handle SIGHUP, SIGTERM and SIGINT before anything can send them: their default action
    // ends the process at once, and a supervisor may stop us while we are still starting.
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|source| ServeError::Io { context: "installing the SIGHUP handler", source })?;
    let stop_signals = StopSignals::install()?;
    // Held since before main (see `hold_stop_signals`): one that came meanwhile is delivered
    // now, to the handlers.
    release_stop_signals();
    tracing::debug!("signal handlers installed");
    // The files as they were when loaded: a change made before the watch below is in place
    // would otherwise go unnoticed until the next one.
    let loaded_files: Vec<std::path::PathBuf> =
        config.file.iter().chain(config.web_config_file.iter()).cloned().collect();
    let loaded_fingerprint = reload::fingerprint(&loaded_files);
    let web = Arc::new(webconfig::load(config.web_config_file.as_deref())?);
    let bind_error = |source| ServeError::Bind { address: config.listen_address.clone(), source };
    let (host, port) = split_listen_address(&config.listen_address)
        .map_err(|message| bind_error(std::io::Error::new(std::io::ErrorKind::InvalidInput, message)))?;
    let listener = server::bind(host.as_deref(), port).await.map_err(bind_error)?;
    let (sampler, snapshots, enabled) = lifecycle::start_sampler(&config, &own)?;
    let address = server::local_address(&listener).map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(
        address = %address,
        telemetry_path = %config.telemetry_path,
        collectors = %lifecycle::names(&enabled),
        procfs = %config.roots.procfs.display(),
        sysfs = %config.roots.sysfs.display(),
        web = %web.summary(),
        version = env!("CARGO_PKG_VERSION"),
        "listening"
    );
    let alert_task = lifecycle::start_alerting(&config, &snapshots, &own);
    own.loaded(true);
    let state =
        Arc::new(AppState::new(lifecycle::site(&config, snapshots.clone(), enabled, web, &own), own.registry.clone()));

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
    let supervisor =
        notifier.clone().map(|n| tokio::spawn(watchdog::supervise(state.clone(), n, sdnotify::watchdog_timeout())));

    let (file_events_tx, mut file_events) = mpsc::unbounded_channel();
    let mut daemon =
        Daemon::new(sources, own, state, Running { config, sampler, snapshots, alert_task }, file_events_tx);
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
                let changed = daemon.files_changed();
                if changed {
                    tracing::info!("configuration files changed, reloading");
                }
                changed
            }
        };
        // A stop signal is handled while a reload runs: a hostile file can take long to parse, and
        // a stop must not wait for it. The files are parsed off this loop (off_the_event_loop); a
        // stop abandons the reload, whose outcome the stopping daemon would not use.
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
    daemon.stop().await;
    tracing::info!("stopped");
    Ok(())
}

/// The signals the daemon handles, whose default action would end it.
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

fn stop_signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set we own; sigaddset only adds valid signal numbers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in STOP_SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread, so that one arriving before the
/// daemon's handlers exist stays pending instead of ending the process: a service manager may
/// signal a daemon within its first milliseconds. The binary calls it from `.init_array`, before
/// Rust's runtime and `main`; threads started meanwhile inherit the mask, and a pending signal goes
/// to a thread that does not block it (signal(7)), here the main thread once
/// [`release_stop_signals`] ran. Only the libc calls: no allocation, no Rust runtime needed.
pub extern "C" fn hold_stop_signals() {
    let set = stop_signal_set();
    // SAFETY: pthread_sigmask reads the set we own; a null old set is allowed.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Undoes [`hold_stop_signals`] in the calling thread: `serve` once its handlers are in place,
/// the other commands at once (they keep the default actions, and `check --exec` hands its
/// signal mask on to the job).
pub fn release_stop_signals() {
    let set = stop_signal_set();
    // SAFETY: as in hold_stop_signals.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
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
