#![no_main]
//! Fuzz target: see harness/logs.rs (`run_config`).
#[path = "../harness/logs.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::run_config(data);
});
