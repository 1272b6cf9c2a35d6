//! Logs and rules: `check`, `score`, `regress`, `sysinfo`, `package` and `verify`, as library
//! calls and as commands, against the official MLCommons tools on the real published logs and on
//! logs our emitter and trainer write. One test binary (tests/<area>/main.rs: one per area, each
//! linking libtorch once); the modules are the former one-file test crates, the helpers are
//! tests/common/. The modules marked `#![cfg(feature = "torch")]` need the trainer; the rest run
//! in the lite build too (`--no-default-features`).

#[path = "../common/mod.rs"]
mod common;

mod benchmark_rounds;
mod check_cli;
mod check_differential;
mod check_set;
mod ci_files;
mod closed_pipe;
mod doc_paths;
mod fuzz_regressions;
mod hostile_trees;
mod package_official;
mod package_recorded_sysinfo;
mod package_refusals;
mod parser_props;
mod plan_reality;
mod projection_fixtures;
mod regress_gate;
mod score_cli;
mod score_fixtures;
mod score_rcp_oracle;
mod sysinfo_detect;
mod verify_tamper;
