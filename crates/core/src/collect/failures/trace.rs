//! The tracing thread: sets the probes up, reads trace_pipe, attributes refusals, removes the
//! probes when stopped.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::stop::Stop;
use memlock_kernel::fsroot::Roots;
use memlock_kernel::trace_pipe;

use super::calls::CALLS;
use super::cause::attribute;
use super::pairing::{Pairing, Refusal};
use super::probes::{set_up, Mode, Pipes, Unsupported};
use super::series::Book;
use super::FailuresStats;

/// How often the reader drains the entries' trace_pipe (a failed return wakes it at once): one
/// poll and one read per period when idle, the entries of a burst in a few large reads.
pub(crate) const READ_EVERY: Duration = Duration::from_millis(50);

/// What the tracing thread shares with the collector.
#[derive(Debug, Default)]
pub(super) struct Shared {
    /// `None` while setting up.
    state: Option<Result<(), Unsupported>>,
    probed: Vec<(&'static str, bool)>,
    mode: Option<Mode>,
    book: Book,
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sets up, traces until stopped, removes the probes.
fn trace(roots: Roots, shared: Arc<Mutex<Shared>>, stop: Arc<Stop>, waker: Option<Arc<OwnedFd>>) {
    let mut probed = CALLS.iter().map(|c| (c.function, false)).collect();
    let mut mode = None;
    let outcome = set_up(&roots, &mut probed, &mut mode);
    {
        let mut shared = lock(&shared);
        shared.probed = probed.clone();
        shared.mode = outcome.is_ok().then_some(mode).flatten();
        shared.state = Some(outcome.as_ref().map(|_| ()).map_err(|(reason, _)| *reason));
    }
    let (probes, pipes) = match outcome {
        Ok(running) => running,
        Err((reason, message)) => {
            tracing::warn!(reason = reason.as_str(), "failures collector cannot run: {message}");
            return;
        }
    };
    let found: Vec<&str> = probed.iter().filter(|(_, p)| *p).map(|(f, _)| *f).collect();
    let missing: Vec<&str> = probed.iter().filter(|(_, p)| !*p).map(|(f, _)| *f).collect();
    let pairing = mode.map_or("", Mode::as_str);
    tracing::info!(instance = %probes.name, probed = %found.join(","), not_found = %missing.join(","), pairing,
        "failures collector: tracing refused registrations and locks");
    if let Err(e) = read_loop(pipes, &roots, &shared, &stop, waker.as_deref()) {
        tracing::warn!(error = %e, "failures collector: reading trace_pipe failed; it stops tracing");
        lock(&shared).state = Some(Err(Unsupported::SetupFailed));
    }
    // The pipes are closed: the instances can go.
    probes.remove();
    tracing::info!(instance = %probes.name, "failures collector: probes removed");
}

/// Appends what `pipe` has to `line`, feeding each whole line to `pairing`.
fn drain(
    pipe: &mut std::fs::File,
    buf: &mut [u8],
    line: &mut Vec<u8>,
    pairing: &mut Pairing,
    refusals: &mut Vec<Refusal>,
) -> std::io::Result<()> {
    loop {
        match pipe.read(buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                for &b in &buf[..n] {
                    // A line longer than any event is cut, and rejected as a whole.
                    if line.len() <= trace_pipe::MAX_LINE_BYTES {
                        line.push(b);
                    }
                    if b == b'\n' {
                        refusals.extend(pairing.line(line));
                        line.clear();
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn read_loop(
    pipes: Pipes,
    roots: &Roots,
    shared: &Mutex<Shared>,
    stop: &Stop,
    waker: Option<&OwnedFd>,
) -> std::io::Result<()> {
    let (mut entries, mut returns) = pipes;
    let mut pairing = Pairing::new(procfs::page_size());
    let mut buf = vec![0u8; 64 * 1024];
    let (mut entry_line, mut return_line) = (Vec::with_capacity(256), Vec::with_capacity(256));
    // Wakes at a failed return or at the stop (the waker), else every READ_EVERY for the entries
    // of the user space pairing; with the kernel's, nothing else (no wake-up while no call fails).
    let timeout = match (&entries, waker) {
        (None, Some(_)) => -1,
        _ => i32::try_from(READ_EVERY.as_millis()).unwrap_or(50),
    };
    loop {
        let mut polled = [libc::pollfd { fd: returns.as_raw_fd(), events: libc::POLLIN, revents: 0 }; 2];
        if let Some(waker) = waker {
            polled[1].fd = waker.as_raw_fd();
        }
        let count = if waker.is_some() { 2 } else { 1 };
        // SAFETY: `count` valid pollfds for the duration of the call.
        let ready = unsafe { libc::poll(polled.as_mut_ptr(), count, timeout) };
        if ready < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if stop.sleep_until(Instant::now()) {
            return Ok(());
        }
        let mut refusals = Vec::new();
        // Entries first: a return pairs with an entry already read.
        if let Some(entries) = &mut entries {
            drain(entries, &mut buf, &mut entry_line, &mut pairing, &mut refusals)?;
        }
        drain(&mut returns, &mut buf, &mut return_line, &mut pairing, &mut refusals)?;
        let now = Instant::now();
        let attributed: Vec<_> = refusals.iter().map(|r| attribute(roots, r)).collect();
        let mut shared = lock(shared);
        for (key, requested, figures) in attributed {
            tracing::warn!(pid = key.pid, comm = %key.comm, cgroup = %key.cgroup, call = key.call,
                errno = %key.errno, cause = key.cause.as_str(), requested_bytes = requested,
                "a registration or lock was refused");
            shared.book.record(key, requested, figures, now);
        }
        shared.book.lost_events = pairing.lost_events;
        shared.book.unparsed_lines = pairing.unparsed_lines;
        shared.book.forgotten_entries = pairing.forgotten_entries;
        shared.book.pending = pairing.pending() as u64;
    }
}

/// The tracing thread, with what it shares and what stops it: the thread removes its probes when
/// this is dropped.
pub(super) struct Tracer {
    shared: Arc<Mutex<Shared>>,
    thread: Option<Thread>,
}

/// The thread, its stop and its waker.
type Thread = (JoinHandle<()>, Arc<Stop>, Option<Arc<OwnedFd>>);

/// Tracing threads that have not yet removed their probes, and the wake-up for [`wait_removed`].
static UNREMOVED: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// Counts a tracing thread in [`UNREMOVED`] until it ends, however it ends.
struct Unremoved;

impl Unremoved {
    fn new() -> Unremoved {
        *UNREMOVED.0.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        Unremoved
    }
}

impl Drop for Unremoved {
    fn drop(&mut self) {
        let mut count = UNREMOVED.0.lock().unwrap_or_else(PoisonError::into_inner);
        *count = count.saturating_sub(1);
        UNREMOVED.1.notify_all();
    }
}

/// Waits up to `timeout` for every tracing thread to have removed its probes; false when some
/// have not. The daemon's exit waits on it: stopping the sampler gives up on a slow collector
/// after 2 s, and removing the probes (each kprobe's unregistration waits for an RCU grace
/// period) can take longer than that (in a TCG guest), and the process must not exit with its
/// probes left.
pub fn wait_removed(timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut count = UNREMOVED.0.lock().unwrap_or_else(PoisonError::into_inner);
    while *count > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        count = UNREMOVED.1.wait_timeout(count, left).unwrap_or_else(PoisonError::into_inner).0;
    }
    true
}

impl Tracer {
    /// Set-up reads available_filter_functions (tens of thousands of lines) and writes tracefs:
    /// on the tracing thread, so no collection waits for it.
    pub(super) fn start(roots: Roots) -> Tracer {
        let shared = Arc::<Mutex<Shared>>::default();
        let stop = Arc::new(Stop::default());
        let waker = waker();
        let (thread_shared, thread_stop, thread_waker) = (shared.clone(), stop.clone(), waker.clone());
        let unremoved = Unremoved::new();
        let run = move || {
            let _unremoved = unremoved;
            trace(roots, thread_shared, thread_stop, thread_waker)
        };
        let thread = match std::thread::Builder::new().name("failures-trace".into()).spawn(run) {
            Ok(thread) => Some((thread, stop, waker)),
            Err(e) => {
                tracing::warn!(error = %e, "failures collector: cannot start its tracing thread");
                lock(&shared).state = Some(Err(Unsupported::SetupFailed));
                None
            }
        };
        Tracer { shared, thread }
    }

    #[cfg(test)]
    pub(super) fn record(&self, key: super::SeriesKey, requested: u64, figures: super::Figures, at: Instant) {
        lock(&self.shared).book.record(key, requested, figures, at);
    }

    /// What the thread has seen so far.
    pub(super) fn stats(&self) -> FailuresStats {
        let shared = lock(&self.shared);
        let unsupported = match shared.state {
            None => Some(Unsupported::Starting),
            Some(Ok(())) => None,
            Some(Err(reason)) => Some(reason),
        };
        let probed = if shared.probed.is_empty() {
            CALLS.iter().map(|c| (c.function, false)).collect()
        } else {
            shared.probed.clone()
        };
        let mode = if unsupported.is_none() { shared.mode } else { None };
        FailuresStats { unsupported, mode, probed, book: shared.book.clone() }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if let Some((thread, stop, waker)) = self.thread.take() {
            stop.stop();
            if let Some(waker) = waker {
                let one = 1u64.to_ne_bytes();
                // SAFETY: 8 bytes from a live buffer to an open eventfd.
                let _ = unsafe { libc::write(waker.as_raw_fd(), one.as_ptr().cast(), one.len()) };
            }
            let _ = thread.join();
        }
    }
}

/// An eventfd that wakes the tracing thread's poll at the stop; `None` when it cannot be made
/// (the thread then looks at the stop every READ_EVERY).
fn waker() -> Option<Arc<OwnedFd>> {
    // SAFETY: eventfd takes no pointers; a non-negative return is a new descriptor we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    // SAFETY: `fd` is open and owned by nothing else.
    (fd >= 0).then(|| Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found in the VM: the exit gave up on the failures collector after 2 s, mid-removal.
    #[test]
    fn the_exit_can_wait_for_every_tracing_thread_to_have_removed_its_probes() {
        let running = Unremoved::new();
        assert!(!wait_removed(Duration::from_millis(50)), "a tracing thread still runs");
        let waiter = std::thread::spawn(|| wait_removed(Duration::from_secs(60)));
        drop(running);
        assert!(waiter.join().unwrap(), "woken when the last one ended");
    }
}
