//! The core crate's fuzz targets as a library for this crate's libFuzzer binaries: the
//! shared registry types and helpers, and tests/fuzz/targets/core.rs, which the stable engine
//! (`cargo test --test fuzz`) runs too.

#[path = "../../tests/fuzz/targets/common.rs"]
pub mod common;
#[path = "../../tests/fuzz/targets/core.rs"]
pub mod layer;
#[path = "../runner.rs"]
mod runner;

pub use runner::run;
