//! systemd's notify protocol (`Type=notify`, `WatchdogSec=`), without libsystemd: datagrams of
//! `KEY=value` lines to the unix socket named by `NOTIFY_SOCKET`.
//!
//! The daemon says `READY=1` once every enabled collector has produced its first sample, and
//! pings `WATCHDOG=1` only while every collector keeps finishing runs on time, so systemd
//! restarts an exporter whose sampler is stuck (a collector blocked in a read, a deadlock)
//! rather than one that merely serves stale numbers forever.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

/// A connection to the service manager's notification socket.
pub struct Notifier {
    socket: UnixDatagram,
    address: SocketAddr,
}

impl Notifier {
    /// From `NOTIFY_SOCKET`; `None` when not run by a service manager that listens.
    pub fn from_env() -> Option<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")?;
        match Self::connect(path.as_encoded_bytes()) {
            Ok(notifier) => Some(notifier),
            Err(err) => {
                tracing::warn!(error = %err, socket = %path.to_string_lossy(), "NOTIFY_SOCKET is set but unusable; not \
                    notifying systemd");
                None
            }
        }
    }

    /// A path, or `@name` for a socket in the abstract namespace.
    pub fn connect(name: &[u8]) -> io::Result<Notifier> {
        let address = match name.strip_prefix(b"@") {
            Some(abstract_name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(abstract_name)?
            }
            None => SocketAddr::from_pathname(std::path::Path::new(std::ffi::OsStr::from_bytes(name)))?,
        };
        let socket = UnixDatagram::unbound()?;
        socket.set_nonblocking(true)?;
        Ok(Notifier { socket, address })
    }

    pub fn send(&self, message: &str) -> io::Result<()> {
        self.socket.send_to_addr(message.as_bytes(), &self.address).map(|_| ())
    }

    /// Sends, logging a failure instead of returning it: notification is best effort.
    pub fn notify(&self, message: &str) {
        if let Err(err) = self.send(message) {
            tracing::warn!(error = %err, message, "notifying systemd failed");
        }
    }
}

/// The watchdog timeout systemd asked for (`WATCHDOG_USEC`), if it is meant for this process
/// (`WATCHDOG_PID`, when set, names it).
pub fn watchdog_timeout() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.trim().parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// How late a collector may finish before the sampler counts as stuck: its interval plus this
/// much. At least the watchdog timeout, and never under 2 s, so a slow full scan or a busy
/// machine does not get the daemon killed.
pub fn stall_grace(watchdog: Duration) -> Duration {
    watchdog.max(Duration::from_secs(2))
}

/// The collectors (of `expected`: name and interval) whose latest run finished longer ago than
/// their interval plus `grace`, or that never ran although the sampler started `started` ago.
pub fn stalled<'a>(
    last_finished: impl Fn(&str) -> Option<Instant>,
    expected: &'a [(&'static str, Duration)],
    started: Instant,
    now: Instant,
    grace: Duration,
) -> Vec<&'a str> {
    expected
        .iter()
        .filter(|(name, interval)| {
            let last = last_finished(name).unwrap_or(started);
            now.saturating_duration_since(last) > *interval + grace
        })
        .map(|(name, _)| *name)
        .collect()
}

/// Whether every expected collector has reported at least once.
pub fn all_reported(last_finished: impl Fn(&str) -> Option<Instant>, expected: &[(&'static str, Duration)]) -> bool {
    expected.iter().all(|(name, _)| last_finished(name).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlock_core::snapshot::{Report, Snapshot};
    use std::sync::Arc;

    fn report(name: &'static str, finished: Instant) -> Report {
        Report {
            collector: name,
            success: true,
            duration: Duration::ZERO,
            interval: Duration::from_secs(1),
            finished,
            data: None,
            trends: Arc::default(),
        }
    }

    /// When each collector of `snapshot` last finished, as the daemon reads it.
    fn finished(snapshot: &Snapshot) -> impl Fn(&str) -> Option<Instant> + '_ {
        |name| snapshot.report(name).map(|r| r.finished)
    }

    #[test]
    fn a_collector_that_stops_finishing_runs_is_stalled() {
        let start = Instant::now();
        let expected = [("node", Duration::from_secs(1)), ("rdma_sysfs", Duration::from_secs(5))];
        let grace = Duration::from_secs(2);
        let snapshot = Snapshot::new(vec![report("node", start), report("rdma_sysfs", start)]);
        assert!(stalled(finished(&snapshot), &expected, start, start + Duration::from_secs(3), grace).is_empty());
        // 3.5 s after node's last run: over 1 s + 2 s; rdma_sysfs (5 s interval) is still on time.
        assert_eq!(
            stalled(finished(&snapshot), &expected, start, start + Duration::from_millis(3500), grace),
            vec!["node"]
        );
        assert_eq!(
            stalled(finished(&snapshot), &expected, start, start + Duration::from_secs(8), grace),
            vec!["node", "rdma_sysfs"]
        );
    }

    #[test]
    fn a_collector_that_never_ran_is_stalled_only_after_its_grace() {
        let start = Instant::now();
        let expected = [("node", Duration::from_secs(1))];
        let empty = Snapshot::empty();
        assert!(!all_reported(finished(&empty), &expected));
        assert!(stalled(finished(&empty), &expected, start, start + Duration::from_secs(2), Duration::from_secs(2))
            .is_empty());
        assert_eq!(
            stalled(finished(&empty), &expected, start, start + Duration::from_secs(4), Duration::from_secs(2)),
            vec!["node"]
        );
        assert!(all_reported(finished(&Snapshot::new(vec![report("node", start)])), &expected));
    }

    #[test]
    fn grace_has_a_floor() {
        assert_eq!(stall_grace(Duration::from_millis(500)), Duration::from_secs(2));
        assert_eq!(stall_grace(Duration::from_secs(30)), Duration::from_secs(30));
    }

    #[test]
    fn datagrams_reach_path_and_abstract_sockets() {
        let tmp = tempfile::Builder::new().prefix("memlock-sdnotify-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).unwrap();
        Notifier::connect(path.as_os_str().as_bytes()).unwrap().send("READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("memlock-sdnotify-test-{}", std::process::id());
        let abstract_listener =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        Notifier::connect(format!("@{name}").as_bytes()).unwrap().send("WATCHDOG=1").unwrap();
        let n = abstract_listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"WATCHDOG=1");
    }
}
