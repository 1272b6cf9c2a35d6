#![no_main]
//! Fuzz target: see harness/data.rs (`jpeg_region`).
#[path = "../harness/data.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::jpeg_region(data);
});
