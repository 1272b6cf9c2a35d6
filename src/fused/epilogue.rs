//! Fused epilogues for BERT (`methods.fused_epilogues`): `LayerNorm(residual + dropout(x W^T + b))`
//! as ONE autograd op, over the C++ shim (`shim/fused_epilogue.cpp`).
//!
//! Two paths behind the same op:
//! - **composite** (every device): ATen ops with an explicit backward. It draws the dropout mask
//!   as `at::dropout` does (CPU: `empty_like(x).bernoulli_(1-p)`, CUDA: `native_dropout`), so it
//!   consumes the RNG like the unfused ops; on the CPU in fp32 its outputs and gradients are
//!   bit-identical to them (`tests/numerics/fused_epilogue.rs`).
//! - **kernel** (CUDA, build feature `cuda`): the bias add, the dropout mask multiply, the
//!   residual add and the LayerNorm in one row kernel, and the LayerNorm backward fused with the
//!   mask and the residual gradient in another, compiled at run time with NVRTC on first use.
//!   Rows of a multiple of 4 elements up to 1,024 (BERT's) take vectorised kernels (a warp per
//!   row), whose forward draws the dropout mask itself (Philox from the device generator's state,
//!   graph-safe, so CUDA graph replays draw new masks); other rows get it from ATen's
//!   `bernoulli_` on the device. The math is the same; the rounding differs from the unfused ops (fp32 throughout inside the
//!   kernel, no intermediate bf16 rounding). If NVRTC or the driver fails, one warning is logged
//!   and the composite path runs. The same kernels also run on the CPU, on an emulator of CUDA's
//!   execution model ([`Path::Emulated`]), so CI checks them without a GPU.
//!
//! Dtypes are those of the unfused ops: under autocast the output is fp32 (layer_norm's autocast
//! policy); otherwise the promotion of `h` and `residual`. [`Epilogue::out`] asks for another
//! output dtype (`methods.bf16_residual`: a bf16 residual stream under autocast).
//!
//! The intermediate dense's bias + GELU is the other BERT epilogue ([`dense_bias_gelu`], also
//! under `methods.fused_epilogues`): on the kernel path the matmul runs without its bias, one
//! elementwise kernel adds it and applies the exact (erf) GELU, and its backward takes the
//! GELU's gradient and the bias's column sums in one pass. (`methods.fused_bias_gelu`, open
//! division only, instead fuses a tanh GELU into the matmuls: `crate::fused::bias_gelu`,
//! cuBLASLt's GELU_AUX_BIAS / DGELU_BGRAD epilogues.)

use super::fp8::Quantized;
use super::Path;
use crate::shim::cuda_emu_entry::mr_cuda_emu_selftest;
use crate::shim::error::call;
use crate::shim::fused_epilogue::{
    mr_fe_bias_dropout_add_ln, mr_fe_bias_gelu, mr_fe_dense_bias_gelu, mr_fe_dense_dropout_add_ln,
    mr_fe_kernel_built, mr_fe_kernel_status, mr_fe_nvrtc_compile, mr_fe_qkv_projection,
    mr_fe_set_thread_mask_draw, mr_fe_v4_launches, EpilogueArgs, Err, T,
};
use anyhow::{bail, Result};
use std::os::raw::c_int;
use std::sync::atomic::AtomicBool;
use tch::{Kind, Tensor};
use torch_sys::C_tensor;

/// The inputs shared by both entry points.
pub struct Epilogue<'a> {
    /// Added to the dropped-out value (same shape as the dense output).
    pub residual: &'a Tensor,
    /// LayerNorm weight and bias (`[H]`).
    pub gamma: &'a Tensor,
    pub beta: &'a Tensor,
    pub eps: f64,
    /// Dropout probability (applied only when `train`).
    pub p: f64,
    pub train: bool,
    /// A given keep-mask (1 = keep, like the dense output) instead of a fresh draw: tests and the
    /// GPU check, to compare both paths with the same mask.
    pub mask: Option<&'a Tensor>,
    pub path: Path,
    /// The output's dtype: `None` as the unfused ops give it (fp32 under autocast), or one of
    /// fp32 / bf16 / fp16 (`methods.bf16_residual`: bf16 under autocast; the LayerNorm still
    /// computes in fp32 and its output is rounded once).
    pub out: Option<Kind>,
}

