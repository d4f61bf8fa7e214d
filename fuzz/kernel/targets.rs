//! The kernel crate's fuzz targets as a library for this crate's libFuzzer binaries: the
//! shared registry types and helpers, and tests/fuzz/targets/kernel.rs, which the stable engine
//! (`cargo test --test fuzz`) runs too.

#[path = "../../tests/fuzz/targets/common.rs"]
pub mod common;
#[path = "../../tests/fuzz/targets/kernel.rs"]
pub mod layer;
#[path = "../runner.rs"]
mod runner;

pub use runner::run;
