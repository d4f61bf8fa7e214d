//! Logging to stderr with tracing-subscriber, as text or JSON lines. The level can change at run
//! time (a configuration reload); the format cannot.
//!
//! Log lines carry text from the host (cgroup directory names, paths, command names): in the
//! text format every control character in an event is written as `\xNN`, so that a cgroup
//! named `x\nlevel=ERROR ...` cannot forge a line. JSON escapes them already (serde_json).

use std::borrow::Cow;
use std::io::{self, Write};
use std::sync::OnceLock;

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
    let output = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_target(false);
    let registry = tracing_subscriber::registry().with(level_layer);
    // try_init: a second call (tests) keeps the first subscriber instead of panicking.
    let installed = match format {
        LogFormat::Text => registry.with(output.with_ansi(false).with_writer(|| EscapingStderr)).try_init(),
        LogFormat::Json => registry.with(output.json().flatten_event(true)).try_init(),
    };
    if installed.is_ok() {
        let _ = LEVEL.set(handle);
    }
}

/// Changes the level of the subscriber [`init`] installed; false when there is none.
pub fn set_level(level: LogLevel) -> bool {
    LEVEL.get().is_some_and(|handle| handle.reload(filter(level)).is_ok())
}

/// stderr for the text format. tracing-subscriber formats each event into one buffer and hands
/// it to the writer in a single `write_all` (`fmt::Layer::on_event`, fmt_layer.rs in 0.3.23),
/// so each write is one whole line: its interior control characters are escaped, its final
/// newline kept. tracing-subscriber's own sanitising (format/escape.rs) covers only terminal
/// escapes (ESC, BEL, BS, FF, DEL, C1) and only in the message: a newline in the message or any
/// control character in a `%` field reaches the output raw.
struct EscapingStderr;

impl Write for EscapingStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stderr().lock().write_all(&escape_controls(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

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

    /// A writer that keeps what the subscriber writes, escaped as [`EscapingStderr`] escapes it.
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

    /// Issue 15 item 8, through the real subscriber and formatter the daemon uses: a cgroup path
    /// with a newline, in the message, in a `%` field and in a `?` field, forges no line.
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
