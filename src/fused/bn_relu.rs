//! Fused batch norm + (residual add) + ReLU (`methods.fused_bn_relu`, ResNet, both divisions):
//! `y = relu(bn(x) + z)` as one autograd op from the C++ shim (`shim/fused_bn.cpp`).
//!
//! On the CPU (and on CUDA wherever cuDNN's fused kernels do not apply) the op runs the very
//! ATen calls of the unfused chain `apply_t(&bn)`, `+= z`, `relu_()`, forward and backward, so
//! training is bit-identical to the unfused model (`tests/numerics/fused_bn_relu.rs`); it only saves one
//! activation fewer per BN. In a build with the `cuda` feature, NHWC fp16/bf16 activations on a
//! GPU run cuDNN's fused BN+add+ReLU kernels (one kernel forward, one backward); if cuDNN refuses
//! a dtype the op falls back to the composite path and [`warn_fallback_once`] says why.
//!
//! `nn::BatchNorm` keeps its momentum and eps private, so callers pass them (ResNet's are
//! constants).

use crate::shim::fused_bn::{
    mr_bn_add_relu, mr_fused_bn_counts, mr_fused_bn_cudnn_compiled, mr_fused_bn_cudnn_eligible,
    mr_fused_bn_cudnn_probe, mr_fused_bn_fallback_reason,
};
use anyhow::{bail, Result};
use std::os::raw::{c_char, c_int};
use std::sync::atomic::AtomicBool;
use tch::{nn, Tensor};
use torch_sys::C_tensor;

fn ptr(t: Option<&Tensor>) -> *const C_tensor {
    t.map_or(std::ptr::null(), |t| t.as_ptr())
}

/// `relu(bn(x) + residual)` (no residual: `relu(bn(x))`) with `bn`'s parameters and running
/// statistics (updated in place when `train`, as `x.apply_t(bn, true)` does).
pub fn f_bn_add_relu(
    x: &Tensor,
    residual: Option<&Tensor>,
    bn: &nn::BatchNorm,
    momentum: f64,
    eps: f64,
    train: bool,
) -> Result<Tensor> {
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: every pointer is a live tensor of the caller's (or null where the shim allows
    // it); on success the shim hands over a new at::Tensor, which we then own.
    crate::shim::error::call("fused BN+ReLU", |err| unsafe {
        mr_bn_add_relu(
            x.as_ptr(),
            ptr(residual),
            ptr(bn.ws.as_ref()),
            ptr(bn.bs.as_ref()),
            bn.running_mean.as_ptr(),
            bn.running_var.as_ptr(),
            c_int::from(train),
            momentum,
            eps,
            &mut out,
            err,
        )
    })?;
    // SAFETY: see above.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// [`f_bn_add_relu`] for model code (`ModuleT::forward_t` cannot return an error): a failure
/// panics with libtorch's message, which the training step's `catching` turns into a clean
/// error that ends the run as aborted (as for any other libtorch error inside a step).
pub fn bn_add_relu(
    x: &Tensor,
    residual: Option<&Tensor>,
    bn: &nn::BatchNorm,
    momentum: f64,
    eps: f64,
    train: bool,
) -> Tensor {
    match f_bn_add_relu(x, residual, bn, momentum, eps, train) {
        Ok(y) => y,
        Err(e) => panic!("{e:#}"),
    }
}

/// Whether this build has the cuDNN path (the `cuda` feature).
pub fn cudnn_compiled() -> bool {
    // SAFETY: no arguments, no state.
    unsafe { mr_fused_bn_cudnn_compiled() != 0 }
}

/// Whether every cuDNN entry point the fused op uses resolves from the libcudnn loaded in this
/// process (needs no GPU; an error says what is missing, or that the build lacks `cuda`).
pub fn cudnn_probe() -> Result<()> {
    // SAFETY: a plain query with an out-pointer for its message.
    match crate::shim::error::reported(|m| unsafe { mr_fused_bn_cudnn_probe(m) }) {
        None => Ok(()),
        Some(why) => bail!("{why}"),
    }
}

/// Training forwards so far on cuDNN's fused kernels and on the composite path.
pub fn counts() -> (i64, i64) {
    let (mut a, mut b) = (0, 0);
    // SAFETY: two valid out-pointers.
    unsafe { mr_fused_bn_counts(&mut a, &mut b) };
    (a, b)
}

/// Why the op left the cuDNN path for a dtype in this process (cuDNN refused it), if it did.
pub fn fallback_reason() -> Option<String> {
    // SAFETY: a plain query with an out-pointer for its message.
    crate::shim::error::reported(|m| unsafe { mr_fused_bn_fallback_reason(m) })
}

static WARNED: AtomicBool = AtomicBool::new(false);

/// Prints one warning line (once per process) when cuDNN refused the fused kernels and the
/// composite path took over. Cheap after the warning: one atomic load.
pub fn warn_fallback_once() {
    super::warn_fallback_once(
        &WARNED,
        "fused_bn_relu",
        "the composite path runs",
        fallback_reason,
    );
}

/// `Ok(())` when a training call with these tensors would take the cuDNN path, else the
/// reason it would not (for the GPU check example).
pub fn cudnn_eligible(
    x: &Tensor,
    residual: Option<&Tensor>,
    bn: &nn::BatchNorm,
) -> Result<std::result::Result<(), String>> {
    let mut why: *mut c_char = std::ptr::null_mut();
    let mut err: *mut c_char = std::ptr::null_mut();
    // SAFETY: live tensors or nulls; strings come back malloc'd and are taken below.
    let rc = unsafe {
        mr_fused_bn_cudnn_eligible(
            x.as_ptr(),
            ptr(residual),
            ptr(bn.ws.as_ref()),
            ptr(bn.bs.as_ref()),
            bn.running_mean.as_ptr(),
            bn.running_var.as_ptr(),
            &mut why,
            &mut err,
        )
    };
    match rc {
        1 => Ok(Ok(())),
        // SAFETY: the shim set `why` for a negative verdict.
        0 => Ok(Err(unsafe { crate::shim::error::take(why) })),
        // SAFETY: the shim set `err` for a failed call.
        _ => bail!("fused BN+ReLU: {}", unsafe {
            crate::shim::error::take(err)
        }),
    }
}
