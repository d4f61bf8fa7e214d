//! Pure parsers for kernel files, and the one bounded reader ([`fsroot`]) the collectors read
//! them through. Each parser takes the file's text and returns typed values; none performs I/O.
//! A value the kernel did not print is `None` (absent is not zero).

pub mod cgroup_path;
pub mod fsroot;
pub mod launchers;
pub mod memcg;
pub mod meminfo;
pub mod nccl_library;
pub mod nldev;
pub mod pid_cgroup;
pub mod pid_creds;
pub mod pid_limits;
pub mod pid_stat;
pub mod pid_status;
pub mod proc_cgroups;
pub mod quote;
pub mod rdma_cgroup;
pub mod rdma_sysfs;
pub mod registrants;
pub mod smaps_rollup;
pub mod sysvm;
pub mod tasks;
pub mod trace_pipe;
pub mod uid_map;
pub mod versions;
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

/// A field's decimal value: ASCII digits only (no sign, see [`decimal`]), an overflow said as
/// such.
pub(crate) fn field_u64(line: usize, key: &str, value: &str) -> Result<u64, ParseError> {
    if !all_digits(value) {
        return Err(ParseError::NotANumber { line, key: key.to_owned(), value: value.to_owned() });
    }
    value.parse().map_err(|_| ParseError::Overflow { line, key: key.to_owned() })
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
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

/// A decimal number as the kernel prints one (`%llu`, `%lu`, `%d`): ASCII digits, after a `-`
/// for a signed type. Rust's `str::parse` also takes a leading `+`, which no kernel file holds:
/// every number in a kernel file is read through here, so `+5` is an error, not 5.
pub fn decimal<T: std::str::FromStr>(text: &str) -> Option<T> {
    all_digits(text.strip_prefix('-').unwrap_or(text)).then(|| text.parse().ok()).flatten()
}

/// A number in a name the kernel made with `%u` (a port or NUMA node directory, a hugepage
/// size; pid directories are read as bytes, `process::scan::parse_pid_bytes`): canonical
/// digits only, so that `01` and `+1` beside `1` are not a second 1 (they made duplicate
/// series).
pub fn name_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    if name.len() > 1 && name.starts_with('0') {
        return None;
    }
    all_digits(name).then(|| decimal(name)).flatten()
}

/// Parses a decimal u64, tolerating surrounding whitespace (kernel files end in a newline).
pub fn parse_u64(text: &str) -> Result<u64, ParseError> {
    let value = text.trim();
    if value.is_empty() {
        return Err(ParseError::Empty);
    }
    decimal(value).ok_or_else(|| ParseError::Format(format!("{value:?} is not a non-negative integer")))
}

/// Parses a decimal i64 (for sysctls that may be negative).
pub fn parse_i64(text: &str) -> Result<i64, ParseError> {
    let value = text.trim();
    if value.is_empty() {
        return Err(ParseError::Empty);
    }
    decimal(value).ok_or_else(|| ParseError::Format(format!("{value:?} is not an integer")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_digits_as_the_kernel_prints_them() {
        assert_eq!(decimal::<u64>("18446744073709551615"), Some(u64::MAX));
        assert_eq!(decimal::<i64>("-1"), Some(-1));
        assert_eq!(decimal::<u64>("0042"), Some(42), "leading zeros in a value create no duplicate");
        for text in ["+5", "-5", "", "-", "+", " 5", "5 ", "5_0", "0x10", "18446744073709551616", "٣"] {
            assert_eq!(decimal::<u64>(text), None, "{text:?}");
        }
        assert_eq!(decimal::<i64>("+5"), None);
        assert_eq!(decimal::<i64>("--5"), None);
    }

    #[test]
    fn numbers_in_names_are_canonical() {
        assert_eq!(name_number::<u32>("1"), Some(1));
        assert_eq!(name_number::<u32>("0"), Some(0));
        assert_eq!(name_number::<u32>("10"), Some(10));
        for name in ["01", "+1", "-1", "00", "1 ", "", "1a", "4294967296"] {
            assert_eq!(name_number::<u32>(name), None, "{name:?}");
        }
    }

    /// Rust's `str::parse` takes a leading `+`, which the kernel never writes: a value with one
    /// is not the kernel's and is refused.
    #[test]
    fn no_kernel_parser_takes_a_plus_sign() {
        let status = include_str!("../../../tests/fixtures/captures/proc_self_status")
            .replace("VmPin:\t       0 kB", "VmPin:\t      +4 kB");
        assert!(pid_status::parse(&status).is_err());
        let limits = include_str!("../../../tests/fixtures/captures/proc_self_limits")
            .replace("8388608              8388608", "+8388608             8388608");
        assert!(pid_limits::parse(&limits).is_err(), "{limits}");
        assert!(meminfo::parse("MemTotal:       +16 kB\n").is_err());
        assert!(vmstat::parse("nr_mlock +5\n").is_err());
        assert!(uid_map::is_initial("0 0 +4294967295\n").is_err());
        assert!(proc_cgroups::parse("#subsys_name\thierarchy\tnum_cgroups\tenabled\nmemory\t+4\t10\t1\n").is_err());
        assert!(memcg::parse_v1_limit("+5\n").is_err());
        assert!(memcg::parse_v2_limit("+5\n").is_err());
        assert!(memcg::parse_v1_stat("cache 0\nunevictable +5\n").is_err());
        assert!(rdma_cgroup::parse("mlx5_0 hca_handle=+2 hca_object=max\n").is_err());
        assert!(rdma_sysfs::parse_numbered("+4: ACTIVE\n").is_err());
        assert!(rdma_sysfs::parse_counter("+5\n").is_err());
        assert!(parse_u64("+5\n").is_err() && parse_i64("+5\n").is_err());
        assert_eq!(sysvm::parse_hugepage_dir_name("hugepages-+2048kB"), None);
        assert_eq!(sysvm::parse_hugepage_dir_name("hugepages-02048kB"), None);
        assert_eq!(sysvm::parse_hugepage_dir_name("hugepages-2048kB"), Some(2 << 20));
    }
}
