//! What every fuzz target is made of, and the helpers their seeds and oracles share: the
//! registry's types, the fixture files as seeds, and the conversions the collectors apply.
//! Each crate's targets use this and their own crate alone, so that each cargo-fuzz crate in
//! fuzz/ depends on its layer only.

use std::path::{Path, PathBuf};

/// What a parser made of one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Rejected,
}

/// What a bounded run of a target must show besides surviving every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Some mutated inputs are accepted and some rejected: the mutations reach both paths.
    BothPaths,
    /// The parser is total (it accepts anything); only accepted inputs are required.
    AlwaysAccepts,
}

pub struct Target {
    /// Also the name of its libFuzzer binary in fuzz/<crate>/.
    pub name: &'static str,
    pub expect: Expect,
    /// Valid inputs: every seed must be accepted.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// `Err` when an oracle breaks; a panic is a finding too.
    pub check: fn(&[u8]) -> Result<Verdict, String>,
}

/// The file a target that loads real files writes its input to: one per process and target.
pub fn scratch_file(target: &str) -> PathBuf {
    std::env::temp_dir().join(format!("memlock-fuzz-{}-{target}", std::process::id()))
}

/// Text as the collectors see it: `fsroot::read_into` replaces invalid UTF-8.
pub fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

pub fn verdict<T, E>(result: &Result<T, E>) -> Verdict {
    if result.is_ok() {
        Verdict::Accepted
    } else {
        Verdict::Rejected
    }
}

/// Same result after appending a line the parser must skip.
pub fn unchanged_by<T: PartialEq + std::fmt::Debug>(
    parse: impl Fn(&str) -> T,
    text: &str,
    extra: &str,
) -> Result<(), String> {
    let before = parse(text);
    let after = parse(&format!("{text}\n{extra}\n"));
    if before != after {
        return Err(format!("appending {extra:?} changed the result from {before:?} to {after:?}"));
    }
    Ok(())
}

/// The repository: the manifest directory of the tests, the parent of fuzz/'s (this file is
/// compiled in both).
pub fn repository() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.ancestors().find(|dir| dir.join("tests/fixtures").is_dir()).unwrap_or(manifest).to_path_buf()
}

pub fn fixtures() -> PathBuf {
    repository().join("tests/fixtures")
}

/// Every regular file under `dir` (symlinks not followed), with its path.
pub fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
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

pub fn fixture_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    walk(&fixtures(), &mut files);
    files
}

pub fn dedup(mut seeds: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    seeds.sort();
    seeds.dedup();
    seeds
}

/// The contents of the fixture files whose name satisfies `pick`, deduplicated.
pub fn corpus(pick: impl Fn(&str) -> bool) -> Vec<Vec<u8>> {
    dedup(
        fixture_files()
            .iter()
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&pick))
            .filter_map(|p| std::fs::read(p).ok())
            .collect(),
    )
}

pub fn strings(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}
