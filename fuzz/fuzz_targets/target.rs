//! Every fuzz binary is this file: Cargo names the binary after its target in
//! tests/fuzz/targets.rs, and the binary runs that target.
#![no_main]

use memlock_exporter_fuzz_targets::find;

/// One libFuzzer case: a broken oracle becomes a panic, which libFuzzer reports and saves.
fn run(name: &str, data: &[u8]) {
    let Some(target) = find(name) else { panic!("no fuzz target named {name}") };
    if let Err(message) = (target.check)(data) {
        panic!("fuzz target {name}: {message}");
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(env!("CARGO_BIN_NAME"), data));
