//! Fuzz target `descriptor`: arbitrary bytes as a ring `Command` and `Completion`, as a postcard
//! `ControlMessage`, and as a control-socket byte stream; decoding must give a value or an
//! error, never panic or hang. The property is `properties::descriptor` (shared with
//! `tests/rust/proptest_parsing.rs`).
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run descriptor -- -max_total_time=60
//! ```
#![no_main]

#[path = "../src/properties.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::descriptor(data));
