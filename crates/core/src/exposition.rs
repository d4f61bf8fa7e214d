//! A small writer for the Prometheus text exposition format (version 0.0.4).
//!
//! Sampled data is rendered once per snapshot, so the writer favours simplicity: one `String`,
//! no intermediate model. It guarantees the invariants promtool checks: each family's samples
//! are contiguous under one HELP/TYPE header, label values are escaped, and a family with no
//! samples writes nothing.
//!
//! It is also the one home of the label-value bound ([`label_value`]): every sample passes
//! through it, so no collector can export a value read from /proc or /sys unbounded.

use std::borrow::Cow;
use std::fmt::Write as _;

/// The longest label value exported, in bytes. Real values are far shorter: the longest in the
/// fixtures, a Kubernetes container's cgroup under the systemd driver, is 234 bytes, and the
/// kernel caps `/proc/<pid>/cgroup` paths at PATH_MAX (4096; `proc_cgroup_show` in
/// kernel/cgroup/cgroup.c). Unbounded, huge cgroup paths (from a procfs root someone else writes)
/// would make a huge scrape, every series repeating the path.
pub const MAX_LABEL_VALUE_BYTES: usize = 512;

/// Bytes of the mark a rewritten value ends in: `~` and 16 hex digits.
const MARK_BYTES: usize = 17;

/// A label value as it is exported, by the scrape and by the fast path to Alertmanager alike
/// (the two must agree for Alertmanager to group and inhibit). A value of at most
/// [`MAX_LABEL_VALUE_BYTES`] without control characters is unchanged. Any other is rewritten:
/// control characters (NUL, newline, escape... reach us in cgroup directory names and in files
/// of a fake root) as `\xNN` like `systemd-escape` writes them, cut to the bound, and marked
/// with `~` and the first 16 hex digits of the SHA-256 of the original value. The mark keeps
/// two values that differ past the cut as two series (the same series would be a duplicate in
/// one scrape), and the same value the same series across samples and restarts.
pub fn label_value(value: &str) -> Cow<'_, str> {
    if value.len() <= MAX_LABEL_VALUE_BYTES && !value.chars().any(char::is_control) {
        return Cow::Borrowed(value);
    }
    let budget = MAX_LABEL_VALUE_BYTES - MARK_BYTES;
    let mut out = String::with_capacity(MAX_LABEL_VALUE_BYTES);
    for c in value.chars() {
        let width = if c.is_control() { 4 } else { c.len_utf8() };
        if out.len() + width > budget {
            break;
        }
        if c.is_control() {
            // Every control character (Unicode category Cc) is below U+00A0: two hex digits.
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, value.as_bytes());
    out.push('~');
    for byte in &digest.as_ref()[..(MARK_BYTES - 1) / 2] {
        let _ = write!(out, "{byte:02x}");
    }
    Cow::Owned(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

/// A sample value. Integers are written exactly (bytes beyond 2^53 must not be rounded here).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Int(u64::from(v))
    }
}

#[derive(Default)]
pub struct Exposition {
    out: String,
    pending: Option<(&'static str, &'static str, Kind)>,
    current: &'static str,
    rewritten_label_values: u64,
    samples: usize,
    /// Samples are counted, not written: how the series budget learns the size of what the
    /// collectors always export from the same code that exports it, without a second text.
    counting: bool,
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// An exposition that only counts its samples ([`Exposition::samples`]); its text is empty.
    pub fn counting() -> Self {
        Self { counting: true, ..Self::default() }
    }

    /// Starts a family; its header is written with its first sample.
    pub fn family(&mut self, name: &'static str, help: &'static str, kind: Kind) -> &mut Self {
        self.pending = Some((name, help, kind));
        self.current = name;
        self
    }

