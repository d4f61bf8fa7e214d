//! `/proc/PID/limits`: the `Max locked memory` line (RLIMIT_MEMLOCK).
//!
//! Fixed columns: the name left-justified in 25, then the soft and hard values left-justified
//! in 20 each, then the unit; every line ends in spaces. An infinite limit prints `unlimited`,
//! which is kept as [`Limit::Unlimited`] rather than a huge number.

use super::ParseError;

const MEMLOCK_LINE: &str = "Max locked memory";

/// One RLIMIT value.
pub use super::Limit;

/// RLIMIT_MEMLOCK. The kernel checks `VmLck` (mlock, vfio type1) and `VmPin` (RDMA
/// registration, `ib_umem_get`) against `soft`, each on its own; io_uring and iommufd check the
/// user's `locked_vm` against it instead (`__io_account_mem`, io_uring/rsrc.c), and
/// `mlockall(MCL_CURRENT)` VmSize (mm/mlock.c). `hard` is how far an unprivileged process may
/// raise it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemlockLimits {
    pub soft: Limit,
    pub hard: Limit,
}

/// Parses the text of `/proc/PID/limits`. A text without a complete `Max locked memory` line
/// is an error: every kernel prints it.
pub fn parse(text: &str) -> Result<MemlockLimits, ParseError> {
    for (index, line) in text.split('\n').enumerate() {
        let Some(rest) = line.strip_prefix(MEMLOCK_LINE) else { continue };
        let line_no = index + 1;
        let key = || MEMLOCK_LINE.to_owned();
        let mut fields = rest.split_ascii_whitespace();
        let soft = fields.next().ok_or_else(|| ParseError::MissingValue { line: line_no, key: key() })?;
        let hard = fields.next().ok_or_else(|| ParseError::MissingValue { line: line_no, key: key() })?;
        match fields.next() {
            // A line cut before its unit still carries both values.
            None | Some("bytes") => {}
            Some(unit) => {
                return Err(ParseError::Format(format!("line {line_no}: {MEMLOCK_LINE}: unknown unit {unit:?}")))
            }
        }
        let (soft, hard) = (parse_limit(line_no, soft)?, parse_limit(line_no, hard)?);
        // setrlimit(2) refuses a soft limit above the hard one (EINVAL), so the kernel never
        // prints one: this is a torn read of a file rewritten under us, or not a limits file.
        if soft.bytes().unwrap_or(u64::MAX) > hard.bytes().unwrap_or(u64::MAX) {
            return Err(ParseError::Format(format!("line {line_no}: {MEMLOCK_LINE}: soft limit above the hard limit")));
        }
        return Ok(MemlockLimits { soft, hard });
    }
    if text.trim().is_empty() {
        return Err(ParseError::Empty);
    }
    Err(ParseError::Format(format!("no {MEMLOCK_LINE:?} line")))
}

fn parse_limit(line: usize, value: &str) -> Result<Limit, ParseError> {
    if value == "unlimited" {
        return Ok(Limit::Unlimited);
    }
    super::decimal(value).map(Limit::Bytes).ok_or_else(|| ParseError::NotANumber {
        line,
        key: MEMLOCK_LINE.to_owned(),
        value: value.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPTURE: &str = include_str!("../../../tests/fixtures/captures/proc_self_limits");

    #[test]
    fn parses_the_captured_limits() {
        assert_eq!(parse(CAPTURE), Ok(MemlockLimits { soft: Limit::Bytes(8388608), hard: Limit::Bytes(8388608) }));
    }

    #[test]
    fn a_soft_limit_above_the_hard_one_is_a_torn_read() {
        let line = |values: &str| CAPTURE.replace("8388608              8388608              bytes", values);
        // Rewritten under the reader and cut inside the hard value.
        assert!(matches!(parse(&line("8388608              83")), Err(ParseError::Format(_))));
        assert!(matches!(parse(&line("unlimited            83886")), Err(ParseError::Format(_))));
        // The kernel's own orders parse.
        assert!(parse(&line("65536                unlimited            bytes")).is_ok());
        assert!(parse(&line("65536                65536                bytes")).is_ok());
    }

    #[test]
    fn unlimited_is_its_own_variant() {
        let text = CAPTURE.replace(
            "Max locked memory         8388608              8388608              bytes     ",
            "Max locked memory         unlimited            unlimited            bytes     ",
        );
        let limits = parse(&text).unwrap();
        assert_eq!(limits, MemlockLimits { soft: Limit::Unlimited, hard: Limit::Unlimited });
        assert_eq!(limits.soft.bytes(), None);
        assert!(limits.hard.is_unlimited());
    }

    #[test]
    fn soft_below_hard_and_wide_values() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \nMax locked \
            memory         65536                18446744073709551614 bytes     \n";
        let limits = parse(text).unwrap();
        assert_eq!(limits.soft, Limit::Bytes(65536));
        assert_eq!(limits.hard, Limit::Bytes(u64::MAX - 1));
        assert_eq!(limits.soft.bytes(), Some(65536));
    }

    #[test]
    fn malformed_lines_are_errors_naming_the_line() {
        assert_eq!(
            parse("Limit\nMax locked memory         lots                 8388608              bytes     \n"),
            Err(ParseError::NotANumber { line: 2, key: MEMLOCK_LINE.into(), value: "lots".into() })
        );
        assert_eq!(
            parse("Max locked memory         8388608"),
            Err(ParseError::MissingValue { line: 1, key: MEMLOCK_LINE.into() })
        );
        assert_eq!(parse("Max locked memory"), Err(ParseError::MissingValue { line: 1, key: MEMLOCK_LINE.into() }));
        assert!(matches!(
            parse("Max locked memory         -1                   -1                   bytes     "),
            Err(ParseError::NotANumber { .. })
        ));
        assert!(matches!(
            parse("Max locked memory         1                    99999999999999999999999"),
            Err(ParseError::NotANumber { .. })
        ));
        assert!(matches!(
            parse("Max locked memory         1                    1                    pages     "),
            Err(ParseError::Format(_))
        ));
        // Cut after the hard value: both values are there.
        assert_eq!(
            parse("Max locked memory         1                    2"),
            Ok(MemlockLimits { soft: Limit::Bytes(1), hard: Limit::Bytes(2) })
        );
    }

    #[test]
    fn missing_line_empty_and_garbage_are_errors_not_panics() {
        assert_eq!(parse(""), Err(ParseError::Empty));
        let without = CAPTURE.lines().filter(|l| !l.starts_with(MEMLOCK_LINE)).collect::<Vec<_>>().join("\n");
        assert!(matches!(parse(&without), Err(ParseError::Format(_))));
        let truncated = &CAPTURE[..CAPTURE.find(MEMLOCK_LINE).unwrap() + 10];
        assert!(matches!(parse(truncated), Err(ParseError::Format(_))));
        let garbage: String = (0..2_000_000u32).map(|i| char::from(b'!' + (i % 90) as u8)).collect();
        assert!(matches!(parse(&garbage), Err(ParseError::Format(_))));
        let binary = String::from_utf8_lossy(&[b'M', b'a', b'x', 0xff, 0x00, b'\n']).into_owned();
        assert!(parse(&binary).is_err());
    }
}
