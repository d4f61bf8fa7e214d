//! Every fuzz binary of this crate is this file; ../../runner.rs says how it picks its target.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memlock_core_fuzz::run(env!("CARGO_BIN_NAME"), data));
