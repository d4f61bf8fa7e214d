//! Every fuzz binary is this file: Cargo names the binary after its target in
//! src/fuzz_targets.rs, and the binary runs that target.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memlock_exporter::fuzz_targets::run(env!("CARGO_BIN_NAME"), data));
