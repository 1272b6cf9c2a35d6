//! Training through the trainer: the tiny ResNet and BERT presets converge and their logs pass
//! the checkers, the engine's protocol and its error paths, run sets and their resumption,
//! recipes, the configs' refusals, and the GPU benchmark presets and report. One test binary
//! (tests/<area>/main.rs: one per area, each linking libtorch once); the modules are the former
//! one-file test crates, the helpers are tests/common/.
//!
//! The trainer runs here do not take the rng turn (tests/common/rng.rs): their draws from
//! libtorch's generator are the seeding and initial weights, which the engine does under its own
//! lock, and the tiny presets train without dropout, so concurrent runs cannot change each
//! other's numbers. Tests whose results depend on libtorch's generator between the seeding and
//! their last draw live in the `numerics` binary, where every draw holds the turn.

#[path = "../common/mod.rs"]
mod common;

mod bench_configs;
mod bench_report;
mod bert_tiny;
mod default_config;
mod host_sync;
mod plan_configs;
mod plan_given;
mod recipes;
mod runset_lock;
mod runset_resume;
mod step_errors;
mod train_config;
mod train_engine;
mod train_imagefolder;
mod train_tiny;
