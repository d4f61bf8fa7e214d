//! Fuzzing of every parser, without nightly or extra crates: a deterministic mutation fuzzer
//! seeded from the fixture trees and the real captures.
//!
//! Each target takes its seed corpus (the fixture files the parser reads in production), checks
//! that every seed parses, then mutates seeds for a time budget: bit flips, truncations, splices
//! of two seeds, numbers replaced by huge or malformed ones, NUL bytes, invalid UTF-8, line
//! edits, blown-up sizes and plain random bytes. Text passes through the same lossy UTF-8
//! conversion as `fsroot::read_into`. A target fails on a panic or when an oracle (a property
//! the parser's output must have, beyond not panicking) is violated; the input is saved and the
//! message says how to replay the exact case.
//!
//! - `cargo test --lib fuzz` runs every target for `FUZZ_SECONDS` (default 2) each;
//! - `FUZZ_SECONDS=600 cargo test --release --lib fuzz -- --test-threads=2` is the long run;
//! - `FUZZ_SEED=<n>` changes the stream of cases, `FUZZ_CASE=<n>` replays one case.
//!
//! Findings become regression tests beside the parser that had the bug (see
//! docs/reliability.md).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// splitmix64: tiny, fast and deterministic, so a case number reproduces its input.
#[derive(Clone)]
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// FNV-1a, to derive a case's stream from the seed, the target and the case number.
fn mix(seed: u64, target: &str, case: u64) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for byte in target.bytes().chain(case.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// Numbers a kernel never prints (or prints only at the edge) and shapes that look numeric.
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "+1",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999999999999",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "9223372036854771712",
    "4611686018427387904",
    "1e10",
    "0x1f",
    "1.5",
    "-0",
    "",
    " ",
    "NaN",
    "inf",
    "max",
    "unlimited",
    "N/A",
    "\u{0663}",
    "00000000000000000000000000000001",
];

/// Bytes and short tokens that mean something to one parser or another.
const TOKENS: &[&[u8]] = &[
    b"\0",
    b"\n",
    b"\t",
    b" ",
    b":",
    b"=",
    b"[",
    b"]",
    b" kB",
    b"max",
    b"unlimited",
    b"\r\n",
    b"\xff\xfe",
    b"\xc3",
    b"\xe2\x82",
    b"\x80",
    b"\xef\xbb\xbf",
    b" (deleted)",
    b"..",
    b"/",
    b"::",
    b"0::/",
    b"Node 0 ",
    b"#",
    b"\"",
    b"\\",
    b"{",
    b"}",
];

fn random_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next() as u8).collect()
}

/// The start and end of a random line of `data` (without its newline).
fn random_line(rng: &mut Rng, data: &[u8]) -> (usize, usize) {
    let starts: Vec<usize> = std::iter::once(0).chain(data.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1)).collect();
    let start = *rng.pick(&starts);
    let end = data[start..].iter().position(|&b| b == b'\n').map_or(data.len(), |p| start + p);
    (start, end)
}

/// One mutation of `data`; `seeds` supplies the other half of splices.
fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    let len = data.len();
    match rng.below(16) {
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = *rng.pick(&[0u8, 0xff, b'\n', b'\t', b' ', b':', b'0', b'9', 0x7f, 0x80]);
        }
        2 if len > 0 => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(16)).min(len);
            data.drain(start..end);
        }
        3 => {
            let at = rng.below(len + 1);
            let token = rng.pick(TOKENS).to_vec();
            data.splice(at..at, token);
        }
        4 if len > 0 => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(64)).min(len);
            let copy = data[start..end].to_vec();
            let at = rng.below(len + 1);
            data.splice(at..at, copy);
        }
        5 => data.truncate(rng.below(len + 1)),
        6 => {
            let other = rng.pick(seeds);
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        7 | 8 => {
            // Replace a run of digits (most values) with an edge-case number.
            let digits: Vec<usize> = data.iter().enumerate().filter(|(_, b)| b.is_ascii_digit()).map(|(i, _)| i).collect();
            if let Some(&start) = digits.get(rng.below(digits.len())) {
                let mut begin = start;
                while begin > 0 && data[begin - 1].is_ascii_digit() {
                    begin -= 1;
                }
                let end = data[start..].iter().position(|b| !b.is_ascii_digit()).map_or(len, |p| start + p);
                let number = rng.pick(NUMBERS).as_bytes().to_vec();
                data.splice(begin..end, number);
            }
        }
        9 => {
            let (start, end) = random_line(rng, data);
            match rng.below(4) {
                0 => {
                    data.drain(start..(end + 1).min(data.len()));
                }
                1 => {
                    let mut line = data[start..end].to_vec();
                    line.push(b'\n');
                    data.splice(start..start, line);
                }
                2 => {
                    // Join with the next line.
                    if end < data.len() {
                        data.remove(end);
                    }
                }
                _ => {
                    data.splice(end..end, b"\r".iter().copied());
                }
            }
        }
        10 => {
            // Whitespace the kernel is exact about: tabs become spaces, padding disappears.
            for b in data.iter_mut() {
                if *b == b'\t' && rng.chance(2) {
                    *b = b' ';
                }
            }
            if rng.chance(2) {
                data.retain(|&b| b != b' ' || rng.chance(2));
            }
        }
        11 => {
            let at = rng.below(len + 1);
            let nuls = vec![0u8; 1 + rng.below(8)];
            data.splice(at..at, nuls);
        }
        12 => {
            let at = rng.below(len + 1);
            let count = 1 + rng.below(8);
            let junk = random_bytes(rng, count).into_iter().map(|b| b | 0x80).collect::<Vec<_>>();
            data.splice(at..at, junk);
        }
        13 if rng.chance(64) => {
            // Enormous: a line repeated up to about the 1 MiB read bound.
            let (start, end) = random_line(rng, data);
            let mut line = data[start..end].to_vec();
            line.push(b'\n');
            let times = (1 << 20) / line.len();
            let blown: Vec<u8> = line.iter().copied().cycle().take(line.len() * times.min(1 << 16)).collect();
            data.splice(start..start, blown);
        }
        14 if rng.chance(8) => {
            let count = rng.below(512);
            *data = random_bytes(rng, count);
        }
        _ => {
            let at = rng.below(len + 1);
            let count = 1 + rng.below(4);
            let bytes = random_bytes(rng, count);
            data.splice(at..at, bytes);
        }
    }
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = rng.pick(seeds).clone();
    for _ in 0..1 + rng.below(4) {
        mutate_once(rng, &mut data, seeds);
    }
    data
}

