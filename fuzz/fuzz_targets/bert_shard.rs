#![no_main]
//! Fuzz target: see harness/data.rs (`bert_shard`).
#[path = "../harness/data.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::bert_shard(data);
});