    /// Writes one sample of the current family.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Into<Value>) -> &mut Self {
        if self.counting {
            self.samples += 1;
            return self;
        }
        if let Some((name, help, kind)) = self.pending.take() {
            let kind = match kind {
                Kind::Gauge => "gauge",
                Kind::Counter => "counter",
            };
            let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
            let _ = writeln!(self.out, "# TYPE {name} {kind}");
        }
        self.out.push_str(self.current);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(key);
                self.out.push_str("=\"");
                // Escaping finds a control character on its way (one pass over the value, not
                // two: this runs for every label of every series); then label_value rewrites it.
                let start = self.out.len();
                if value.len() > MAX_LABEL_VALUE_BYTES || !escape_plain_label_value(&mut self.out, value) {
                    self.out.truncate(start);
                    self.rewritten_label_values += 1;
                    let written = escape_plain_label_value(&mut self.out, &label_value(value));
                    debug_assert!(written, "label_value left a control character in {value:?}");
                }
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        self.samples += 1;
        match value.into() {
            Value::Int(v) => {
                let _ = write!(self.out, "{v}");
            }
            Value::Float(v) => write_float(&mut self.out, v),
        }
        self.out.push('\n');
        self
    }

    /// Writes a sample only when the value is present: absent in the kernel is not zero.
    pub fn maybe(&mut self, labels: &[(&str, &str)], value: Option<impl Into<Value>>) -> &mut Self {
        if let Some(value) = value {
            self.sample(labels, value);
        }
        self
    }

    /// How many label values written so far [`label_value`] had to rewrite.
    pub(crate) fn rewritten_label_values(&self) -> u64 {
        self.rewritten_label_values
    }

    /// Samples written so far.
    pub fn samples(&self) -> usize {
        self.samples
    }

    pub fn finish(self) -> String {
        self.out
    }
}

fn write_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

