//! The stable fuzzing engine: a deterministic mutation fuzzer over the targets of
//! [`targets`] (every parser, its seed corpus from the fixture trees and the real captures, and
//! its oracle). The cargo-fuzz crates in `fuzz/` run the same targets under libFuzzer.
//!
//! Each target checks that every seed parses, then mutates seeds for a time budget: bit flips,
//! truncations, splices of two seeds, numbers replaced by huge or malformed ones, NUL bytes,
//! invalid UTF-8, line edits, blown-up sizes and plain random bytes. A target fails on a panic or
//! when its oracle is violated; the input is saved and the message says how to replay the exact
//! case.
//!
//! - `cargo test --test fuzz` runs every target for `FUZZ_SECONDS` (default 2) each;
//! - `FUZZ_SECONDS=600 cargo test --release --test fuzz -- --test-threads=2` is the long run;
//! - `FUZZ_SEED=<n>` changes the stream of cases, `FUZZ_CASE=<n>` replays one case;
//! - `scripts/fuzz.sh` runs the same targets under libFuzzer (cargo-fuzz), seeded from here.
//!
//! Findings become regression tests beside the parser that had the bug (see
//! docs/reliability.md).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

mod targets;

use targets::{Expect, Target, Verdict};

/// splitmix64: tiny, fast and deterministic, so a case number reproduces its input.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
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
    let starts: Vec<usize> =
        std::iter::once(0).chain(data.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1)).collect();
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
            let digits: Vec<usize> =
                data.iter().enumerate().filter(|(_, b)| b.is_ascii_digit()).map(|(i, _)| i).collect();
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

fn escape_preview(bytes: &[u8]) -> String {
    let shown: String = bytes.iter().take(600).flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect();
    if bytes.len() > 600 {
        format!("{shown}... ({} bytes)", bytes.len())
    } else {
        shown
    }
}

/// Runs one target: every seed must be accepted, then mutated cases for the time budget.
fn fuzz(spec: &Target) {
    let (target, expect, check) = (spec.name, spec.expect, spec.check);
    let seeds = (spec.seeds)();
    assert!(!seeds.is_empty(), "{target}: no seeds; the corpus selection found no fixture files");
    for (index, seed) in seeds.iter().enumerate() {
        match catch_unwind(AssertUnwindSafe(|| check(seed))) {
            Ok(Ok(Verdict::Accepted)) => {}
            Ok(Ok(Verdict::Rejected)) => {
                panic!("{target}: seed {index} is rejected, but the corpus holds valid files: {}", escape_preview(seed))
            }
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
                panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("?")
            )),
        };
        if let Some(message) = failure {
            let dir = std::env::temp_dir().join("memlock-fuzz-findings");
            let _ = std::fs::create_dir_all(&dir);
            let saved = dir.join(format!("{target}-{seed:x}-{case}.bin"));
            let _ = std::fs::write(&saved, &input);
            panic!(
                "fuzz target {target}, case {case}: {message}\n  replay: FUZZ_SEED={seed} FUZZ_CASE={case} cargo test \
                    --test fuzz target::{target}\n  input saved to {}\n  input: {}",
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
        assert!(
            accepted > 0,
            "{target}: no mutated input was accepted in {cases} cases: the mutations never reach the success path"
        );
        if matches!(expect, Expect::BothPaths) {
            assert!(
                rejected > 0,
                "{target}: no mutated input was rejected in {cases} cases: the parser accepts garbage"
            );
        }
    }
}

/// One test per target, so the harness runs them in parallel and names the one that failed.
macro_rules! targets {
    ($($name:ident)*) => {
        mod target {
            $(
                #[test]
                fn $name() {
                    let target = crate::targets::find(stringify!($name)).expect("a registered target");
                    super::fuzz(target);
                    let _ = std::fs::remove_file(crate::targets::scratch_file(target.name));
                }
            )*
        }

        #[test]
        fn every_registered_target_has_a_test() {
            let tested = [$(stringify!($name)),*];
            let registered: Vec<&str> = targets::all().map(|t| t.name).collect();
            assert_eq!(registered, tested);
        }

        /// And a libFuzzer binary in its crate's fuzz crate, whose manifest lists one per target.
        #[test]
        fn every_registered_target_has_a_libfuzzer_binary() {
            for layer in targets::LAYERS {
                let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(layer.fuzz_crate).join("Cargo.toml");
                let manifest = std::fs::read_to_string(&path).expect("the fuzz crate's manifest");
                let mut binaries: Vec<&str> = manifest
                    .split("[[bin]]")
                    .skip(1)
                    .filter_map(|section| section.lines().find_map(|l| l.trim().strip_prefix("name \
                        = ")).map(|n| n.trim_matches('"')))
                    .collect();
                let mut registered: Vec<&str> = layer.targets.iter().map(|t| t.name).collect();
                binaries.sort_unstable();
                registered.sort_unstable();
                assert_eq!(binaries, registered, "{}", path.display());
            }
        }
    };
}

