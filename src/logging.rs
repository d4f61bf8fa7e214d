//! Logging to stderr with tracing-subscriber, as text or JSON lines. The level can change at run
//! time (a configuration reload); the format cannot.
//!
//! Log lines carry text from the host (cgroup directory names, paths, command names): in the
//! text format every control character in an event is written as `\xNN`, so that a cgroup
//! named `x\nlevel=ERROR ...` cannot forge a line. JSON escapes them already (serde_json).
//!
//! Lines go to stderr through a bounded queue and a thread of their own ([`NonBlocking`]): a
//! reader that stops (journald stalled, a container runtime's log pipe full) holds up only that
//! thread, and lines beyond the queue are dropped and counted
//! (`memlock_exporter_log_lines_dropped_total`), never waited for: the fast path logs its
//! "firing" lines, and a full pipe must not keep a page from leaving.

use std::borrow::Cow;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tracing::level_filters::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, Registry};

use memlock_core::config::{LogFormat, LogLevel};

static LEVEL: OnceLock<reload::Handle<LevelFilter, Registry>> = OnceLock::new();

fn filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Error => LevelFilter::ERROR,
    }
}

pub fn init(level: LogLevel, format: LogFormat) {
    let (level_layer, handle) = reload::Layer::new(filter(level));
    let queue = STDERR.get_or_init(|| NonBlocking::new(io::stderr(), QUEUE_LINES)).clone();
    let output = tracing_subscriber::fmt::layer().with_target(false);
    let registry = tracing_subscriber::registry().with(level_layer);
    // try_init: a second call (tests) keeps the first subscriber instead of panicking.
    let installed = match format {
        LogFormat::Text => {
            let escaping = NonBlocking { escape: true, ..queue };
            registry.with(output.with_ansi(false).with_writer(escaping)).try_init()
        }
        LogFormat::Json => registry.with(output.json().flatten_event(true).with_writer(queue)).try_init(),
    };
    if installed.is_ok() {
        let _ = LEVEL.set(handle);
    }
}

/// Changes the level of the subscriber [`init`] installed; false when there is none.
pub fn set_level(level: LogLevel) -> bool {
    LEVEL.get().is_some_and(|handle| handle.reload(filter(level)).is_ok())
}

/// Lines the queue to stderr holds: about 300 KB of typical lines, minutes of a busy daemon's
/// log, so a reader that pauses for a moment loses nothing.
pub const QUEUE_LINES: usize = 2048;

static STDERR: OnceLock<NonBlocking> = OnceLock::new();

/// Lines dropped because stderr's reader did not keep up, since the start.
pub fn dropped_lines() -> u64 {
    STDERR.get().map_or(0, NonBlocking::dropped)
}

/// Waits up to `timeout` for the queued lines to be written (the exit's last lines).
pub fn flush(timeout: Duration) {
    if let Some(queue) = STDERR.get() {
        queue.flush(timeout);
    }
}

/// A writer that queues each line for a thread that writes it to the sink, and drops it
/// (counted) when the queue is full: a logging call never waits for the sink's reader.
#[derive(Clone)]
pub struct NonBlocking {
    lines: Option<SyncSender<Vec<u8>>>,
    shared: Arc<Shared>,
    /// Escape control characters first (the text format, see [`escape_controls`]).
    escape: bool,
}

#[derive(Default)]
struct Shared {
    queued: AtomicU64,
    written: AtomicU64,
    dropped: AtomicU64,
}

