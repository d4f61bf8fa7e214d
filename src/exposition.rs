//! A small writer for the Prometheus text exposition format (version 0.0.4).
//!
//! Sampled data is rendered once per snapshot, so the writer favours simplicity: one `String`,
//! no intermediate model. It guarantees the invariants promtool checks: each family's samples
//! are contiguous under one HELP/TYPE header, label values are escaped, and a family with no
//! samples writes nothing.

use std::fmt::Write as _;

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
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a family; its header is written with its first sample.
    pub fn family(&mut self, name: &'static str, help: &'static str, kind: Kind) -> &mut Self {
        self.pending = Some((name, help, kind));
        self.current = name;
        self
    }

    /// Writes one sample of the current family.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Into<Value>) -> &mut Self {
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
                escape_label_value(&mut self.out, value);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
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

fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
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
            .sample(&[("a", "x\"y\\z\nw")], 5u64)
            .sample(&[], 1.5)
            .maybe(&[], None::<u64>)
            .sample(&[], f64::INFINITY)
            .sample(&[], u64::MAX);
        let text = e.finish();
        assert_eq!(
            text,
            "# HELP m_bytes Bytes.\n# TYPE m_bytes gauge\nm_bytes{a=\"x\\\"y\\\\z\\nw\"} 5\nm_bytes 1.5\nm_bytes \
                +Inf\nm_bytes 18446744073709551615\n"
        );
    }
}
