//! Fuzz target `header`: arbitrary segment headers, raw or mutated from a valid one, through
//! `ringenv_runtime::read_header`, which must return a layout that fits or an error, never
//! panic. The property is `properties::header` (shared with `tests/rust/proptest_parsing.rs`).
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run header -- -max_total_time=60
//! ```
#![no_main]

#[path = "../src/properties.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::header(data));
