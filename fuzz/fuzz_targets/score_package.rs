#![no_main]
//! Fuzz target: see harness/package.rs (`score_package`).
#[path = "../harness/package.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::score_package(data);
});