fn opt(t: Option<&Tensor>) -> T {
    t.map_or(std::ptr::null(), |t| t.as_ptr())
}

impl Epilogue<'_> {
    /// Borrows the tensors: the result lives no longer than `self`.
    fn args(&self) -> Result<EpilogueArgs> {
        Ok(EpilogueArgs {
            residual: self.residual.as_ptr(),
            gamma: self.gamma.as_ptr(),
            beta: self.beta.as_ptr(),
            mask: opt(self.mask),
            p: self.p,
            train: c_int::from(self.train),
            eps: self.eps,
            mode: self.path.code(),
            out_type: match self.out {
                Some(k) => kind_code(k)?,
                None => -1,
            },
            fp8_scale: std::ptr::null(),
        })
    }

    /// Calls an entry point with these arguments; returns its output and whether the CUDA
    /// kernel path ran.
    fn call(&self, f: EntryPoint<'_>) -> Result<(Tensor, bool)> {
        let args = self.args()?;
        let mut out = std::ptr::null_mut();
        let mut used: c_int = 0;
        call("fused epilogue", |err| {
            f(&args, &mut out, std::ptr::null_mut(), &mut used, err)
        })?;
        Ok((finish(out), used != 0))
    }

    /// [`Epilogue::call`] asking also for the output cast to E4M3 with `fp8_scale` (one fp32
    /// value on the device) and its amax.
    fn call_fp8(&self, fp8_scale: &Tensor, f: EntryPoint<'_>) -> Result<(Tensor, Quantized, bool)> {
        let mut args = self.args()?;
        args.fp8_scale = fp8_scale.as_ptr();
        let mut out = std::ptr::null_mut();
        let mut fp8 = [std::ptr::null_mut(); 2];
        let mut used: c_int = 0;
        call("fused epilogue", |err| {
            f(&args, &mut out, fp8.as_mut_ptr(), &mut used, err)
        })?;
        let y = finish(out);
        // SAFETY: with an FP8 scale, on success the shim returned two new at::Tensors in `fp8`.
        let [q, amax] = fp8.map(|t| unsafe { Tensor::from_ptr(t) });
        Ok((y, Quantized { q, amax }, used != 0))
    }
}

/// An entry point of the shim as [`Epilogue::call`] calls it: (arguments, output, room for the
/// FP8 output or null, which path ran, error).
type EntryPoint<'a> = &'a dyn Fn(
    *const EpilogueArgs,
    *mut *mut C_tensor,
    *mut *mut C_tensor,
    *mut c_int,
    Err,
) -> c_int;

static WARNED: AtomicBool = AtomicBool::new(false);

/// Why the kernel path is unusable in this process (it failed to build or load), if it is.
pub fn fallback_reason() -> Option<String> {
    let mut msg = std::ptr::null_mut();
    // SAFETY: plain status query; `msg` is set (malloc'd) only when the status is -1.
    let status = unsafe { mr_fe_kernel_status(&mut msg) };
    // SAFETY: the shim set `msg` for status -1 (or left it null).
    (status < 0).then(|| unsafe { crate::shim::error::take(msg) })
}

/// One warning per process when the kernel path failed to build (the composite path runs).
fn warn_if_kernel_failed() {
    super::warn_fallback_once(
        &WARNED,
        "fused_epilogues",
        "the CUDA kernels are unavailable, using the composite (ATen) path",
        fallback_reason,
    );
}

/// The tensor a successful entry point handed over (after the one-time kernel warning).
fn finish(out: *mut C_tensor) -> Tensor {
    warn_if_kernel_failed();
    // SAFETY: on success the shim returned a new at::Tensor that we now own.
    unsafe { Tensor::from_ptr(out) }
}

