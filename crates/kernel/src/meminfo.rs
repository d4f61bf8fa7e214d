//! `/proc/meminfo` and `/sys/devices/system/node/nodeN/meminfo`.
//!
//! Lines are `Key: value[ kB]`; per-node files prefix each line with `Node <id> `. Values with
//! a `kB` unit are KiB; `HugePages_*` are page counts. Keys vary by kernel version and config, so
//! only the keys we export are looked at; unknown keys are ignored whatever their value.

use super::{field_u64, ParseError, Parsed};

/// The fields of meminfo that memlock-exporter uses. Sizes are bytes, hugepage fields pages.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Meminfo {
    pub mem_total: Option<u64>,
    pub mem_free: Option<u64>,
    pub mem_available: Option<u64>,
    pub mlocked: Option<u64>,
    pub unevictable: Option<u64>,
    pub committed_as: Option<u64>,
    pub commit_limit: Option<u64>,
    pub cma_total: Option<u64>,
    pub cma_free: Option<u64>,
    pub hugetlb: Option<u64>,
    pub hugepages_total: Option<u64>,
    pub hugepages_free: Option<u64>,
    pub hugepages_reserved: Option<u64>,
    pub hugepages_surplus: Option<u64>,
    pub hugepage_size: Option<u64>,
}

impl Meminfo {
    fn slot(&mut self, key: &str) -> Option<&mut Option<u64>> {
        Some(match key {
            "MemTotal" => &mut self.mem_total,
            "MemFree" => &mut self.mem_free,
            "MemAvailable" => &mut self.mem_available,
            "Mlocked" => &mut self.mlocked,
            "Unevictable" => &mut self.unevictable,
            "Committed_AS" => &mut self.committed_as,
            "CommitLimit" => &mut self.commit_limit,
            "CmaTotal" => &mut self.cma_total,
            "CmaFree" => &mut self.cma_free,
            "Hugetlb" => &mut self.hugetlb,
            "HugePages_Total" => &mut self.hugepages_total,
            "HugePages_Free" => &mut self.hugepages_free,
            "HugePages_Rsvd" => &mut self.hugepages_reserved,
            "HugePages_Surp" => &mut self.hugepages_surplus,
            "Hugepagesize" => &mut self.hugepage_size,
            _ => return None,
        })
    }
}

/// Parses `/proc/meminfo` or a per-node meminfo file, all or nothing ([`Parsed::strict`]).
pub fn parse(text: &str) -> Result<Meminfo, ParseError> {
    parse_fields(text)?.strict()
}

/// Parses `/proc/meminfo` or a per-node meminfo file field by field: a known key with a
/// malformed value is an error of that field only; unknown keys and lines without a colon are
/// skipped. A text with no known key at all is an error, so an empty or garbage file is
/// reported rather than exported as "nothing".
pub fn parse_fields(text: &str) -> Result<Parsed<Meminfo>, ParseError> {
    let mut parsed = Parsed::<Meminfo>::default();
    let mut known = 0usize;
    for (index, line) in text.lines().enumerate() {
        let Some((label, rest)) = line.split_once(':') else { continue };
        let key = strip_node_prefix(label.trim());
        let Some(slot) = parsed.value.slot(key) else { continue };
        known += 1;
        match field(index + 1, key, rest) {
            Ok(value) => *slot = Some(value),
            Err(error) => parsed.field_errors.push(error),
        }
    }
    if known == 0 {
        return Err(ParseError::Empty);
    }
    Ok(parsed)
}

/// ` 24684084 kB` -> bytes, `    1024` -> 1024.
fn field(line: usize, key: &str, rest: &str) -> Result<u64, ParseError> {
    let mut fields = rest.split_ascii_whitespace();
    let Some(number) = fields.next() else {
        return Err(ParseError::MissingValue { line, key: key.to_owned() });
    };
    let value = field_u64(line, key, number)?;
    match fields.next() {
        Some("kB") => value.checked_mul(1024).ok_or_else(|| ParseError::Overflow { line, key: key.to_owned() }),
        Some(unit) => Err(ParseError::Format(format!("line {line}: {key}: unknown unit {unit:?}"))),
        None => Ok(value),
    }
}

