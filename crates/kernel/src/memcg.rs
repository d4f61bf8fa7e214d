//! Memory cgroup files, v1 (`memory.usage_in_bytes`, `memory.limit_in_bytes`, `memory.stat`,
//! `memory.oom_control`, `memory.failcnt`) and v2 (`memory.current`, `memory.max`,
//! `memory.high`, `memory.swap.max`, `memory.stat`, `memory.events`).
//!
//! Single-number files (`usage_in_bytes`, `failcnt`, `memory.current`) parse with
//! [`super::parse_u64`]. Limits have sentinels: v1 prints "unlimited" as the largest page
//! counter times the page size (`9223372036854771712` with 4 KiB pages, `…759424` with 16 KiB,
//! `…710272` with 64 KiB), v2 prints `max`.

use super::{field_u64, ParseError, Parsed};

/// Any v1 limit at or above this is "unlimited", whatever the page size: the kernel's
/// sentinel is `(LONG_MAX / PAGE_SIZE) * PAGE_SIZE`, just below 2^63, and no machine has
/// 2^62 bytes of memory.
pub const V1_UNLIMITED_FROM: u64 = 1 << 62;

pub use super::Limit;

impl Limit {
    /// A v1 value: the page-size-dependent sentinel and anything above 2^62 is unlimited.
    pub(crate) fn from_v1(value: u64) -> Limit {
        if value >= V1_UNLIMITED_FROM {
            Limit::Unlimited
        } else {
            Limit::Bytes(value)
        }
    }
}

/// `memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`, `memory.soft_limit_in_bytes` (v1).
pub fn parse_v1_limit(text: &str) -> Result<Limit, ParseError> {
    super::parse_u64(text).map(Limit::from_v1)
}

/// `memory.max`, `memory.high`, `memory.swap.max` (v2): bytes or `max`.
pub fn parse_v2_limit(text: &str) -> Result<Limit, ParseError> {
    match text.trim() {
        "max" => Ok(Limit::Unlimited),
        other => super::parse_u64(other).map(Limit::Bytes),
    }
}

/// The fields of v1 `memory.stat` the exporter uses. Local keys describe the cgroup's own
/// pages, `total_*` keys its whole subtree (which is what `usage_in_bytes` counts).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct V1Stat {
    pub unevictable: Option<u64>,
    pub(crate) total_unevictable: Option<u64>,
    pub inactive_file: Option<u64>,
    pub total_inactive_file: Option<u64>,
    /// The lowest `limit_in_bytes` on the path to the root: the limit that applies.
    pub hierarchical_memory_limit: Option<Limit>,
    /// The same for memory plus swap; absent without swap accounting.
    pub hierarchical_memsw_limit: Option<Limit>,
}

impl V1Stat {
    /// Unevictable (mlocked) bytes of the subtree, matching `usage_in_bytes`.
    pub fn subtree_unevictable(&self) -> Option<u64> {
        self.total_unevictable.or(self.unevictable)
    }

    /// Page cache on the inactive list, of the subtree: what reclaim takes first.
    pub fn subtree_inactive_file(&self) -> Option<u64> {
        self.total_inactive_file.or(self.inactive_file)
    }
}

/// The working set as kubelet and cAdvisor define it: usage minus the inactive page cache,
/// which the kernel reclaims before it would fail a charge. mlock()ed pages sit on the
/// unevictable list, never on inactive_file, so they always count. Floored at 0 because
/// `memory.stat` is flushed from per-CPU counters lazily (up to 2 s late) while usage is exact:
/// right after a large file is dropped the stale inactive_file can exceed usage.
pub fn working_set(usage: u64, inactive_file: u64) -> u64 {
    usage.saturating_sub(inactive_file)
}

/// Parses v1 `memory.stat`, all or nothing.
pub fn parse_v1_stat(text: &str) -> Result<V1Stat, ParseError> {
    parse_v1_stat_fields(text)?.strict()
}

/// Parses v1 `memory.stat` field by field.
pub fn parse_v1_stat_fields(text: &str) -> Result<Parsed<V1Stat>, ParseError> {
    let Parsed { value, field_errors } = parse_pairs(
        text,
        [
            "unevictable",
            "total_unevictable",
            "inactive_file",
            "total_inactive_file",
            "hierarchical_memory_limit",
            "hierarchical_memsw_limit",
        ],
    )?;
    let [unevictable, total_unevictable, inactive_file, total_inactive_file, memory_limit, memsw_limit] = value;
    let value = V1Stat {
        unevictable,
        total_unevictable,
        inactive_file,
        total_inactive_file,
        hierarchical_memory_limit: memory_limit.map(Limit::from_v1),
        hierarchical_memsw_limit: memsw_limit.map(Limit::from_v1),
    };
    Ok(Parsed { value, field_errors })
}

