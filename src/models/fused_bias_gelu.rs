//! Fused dense + bias + GELU for BERT (`methods.fused_bias_gelu`, open division):
//! `gelu_tanh(x W^T + b)` as ONE autograd op, over the C++ shim (`shim/fused_bias_gelu.cpp`).
//!
//! Two paths behind the same op:
//! - **composite** (every device): `addmm` then `gelu(approximate="tanh")`, with an explicit
//!   backward that makes the calls autograd makes for the unfused ops; on the CPU in fp32 its
//!   output and gradients are bit-identical to `x.linear(W, b).gelu("tanh")`
//!   (`tests/fused_bias_gelu.rs`).
//! - **cuBLASLt** (CUDA, build feature `cuda`, bf16/fp16 operands, K and N multiples of 8): one
//!   `cublasLtMatmul` with the `GELU_AUX_BIAS` epilogue writes the output and the pre-activation
//!   the backward needs, so the separate GELU pass over the `[tokens, 4096]` intermediate goes
//!   away. The backward runs GELU's gradient on the saved pre-activation and two matmuls.
//!   Where cuBLASLt has no algorithm for a shape, that call takes the composite path and one
//!   warning is logged.
//!
//! The GELU is the tanh approximation, because that is what cuBLASLt's epilogue computes.
//! BERT's reference uses the erf form, so the method changes the model function slightly
//! (at most 4.7e-4 per activation and 8.7e-4 in slope, below bf16 resolution near 1). That is
//! why the closed division refuses it.
//!
//! Under autocast the op casts x, W and b the way autocast casts `linear`'s arguments, and
//! returns the autocast dtype, as the unfused `linear` + `gelu` do.

use anyhow::{bail, Result};
use std::os::raw::{c_char, c_int};
use std::sync::Once;
use tch::Tensor;
use torch_sys::C_tensor;

type T = *const C_tensor;

extern "C" {
    fn mr_fbg_dense_bias_gelu(
        x: T,
        w: T,
        b: T,
        mode: c_int,
        out: *mut *mut C_tensor,
        used_lt: *mut c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    fn mr_fbg_fallback_reason(msg: *mut *mut c_char) -> c_int;
    fn mr_fbg_lt_built() -> c_int;
}

/// Which implementation to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeluPath {
    /// cuBLASLt where it can run (CUDA bf16/fp16, aligned sizes, an algorithm for the shape),
    /// else the composite path.
    Auto,
    /// ATen ops only (the CPU path; on CUDA the reference for cuBLASLt).
    Composite,
    /// cuBLASLt, or an error saying why not (the GPU check).
    CublasLt,
}

impl GeluPath {
    fn code(self) -> c_int {
        match self {
            GeluPath::Auto => 0,
            GeluPath::Composite => 1,
            GeluPath::CublasLt => 2,
        }
    }
}

static WARNED: Once = Once::new();

/// One warning per process when a cuBLASLt-eligible call took the composite path.
fn warn_on_fallback() {
    if WARNED.is_completed() {
        return;
    }
    let mut msg = std::ptr::null_mut();
    // SAFETY: plain query; `msg` is set (malloc'd) only when it returns 1.
    if unsafe { mr_fbg_fallback_reason(&mut msg) } == 1 {
        // SAFETY: the shim set `msg` for the answer 1.
        let why = unsafe { crate::shim_error::take(msg) };
        WARNED.call_once(|| {
            tracing::warn!(
                "methods.fused_bias_gelu: cuBLASLt's fused epilogue did not run for some \
                 shapes, which use the composite (ATen) path: {why}"
            );
        });
    }
}

/// `gelu_tanh(x W^T + b)` as one autograd op (x `[..., K]`, W `[N, K]`, b `[N]`); returns the
/// output `[..., N]` and whether cuBLASLt's fused epilogue ran.
pub fn dense_bias_gelu(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    path: GeluPath,
) -> Result<(Tensor, bool)> {
    let mut out = std::ptr::null_mut();
    let mut used: c_int = 0;
    let mut err = std::ptr::null_mut();
    // SAFETY: every pointer is a live tensor for the duration of the call.
    let rc = unsafe {
        mr_fbg_dense_bias_gelu(
            x.as_ptr(),
            w.as_ptr(),
            b.as_ptr(),
            path.code(),
            &mut out,
            &mut used,
            &mut err,
        )
    };
    if rc != 0 {
        // SAFETY: the shim set `err` (or left it null) for this failed call.
        let msg = unsafe { crate::shim_error::take(err) };
        bail!("{msg}");
    }
    warn_on_fallback();
    // SAFETY: on success the shim returned a new at::Tensor that we now own.
    Ok((unsafe { Tensor::from_ptr(out) }, used != 0))
}

/// Whether this build has the cuBLASLt path (cargo feature `cuda`).
pub fn lt_built() -> bool {
    // SAFETY: no arguments.
    unsafe { mr_fbg_lt_built() != 0 }
}
