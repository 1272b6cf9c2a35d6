//! The fuzzers' findings for the log readers, replayed without a fuzzer: every input kept under
//! tests/fuzz_regressions/{mllog_rules,run_config,score_package,verify_tarball}/ runs through
//! the fuzz target's own harness (fuzz/harness/) and must answer without a panic
//! (tests/common/fuzz_replay.rs; docs/fuzzing.md lists the targets and what they found).

use crate::common::fuzz_replay::replay;

#[path = "../../fuzz/harness/logs.rs"]
mod logs;
#[path = "../../fuzz/harness/package.rs"]
mod package;

#[test]
fn fuzz_regressions_mllog_rules() {
    replay("mllog_rules", logs::mllog_rules);
}

#[test]
fn fuzz_regressions_run_config() {
    replay("run_config", logs::run_config);
}

#[test]
fn fuzz_regressions_score_package() {
    replay("score_package", package::score_package);
}

#[test]
fn fuzz_regressions_verify_tarball() {
    replay("verify_tarball", package::verify_tarball);
}