/// v1 `memory.oom_control`: `oom_kill_disable`, `under_oom` and (since v4.13) `oom_kill`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OomControl {
    pub oom_kill_disable: Option<u64>,
    pub(crate) under_oom: Option<u64>,
    /// Processes the OOM killer killed in this cgroup.
    pub oom_kill: Option<u64>,
}

pub fn parse_oom_control(text: &str) -> Result<OomControl, ParseError> {
    parse_oom_control_fields(text)?.strict()
}

pub(crate) fn parse_oom_control_fields(text: &str) -> Result<Parsed<OomControl>, ParseError> {
    let parsed = parse_pairs(text, ["oom_kill_disable", "under_oom", "oom_kill"])?;
    let [oom_kill_disable, under_oom, oom_kill] = parsed.value;
    Ok(Parsed { value: OomControl { oom_kill_disable, under_oom, oom_kill }, field_errors: parsed.field_errors })
}

/// The fields of v2 `memory.stat` the exporter uses (the file is hierarchical, and its key
/// order changes between kernel versions).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct V2Stat {
    pub unevictable: Option<u64>,
    pub inactive_file: Option<u64>,
}

pub fn parse_v2_stat(text: &str) -> Result<V2Stat, ParseError> {
    parse_v2_stat_fields(text)?.strict()
}

pub fn parse_v2_stat_fields(text: &str) -> Result<Parsed<V2Stat>, ParseError> {
    let parsed = parse_pairs(text, ["unevictable", "inactive_file"])?;
    let [unevictable, inactive_file] = parsed.value;
    Ok(Parsed { value: V2Stat { unevictable, inactive_file }, field_errors: parsed.field_errors })
}

/// v2 `memory.events` (hierarchical counts).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct V2Events {
    pub low: Option<u64>,
    pub high: Option<u64>,
    /// Times usage was about to exceed `memory.max`.
    pub max: Option<u64>,
    /// Times the OOM path was entered.
    pub oom: Option<u64>,
    /// Processes killed by the OOM killer.
    pub oom_kill: Option<u64>,
    pub(crate) oom_group_kill: Option<u64>,
}

pub fn parse_v2_events(text: &str) -> Result<V2Events, ParseError> {
    parse_v2_events_fields(text)?.strict()
}

pub(crate) fn parse_v2_events_fields(text: &str) -> Result<Parsed<V2Events>, ParseError> {
    let parsed = parse_pairs(text, ["low", "high", "max", "oom", "oom_kill", "oom_group_kill"])?;
    let [low, high, max, oom, oom_kill, oom_group_kill] = parsed.value;
    let value = V2Events { low, high, max, oom, oom_kill, oom_group_kill };
    Ok(Parsed { value, field_errors: parsed.field_errors })
}

