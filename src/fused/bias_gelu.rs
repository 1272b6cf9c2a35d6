//! Fused feed-forward matmuls for BERT (`methods.fused_bias_gelu`, open division):
//! `gelu_tanh(x W1^T + b1) W2^T` as ONE autograd op, over the C++ shim
//! (`shim/fused_bias_gelu.cpp`). The output dense's bias, dropout, residual and LayerNorm stay
//! with the caller (the fused epilogue op or the plain ops).
//!
//! Two paths behind the same op:
//! - **composite** (every device): `addmm`, `gelu(approximate="tanh")`, `mm`, with an explicit
//!   backward that makes the calls autograd makes for the unfused ops; on the CPU in fp32 and
//!   under bf16 autocast its output and gradients are bit-identical to
//!   `x.linear(W1, b1).gelu("tanh").linear(W2, None)` (`tests/numerics/fused_bias_gelu.rs`).
//! - **cuBLASLt** (CUDA, build feature `cuda`, bf16/fp16 operands, sizes multiples of 8): the
//!   bias + GELU ride in the epilogues of cuBLASLt matmuls. In the forward, `GELU_AUX_BIAS` writes
//!   the activation and the pre-activation the backward needs. In the backward, `DGELU_BGRAD` on
//!   the `dz W2` product writes GELU's input gradient and the bias gradient. The separate GELU,
//!   GELU-backward and bias-sum passes over the `[tokens, 4096]` intermediate go away.
//!   Where cuBLASLt has no algorithm for a shape, that call takes the composite path and one
//!   warning is logged.
//!
//! The GELU is the tanh approximation, because that is what cuBLASLt's epilogues compute.
//! BERT's reference uses the erf form, so the method changes the model function slightly
//! (at most 4.7e-4 per activation and 8.7e-4 in slope, below bf16 resolution near 1). That is
//! why the closed division refuses it.
//!
//! Under autocast the op casts x, W1, b1 and W2 the way autocast casts `linear`'s arguments, and
//! returns the autocast dtype, as the unfused `linear`s do.

use super::Path;
use crate::shim::error::{call, reported};
use crate::shim::fused_bias_gelu::{
    mr_fbg_dense_gelu_dense, mr_fbg_fallback_reason, mr_fbg_lt_built, mr_fbg_lt_probe,
};
use anyhow::{bail, Result};
use std::os::raw::c_int;
use std::sync::atomic::AtomicBool;
use tch::Tensor;

static WARNED: AtomicBool = AtomicBool::new(false);

/// Why a cuBLASLt-eligible forward or backward took the composite path in this process, if one
/// did (the first reason).
pub fn fallback_reason() -> Option<String> {
    // SAFETY: a plain query with an out-pointer for its message.
    reported(|m| unsafe { mr_fbg_fallback_reason(m) })
}

/// One warning per process when a cuBLASLt-eligible forward or backward took the composite path.
fn warn_on_fallback() {
    super::warn_fallback_once(
        &WARNED,
        "fused_bias_gelu",
        "cuBLASLt's fused epilogue did not run for some shapes, which use the composite (ATen) \
         path",
        fallback_reason,
    );
}

/// `gelu_tanh(x W1^T + b1) W2^T` as one autograd op (x `[..., H]`, W1 `[I, H]`, b1 `[I]`,
/// W2 `[H2, I]`); returns the output `[..., H2]` (without the second dense's bias) and whether
/// the forward ran cuBLASLt's fused epilogue.
pub fn dense_gelu_dense(
    x: &Tensor,
    w1: &Tensor,
    b1: &Tensor,
    w2: &Tensor,
    path: Path,
) -> Result<(Tensor, bool)> {
    path.refuse_emulated("fused bias+GELU")?;
    let mut out = std::ptr::null_mut();
    let mut used: c_int = 0;
    // SAFETY: every pointer is a live tensor for the duration of the call. The shim's messages
    // name it ("fused bias+GELU: ..."), so no prefix.
    call("", |err| unsafe {
        mr_fbg_dense_gelu_dense(
            x.as_ptr(),
            w1.as_ptr(),
            b1.as_ptr(),
            w2.as_ptr(),
            path.code(),
            &mut out,
            &mut used,
            err,
        )
    })?;
    warn_on_fallback();
    // SAFETY: on success the shim returned a new at::Tensor that we now own.
    Ok((unsafe { Tensor::from_ptr(out) }, used != 0))
}

/// Whether this build has the cuBLASLt path (cargo feature `cuda`).
pub fn lt_built() -> bool {
    // SAFETY: no arguments.
    unsafe { mr_fbg_lt_built() != 0 }
}

/// Whether every cuBLASLt entry point the op uses resolves from the libcublasLt loaded in this
/// process (needs no GPU; an error says what is missing, or that the build lacks `cuda`).
pub fn lt_probe() -> Result<()> {
    // SAFETY: a plain query with an out-pointer for its message.
    match reported(|m| unsafe { mr_fbg_lt_probe(m) }) {
        None => Ok(()),
        Some(why) => bail!("{why}"),
    }
}