/// What a parser made of one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accepted,
    Rejected,
}

fn verdict<T, E>(result: &Result<T, E>) -> Verdict {
    if result.is_ok() {
        Verdict::Accepted
    } else {
        Verdict::Rejected
    }
}

/// What a target must show besides surviving every case.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Some mutated inputs are accepted and some rejected: the mutations reach both paths.
    BothPaths,
    /// The parser is total (it accepts anything); only accepted inputs are required.
    AlwaysAccepts,
}

/// Text as the collectors see it: `fsroot::read_into` replaces invalid UTF-8.
fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

fn escape_preview(bytes: &[u8]) -> String {
    let shown: String = bytes.iter().take(600).flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect();
    if bytes.len() > 600 {
        format!("{shown}... ({} bytes)", bytes.len())
    } else {
        shown
    }
}

/// Runs one target: every seed must be accepted, then mutated cases for the time budget.
fn fuzz(target: &str, seeds: Vec<Vec<u8>>, expect: Expect, mut check: impl FnMut(&[u8]) -> Result<Verdict, String>) {
    assert!(!seeds.is_empty(), "{target}: no seeds; the corpus selection found no fixture files");
    for (index, seed) in seeds.iter().enumerate() {
        match catch_unwind(AssertUnwindSafe(|| check(seed))) {
            Ok(Ok(Verdict::Accepted)) => {}
            Ok(Ok(Verdict::Rejected)) => panic!("{target}: seed {index} is rejected, but the corpus holds valid files: {}", escape_preview(seed)),
            Ok(Err(message)) => panic!("{target}: seed {index}: {message}: {}", escape_preview(seed)),
            Err(_) => panic!("{target}: seed {index} panics: {}", escape_preview(seed)),
        }
    }
    let seconds: f64 = env_number("FUZZ_SECONDS").unwrap_or(2.0);
    let seed: u64 = env_number("FUZZ_SEED").unwrap_or(0x6d65_6d6c_6f63_6b21);
    let only: Option<u64> = env_number("FUZZ_CASE");
    let deadline = Instant::now() + Duration::from_secs_f64(seconds.max(0.0));
    let (mut cases, mut accepted, mut rejected) = (0u64, 0u64, 0u64);
    let mut case = only.unwrap_or(0);
    loop {
        let mut rng = Rng(mix(seed, target, case));
        let input = mutate(&mut rng, &seeds);
        let outcome = catch_unwind(AssertUnwindSafe(|| check(&input)));
        let failure = match outcome {
            Ok(Ok(Verdict::Accepted)) => {
                accepted += 1;
                None
            }
            Ok(Ok(Verdict::Rejected)) => {
                rejected += 1;
                None
            }
            Ok(Err(message)) => Some(message),
            Err(panic) => Some(format!(
                "panicked: {}",
                panic.downcast_ref::<String>().map(String::as_str).or_else(|| panic.downcast_ref::<&str>().copied()).unwrap_or("?")
            )),
        };
        if let Some(message) = failure {
            let dir = std::env::temp_dir().join("memlock-fuzz-findings");
            let _ = std::fs::create_dir_all(&dir);
            let saved = dir.join(format!("{target}-{seed:x}-{case}.bin"));
            let _ = std::fs::write(&saved, &input);
            panic!(
                "fuzz target {target}, case {case}: {message}\n  replay: FUZZ_SEED={seed} FUZZ_CASE={case} cargo test --lib fuzz::\n  input saved to {}\n  input: {}",
                saved.display(),
                escape_preview(&input)
            );
        }
        cases += 1;
        case += 1;
        if only.is_some() || (cases % 64 == 0 && Instant::now() >= deadline) {
            break;
        }
    }
    eprintln!("fuzz {target}: {cases} cases, {accepted} accepted, {rejected} rejected, {} seeds", seeds.len());
    if only.is_none() {
        assert!(accepted > 0, "{target}: no mutated input was accepted in {cases} cases: the mutations never reach the success path");
        if matches!(expect, Expect::BothPaths) {
            assert!(rejected > 0, "{target}: no mutated input was rejected in {cases} cases: the parser accepts garbage");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The corpus: fixture files picked by name, read at run time so new fixtures join by themselves.

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Every regular file under `dir` (symlinks not followed), with its path.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            walk(&entry.path(), out);
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
}

fn fixture_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    walk(&fixtures(), &mut files);
    files
}

/// The contents of the fixture files whose name satisfies `pick`, deduplicated.
fn corpus(pick: impl Fn(&str) -> bool) -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = fixture_files()
        .iter()
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&pick))
        .filter_map(|p| std::fs::read(p).ok())
        .collect();
    seeds.sort();
    seeds.dedup();
    seeds
}