/// `LayerNorm(residual + dropout(h + bias))` as one autograd op; returns the output and whether
/// the CUDA kernel path ran.
pub fn bias_dropout_add_ln(
    h: &Tensor,
    bias: Option<&Tensor>,
    e: &Epilogue,
) -> Result<(Tensor, bool)> {
    // SAFETY: h, bias and the epilogue's tensors are live for the call (bias may be null).
    e.call(&|args, out, fp8, used, err| unsafe {
        mr_fe_bias_dropout_add_ln(h.as_ptr(), opt(bias), args, out, fp8, used, err)
    })
}

/// [`bias_dropout_add_ln`] whose output feeds an FP8 linear (`methods.fp8`): the op also
/// returns the output cast to E4M3 with `fp8_scale` (that linear's input scale, one fp32 value
/// on the device) and its amax, for [`crate::fused::fp8::linear_cast`]. The vectorised kernel
/// writes both in the pass that writes the output; the other paths cast with ATen ops, as the
/// linear itself would. Returns the output, the cast and whether the kernel path ran.
pub fn bias_dropout_add_ln_fp8(
    h: &Tensor,
    bias: Option<&Tensor>,
    e: &Epilogue,
    fp8_scale: &Tensor,
) -> Result<(Tensor, Quantized, bool)> {
    // SAFETY: h, bias, fp8_scale and the epilogue's tensors are live for the call (bias may be
    // null); `fp8` has room for the two tensors the shim returns with a scale.
    e.call_fp8(fp8_scale, &|args, out, fp8, used, err| unsafe {
        mr_fe_bias_dropout_add_ln(h.as_ptr(), opt(bias), args, out, fp8, used, err)
    })
}

/// `LayerNorm(residual + dropout(x W^T + b))`: the dense layer and its epilogue. With the
/// kernel path the matmul runs without its bias (the kernel adds it); otherwise it is exactly
/// the unfused `linear`. Returns the output and whether the CUDA kernel path ran.
pub fn dense_dropout_add_ln(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    e: &Epilogue,
) -> Result<(Tensor, bool)> {
    // SAFETY: x, w, b and the epilogue's tensors are live for the call.
    e.call(&|args, out, fp8, used, err| unsafe {
        mr_fe_dense_dropout_add_ln(
            x.as_ptr(),
            w.as_ptr(),
            b.as_ptr(),
            args,
            out,
            fp8,
            used,
            err,
        )
    })
}

/// `GELU(x W^T + b)` (the exact, erf GELU): the intermediate dense layer and its epilogue. With
/// the kernel path the matmul runs without its bias and one kernel adds the bias and applies the
/// GELU, in fp32, rounded once to the matmul's dtype; its backward computes the GELU's gradient
/// and the bias's in one pass (the unfused ops take a separate reduction for the bias).
/// Otherwise it is exactly the unfused `linear(x, w, b).gelu("none")`. Returns the output and
/// whether the kernel path ran.
pub fn dense_bias_gelu(x: &Tensor, w: &Tensor, b: &Tensor, path: Path) -> Result<(Tensor, bool)> {
    let mut out = std::ptr::null_mut();
    let mut used: c_int = 0;
    // SAFETY: x, w and b are live for the call; the shim hands back a new tensor on success.
    call("fused bias + GELU", |err| unsafe {
        mr_fe_dense_bias_gelu(
            x.as_ptr(),
            w.as_ptr(),
            b.as_ptr(),
            path.code(),
            &mut out,
            &mut used,
            err,
        )
    })?;
    Ok((finish(out), used != 0))
}