targets! {
    meminfo vmstat single_numbers pid_status pid_limits uid_map pid_cgroup proc_cgroups rdma_cgroup
    memcg_v1_limit memcg_v2_limit memcg_v1_stat memcg_v2_stat memcg_oom_control memcg_events
    rdma_sysfs_numbered rdma_sysfs_rate rdma_sysfs_counter rdma_sysfs_label thp_choice
    hugepage_dir_name cgroup_path nldev nvidia_version maps_nccl maps_registrants nccl_library trace_pipe
    config_file duration listen_address alertmanager_url exposition_labels
    web_config_file basic_authorization
    nccl_environment nccl_log
}

#[test]
fn the_corpus_has_a_directory_of_seeds_per_target() {
    let dir = std::env::temp_dir().join(format!("memlock-fuzz-corpus-{}", std::process::id()));
    let written = targets::write_corpus(&dir).expect("write the corpus");
    for layer in targets::LAYERS {
        for target in layer.targets {
            let seeds = std::fs::read_dir(dir.join(layer.fuzz_crate).join("corpus").join(target.name))
                .map(|d| d.count())
                .unwrap_or(0);
            assert_eq!(seeds, (target.seeds)().len(), "{}", target.name);
            assert!(seeds > 0, "{}: no seeds", target.name);
        }
    }
    assert!(written > targets::all().count());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes the seed corpora for the libFuzzer runs, each in its fuzz crate under the given root
/// (the repository for scripts/fuzz.sh): `FUZZ_CORPUS_ROOT=<dir> cargo test --test fuzz
/// write_corpus -- --ignored`.
#[test]
#[ignore = "a tool, not a test: run by scripts/fuzz.sh"]
fn write_corpus() {
    let root = std::env::var("FUZZ_CORPUS_ROOT").expect("FUZZ_CORPUS_ROOT names the directory to write under");
    targets::write_corpus(std::path::Path::new(&root)).expect("write the corpus");
}

/// Netlink's own mutations besides the targets': a message or attribute length rewritten to an
/// edge value, and tails of random bytes.
mod nldev {
    use memlock_kernel::nldev::{
        attrs, cmd, decode_device, decode_mr_part, decode_res_summary, nldev_type, Header, ReplyReader,
        ATTR_HEADER_LEN, HEADER_LEN,
    };

    use super::Rng;

    /// Runs every decoder over a buffer, returning how many items came out in total.
    fn decode_everything(buf: &[u8]) -> usize {
        let mut items = 0;
        for kind in [cmd::RES_GET, cmd::RES_MR_GET, cmd::GET] {
            let seq = Header::parse(buf).map(|h| h.seq).unwrap_or(0);
            let mut reader = ReplyReader::new(nldev_type(kind), seq, 64);
            let _ = reader.feed(buf, |_, body| {
                items += decode_mr_part(body).map(|p| p.entries.len()).unwrap_or(0);
                items += decode_res_summary(body).map(|s| s.entries.len()).unwrap_or(0);
                items += decode_device(body).map(|_| 1).unwrap_or(0);
                for a in attrs(body).flatten() {
                    let _ = (a.u8(), a.u32(), a.u64(), a.string());
                    items += a.nested().flatten().count();
                }
                Ok(())
            });
        }
        items
    }

    #[test]
    fn random_and_mutated_buffers_never_panic_and_output_stays_bounded() {
        let seeds = (crate::targets::find("nldev").expect("the nldev target").seeds)();
        let mut rng = Rng(0x5eed_1234_abcd_0001);
        let mut decoded_something = 0usize;
        for round in 0..200_000 {
            let buf: Vec<u8> = match round % 4 {
                0 => (0..rng.below(300)).map(|_| rng.next() as u8).collect(),
                1 => {
                    let mut b = seeds[rng.below(seeds.len())].clone();
                    for _ in 0..1 + rng.below(4) {
                        let i = rng.below(b.len());
                        b[i] ^= 1 << rng.below(8);
                    }
                    b
                }
                2 => {
                    let b = &seeds[rng.below(seeds.len())];
                    b[..rng.below(b.len() + 1)].to_vec()
                }
                _ => {
                    // Rewrite a length field: the message length or a u16 attribute length.
                    let mut b = seeds[rng.below(seeds.len())].clone();
                    let at = if rng.below(2) == 0 { 0 } else { HEADER_LEN + 4 * rng.below((b.len() - HEADER_LEN) / 4) };
                    let value = [0u16, 1, 3, 4, 5, 0xff, 0xfff, 0xffff, rng.next() as u16][rng.below(9)];
                    if at + 2 <= b.len() {
                        b[at..at + 2].copy_from_slice(&value.to_ne_bytes());
                    }
                    if rng.below(2) == 0 {
                        let extra = rng.below(40);
                        b.extend((0..extra).map(|_| rng.next() as u8));
                    }
                    b
                }
            };
            let items = decode_everything(&buf);
            // Every item needs at least one 4-byte attribute header; the decoders ran three
            // times with four views each, so nothing can come out of thin air.
            assert!(
                items <= 12 * (buf.len() / ATTR_HEADER_LEN + 1),
                "round {round}: {items} items from {} bytes",
                buf.len()
            );
            decoded_something += usize::from(items > 0);
        }
        assert!(decoded_something > 10_000, "mutations should often still decode: {decoded_something}");
    }
}
