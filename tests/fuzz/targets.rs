//! The fuzz targets: every parser of kernel, network and user input, each with its seed corpus
//! and its oracle (the properties its output must have beyond not panicking), grouped by the
//! crate whose parsers they fuzz (`targets/<crate>.rs`).
//!
//! One registry, two engines: `tests/fuzz/main.rs` mutates the seeds of every crate's targets
//! for a bounded time under `cargo test --test fuzz` (stable, deterministic, replayable), and
//! libFuzzer runs the same targets with coverage guidance (`scripts/fuzz.sh`, see
//! docs/reliability.md) through one cargo-fuzz crate per layer, `fuzz/<crate>/`, which depends
//! on that crate alone: a crate's parsers are fuzzed without building the layers above them.
//! This file is a module of that test; each fuzz crate's library takes `targets/common.rs` and
//! its own crate's file. The exporter itself ships none of it. An oracle is a thin call into a
//! parser's public API.

use std::path::Path;

// Paths from this file's directory, the same whether the file is a fuzz crate's module or a
// module of the fuzz test (where a plain `mod` would look in tests/fuzz/targets/).
#[path = "targets/common.rs"]
mod common;
#[path = "targets/core.rs"]
mod core_targets;
#[path = "targets/http.rs"]
mod http_targets;
#[path = "targets/kernel.rs"]
mod kernel_targets;
#[path = "targets/preflight.rs"]
mod preflight_targets;

pub use common::{scratch_file, Expect, Target, Verdict};

/// One crate's targets, and the cargo-fuzz crate that runs them under libFuzzer.
pub struct Layer {
    /// The fuzz crate's directory, from the repository: its manifest lists one binary per target.
    pub fuzz_crate: &'static str,
    pub targets: &'static [Target],
}

/// Every crate's targets, from the kernel crate up.
pub const LAYERS: &[Layer] = &[
    Layer { fuzz_crate: "fuzz/kernel", targets: kernel_targets::TARGETS },
    Layer { fuzz_crate: "fuzz/core", targets: core_targets::TARGETS },
    Layer { fuzz_crate: "fuzz/http", targets: http_targets::TARGETS },
    Layer { fuzz_crate: "fuzz/preflight", targets: preflight_targets::TARGETS },
];

/// Every target, in the order of docs/reliability.md's table.
pub fn all() -> impl Iterator<Item = &'static Target> {
    LAYERS.iter().flat_map(|layer| layer.targets)
}

pub fn find(name: &str) -> Option<&'static Target> {
    all().find(|t| t.name == name)
}

/// Writes each target's seeds to `root/<fuzz crate>/corpus/<target>/seed-<n>`, where cargo-fuzz
/// and libFuzzer read a target's corpus from. Returns how many files were written.
pub fn write_corpus(root: &Path) -> std::io::Result<usize> {
    let mut written = 0;
    for layer in LAYERS {
        for target in layer.targets {
            let out = root.join(layer.fuzz_crate).join("corpus").join(target.name);
            std::fs::create_dir_all(&out)?;
            for (index, seed) in (target.seeds)().iter().enumerate() {
                std::fs::write(out.join(format!("seed-{index}")), seed)?;
                written += 1;
            }
        }
    }
    Ok(written)
}
