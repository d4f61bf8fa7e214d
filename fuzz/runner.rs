//! What every libFuzzer binary of the fuzz crates runs, each crate's library including this file:
//! Cargo names a binary after its target, and the binary runs that target, or the one
//! `MEMLOCK_FUZZ_TARGET` names. scripts/fuzz.sh builds one binary per fuzz crate and runs each of
//! the crate's targets through that variable: a binary per target, each linking its crate with
//! the coverage instrumentation, made the build most of CI's fuzzing step.

use std::sync::OnceLock;

use super::common::Target;
use super::layer::TARGETS;

fn target(binary: &str) -> &'static Target {
    static TARGET: OnceLock<(String, Option<&'static Target>)> = OnceLock::new();
    let (name, target) = TARGET.get_or_init(|| {
        let name = std::env::var("MEMLOCK_FUZZ_TARGET").unwrap_or_else(|_| binary.to_owned());
        let target = TARGETS.iter().find(|t| t.name == name);
        (name, target)
    });
    target.unwrap_or_else(|| panic!("no fuzz target named {name} in this crate"))
}

/// One libFuzzer case of the binary named `binary`: a broken oracle becomes a panic, which
/// libFuzzer reports and saves.
pub fn run(binary: &str, data: &[u8]) {
    let target = target(binary);
    if let Err(message) = (target.check)(data) {
        panic!("fuzz target {}: {message}", target.name);
    }
}