/// `Node 12 MemFree` -> `MemFree`; other labels are returned unchanged.
fn strip_node_prefix(label: &str) -> &str {
    let Some(rest) = label.strip_prefix("Node ") else { return label };
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    rest.trim_start()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPTURE: &str = include_str!("../../../tests/fixtures/captures/proc_meminfo");
    const NODE_CAPTURE: &str = include_str!("../../../tests/fixtures/captures/node0_meminfo");

    #[test]
    fn parses_the_captured_proc_meminfo() {
        let info = parse(CAPTURE).unwrap();
        assert_eq!(info.mem_total, Some(24684084 * 1024));
        assert_eq!(info.mem_available, Some(23786376 * 1024));
        assert_eq!(info.mlocked, Some(503424 * 1024));
        assert_eq!(info.unevictable, Some(504260 * 1024));
        assert_eq!(info.commit_limit, Some(12342040 * 1024));
        assert_eq!(info.committed_as, Some(904584 * 1024));
        assert_eq!(info.hugepages_total, Some(0));
        assert_eq!(info.hugepage_size, Some(2048 * 1024));
        assert_eq!(info.hugetlb, Some(0));
        // CONFIG_CMA is off on the captured kernel: absent, not zero.
        assert_eq!(info.cma_total, None);
        assert_eq!(info.cma_free, None);
    }

    #[test]
    fn parses_the_captured_node_meminfo() {
        let info = parse(NODE_CAPTURE).unwrap();
        assert_eq!(info.mem_total, Some(4548812 * 1024));
        assert_eq!(info.mem_free, Some(3520156 * 1024));
        assert_eq!(info.mlocked, Some(503424 * 1024));
        assert_eq!(info.hugepages_total, Some(0));
        assert_eq!(info.hugepages_reserved, None, "per-node files have no Rsvd");
        assert_eq!(info.mem_available, None);
    }

    #[test]
    fn two_digit_node_ids_and_wide_values() {
        let text = "Node 12 MemFree:        123 kB\nNode 12 HugePages_Total:   1024\nVmallocTotal:   34359738367 kB\n";
        let info = parse(text).unwrap();
        assert_eq!(info.mem_free, Some(123 * 1024));
        assert_eq!(info.hugepages_total, Some(1024));
    }

    #[test]
    fn hugepage_block_of_a_gpu_node() {
        let text = "HugePages_Total:    1024\nHugePages_Free:      924\nHugePages_Rsvd:        0\n\
            HugePages_Surp:        0\nHugepagesize:       2048 kB\nHugetlb:         2097152 kB\n";
        let info = parse(text).unwrap();
        assert_eq!(info.hugepages_total, Some(1024));
        assert_eq!(info.hugepages_free, Some(924));
        assert_eq!(info.hugetlb, Some(2 << 30));
    }

    #[test]
    fn malformed_known_values_are_errors_naming_the_line() {
        assert_eq!(
            parse("MemTotal:       24684084 kB\nMlocked:   lots kB\n"),
            Err(ParseError::NotANumber { line: 2, key: "Mlocked".into(), value: "lots".into() })
        );
        assert_eq!(parse("MemTotal:"), Err(ParseError::MissingValue { line: 1, key: "MemTotal".into() }));
        assert!(matches!(parse("MemTotal: 18446744073709551615 kB"), Err(ParseError::Overflow { .. })));
        // Too many digits is out of range, not "not a number".
        assert!(matches!(parse("MemTotal: 99999999999999999999999 kB"), Err(ParseError::Overflow { .. })));
        assert!(matches!(parse("MemTotal: +5 kB"), Err(ParseError::NotANumber { .. })), "no sign");
        assert!(matches!(parse("MemTotal: 1 MB"), Err(ParseError::Format(_))));
    }

    /// One malformed line must not drop every node memory family.
    #[test]
    fn a_malformed_field_costs_only_that_field() {
        let text = "MemTotal:       24684084 kB\nMemFree:   lots kB\nMemAvailable:   99999999999999999999 kB\n\
            Mlocked:          503424 kB\n";
        let parsed = parse_fields(text).unwrap();
        assert_eq!(parsed.value.mem_total, Some(24684084 * 1024));
        assert_eq!(parsed.value.mlocked, Some(503424 * 1024));
        assert_eq!((parsed.value.mem_free, parsed.value.mem_available), (None, None));
        assert_eq!(parsed.field_errors.len(), 2);
        assert_eq!(parsed.field_errors[0].to_string(), "line 2: MemFree: value \"lots\" is not a number");
        assert!(parsed.field_errors[1].to_string().contains("MemAvailable: value is out of range"), "{parsed:?}");
        assert!(parse(text).is_err(), "the strict reading still refuses it");
    }

    #[test]
    fn unknown_keys_and_truncated_lines_are_skipped() {
        let text = "Whatever: nonsense\nMemTotal:       100 kB\nMemFre";
        let info = parse(text).unwrap();
        assert_eq!(info.mem_total, Some(102400));
        assert_eq!(info.mem_free, None);
    }

    #[test]
    fn empty_and_garbage_files_are_errors() {
        assert_eq!(parse(""), Err(ParseError::Empty));
        let garbage: String = (0..2_000_000u32).map(|i| char::from(b'!' + (i % 90) as u8)).collect();
        assert_eq!(parse(&garbage), Err(ParseError::Empty));
        let binary = String::from_utf8_lossy(&[0xff, 0x00, b':', 0x80, b'\n']).into_owned();
        assert_eq!(parse(&binary), Err(ParseError::Empty));
    }
}