/// Same result after appending a line the parser must skip.
fn unchanged_by<T: PartialEq + std::fmt::Debug>(parse: impl Fn(&str) -> T, text: &str, extra: &str) -> Result<(), String> {
    let before = parse(text);
    let after = parse(&format!("{text}\n{extra}\n"));
    if before != after {
        return Err(format!("appending {extra:?} changed the result from {before:?} to {after:?}"));
    }
    Ok(())
}

mod kernel_files {
    use super::*;
    use crate::kernel::{self, memcg, meminfo, pid_cgroup, pid_limits, pid_status, proc_cgroups, rdma_cgroup, rdma_sysfs, sysvm, vmstat};

    #[test]
    fn meminfo() {
        let seeds = corpus(|n| n == "meminfo" || n == "proc_meminfo" || n == "node0_meminfo");
        fuzz("meminfo", seeds, Expect::BothPaths, |bytes| {
            let text = text(bytes);
            let parsed = meminfo::parse(&text);
            if parsed.is_ok() {
                unchanged_by(meminfo::parse, &text, "Zzz_NotAKey:    7 kB")?;
            }
            Ok(verdict(&parsed))
        });
    }

    #[test]
    fn vmstat() {
        let seeds = corpus(|n| n == "vmstat" || n == "proc_vmstat");
        fuzz("vmstat", seeds, Expect::BothPaths, |bytes| {
            let text = text(bytes);
            let parsed = vmstat::parse(&text);
            if let Ok(stat) = &parsed {
                if let (Some(pinned), Some(acquired)) = (stat.pinned_pages(), stat.nr_foll_pin_acquired) {
                    if pinned > acquired {
                        return Err(format!("{pinned} pinned pages out of {acquired} acquired"));
                    }
                }
                unchanged_by(vmstat::parse, &text, "zzz_not_a_counter 7")?;
            }
            Ok(verdict(&parsed))
        });
    }

    #[test]
    fn pid_status() {
        let seeds = corpus(|n| n == "status" || n == "proc_self_status");
        fuzz("pid_status", seeds, Expect::BothPaths, |bytes| {
            let text = text(bytes);
            let parsed = pid_status::parse(&text);
            if let Ok(status) = &parsed {
                if status.locked_bytes.is_some_and(|b| b % 1024 != 0) || status.pinned_bytes.is_some_and(|b| b % 1024 != 0) {
                    return Err(format!("kB values must come out as whole KiB: {status:?}"));
                }
                if status.name.contains('\n') {
                    return Err(format!("the command name spans lines: {:?}", status.name));
                }
                unchanged_by(|t| pid_status::parse(t).map(|s| format!("{s:?}")), &text, "Zzz:\tnot a key")?;
            }
            Ok(verdict(&parsed))
        });
    }

    #[test]
    fn pid_limits() {
        let seeds = corpus(|n| n == "limits" || n == "proc_self_limits");
        fuzz("pid_limits", seeds, Expect::BothPaths, |bytes| {
            let text = text(bytes);
            let parsed = pid_limits::parse(&text);
            if parsed.is_ok() {
                unchanged_by(pid_limits::parse, &text, "Max zzz                   1                    1                    zzz       ")?;
            }
            Ok(verdict(&parsed))
        });
    }

