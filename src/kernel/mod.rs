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
pub mod vmstat;

use thiserror::Error;

/// Why a kernel file's text could not be understood. Line numbers start at 1.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ParseError {
    #[error("line {line}: {key}: value {value:?} is not a number")]
    NotANumber { line: usize, key: String, value: String },
    #[error("line {line}: {key}: value overflows 64 bits")]
    Overflow { line: usize, key: String },
    #[error("line {line}: {key}: missing value")]
    MissingValue { line: usize, key: String },
    #[error("no recognisable fields")]
    Empty,
    #[error("{0}")]
    Format(String),
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
