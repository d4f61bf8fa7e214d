//! systemd supervision of the running daemon: `READY=1` once every collector has its first
//! sample, then `WATCHDOG=1` pings only while every collector keeps finishing its runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sdnotify::{self, Notifier};
use memlock_http::server::AppState;

/// Tells systemd when the first sample is in, then pings the watchdog while every collector
/// keeps finishing its runs; stops pinging (so systemd restarts the service) when one is stuck.
pub async fn supervise(state: Arc<AppState>, notifier: Arc<Notifier>, watchdog: Option<Duration>) {
    let started = Instant::now();
    loop {
        let site = state.site();
        let page = (site.pages)();
        if sdnotify::all_reported(|name| page.last_run(name).map(|(_, finished)| finished), &site.collectors) {
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
        let page = (site.pages)();
        let last = |name: &str| page.last_run(name).map(|(_, finished)| finished);
        let stalled: Vec<String> = sdnotify::stalled(last, &site.collectors, started, Instant::now(), grace)
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