impl NonBlocking {
    /// Starts the thread writing to `sink`; `lines` is the queue's length. Should the thread
    /// not start, every line is dropped and counted: logging must not stop the daemon.
    pub fn new(mut sink: impl Write + Send + 'static, lines: usize) -> NonBlocking {
        let (sender, receiver) = mpsc::sync_channel::<Vec<u8>>(lines);
        let shared = Arc::new(Shared::default());
        let counts = shared.clone();
        let spawned = std::thread::Builder::new().name("log-writer".into()).spawn(move || {
            for line in receiver {
                // A write error (stderr closed) loses the line; there is nowhere to report it.
                let _ = sink.write_all(&line).and_then(|()| sink.flush());
                counts.written.fetch_add(1, Ordering::Release);
            }
        });
        NonBlocking { lines: spawned.ok().map(|_| sender), shared, escape: false }
    }

    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Waits up to `timeout` until every line queued so far is written.
    pub fn flush(&self, timeout: Duration) {
        let target = self.shared.queued.load(Ordering::Acquire);
        let deadline = Instant::now() + timeout;
        while self.shared.written.load(Ordering::Acquire) < target && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Write for NonBlocking {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let line = if self.escape { escape_controls(buf).into_owned() } else { buf.to_vec() };
        match self.lines.as_ref().map(|s| s.try_send(line)) {
            Some(Ok(())) => {
                self.shared.queued.fetch_add(1, Ordering::Release);
            }
            Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for NonBlocking {
    type Writer = NonBlocking;
    fn make_writer(&'a self) -> NonBlocking {
        self.clone()
    }
}

/// `memlock_exporter_log_lines_dropped_total`, read at every scrape.
pub struct DroppedLinesCollector {
    counter: prometheus::IntCounter,
}

impl DroppedLinesCollector {
    pub fn new() -> Result<Self, prometheus::Error> {
        let counter = prometheus::IntCounter::new(
            "memlock_exporter_log_lines_dropped_total",
            "Log lines dropped because the reader of standard error did not keep up.",
        )?;
        Ok(Self { counter })
    }
}

impl prometheus::core::Collector for DroppedLinesCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.counter.desc()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let total = dropped_lines();
        self.counter.inc_by(total.saturating_sub(self.counter.get()));
        self.counter.collect()
    }
}

/// The escaping of the text format. tracing-subscriber formats each event into one buffer and hands
/// it to the writer in a single `write_all` (`fmt::Layer::on_event`, fmt_layer.rs in 0.3.23),
/// so each write is one whole line: its interior control characters are escaped, its final
/// newline kept. tracing-subscriber's own sanitising (format/escape.rs) covers only terminal
/// escapes (ESC, BEL, BS, FF, DEL, C1) and only in the message: a newline in the message or any
/// control character in a `%` field reaches the output raw.
///
/// A formatted line with every control character but a final newline written as `\xNN`.
fn escape_controls(line: &[u8]) -> Cow<'_, [u8]> {
    let (body, end) = match line.strip_suffix(b"\n") {
        Some(body) => (body, "\n"),
        None => (line, ""),
    };
    // The subscriber formats into a String: a line that is not UTF-8 is not from it, and is
    // written lossily.
    let text = String::from_utf8_lossy(body);
    if matches!(text, Cow::Borrowed(_)) && !text.chars().any(char::is_control) {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len() + 16);
    for c in text.chars() {
        if c.is_control() {
            // Control characters (Unicode Cc) are all below U+00A0: two hex digits.
            let _ = std::fmt::Write::write_fmt(&mut out, format_args!("\\x{:02x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out.push_str(end);
    Cow::Owned(out.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::fmt::MakeWriter;

    #[test]
    fn control_characters_are_escaped_and_the_line_end_kept() {
        assert_eq!(escape_controls(b"plain line\n").as_ref(), b"plain line\n");
        assert!(matches!(escape_controls(b"plain line\n"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("a\nb\r\0c\u{1b}[2J\u{85}é\n".as_bytes()).as_ref(),
            "a\\x0ab\\x0d\\x00c\\x1b[2J\\x85é\n".as_bytes()
        );
        assert_eq!(escape_controls(b"no end").as_ref(), b"no end");
        assert_eq!(escape_controls(b"\xff\n\n").as_ref(), "\u{fffd}\\x0a\n".as_bytes());
    }

    /// A writer that keeps what the subscriber writes, escaped as the text format's writer escapes it.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(&escape_controls(buf));
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    /// A sink whose reader stopped: a pipe nobody reads. Every write returns at once whatever
    /// the pipe holds; what the queue cannot hold is counted as dropped, and once the reader
    /// reads again the lines kept arrive whole.
    #[test]
    fn a_stalled_reader_never_blocks_a_write_and_drops_are_counted() {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array we own.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: each descriptor is ours alone from here on, owned by one File.
        let (mut reader, sink) = unsafe {
            use std::os::fd::FromRawFd;
            (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1]))
        };
        let queue = NonBlocking::new(sink, 16);
        let line = format!("{}\n", "x".repeat(1023));
        let started = Instant::now();
        // 1 MiB of lines against a pipe of 64 KiB and a queue of 16.
        for _ in 0..1024 {
            queue.make_writer().write_all(line.as_bytes()).unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(2), "writes waited {:?}", started.elapsed());
        let dropped = queue.dropped();
        // Kept: the queue's 16, the pipe's 64, and the one line the writer thread holds while
        // its write waits for room in the pipe (taken from the queue, not yet in the pipe).
        assert!(dropped >= 1024 - 16 - 64 - 1, "only {dropped} of 1024 lines dropped");
        assert!(dropped < 1024, "every line dropped");
        let mut read = vec![0u8; 1 << 20];
        let mut got = 0;
        drop(queue);
        loop {
            match std::io::Read::read(&mut reader, &mut read[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => panic!("{e}"),
            }
        }
        let text = String::from_utf8_lossy(&read[..got]);
        assert!(text.lines().all(|l| l.len() == 1023), "a line was cut");
        assert_eq!(text.lines().count() as u64, 1024 - dropped);
    }

    /// Through the real subscriber and formatter the daemon uses: a cgroup path with a newline,
    /// in the message, in a `%` field and in a `?` field, forges no line.
    #[test]
    fn a_cgroup_name_with_a_newline_forges_no_log_line() {
        let captured = Captured::default();
        let subscriber =
            tracing_subscriber::fmt().with_ansi(false).with_target(false).with_writer(captured.clone()).finish();
        let path = std::path::PathBuf::from("/sys/fs/cgroup/memory/x\n2026-01-01T00:00:00Z ERROR forged\u{1b}[2J");
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(path = %path.display(), "cgroup files not readable");
            tracing::warn!(path = ?path, "debug field");
            tracing::warn!("in the message: {}", path.display());
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        for line in &lines {
            assert!(line.contains(" WARN "), "{line}");
            assert!(!line.contains('\u{1b}'), "{line}");
        }
        assert!(
            lines[0].contains("path=/sys/fs/cgroup/memory/x\\x0a2026-01-01T00:00:00Z ERROR forged\\x1b[2J"),
            "{text}"
        );
        assert!(lines[2].contains("in the message: /sys/fs/cgroup/memory/x\\x0a2026"), "{text}");
    }
}
