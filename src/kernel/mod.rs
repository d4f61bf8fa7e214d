//! Pure parsers for kernel files. Each takes the file's text and returns typed values; none
//! performs I/O. A value the kernel did not print is `None` (absent is not zero).

pub mod cgroup_path;
pub mod memcg;
pub mod meminfo;
pub mod nldev;
pub mod pid_cgroup;
pub mod pid_limits;
pub mod pid_status;
pub mod proc_cgroups;
pub mod rdma_cgroup;
pub mod rdma_sysfs;
pub mod sysvm;
pub mod uid_map;
pub mod vmstat;

use thiserror::Error;

/// Why a kernel file's text could not be understood. Line numbers start at 1.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ParseError {
    #[error("line {line}: {key}: value {value:?} is not a number")]
    NotANumber { line: usize, key: String, value: String },
    #[error("line {line}: {key}: value is out of range (above 2^64 - 1 in bytes)")]
    Overflow { line: usize, key: String },
    #[error("line {line}: {key}: missing value")]
    MissingValue { line: usize, key: String },
    #[error("no recognisable fields")]
    Empty,
    #[error("{0}")]
    Format(String),
}

/// A line-oriented file read field by field: every field that parsed, and one error per field
/// that did not. A malformed or overflowing value costs only its own field (meminfo, vmstat,
/// `/proc/PID/status`, memory.stat): the collector exports the others and reports the errors.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed<T> {
    pub value: T,
    pub field_errors: Vec<ParseError>,
}

impl<T> Parsed<T> {
    /// All or nothing, for one-shot readers (`check`, `estimate`, `drill`): the first field
    /// error is the error.
    pub fn strict(self) -> Result<T, ParseError> {
        match self.field_errors.into_iter().next() {
            Some(error) => Err(error),
            None => Ok(self.value),
        }
    }
}

/// A field's decimal value: ASCII digits only (no sign), an overflow said as such.
pub(crate) fn field_u64(line: usize, key: &str, value: &str) -> Result<u64, ParseError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::NotANumber { line, key: key.to_owned(), value: value.to_owned() });
    }
    value.parse().map_err(|_| ParseError::Overflow { line, key: key.to_owned() })
}

/// A limit the kernel prints either as a number or as "unlimited" (`unlimited` in
/// `/proc/PID/limits`, `max` in cgroup v2, a page-size-dependent sentinel in cgroup v1). Never
/// a huge number standing for "no limit".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Bytes(u64),
    Unlimited,
}

impl Limit {
    /// The bytes of a real limit; `None` when unlimited (not exported as a number).
    pub fn bytes(self) -> Option<u64> {
        match self {
            Limit::Bytes(b) => Some(b),
            Limit::Unlimited => None,
        }
    }

    pub fn is_unlimited(self) -> bool {
        self == Limit::Unlimited
    }

    /// The tighter of two limits.
    pub fn min(self, other: Limit) -> Limit {
        match (self, other) {
            (Limit::Bytes(a), Limit::Bytes(b)) => Limit::Bytes(a.min(b)),
            (Limit::Bytes(a), Limit::Unlimited) | (Limit::Unlimited, Limit::Bytes(a)) => Limit::Bytes(a),
            (Limit::Unlimited, Limit::Unlimited) => Limit::Unlimited,
        }
    }
}

/// Parses a decimal u64, tolerating surrounding whitespace (kernel files end in a newline).
pub fn parse_u64(text: &str) -> Result<u64, ParseError> {
    let value = text.trim();
    if value.is_empty() {
        return Err(ParseError::Empty);
    }
    value.parse::<u64>().map_err(|_| ParseError::Format(format!("{value:?} is not a non-negative integer")))
}

/// Parses a decimal i64 (for sysctls that may be negative).
pub fn parse_i64(text: &str) -> Result<i64, ParseError> {
    let value = text.trim();
    if value.is_empty() {
        return Err(ParseError::Empty);
    }
    value.parse::<i64>().map_err(|_| ParseError::Format(format!("{value:?} is not an integer")))
}