    #[test]
    fn pid_cgroup() {
        let seeds = corpus(|n| n == "cgroup" || n == "proc_self_cgroup_hybrid_v1");
        fuzz("pid_cgroup", seeds, Expect::BothPaths, |bytes| {
            let text = text(bytes);
            let parsed = pid_cgroup::memory_path(&text);
            if let Ok(path) = &parsed {
                if path.is_some_and(|p| !p.starts_with('/') || p.contains('\n')) {
                    return Err(format!("the path {path:?} is not one absolute path"));
                }
                unchanged_by(|t| pid_cgroup::memory_path(t).map(|p| p.map(str::to_owned)), &text, "12:zzz:/elsewhere")?;
            }
            Ok(verdict(&parsed))
        });
    }

    #[test]
    fn proc_cgroups() {
        let seeds = corpus(|n| n == "proc_cgroups" || n == "cgroups");
        fuzz("proc_cgroups", seeds, Expect::BothPaths, |bytes| {
            let text = text(bytes);
            let parsed = proc_cgroups::parse(&text);
            if let Ok(controllers) = &parsed {
                if controllers.is_empty() || controllers.iter().any(|c| c.name.is_empty() || c.name.bytes().any(|b| b.is_ascii_whitespace())) {
                    return Err(format!("controllers must be non-empty names: {controllers:?}"));
                }
                unchanged_by(proc_cgroups::parse, &text, "#subsys_name\thierarchy\tnum_cgroups\tenabled")?;
            }
            Ok(verdict(&parsed))
        });
    }

    #[test]
    fn rdma_cgroup() {
        let seeds = corpus(|n| n == "rdma.current" || n == "rdma.max");
        fuzz("rdma_cgroup", seeds, Expect::BothPaths, |bytes| {
            let text = text(bytes);
            let parsed = rdma_cgroup::parse(&text);
            if let Ok(devices) = &parsed {
                if devices.iter().any(|d| d.device.is_empty() || d.device.bytes().any(|b| b.is_ascii_whitespace() || b == b'=')) {
                    return Err(format!("device names must be single words: {devices:?}"));
                }
                unchanged_by(rdma_cgroup::parse, &text, "")?;
            }
            Ok(verdict(&parsed))
        });
    }

    /// The memory cgroup files, each through the parser the collector uses for it.
    #[test]
    fn memcg() {
        const FILES: &[&str] = &[
            "memory.usage_in_bytes",
            "memory.failcnt",
            "memory.current",
            "memory.limit_in_bytes",
            "memory.memsw.limit_in_bytes",
            "memory.max",
            "memory.high",
            "memory.swap.max",
            "memory.stat",
            "memory.oom_control",
            "memory.events",
        ];
        let mut by_file: Vec<(&str, Vec<Vec<u8>>)> = FILES.iter().map(|f| (*f, corpus(|n| n == *f || n == format!("cgv1_root_{f}")))).collect();
        by_file.retain(|(_, seeds)| !seeds.is_empty());
        assert!(by_file.len() >= 10, "memory cgroup fixtures: {:?}", by_file.iter().map(|(f, _)| f).collect::<Vec<_>>());
        for (file, seeds) in by_file {
            let v2_stat = |text: &str| text.contains("anon ") || text.contains("file_mapped");
            fuzz(file, seeds, Expect::BothPaths, |bytes| {
                let text = text(bytes);
                let verdict = match file {
                    "memory.usage_in_bytes" | "memory.failcnt" | "memory.current" => verdict(&kernel::parse_u64(&text)),
                    "memory.limit_in_bytes" | "memory.memsw.limit_in_bytes" => {
                        let parsed = memcg::parse_v1_limit(&text);
                        if let Ok(memcg::Limit::Bytes(bytes)) = parsed {
                            if bytes >= memcg::V1_UNLIMITED_FROM {
                                return Err(format!("{bytes} is the unlimited sentinel, not a limit"));
                            }
                        }
                        verdict(&parsed)
                    }
                    "memory.max" | "memory.high" | "memory.swap.max" => verdict(&memcg::parse_v2_limit(&text)),
                    "memory.stat" if v2_stat(&text) => {
                        let parsed = memcg::parse_v2_stat(&text);
                        if parsed.is_ok() {
                            unchanged_by(memcg::parse_v2_stat, &text, "zzz_not_a_key 7")?;
                        }
                        verdict(&parsed)
                    }
                    "memory.stat" => {
                        let parsed = memcg::parse_v1_stat(&text);
                        if let Ok(stat) = &parsed {
                            for limit in [stat.hierarchical_memory_limit, stat.hierarchical_memsw_limit].into_iter().flatten() {
                                if limit.bytes().is_some_and(|b| b >= memcg::V1_UNLIMITED_FROM) {
                                    return Err(format!("{limit:?} is the unlimited sentinel, not a limit"));
                                }
                            }
                            unchanged_by(memcg::parse_v1_stat, &text, "zzz_not_a_key 7")?;
                        }
                        verdict(&parsed)
                    }
                    "memory.oom_control" => {
                        let parsed = memcg::parse_oom_control(&text);
                        if parsed.is_ok() {
                            unchanged_by(memcg::parse_oom_control, &text, "zzz_not_a_key 7")?;
                        }
                        verdict(&parsed)
                    }
                    _ => {
                        let parsed = memcg::parse_v2_events(&text);
                        if parsed.is_ok() {
                            unchanged_by(memcg::parse_v2_events, &text, "zzz_not_a_key 7")?;
                        }
                        verdict(&parsed)
                    }
                };
                Ok(verdict)
            });
        }
    }

