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
//! - [`train`], [`models`], [`optim`], [`dist`]: training on libtorch (feature `torch`)
//! - [`data`]: data pipelines and synthetic data sets
//! - [`fsutil`]: atomic file writes
//! - [`cpu_bind`]: which CPUs each training process of a node runs on (`[system] cpu_bind`)
//! - [`amp`]: autocast regions (bf16 on GPU, and its CPU twin) through the C++ shim

#[cfg(feature = "torch")]
pub mod amp;
pub mod benchmarks;
pub mod cli;
pub mod cpu_bind;
#[cfg(feature = "torch")]
pub mod cuda;
#[cfg(feature = "torch")]
pub mod cuda_graph;
pub mod data;
pub mod demo;
#[cfg(feature = "torch")]
pub mod dist;
pub mod fsutil;
pub mod interrupt;
pub mod launch;
pub mod logging;
pub mod methods;
pub mod mllog;
#[cfg(feature = "torch")]
pub mod models;
pub mod official;
pub mod optim;
pub mod recipes;
pub mod regress;
pub mod rules;
pub mod runs;
pub mod score;
#[cfg(feature = "torch")]
mod shim_error;
pub mod submission;
pub mod train;
