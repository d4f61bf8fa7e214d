//! Every fuzz binary is this file: Cargo names the binary after its target in
//! tests/fuzz/targets.rs, and the binary runs that target, or the one `MEMLOCK_FUZZ_TARGET`
//! names. scripts/fuzz.sh builds one binary and runs every target through that variable: 33
//! binaries, each linking the whole exporter with its coverage instrumentation, made the build
//! most of CI's fuzzing step.
#![no_main]

use std::sync::OnceLock;

use memlock_exporter_fuzz_targets::{find, Target};

fn target() -> &'static Target {
    static TARGET: OnceLock<(String, Option<&'static Target>)> = OnceLock::new();
    let (name, target) = TARGET.get_or_init(|| {
        let name = std::env::var("MEMLOCK_FUZZ_TARGET").unwrap_or_else(|_| env!("CARGO_BIN_NAME").to_owned());
        let target = find(&name);
        (name, target)
    });
    target.unwrap_or_else(|| panic!("no fuzz target named {name}"))
}

/// One libFuzzer case: a broken oracle becomes a panic, which libFuzzer reports and saves.
fn run(data: &[u8]) {
    let target = target();
    if let Err(message) = (target.check)(data) {
        panic!("fuzz target {}: {message}", target.name);
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(data));