/// Parses `key value` lines, returning the values of `keys` in their order. A known key with a
/// missing or malformed value is an error of that field only; unknown keys are skipped. A text
/// without a single `key number` line is an error, so an empty or garbage file is reported
/// rather than read as "nothing".
fn parse_pairs<const N: usize>(text: &str, keys: [&str; N]) -> Result<Parsed<[Option<u64>; N]>, ParseError> {
    let mut parsed = Parsed { value: [None; N], field_errors: Vec::new() };
    let mut numeric_lines = 0usize;
    for (index, line) in text.lines().enumerate() {
        let mut fields = line.split_ascii_whitespace();
        let Some(key) = fields.next() else { continue };
        let value = fields.next();
        let Some(slot) = keys.iter().position(|k| *k == key) else {
            if value.is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())) {
                numeric_lines += 1;
            }
            continue;
        };
        numeric_lines += 1;
        let line_no = index + 1;
        let value = match value {
            Some(value) => field_u64(line_no, key, value),
            None => Err(ParseError::MissingValue { line: line_no, key: key.to_owned() }),
        };
        match value {
            Ok(value) => parsed.value[slot] = Some(value),
            Err(error) => parsed.field_errors.push(error),
        }
    }
    if numeric_lines == 0 {
        return Err(ParseError::Empty);
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_u64;

    const ROOT_STAT: &str = include_str!("../../../tests/fixtures/captures/cgv1_root_memory.stat");
    const ROOT_LIMIT: &str = include_str!("../../../tests/fixtures/captures/cgv1_root_memory.limit_in_bytes");
    const ROOT_MEMSW_LIMIT: &str =
        include_str!("../../../tests/fixtures/captures/cgv1_root_memory.memsw.limit_in_bytes");
    const ROOT_USAGE: &str = include_str!("../../../tests/fixtures/captures/cgv1_root_memory.usage_in_bytes");
    const ROOT_MAX_USAGE: &str = include_str!("../../../tests/fixtures/captures/cgv1_root_memory.max_usage_in_bytes");
    const ROOT_FAILCNT: &str = include_str!("../../../tests/fixtures/captures/cgv1_root_memory.failcnt");
    const ROOT_OOM: &str = include_str!("../../../tests/fixtures/captures/cgv1_root_memory.oom_control");

    #[test]
    fn captured_v1_root_files() {
        assert_eq!(parse_v1_limit(ROOT_LIMIT), Ok(Limit::Unlimited));
        assert_eq!(parse_v1_limit(ROOT_MEMSW_LIMIT), Ok(Limit::Unlimited));
        assert_eq!(parse_u64(ROOT_USAGE), Ok(895455232));
        assert_eq!(parse_u64(ROOT_MAX_USAGE), Ok(1278595072));
        assert_eq!(parse_u64(ROOT_FAILCNT), Ok(0));
        assert_eq!(
            parse_oom_control(ROOT_OOM),
            Ok(OomControl { oom_kill_disable: Some(0), under_oom: Some(0), oom_kill: Some(0) })
        );
        let stat = parse_v1_stat(ROOT_STAT).unwrap();
        assert_eq!(stat.unevictable, Some(13049856));
        assert_eq!(stat.total_unevictable, Some(516452352));
        assert_eq!(stat.subtree_unevictable(), Some(516452352));
        assert_eq!((stat.inactive_file, stat.total_inactive_file), (Some(98304), Some(164372480)));
        assert_eq!(stat.subtree_inactive_file(), Some(164372480), "the subtree's, like usage_in_bytes");
        assert_eq!(
            working_set(parse_u64(ROOT_USAGE).unwrap(), stat.subtree_inactive_file().unwrap()),
            895455232 - 164372480
        );
        assert_eq!(stat.hierarchical_memory_limit, Some(Limit::Unlimited));
        assert_eq!(stat.hierarchical_memsw_limit, Some(Limit::Unlimited));
    }

    #[test]
    fn the_v1_sentinel_is_unlimited_for_every_page_size() {
        for sentinel in
            ["9223372036854771712\n", "9223372036854759424\n", "9223372036854710272\n", "9223372036854775807\n"]
        {
            assert_eq!(parse_v1_limit(sentinel), Ok(Limit::Unlimited), "{sentinel}");
        }
        assert_eq!(parse_v1_limit("4611686018427387904\n"), Ok(Limit::Unlimited), "2^62 itself");
        assert_eq!(parse_v1_limit("4611686018427387903\n"), Ok(Limit::Bytes((1 << 62) - 1)));
        assert_eq!(parse_v1_limit("17179869184\n"), Ok(Limit::Bytes(16 << 30)));
        assert_eq!(parse_v1_limit("0\n"), Ok(Limit::Bytes(0)));
        let stat = parse_v1_stat("unevictable 0\nhierarchical_memory_limit 9223372036854710272\n").unwrap();
        assert_eq!(stat.hierarchical_memory_limit, Some(Limit::Unlimited));
    }

    #[test]
    fn v1_stat_of_a_limited_child_without_swap_accounting() {
        let text = "cache 4096\nrss 536870912\nunevictable 33554432\nhierarchical_memory_limit 268435456\ntotal_cache \
            4096\ntotal_unevictable 67108864\n";
        let stat = parse_v1_stat(text).unwrap();
        assert_eq!(stat.hierarchical_memory_limit, Some(Limit::Bytes(256 << 20)));
        assert_eq!(stat.hierarchical_memsw_limit, None, "absent without swap accounting");
        assert_eq!(stat.subtree_unevictable(), Some(64 << 20));
        assert_eq!(stat.subtree_inactive_file(), None, "absent, not zero");
        // A kernel that printed only local keys.
        assert_eq!(parse_v1_stat("unevictable 5\n").unwrap().subtree_unevictable(), Some(5));
        assert_eq!(parse_v1_stat("inactive_file 8192\nunevictable 5\n").unwrap().subtree_inactive_file(), Some(8192));
    }

    #[test]
    fn v2_limits() {
        assert_eq!(parse_v2_limit("max\n"), Ok(Limit::Unlimited));
        assert_eq!(parse_v2_limit("34359738368\n"), Ok(Limit::Bytes(32 << 30)));
        assert_eq!(parse_v2_limit("0\n"), Ok(Limit::Bytes(0)));
        assert!(parse_v2_limit("").is_err());
        assert!(parse_v2_limit("Max\n").is_err());
        assert!(parse_v2_limit("-1\n").is_err());
        assert!(parse_v2_limit("max max\n").is_err());
        assert!(parse_v2_limit("99999999999999999999999\n").is_err());
    }

    #[test]
    fn v2_events_and_stat() {
        // The §5.3 example of a limited container leaf.
        let events = parse_v2_events("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n").unwrap();
        assert_eq!(
            events,
            V2Events {
                low: Some(0),
                high: Some(0),
                max: Some(12),
                oom: Some(1),
                oom_kill: Some(1),
                oom_group_kill: Some(0)
            }
        );
        // Older kernels lack oom_group_kill; newer ones add sock_throttled.
        let events = parse_v2_events("low 0\nhigh 3\nmax 0\noom 0\noom_kill 0\nsock_throttled 7\n").unwrap();
        assert_eq!(events.oom_group_kill, None);
        assert_eq!(events.high, Some(3));
        let stat = parse_v2_stat(
            "anon 7340032\nfile 1048576\nshmem 0\nunevictable 4194304\nworkingset_refault_anon 0\npgfault 120\n",
        )
        .unwrap();
        assert_eq!(stat.unevictable, Some(4 << 20));
        assert_eq!(stat.inactive_file, None, "absent, not zero");
        assert_eq!(parse_v2_stat("anon 1\n").unwrap().unevictable, None, "absent, not zero");
        // The LRU lines as 6.x prints them, between the THP and the unevictable lines;
        // workingset_* and the active_/inactive_ prefixes must not be confused with them.
        let stat = parse_v2_stat(
            "anon 943718400\nfile 83886080\nanon_thp 471859200\ninactive_anon 849346560\nactive_anon \
                94371840\ninactive_file 41943040\nactive_file 41943040\nunevictable 0\nworkingset_refault_file 0\n",
        )
        .unwrap();
        assert_eq!((stat.inactive_file, stat.unevictable), (Some(41943040), Some(0)));
        assert!(matches!(parse_v2_stat("inactive_file -4096\n"), Err(ParseError::NotANumber { line: 1, .. })));
    }

    #[test]
    fn malformed_input_is_an_error_naming_the_line() {
        assert_eq!(
            parse_v1_stat("cache 1\nunevictable lots\n"),
            Err(ParseError::NotANumber { line: 2, key: "unevictable".into(), value: "lots".into() })
        );
        assert_eq!(
            parse_oom_control("oom_kill_disable 0\nunder_oom 0\noom_kill\n"),
            Err(ParseError::MissingValue { line: 3, key: "oom_kill".into() })
        );
        assert!(matches!(parse_v2_events("max -1\n"), Err(ParseError::NotANumber { .. })));
        assert!(matches!(parse_v2_events("max 18446744073709551616\n"), Err(ParseError::Overflow { .. })));
        assert_eq!(parse_v2_events(""), Err(ParseError::Empty));
        assert_eq!(parse_v1_stat("\n\n"), Err(ParseError::Empty));
        assert_eq!(parse_v2_stat("garbage without numbers\n"), Err(ParseError::Empty));
        let binary = String::from_utf8_lossy(&[0xff, b' ', 0x00, b'\n', 0x80]).into_owned();
        assert_eq!(parse_oom_control(&binary), Err(ParseError::Empty));
        assert!(parse_u64("12 kB\n").is_err());
        assert!(parse_v1_limit("").is_err());
    }

    #[test]
    fn a_malformed_stat_field_costs_only_that_field() {
        let parsed = parse_v1_stat_fields("cache 1\nunevictable lots\ntotal_inactive_file 4096\n").unwrap();
        assert_eq!((parsed.value.unevictable, parsed.value.total_inactive_file), (None, Some(4096)));
        assert_eq!(parsed.field_errors.len(), 1);
        let parsed = parse_v2_stat_fields("unevictable 99999999999999999999\ninactive_file 8192\n").unwrap();
        assert_eq!((parsed.value.unevictable, parsed.value.inactive_file), (None, Some(8192)));
        assert!(matches!(parsed.field_errors[..], [ParseError::Overflow { line: 1, .. }]));
    }

    #[test]
    fn working_set_is_usage_without_inactive_file_floored_at_zero() {
        // A loader streaming a dataset: most of its usage is reclaimable cache.
        assert_eq!(working_set(4081057792, 3355443200), 725614592);
        assert_eq!(working_set(4096, 0), 4096);
        assert_eq!(working_set(0, 0), 0);
        // memory.stat lags usage: just after a cached file is deleted, inactive_file can
        // still show pages that usage no longer holds. Never negative, never a wrap.
        assert_eq!(working_set(1 << 20, 3 << 20), 0);
        assert_eq!(working_set(0, u64::MAX), 0);
    }

    #[test]
    fn limits_combine_to_the_tighter_one() {
        assert_eq!(Limit::Bytes(5).min(Limit::Unlimited), Limit::Bytes(5));
        assert_eq!(Limit::Unlimited.min(Limit::Bytes(7)), Limit::Bytes(7));
        assert_eq!(Limit::Bytes(9).min(Limit::Bytes(7)), Limit::Bytes(7));
        assert_eq!(Limit::Unlimited.min(Limit::Unlimited), Limit::Unlimited);
        assert_eq!(Limit::Unlimited.bytes(), None);
    }
}
