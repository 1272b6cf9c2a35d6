//! mlperf-run as a library: every subcommand's work, so tests and benchmarks can call it.
//!
//! Modules by concern:
//! - [`mllog`]: the MLPerf log format (emit, parse)
//! - [`benchmarks`]: per-benchmark definitions loaded from `benchmarks/<name>/benchmark.toml`
//! - [`rules`]: compliance checks (`check`)
//! - [`score`]: olympic scoring and reference convergence points (`score`)
//! - [`regress`]: the CI regression gate (`regress`)
//! - [`runs`]: run sets (N seeded runs, resume), their outcome, progress line, plot and report
//! - [`submission`]: system description, submitter tree, tarball, verify
//! - [`train`], [`models`], [`optim`], [`distributed`]: training on libtorch (feature `torch`;
//!   the launcher's environment, `distributed::Rendezvous`, is read in every build)
//! - [`data`]: data pipelines and synthetic data sets
//! - [`gpu`]: autocast regions, CUDA streams and events, whole-step CUDA graphs, which GPU a
//!   CUDA device is
//! - [`fused`]: the fused ops (fused BN+ReLU, the encoder epilogues, bias+GELU, varlen
//!   attention), each a fast kernel with a reference path
//! - `shim`: the C++ shim's FFI declarations (one file per `shim/*.cpp`) and its error call
//! - [`plan`]: closed configs for N GPUs and their projected time to train (`plan`)
//! - [`cli`]: the subcommands' dispatch, and an error mapped to its exit status
//! - [`util`]: exit statuses, atomic file writes, interrupts, libtorch errors, logging set-up
//!
//! The modules stand in layers, each using only lower ones (docs/development.md, "Layers").
//! - [`cpu_bind`]: which CPUs each training process of a node runs on (`[system] cpu_bind`)

pub mod benchmarks;
pub mod cli;
pub mod cpu_bind;
pub mod data;
pub mod demo;
pub mod distributed;
#[cfg(feature = "torch")]
pub mod fused;
#[cfg(feature = "torch")]
pub mod gpu;
pub mod launch;
pub mod methods;
pub mod mllog;
#[cfg(feature = "torch")]
pub mod models;
pub mod official;
pub mod optim;
pub mod plan;
pub mod recipes;
pub mod regress;
pub mod rules;
pub mod runs;
pub mod score;
mod shim;
pub mod submission;
pub mod train;
pub mod util;

#[cfg(test)]
mod layering_tests;
