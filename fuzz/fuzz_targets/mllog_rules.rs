#![no_main]
//! Fuzz target: see harness/logs.rs (`mllog_rules`).
#[path = "../harness/logs.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::mllog_rules(data);
});
