//! The fuzzers' findings for the data readers, replayed without a fuzzer: every input kept
//! under tests/fuzz_regressions/{jpeg_region,bert_shard}/ runs through the fuzz target's own
//! harness (fuzz/harness/data.rs) and must answer without a panic
//! (tests/common/fuzz_replay.rs; docs/fuzzing.md lists the targets and what they found).

use crate::common::fuzz_replay::replay;

#[path = "../../fuzz/harness/data.rs"]
mod data;

#[test]
fn fuzz_regressions_jpeg_region() {
    replay("jpeg_region", data::jpeg_region);
}

/// Writes HDF5 files and reads them back: alone in a process of its own, as the other shard
/// tests (tests/data/bert_data.rs).
#[cfg(feature = "torch")]
#[test]
fn fuzz_regressions_bert_shard() {
    crate::common::alone::run_alone!();
    replay("bert_shard", data::bert_shard);
}
