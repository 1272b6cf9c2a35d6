#![no_main]
//! Fuzz target: see harness/package.rs (`verify_tarball`).
#[path = "../harness/package.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::verify_tarball(data);
});
