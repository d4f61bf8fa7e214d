//! The running configuration and its reload: validate everything first, then swap what
//! changed (sampler, alerting, the site served), and keep the old configuration on any error.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::own_metrics::SelfMetrics;
use super::ServeError;
use crate::reload::{self, FileWatch};
use crate::sdnotify::{self, Notifier};
use memlock_core::alerting;
use memlock_core::config::{self, Config, Sources};
use memlock_core::sampler::Sampler;
use memlock_core::snapshot::Snapshot;
use memlock_http::server::{AppState, Site};
use memlock_http::webconfig::{self, WebConfig};

/// How long to wait for collector threads to stop. A collector blocked in a read (a hung NFS
/// mount, a FIFO) never returns; its thread is left behind rather than holding up a reload or
/// the exit.
const SAMPLER_STOP: Duration = Duration::from_secs(2);
/// How long the exit waits for the failures collector to remove its probes.
const FAILURES_REMOVAL: Duration = Duration::from_secs(10);
/// The longest a reload waits for the new sampler's first complete sample before swapping.
const FIRST_SAMPLE_WAIT: Duration = Duration::from_secs(10);

/// What the current configuration has running. What it serves (the pages, the enabled
/// collectors, the web configuration) is the [`Site`] of the shared [`AppState`], its one home.
pub struct Running {
    pub config: Config,
    pub sampler: Sampler,
    /// What the sampler publishes: the site's pages and the fast path read it.
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    pub alert_task: Option<JoinHandle<()>>,
}

/// Everything that decides what the sampler does; a reload restarts it only when this changes
/// (the collectors' own settings are part of each [`config::CollectorConfig`]).
fn sampling_settings(config: &Config) -> impl PartialEq + std::fmt::Debug + '_ {
    (&config.collectors, &config.roots, &config.trend)
}

