//! The fused ops: each is one autograd op with a fast kernel on a GPU and a reference path
//! made of plain ATen ops (the CPU twin that tests compare against), reporting which path ran
//! and why a fallback happened.
//!
//! - [`bn_relu`]: batch norm + residual add + ReLU (`methods.fused_bn_relu`, cuDNN's fused
//!   kernel, `shim/fused_bn.cpp`)
//! - [`epilogue`]: the encoder's dense + bias + dropout + residual + LayerNorm epilogues and
//!   fused QKV (`methods.fused_epilogues`, `methods.fused_qkv`; CUDA kernels compiled at run
//!   time, `shim/fused_epilogue.cpp`)
//! - [`bias_gelu`]: the feed-forward matmuls with bias + tanh GELU in cuBLASLt's epilogues
//!   (`methods.fused_bias_gelu`, `shim/fused_bias_gelu.cpp`)
//! - [`varlen_attention`]: attention within each packed sequence (`methods.unpad`;
//!   FlashAttention's varlen kernel, `shim/varlen_attention.cpp`)

pub mod bias_gelu;
pub mod bn_relu;
pub mod epilogue;
pub mod varlen_attention;