/// `GELU(z + b)` (the exact, erf GELU) for `z` a matmul's output without its bias (the FP8
/// linear's, `methods.fp8`): one kernel pass adds the bias and applies the GELU, and with
/// `fp8_scale` (the output dense's FP8 input scale, one fp32 value on the device) also writes
/// the output cast to E4M3 with it and the amax, for [`crate::fused::fp8::linear_cast`]. Where
/// the kernels do not run, `gelu(z + b)` and ATen's cast. Returns the output, the cast (with a
/// scale) and whether the kernel path ran.
pub fn bias_gelu(
    z: &Tensor,
    b: &Tensor,
    fp8_scale: Option<&Tensor>,
    path: Path,
) -> Result<(Tensor, Option<Quantized>, bool)> {
    let mut out = std::ptr::null_mut();
    let mut fp8 = [std::ptr::null_mut(); 2];
    let mut used: c_int = 0;
    // SAFETY: z, b and fp8_scale (or null) are live for the call; `fp8` has room for the two
    // tensors the shim returns with a scale.
    call("fused bias + GELU", |err| unsafe {
        mr_fe_bias_gelu(
            z.as_ptr(),
            b.as_ptr(),
            fp8_scale.map_or(std::ptr::null(), |s| s.as_ptr()),
            path.code(),
            &mut out,
            fp8.as_mut_ptr(),
            &mut used,
            err,
        )
    })?;
    let y = finish(out);
    // SAFETY: with a scale, on success the shim returned two new at::Tensors in `fp8`.
    let cast = fp8_scale.map(|_| {
        let [q, amax] = fp8.map(|t| unsafe { Tensor::from_ptr(t) });
        Quantized { q, amax }
    });
    Ok((y, cast, used != 0))
}

/// Fused QKV (`methods.fused_qkv`): the query, key and value projections of `x` (`[N, H]`) as
/// one matmul through `w` (`[3H, H]`) and `b` (`[3H]`), the three weights and biases
/// concatenated; returns q, k, v as `[N, heads, H / heads]` views of its output and whether the
/// kernel path ran. With the kernel path (CUDA, or the emulator) the backward puts d q, d k and
/// d v side by side and sums the bias's gradient in one kernel, where the unfused ops take a
/// stacking copy and a separate reduction; otherwise it is exactly `linear(x, w, b)` viewed
/// `[N, 3, heads, H / heads]` and unbound.
pub fn qkv_projection(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    heads: i64,
    path: Path,
) -> Result<([Tensor; 3], bool)> {
    let mut out = [std::ptr::null_mut(); 3];
    let mut used: c_int = 0;
    // SAFETY: x, w and b are live for the call; `out` has room for the three new tensors the
    // shim hands back on success.
    call("fused QKV", |err| unsafe {
        mr_fe_qkv_projection(
            x.as_ptr(),
            w.as_ptr(),
            b.as_ptr(),
            heads,
            path.code(),
            out.as_mut_ptr(),
            &mut used,
            err,
        )
    })?;
    warn_if_kernel_failed();
    // SAFETY: on success the shim returned three new at::Tensors that we now own.
    let [q, k, v] = out.map(|t| unsafe { Tensor::from_ptr(t) });
    Ok(([q, k, v], used != 0))
}

/// How many times the calling thread launched the vectorised row kernels (rows of a multiple
/// of 4 elements, aligned: BERT's), as (forward, backward); the other rows take the scalar ones.
/// For tests of which kernels ran (a CPU backward runs in the thread that called it).
#[doc(hidden)]
pub fn vectorised_launches() -> (i64, i64) {
    // SAFETY: no pointers.
    unsafe { (mr_fe_v4_launches(0), mr_fe_v4_launches(1)) }
}

/// Who draws the dropout mask when the calling thread's forward needs one (no mask given) and
/// the vectorised forward runs: that kernel itself (`true`, the default: Philox from the
/// device's generator, no separate pass) or ATen's `bernoulli_` as the composite path does
/// (`false`: the two paths then draw the same mask from the same generator state, for tests
/// that compare them step for step).
#[doc(hidden)]
pub fn set_thread_mask_draw_in_kernel(in_kernel: bool) {
    // SAFETY: no pointers.
    unsafe { mr_fe_set_thread_mask_draw(in_kernel as c_int) }
}

/// Whether this build has the CUDA kernel path (cargo feature `cuda`).
pub fn kernel_built() -> bool {
    // SAFETY: no arguments.
    unsafe { mr_fe_kernel_built() != 0 }
}