/// Writes `value` escaped for the text format (`\\`, `\"`) and returns true; or returns false,
/// `out` partly written, at the first control character (C0, DEL, C1: what `char::is_control`
/// is), which [`label_value`] rewrites. Copies runs of plain bytes whole.
fn escape_plain_label_value(out: &mut String, value: &str) -> bool {
    let bytes = value.as_bytes();
    let mut run = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escaped = match byte {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            0..=0x1f | 0x7f => return false,
            // U+0080 to U+009F are C2 80 to C2 9F in UTF-8.
            0xc2 if bytes.get(i + 1).is_some_and(|next| (0x80..=0x9f).contains(next)) => return false,
            _ => continue,
        };
        // `i` is at an ASCII byte, so on a character boundary.
        out.push_str(&value[run..i]);
        out.push_str(escaped);
        run = i + 1;
    }
    out.push_str(&value[run..]);
    true
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_headers_once_and_escapes_labels() {
        let mut e = Exposition::new();
        e.family("m_empty", "never written", Kind::Gauge);
        e.family("m_bytes", "Bytes.", Kind::Gauge)
            .sample(&[("a", "x\"y\\z")], 5u64)
            .sample(&[], 1.5)
            .maybe(&[], None::<u64>)
            .sample(&[], f64::INFINITY)
            .sample(&[], u64::MAX);
        assert_eq!(e.rewritten_label_values(), 0);
        let text = e.finish();
        assert_eq!(
            text,
            "# HELP m_bytes Bytes.\n# TYPE m_bytes gauge\nm_bytes{a=\"x\\\"y\\\\z\"} 5\nm_bytes 1.5\nm_bytes \
                +Inf\nm_bytes 18446744073709551615\n"
        );
    }

    #[test]
    fn a_counting_exposition_counts_what_a_written_one_writes_and_holds_no_text() {
        let long = "x".repeat(1000);
        let fill = |e: &mut Exposition| {
            e.family("m_empty", "never written", Kind::Gauge);
            e.family("m_bytes", "Bytes.", Kind::Gauge)
                .sample(&[("a", long.as_str())], 5u64)
                .maybe(&[], None::<u64>)
                .maybe(&[], Some(2u64))
                .sample(&[], 1.5);
        };
        let (mut written, mut counted) = (Exposition::new(), Exposition::counting());
        fill(&mut written);
        fill(&mut counted);
        assert_eq!(counted.samples(), 3);
        assert_eq!(counted.samples(), written.samples());
        assert_eq!(counted.finish(), "");
        assert_eq!(written.finish().lines().filter(|l| !l.starts_with('#')).count(), 3);
    }

    #[test]
    fn label_values_within_the_bound_are_unchanged() {
        let kube =
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b0e3b1a_2a43_4a3b_9c1e_2f1d0c7a9e11\
            .slice/cri-containerd-3f2b6c1d8e9a0b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c.scope";
        for value in ["", "python3", "/system.slice/dev-disk-by\\x2duuid.swap", "é ü 日本", kube] {
            assert!(matches!(label_value(value), Cow::Borrowed(v) if v == value), "{value}");
        }
        let at_the_bound = "x".repeat(MAX_LABEL_VALUE_BYTES);
        assert!(matches!(label_value(&at_the_bound), Cow::Borrowed(_)));
    }

    #[test]
    fn long_label_values_are_cut_and_marked_with_a_digest_of_the_whole() {
        let long = "x".repeat(1000);
        let cut = label_value(&long);
        assert_eq!(cut.len(), MAX_LABEL_VALUE_BYTES);
        // The digest is SHA-256 (sha256sum of 1000 x's begins 44f8354494a5ba03): stable across
        // releases and restarts, so the series stays the same series.
        assert_eq!(cut, format!("{}~44f8354494a5ba03", "x".repeat(MAX_LABEL_VALUE_BYTES - MARK_BYTES)));
        // Two values that differ only past the cut stay two series.
        let other = format!("{}y", "x".repeat(999));
        assert_ne!(label_value(&other), cut);
        assert_eq!(
            label_value(&other)[..MAX_LABEL_VALUE_BYTES - MARK_BYTES],
            cut[..MAX_LABEL_VALUE_BYTES - MARK_BYTES]
        );
        // Cut on a character boundary, never inside a multi-byte character.
        let accents = label_value(&"é".repeat(400)).into_owned();
        assert!(accents.len() <= MAX_LABEL_VALUE_BYTES);
        assert!(accents.split('~').next().unwrap().chars().all(|c| c == 'é'), "{accents}");
        // One byte over the bound is rewritten too.
        assert_eq!(label_value(&"x".repeat(MAX_LABEL_VALUE_BYTES + 1)).len(), MAX_LABEL_VALUE_BYTES);
    }

    #[test]
    fn control_characters_are_escaped_and_marked() {
        // NUL, newline and a terminal escape, as a cgroup directory name or a fake comm has them.
        assert_eq!(label_value("a\0b\nc\u{1b}[31m"), "a\\x00b\\x0ac\\x1b[31m~9d0fee143cd9c64c");
        // Tab, DEL and a C1 control (NEL, U+0085) are control characters too.
        assert_eq!(label_value("tab\there\u{7f}\u{85}"), "tab\\x09here\\x7f\\x85~5c1795b86ae40d96");
        // An escape is never split by the cut.
        let controls = label_value(&"\0".repeat(300)).into_owned();
        assert!(controls.len() <= MAX_LABEL_VALUE_BYTES);
        assert!(controls.split('~').next().unwrap().len() % 4 == 0, "{controls}");
        for value in ["a\0b".to_owned(), "\n".repeat(1000), "\u{9b}".to_owned()] {
            assert!(!label_value(&value).chars().any(char::is_control), "{value:?}");
        }
    }

    /// The escaping pass and label_value agree on what must be rewritten, for every character
    /// up to U+0200 in every position.
    #[test]
    fn the_escaping_pass_finds_what_label_value_rewrites() {
        for code in 0..0x200u32 {
            let Some(c) = char::from_u32(code) else { continue };
            for value in [format!("{c}"), format!("a{c}b"), format!("é{c}"), format!("{c}\u{80}")] {
                let mut out = String::new();
                let plain = escape_plain_label_value(&mut out, &value);
                assert_eq!(plain, matches!(label_value(&value), Cow::Borrowed(_)), "{value:?}");
            }
        }
    }

    #[test]
    fn every_sample_passes_through_the_bound_and_rewrites_are_counted() {
        let mut e = Exposition::new();
        let long = "/".repeat(1 << 20);
        e.family("m", "M.", Kind::Gauge)
            .sample(&[("cgroup", &long), ("comm", "ok")], 1u64)
            .sample(&[("cgroup", "/ok"), ("comm", "forged\nm 666")], 2u64)
            .sample(&[("cgroup", "/ok")], 3u64);
        assert_eq!(e.rewritten_label_values(), 2);
        let text = e.finish();
        assert!(text.len() < 2 * MAX_LABEL_VALUE_BYTES + 200, "{} bytes", text.len());
        // The newline cannot start a line of its own.
        assert_eq!(text.lines().filter(|l| l.starts_with("m ")).count(), 0, "{text}");
        assert!(text.contains("comm=\"forged\\\\x0am 666~"), "{text}");
    }
}
