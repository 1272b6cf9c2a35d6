//! Several processes: c10d over Gloo on localhost (collectives, the launcher, data-parallel
//! training of the tiny ResNet, failure handling), the Slurm script's dry run, and the CPU
//! binding of a process. One test binary (tests/<area>/main.rs: one per area, each linking
//! libtorch once); the modules are the former one-file test crates, the helpers are
//! tests/common/. The modules marked `#![cfg(feature = "torch")]` need the trainer; the rest run
//! in the lite build too (`--no-default-features`).

#[path = "../common/mod.rs"]
mod common;

mod cpu_bind;
mod dist_bert_packing;
mod dist_gloo;
mod dist_resnet;
mod dist_slurm_script;
mod rank_agree;
mod test_modes;
mod two_node_runs;
mod two_nodes;