/// The self-checks of the CPU emulator that runs these kernels for [`Path::Emulated`]
/// (`shim/cuda_emu_selftest.cpp`; tests/numerics/cuda_emu.rs). The emulator is linked into the
/// test programs only: elsewhere this (and [`Path::Emulated`]) ends with an error saying so.
/// Kernel `which` (0: per-block sum of
/// thread index + 1024 x block index by warp shuffles and shared memory; 1: barriers that can
/// never complete; 2: a partial-mask shuffle; 3: a lane that returns while the others shuffle;
/// 4: a warp sum after which all lanes but 0 return) on a (gx, gy) grid of `threads`-thread
/// blocks. The per-block outputs, or the emulator's error.
#[doc(hidden)]
pub fn emulator_selftest(which: i32, gx: u32, gy: u32, threads: u32) -> Result<Vec<f32>> {
    let mut out = vec![f32::NAN; gx as usize * gy as usize];
    // SAFETY: `out` holds gx * gy floats and the kernels write at most one per block.
    call("", |err| unsafe {
        mr_cuda_emu_selftest(which, gx, gy, threads, out.as_mut_ptr(), err)
    })?;
    Ok(out)
}

/// The kernels' dtype code (fp32, bf16, fp16).
fn kind_code(k: Kind) -> Result<c_int> {
    Ok(match k {
        Kind::Float => 0,
        Kind::BFloat16 => 1,
        Kind::Half => 2,
        other => bail!("fused epilogue kernels: no {other:?} variant"),
    })
}

/// Compiles the CUDA kernels with NVRTC loaded from `nvrtc` for `arch` (`sm_XY`: a CUBIN,
/// `compute_XY`: PTX) with h / residual / output dtypes; returns the binary's size, after
/// checking that every kernel the host launches is in it. Needs no GPU: CI uses it to catch
/// errors in the kernel source.
pub fn nvrtc_compile(
    nvrtc: &std::path::Path,
    arch: &str,
    h: Kind,
    residual: Kind,
    out: Kind,
) -> Result<usize> {
    let path = std::ffi::CString::new(nvrtc.to_string_lossy().as_bytes())?;
    let arch_c = std::ffi::CString::new(arch)?;
    let mut size = 0usize;
    let (ht, rt, ot) = (kind_code(h)?, kind_code(residual)?, kind_code(out)?);
    // SAFETY: valid C strings and out-pointers for the call.
    call("", |err| unsafe {
        mr_fe_nvrtc_compile(path.as_ptr(), arch_c.as_ptr(), ht, rt, ot, &mut size, err)
    })?;
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The emulator is linked into the integration-test programs only (build.rs): this unit-test
    /// program, like mlperf-run, lacks it, so the emulated path ends with an error that says so
    /// (tests/numerics/cuda_emu.rs runs it where it is linked).
    #[test]
    fn the_emulated_path_says_where_the_emulator_is_linked() {
        let msg = format!("{:#}", emulator_selftest(0, 1, 1, 32).unwrap_err());
        assert!(
            msg.contains("linked into tests/, not into mlperf-run"),
            "{msg}"
        );
        let x = Tensor::ones([4, 8], (Kind::Float, tch::Device::Cpu));
        let w = Tensor::ones([8, 8], (Kind::Float, tch::Device::Cpu));
        let b = Tensor::zeros([8], (Kind::Float, tch::Device::Cpu));
        let msg = format!(
            "{:#}",
            dense_bias_gelu(&x, &w, &b, Path::Emulated).unwrap_err()
        );
        assert!(
            msg.contains(
                "fused bias + GELU: the emulated kernel path runs in the test programs only"
            ),
            "{msg}"
        );
        // the other paths do not need it
        let (y, used_kernel) = dense_bias_gelu(&x, &w, &b, Path::Reference).unwrap();
        assert!(!used_kernel);
        assert_eq!(y.size(), [4, 8]);
    }
}