pub type Sampling = (Sampler, watch::Receiver<Arc<Snapshot>>, Vec<(&'static str, Duration)>);

pub fn start_sampler(config: &Config, own: &SelfMetrics) -> Result<Sampling, ServeError> {
    let collectors = memlock_core::collect::build(&config.collectors, &config.roots, &config.trend);
    let enabled: Vec<(&'static str, Duration)> = collectors.iter().map(|(c, interval)| (c.name(), *interval)).collect();
    let series_limit =
        memlock_core::snapshot::SeriesLimit { limit: config.series_limit, registry: Some(own.registry.clone()) };
    let (sampler, snapshots) =
        Sampler::start(collectors, config.trend.clone(), own.collector_errors.clone(), series_limit)
            .map_err(|source| ServeError::Io { context: "starting the sampler threads", source })?;
    Ok((sampler, snapshots, enabled))
}

pub fn start_alerting(
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

pub fn site(
    config: &Config,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    collectors: Vec<(&'static str, Duration)>,
    web: Arc<WebConfig>,
    own: &SelfMetrics,
) -> Site {
    let last_success = Some(&own.alerts.last_success);
    Site {
        pages: super::page::pages(
            snapshots,
            super::page::Landing {
                alertmanagers: config.alerting.alertmanager_urls.clone(),
                last_success: last_success.cloned(),
                failures_enabled: collectors.iter().any(|(name, _)| *name == "failures"),
            },
        ),
        telemetry_path: config.telemetry_path.clone(),
        collectors,
        web,
        max_requests: config.max_requests,
        max_response_bytes: config.max_response_bytes,
        rendered: Default::default(),
    }
}

pub fn names(collectors: &[(&'static str, Duration)]) -> String {
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

pub struct Daemon {
    sources: Sources,
    own: SelfMetrics,
    state: Arc<AppState>,
    running: Running,
    /// The files whose changes trigger a reload, and the digest of their last loaded contents.
    watch_files: Vec<PathBuf>,
    watch: Option<FileWatch>,
    file_events_tx: mpsc::UnboundedSender<()>,
    fingerprint: Vec<Option<[u8; 32]>>,
}

impl Daemon {
    /// Takes over what `serve` started, and watches the files it was loaded from; `file_events`
    /// receives a `()` when one of them may have changed.
    pub fn new(
        sources: Sources,
        own: SelfMetrics,
        state: Arc<AppState>,
        running: Running,
        file_events: mpsc::UnboundedSender<()>,
    ) -> Daemon {
        let web = state.site().web.clone();
        let mut daemon = Daemon {
            sources,
            own,
            state,
            running,
            watch_files: Vec::new(),
            watch: None,
            file_events_tx: file_events,
            fingerprint: Vec::new(),
        };
        daemon.rewatch(&web);
        daemon.fingerprint = reload::fingerprint(&daemon.watch_files);
        daemon
    }

    /// Whether a watched file's contents differ from what was last loaded.
    pub fn files_changed(&self) -> bool {
        reload::fingerprint(&self.watch_files) != self.fingerprint
    }

    /// Watches the configuration file and every file of the web configuration.
    fn rewatch(&mut self, web: &WebConfig) {
        let mut files: Vec<PathBuf> = self.running.config.file.iter().cloned().collect();
        files.extend(web.sources.iter().cloned());
        if self.watch.is_some() && files == self.watch_files {
            return;
        }
        self.watch = Some(FileWatch::new(files.clone(), self.file_events_tx.clone()));
        self.watch_files = files;
    }

    pub async fn reload(&mut self, notifier: Option<&Notifier>) {
        if let Some(n) = notifier {
            n.notify(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
        }
        // Two reads STABLE apart must agree (reload::STABLE: a half-written file is not loaded),
        // and the load must read what they did. No wait when the change arrived by rename, or
        // when no file has new contents to read (unchanged on SIGHUP; gone, a directory, a FIFO:
        // the load fails at once naming the file, as there is nothing half-written to wait for).
        let first = reload::fingerprint(&self.watch_files);
        let whole = self.watch.as_ref().is_some_and(FileWatch::arrived_whole);
        let new_contents =
            first.iter().enumerate().any(|(i, now)| now.is_some() && self.fingerprint.get(i) != Some(now));
        if new_contents && !whole {
            tokio::time::sleep(reload::STABLE).await;
        }
        let fingerprint = reload::fingerprint(&self.watch_files);
        let result =
            if fingerprint == first { self.try_reload(&fingerprint).await } else { Err(ServeError::Unsettled) };
        match result {
            // try_reload recorded the success when the new configuration went live.
            Ok(changes) => tracing::info!(changes = %changes, "configuration reloaded"),
            Err(ServeError::Unsettled) => {
                // The running configuration stays, and nothing failed: the next read decides.
                tracing::info!(files = ?self.watch_files, stable = ?reload::STABLE, "configuration files still \
                    changing; loading them once they stay the same");
                let _ = self.file_events_tx.send(());
                if let Some(n) = notifier {
                    n.notify("READY=1");
                }
                return;
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

    /// Loads and validates everything, then swaps; returns what changed. The success is
    /// recorded just before the swap, so a scrape that sees the new configuration sees its
    /// reload time too (stopping the old sampler, after the swap, can take seconds), and
    /// nothing after the swap can fail.
    async fn try_reload(&mut self, settled: &[Option<[u8; 32]>]) -> Result<String, ServeError> {
        let sources = self.sources.clone();
        let loaded = off_the_event_loop(move || -> Result<_, ServeError> {
            let config = config::load(&sources)?;
            let web = webconfig::load(config.web_config_file.as_deref())?;
            Ok((config, Arc::new(web)))
        })
        .await
        .map_err(|source| ServeError::Io { context: "loading the configuration", source })?;
        // Whatever the load made of them (an error too), files that changed meanwhile may have
        // been read half-written: the next change reloads them.
        if reload::fingerprint(&self.watch_files) != settled {
            return Err(ServeError::Unsettled);
        }
        self.fingerprint = settled.to_vec();
        let (config, web) = loaded?;
        webconfig::refuse_lowering(&self.state.site().web, &web)?;
        config::refuse_failing_open(&self.running.config, &config)?;
        let old = &self.running.config;
        for (key, before, after) in reload::threshold_jumps(old, &config) {
            tracing::warn!(
                key,
                before,
                after,
                "a paging threshold changed {}-fold or more; check the file says what \
                was meant (a half-written or mistyped number looks like this)",
                reload::JUMP_FACTOR
            );
        }
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
                let latest = snapshots.borrow_and_update().clone();
                let complete = sdnotify::all_reported(|name| latest.report(name).map(|r| r.finished), &enabled);
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
            changes.push(format!("collectors={}", names(&enabled)));
            self.own.loaded(true);
            self.state.replace_site(site(&config, snapshots.clone(), enabled, web.clone(), &self.own));
            self.running.snapshots = snapshots;
            stop_sampler(old_sampler).await;
        } else {
            let current = self.state.site();
            self.own.loaded(true);
            let snapshots = self.running.snapshots.clone();
            self.state.replace_site(site(&config, snapshots, current.collectors.clone(), web.clone(), &self.own));
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

    /// Stops the sampler (without waiting on a stuck collector) and the fast path.
    pub async fn stop(self) {
        let Running { sampler, alert_task, .. } = self.running;
        stop_sampler(sampler).await;
        // The failures collector removes its probes from the kernel on its way out, which can
        // take longer than a collector is waited for: they would be left behind (until the next
        // start removes them).
        let removed =
            tokio::task::spawn_blocking(|| memlock_core::collect::failures::wait_removed(FAILURES_REMOVAL)).await;
        if !matches!(removed, Ok(true)) {
            tracing::warn!(timeout = ?FAILURES_REMOVAL, "the failures collector's probes were not removed in time; \
                the next start removes them");
        }
        if let Some(task) = alert_task {
            task.abort();
        }
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

fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000).saturating_add(ts.tv_nsec as u64 / 1000)
}

/// The node's name for the `instance` label of fast-path alerts: the host's, read through the
/// procfs root (so a container reports the node, not the pod).
fn hostname(config: &Config) -> String {
    memlock_kernel::fsroot::read_string(&config.roots.proc("sys/kernel/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
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
        // One collector's own settings, compared by value: a pattern by its text, a duration by
        // its length whatever its unit.
        for changed in [
            ("collector.process.top_n", ::config::Value::from(5u64)),
            ("collector.process.comm_pattern", "^torchrun$".into()),
            ("collector.cgroup.exclude", vec!["^/system.slice"].into()),
            ("collector.rdma_netlink.include", vec!["^mlx5_"].into()),
            ("trend.node_memory_available_floor_ratio", 0.1.into()),
        ] {
            let other = load(vec![(changed.0.into(), changed.1)]);
            assert_ne!(sampling_settings(&base), sampling_settings(&other), "{}", changed.0);
        }
        for same in [
            ("collector.process.full_scan_interval", ::config::Value::from("60000ms")),
            ("collector.process.comm_pattern", "^(python[0-9.]*|pt_main_thread|torchrun|deepspeed)$".into()),
            ("collector.cgroup.max_depth", 12u64.into()),
            ("collector.node.interval", "1000ms".into()),
        ] {
            let other = load(vec![(same.0.into(), same.1)]);
            assert_eq!(sampling_settings(&base), sampling_settings(&other), "{}", same.0);
        }
    }
}
