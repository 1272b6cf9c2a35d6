//! Numerics against references: the models (BERT, ResNet-50), the optimizers (LAMB, AdamW,
//! LARS, SGD, loss scaling) against PyTorch, the fused ops (BN+ReLU, bias+GELU, the epilogues)
//! against the unfused ones and fp64, their CUDA kernels through the CPU emulator, and the
//! CUDA-graph twin against the eager step, mostly bit for bit. One test binary
//! (tests/<area>/main.rs: one per area, each linking libtorch once); the modules are the former
//! one-file test crates, the helpers are tests/common/.
//!
//! Every test here that draws from libtorch's process-wide generator, itself or through a
//! trainer run, holds the rng turn (tests/common/rng.rs) for as long as it draws: the tests of
//! all these modules share one process, so a draw or a seeding outside the turn could shift
//! another module's seeded sequence.
#![cfg(feature = "torch")]

#[path = "../common/mod.rs"]
mod common;

mod bert_model;
mod bert_optim;
mod bert_packing;
mod cuda_emu;
mod cuda_graph_twin;
mod fp8;
mod fused_bias_gelu;
mod fused_bn_relu;
mod fused_epilogue;
mod fused_epilogue_kernels;
mod optim_equivalence;
mod resnet_params;
mod rng_turn;