    /// Single-number sysfs and sysctl files (hugepage pools, vm sysctls).
    #[test]
    fn single_numbers() {
        let seeds = corpus(|n| {
            ["nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages", "nr_overcommit_hugepages", "max_map_count", "overcommit_memory"]
                .iter()
                .any(|k| n == *k || n.ends_with(&format!("_{k}")))
        });
        fuzz("single_numbers", seeds, Expect::BothPaths, |bytes| {
            let text = text(bytes);
            let unsigned = kernel::parse_u64(&text);
            let signed = kernel::parse_i64(&text);
            if let (Ok(u), Ok(i)) = (&unsigned, &signed) {
                if u64::try_from(*i).ok() != Some(*u) {
                    return Err(format!("u64 {u} and i64 {i} of the same text differ"));
                }
            }
            Ok(verdict(&unsigned))
        });
    }

    #[test]
    fn rdma_sysfs_values() {
        let numbered = corpus(|n| n == "state" || n == "phys_state" || n == "node_type");
        fuzz("rdma_sysfs_numbered", numbered, Expect::BothPaths, |bytes| {
            let parsed = rdma_sysfs::parse_numbered(&text(bytes));
            if let Ok(n) = &parsed {
                if n.name.len() > rdma_sysfs::MAX_LABEL_BYTES || n.name.contains('\n') {
                    return Err(format!("label {:?} is not one bounded line", n.name));
                }
            }
            Ok(verdict(&parsed))
        });
        fuzz("rdma_sysfs_rate", corpus(|n| n == "rate"), Expect::BothPaths, |bytes| Ok(verdict(&rdma_sysfs::parse_rate(&text(bytes)))));
        let counters: Vec<Vec<u8>> = fixture_files()
            .iter()
            .filter(|p| p.components().any(|c| c.as_os_str() == "counters" || c.as_os_str() == "hw_counters"))
            .filter_map(|p| std::fs::read(p).ok())
            .collect();
        fuzz("rdma_sysfs_counter", counters, Expect::BothPaths, |bytes| Ok(verdict(&rdma_sysfs::parse_counter(&text(bytes)))));
        let labels = corpus(|n| ["fw_ver", "hca_type", "board_id", "node_guid", "link_layer", "node_desc"].contains(&n));
        fuzz("rdma_sysfs_label", labels, Expect::AlwaysAccepts, |bytes| {
            let label = rdma_sysfs::label_value(&text(bytes));
            if label.len() > rdma_sysfs::MAX_LABEL_BYTES || label.contains('\n') || label != label.trim() {
                return Err(format!("label {label:?} is not one trimmed, bounded line"));
            }
            let counter = rdma_sysfs::port_counter(&label);
            if counter.scale != 1 && counter.scale != 4 {
                return Err(format!("scale {}", counter.scale));
            }
            Ok(Verdict::Accepted)
        });
    }

    #[test]
    fn thp_choices_and_hugepage_names() {
        let seeds = corpus(|n| n.starts_with("thp_") || n == "enabled" || n == "defrag" || n == "shmem_enabled");
        fuzz("thp_choice", seeds, Expect::BothPaths, |bytes| {
            let parsed = sysvm::parse_choice(&text(bytes));
            if let Ok(choice) = &parsed {
                if !choice.options.contains(&choice.active) {
                    return Err(format!("the active choice is not an option: {choice:?}"));
                }
            }
            Ok(verdict(&parsed))
        });
        let names: Vec<Vec<u8>> = ["hugepages-2048kB", "hugepages-1048576kB", "hugepages-64kB"].iter().map(|n| n.as_bytes().to_vec()).collect();
        fuzz("hugepage_dir_name", names, Expect::BothPaths, |bytes| {
            let size = sysvm::parse_hugepage_dir_name(&text(bytes));
            if size.is_some_and(|s| s % 1024 != 0) {
                return Err(format!("{size:?} is not whole KiB"));
            }
            Ok(if size.is_some() { Verdict::Accepted } else { Verdict::Rejected })
        });
    }
}

mod cgroup_paths {
    use super::*;
    use crate::kernel::cgroup_path;

    /// Every cgroup directory of the fixture trees, as the path the collector labels it with,
    /// plus the memory paths of the fixture processes.
    fn paths() -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for hierarchy in ["sys/fs/cgroup/memory", "sys/fs/cgroup/unified", "cgroup-v1", "cgroup-v2"] {
            let root = fixtures().join(hierarchy);
            let mut files = Vec::new();
            walk(&root, &mut files);
            for file in files {
                if let Some(dir) = file.parent().and_then(|d| d.strip_prefix(&root).ok()) {
                    out.push(format!("/{}", dir.display()).into_bytes());
                }
            }
        }
        for cgroup in corpus(|n| n == "cgroup") {
            for line in String::from_utf8_lossy(&cgroup).lines() {
                if let Some(path) = line.splitn(3, ':').nth(2) {
                    out.push(path.as_bytes().to_vec());
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn attribution_labels() {
        let seeds = paths();
        assert!(seeds.len() > 20, "{} cgroup paths", seeds.len());
        fuzz("cgroup_path", seeds, Expect::AlwaysAccepts, |bytes| {
            let path = text(bytes);
            let labels = cgroup_path::labels(&path);
            if labels.first() != Some(&("cgroup", path.to_string())) {
                return Err(format!("the first label is not the path: {labels:?}"));
            }
            let mut keys: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
            keys.sort_unstable();
            keys.dedup();
            if keys.len() != labels.len() {
                return Err(format!("a label name repeats: {labels:?}"));
            }
            for (key, value) in &labels[1..] {
                let ok = match *key {
                    "container_id" => value.len() == 64 && value.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                    "pod_uid" => value.len() == 36 && value.bytes().all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                    "qos_class" => ["guaranteed", "burstable", "besteffort"].contains(&value.as_str()),
                    "slurm_job" => !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()),
                    "slurm_step" | "systemd_unit" => !value.is_empty() && path.contains(value.as_str()),
                    _ => false,
                };
                if !ok {
                    return Err(format!("label {key}={value:?} is not well formed"));
                }
            }
            Ok(Verdict::Accepted)
        });
    }
}

mod netlink {
    use super::*;
    use crate::kernel::nldev::{self, cmd, nldev_type, ReplyReader};

    /// The byte samples of the captures file: `0010  08 00 ...` lines, a sample per `## N.`.
    fn samples() -> Vec<Vec<u8>> {
        let text = std::fs::read_to_string(fixtures().join("captures/rdma-netlink-samples.txt")).expect("netlink samples");
        let mut out: Vec<Vec<u8>> = Vec::new();
        for line in text.lines() {
            if line.starts_with("## ") && line[3..].split_once(". ").is_some_and(|(n, _)| n.parse::<u32>().is_ok()) {
                out.push(Vec::new());
                continue;
            }
            let Some((offset, hex)) = line.split_once("  ") else { continue };
            if offset.len() != 4 || !offset.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            if let Some(sample) = out.last_mut() {
                sample.extend(hex.split_whitespace().filter_map(|b| u8::from_str_radix(b, 16).ok()));
            }
        }
        // Concatenations too: a dump arrives as several messages in one datagram.
        let joined = out.concat();
        out.push(joined);
        out
    }

    #[test]
    fn replies_and_attributes() {
        let seeds = samples();
        assert!(seeds.len() >= 12, "{} netlink samples", seeds.len());
        fuzz("nldev", seeds, Expect::BothPaths, |bytes| {
            let mut items = 0usize;
            let mut any_ok = false;
            let mut longest_string = 0usize;
            for kind in [cmd::RES_GET, cmd::RES_MR_GET, cmd::GET, cmd::RES_MR_GET_RAW] {
                let seq = nldev::Header::parse(bytes).map(|h| h.seq).unwrap_or(0);
                let mut reader = ReplyReader::new(nldev_type(kind), seq, 64);
                let fed = reader.feed(bytes, |_, body| {
                    items += nldev::decode_mr_part(body).map(|p| p.entries.len()).unwrap_or(0);
                    items += nldev::decode_res_summary(body).map(|s| s.entries.len()).unwrap_or(0);
                    items += nldev::decode_device(body).map(|_| 1).unwrap_or(0);
                    for a in nldev::attrs(body).flatten() {
                        longest_string = longest_string.max(a.string().len());
                        let _ = (a.u8(), a.u32(), a.u64());
                        items += a.nested().flatten().count();
                    }
                    Ok(())
                });
                // A kernel error reply (EPERM, a failed dump) is a valid message too.
                any_ok |= !matches!(fed, Err(nldev::ReplyError::Decode(_)));
            }
            if longest_string > nldev::MAX_STRING_BYTES {
                return Err(format!("a string attribute of {longest_string} bytes (bound {})", nldev::MAX_STRING_BYTES));
            }
            // Every decoded item needs its own 4-byte attribute header: four request kinds,
            // four views of each body.
            if items > 16 * (bytes.len() / 4 + 1) {
                return Err(format!("{items} items out of {} bytes", bytes.len()));
            }
            Ok(if any_ok { Verdict::Accepted } else { Verdict::Rejected })
        });
    }
}

mod user_input {
    use super::*;
    use crate::config::{self, ConfigError, Sources};

    /// Configuration files: the shipped example, and one file per section and shape.
    fn config_seeds() -> Vec<Vec<u8>> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let mut seeds = vec![std::fs::read(root.join("docs/config.example.toml")).expect("docs/config.example.toml")];
        for text in [
            "[web]\nlisten_address = \"127.0.0.1:9478\"\ntelemetry_path = \"/metrics\"\nmax_requests = 40\n",
            "[collector.process]\ninterval = \"1s\"\nfull_scan_interval = \"5s\"\nmin_bytes = 1048576\ncomm_pattern = \"^python\"\ntop_n = 200\n",
            "[collector.cgroup]\nenabled = true\ninclude = [\"^/kubepods\"]\nexclude = [\"^/system.slice\"]\nmax_depth = 12\n",
            "[collector.rdma_netlink]\nenabled = false\n[collector.rdma_sysfs]\ninterval = \"5s\"\ninclude = [\"^mlx5_\"]\n",
            "[trend]\nwindow = \"30s\"\nmin_rise_bytes_per_second = 4096\n",
            "[alerting]\nalertmanager_urls = [\"http://127.0.0.1:9093\"]\ninstance = \"node-1\"\nresend_interval = \"30s\"\nusage_ratio_warning = 0.9\n",
            "[log]\nlevel = \"debug\"\nformat = \"json\"\n[path]\nprocfs = \"/host/proc\"\nsysfs = \"/host/sys\"\n",
            "",
        ] {
            seeds.push(text.as_bytes().to_vec());
        }
        seeds
    }

    #[test]
    fn configuration_files() {
        let dir = std::env::temp_dir().join(format!("memlock-fuzz-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.toml");
        let shown = path.display().to_string();
        let sources = Sources { file: Some(path.clone()), env: Some(Default::default()), flags: Vec::new() };
        fuzz("config_file", config_seeds(), Expect::BothPaths, |bytes| {
            std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
            match config::load(&sources) {
                Ok(cfg) => {
                    let bad_interval = cfg.collectors.iter().find(|c| c.interval < Duration::from_millis(100) || c.interval > Duration::from_secs(3600));
                    if let Some(c) = bad_interval {
                        return Err(format!("collector {} accepted with interval {:?}", c.name, c.interval));
                    }
                    if !cfg.telemetry_path.starts_with('/') || cfg.process.top_n == 0 {
                        return Err(format!("accepted an invalid configuration: {cfg:?}"));
                    }
                    Ok(Verdict::Accepted)
                }
                Err(err) => {
                    // A bad file must say which file, or which key and where it was set.
                    let message = err.to_string();
                    let clear = match &err {
                        ConfigError::File { .. } => message.contains(&shown),
                        ConfigError::UnknownKey { key, .. } | ConfigError::Invalid { key, .. } => !key.is_empty() && message.contains(key.as_str()),
                        ConfigError::Other(_) => message.contains(&shown),
                    };
                    if !clear {
                        return Err(format!("the error does not name the file or the key: {message}"));
                    }
                    Ok(Verdict::Rejected)
                }
            }
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn web_configuration_files() {
        let dir = std::env::temp_dir().join(format!("memlock-fuzz-web-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("web.yml");
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let mut seeds = vec![
            // The shipped example names certificates that do not exist here: without them.
            b"http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n    Strict-Transport-Security: max-age=31536000\n".to_vec(),
            b"basic_auth_users:\n  prometheus: $2y$10$X0h1bKHBCrqPjRsAUyRHLOHRyv0GHdNjUJ8o4gYFaVqVbIRMGNY9O\n".to_vec(),
            b"# nothing\n".to_vec(),
        ];
        seeds.push(std::fs::read(root.join("packaging/web-config.example.yml")).unwrap_or_default());
        seeds.retain(|s| !s.is_empty() && !s.windows(9).any(|w| w == b"cert_file"));
        fuzz("web_config_file", seeds, Expect::BothPaths, |bytes| {
            std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
            match crate::web::load(Some(&path)) {
                Ok(_) => Ok(Verdict::Accepted),
                Err(err) if err.to_string().contains(&path.display().to_string()) => Ok(Verdict::Rejected),
                Err(err) => Err(format!("the error does not name the file: {err}")),
            }
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn small_value_parsers() {
        let durations: Vec<Vec<u8>> = ["1s", "500ms", "1.5s", "2m", "1h", "30s"].iter().map(|s| s.as_bytes().to_vec()).collect();
        fuzz("duration", durations, Expect::BothPaths, |bytes| {
            let parsed = config::parse_duration(&text(bytes));
            if let Ok(d) = parsed {
                if d.as_secs_f64().is_nan() {
                    return Err(format!("{d:?}"));
                }
            }
            Ok(verdict(&parsed))
        });
        let addresses: Vec<Vec<u8>> = [":9478", "127.0.0.1:9478", "[::1]:9478", "0.0.0.0:0"].iter().map(|s| s.as_bytes().to_vec()).collect();
        fuzz("listen_address", addresses, Expect::BothPaths, |bytes| Ok(verdict(&crate::server::split_listen_address(&text(bytes)))));
        let urls: Vec<Vec<u8>> = ["http://127.0.0.1:9093", "http://am.example:9093/prefix/"].iter().map(|s| s.as_bytes().to_vec()).collect();
        fuzz("alertmanager_url", urls, Expect::BothPaths, |bytes| {
            let parsed = crate::alerting::Endpoint::parse(&text(bytes));
            if let Ok(endpoint) = &parsed {
                let authority = endpoint.base.strip_prefix("http://").and_then(|rest| rest.split('/').next()).unwrap_or("");
                if authority.is_empty() || authority.contains('@') || !endpoint.alerts_url().ends_with("/api/v2/alerts") {
                    return Err(format!("accepted {endpoint:?}"));
                }
            }
            Ok(verdict(&parsed))
        });
        // "prometheus:secret" and "a:" in base64: headers arrive from any client.
        let headers: Vec<Vec<u8>> = ["Basic cHJvbWV0aGV1czpzZWNyZXQ=", "basic YTo=", "Basic  cHJvbWV0aGV1czpzZWNyZXQ= "].iter().map(|s| s.as_bytes().to_vec()).collect();
        fuzz("basic_authorization", headers, Expect::BothPaths, |bytes| {
            let parsed = crate::web::parse_basic_authorization(bytes);
            if let Some((user, _)) = &parsed {
                if user.contains(':') {
                    return Err(format!("user {user:?} contains the separator"));
                }
            }
            Ok(if parsed.is_some() { Verdict::Accepted } else { Verdict::Rejected })
        });
    }
}

mod exposition {
    use super::*;
    use crate::exposition::{Exposition, Kind};

    /// One sample line of the text format: `name{k="v",...} value`, with every label value
    /// closed and escaped. Returns the label values unescaped.
    fn parse_sample(line: &str) -> Result<Vec<String>, String> {
        let Some(open) = line.find('{') else { return Err(format!("no labels in {line:?}")) };
        let mut values = Vec::new();
        let mut rest = &line[open + 1..];
        loop {
            let eq = rest.find("=\"").ok_or_else(|| format!("no =\" in {line:?}"))?;
            rest = &rest[eq + 2..];
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c @ ('\\' | '"'))) => value.push(c),
                        other => return Err(format!("bad escape {other:?} in {line:?}")),
                    },
                    Some((i, '"')) => break i,
                    Some((_, '\n')) => return Err(format!("raw newline in {line:?}")),
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("unterminated label value in {line:?}")),
                }
            };
            values.push(value);
            rest = &rest[end + 1..];
            if let Some(after) = rest.strip_prefix(',') {
                rest = after;
            } else if let Some(after) = rest.strip_prefix("} ") {
                after.parse::<f64>().map_err(|e| format!("value {after:?}: {e}"))?;
                return Ok(values);
            } else {
                return Err(format!("junk after a label value in {line:?}"));
            }
        }
    }

    /// Label values come from the host: command names, cgroup directory names, sysfs strings.
    #[test]
    fn hostile_label_values_stay_one_line_each() {
        let seeds: Vec<Vec<u8>> = ["python3", "/kubepods.slice/x\"y\\z", "a\nb", "mlx5_0", "é\u{1F600}"].iter().map(|s| s.as_bytes().to_vec()).collect();
        fuzz("exposition_labels", seeds, Expect::AlwaysAccepts, |bytes| {
            let value = text(bytes).into_owned();
            let mut out = Exposition::new();
            out.family("memlock_fuzz_bytes", "A\nhelp \\ text.", Kind::Gauge).sample(&[("comm", value.as_str()), ("cgroup", "/")], 1u64);
            let rendered = out.finish();
            let lines: Vec<&str> = rendered.lines().collect();
            if lines.len() != 3 || !lines[0].starts_with("# HELP memlock_fuzz_bytes ") || lines[1] != "# TYPE memlock_fuzz_bytes gauge" {
                return Err(format!("not three lines: {rendered:?}"));
            }
            let values = parse_sample(lines[2])?;
            if values != [value.clone(), "/".to_owned()] {
                return Err(format!("label values do not round-trip: {values:?} from {value:?}"));
            }
            Ok(Verdict::Accepted)
        });
    }
}
