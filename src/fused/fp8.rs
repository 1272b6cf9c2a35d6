//! FP8 linear layers with delayed scaling (`methods.fp8`), Transformer Engine's recipe in its
//! HYBRID format: activations and weights in E4M3, the output gradients in E5M2, fp32
//! accumulation, bf16 out (on a GPU), fp32 master weights (the optimizer does not change).
//!
//! # The recipe (Transformer Engine's `DelayedScaling`, read from its `recipe` module and the
//! PyTorch module's fp8 meta handling; torchao's float8 training casts the same way)
//! Each linear layer has three per-tensor scales (input, weight, output gradient) and an amax
//! history of `amax_history_len` steps for each (TE's default: 1024) with a margin (default 0):
//! - a cast computes `q = saturate(t * scale)` in the format (largest finite: E4M3 448, E5M2
//!   57344; NaN stays NaN; round to nearest even, subnormals kept) and writes `amax(|t|)` into
//!   row 0 of its history (the max with what is there: with gradient accumulation, the largest
//!   over the step's micro-batches); the matmul dequantises with `1 / scale`;
//! - after the step ([`Fp8State::update`]): `amax = max(history)` over the rows; the new scale is
//!   `(fp8_max * 2^-margin) / amax` where amax is finite and > 0, else the old scale stays; then the
//!   history rolls by one (`roll(-1)`, TE's `_update_amax_history`) and row 0 is zeroed for the
//!   next step. Scales start at 1.
//!
//! Every tensor of it stays on the device and nothing is read by the host, so the whole step,
//! update included, can be captured in a CUDA graph. Each weight is cast once per forward (once
//! per step with `gradient_accumulation_steps = 1`, as every fp8 preset has).
//!
//! # Paths ([`crate::fused::Path`])
//! - `Auto` / `Fast`: ATen's `_scaled_mm` (cuBLASLt's FP8 GEMM; Ada / Hopper and later) with
//!   tensor-wise scales, through `shim/fp8.cpp`. [`path_for`] probes it on the run's device
//!   before the run and refuses the method where it cannot run (the CPU, an A100, a libtorch
//!   without the kernel), naming the reason. Each cast no fused op wrote (weights, gradients,
//!   some inputs) is one pass over its tensor with the amax in the same read (the one-pass cast
//!   kernels, [`cast`]); ATen's ops where those kernels do not take the tensor.
//! - `Reference`: the emulated path, any device: the same casts, scales, amax history and
//!   rounding, dequantised and multiplied in fp32. A run takes it only in the test mode
//!   `MLPERF_RUN_TEST_EMULATE_FP8=1` (refused without the variable); the GPU numerics check
//!   compares the kernel against it.
//! - `Emulated` (tests): `Reference` with every cast on the one-pass cast kernels run by the
//!   CPU emulator of CUDA, so CI checks them against ATen's casts through the whole op.
//!
//! # FP8 attention: a probe only
//! [`attention_probe`] runs one of libtorch's attention ops on FP8 q, k, v
//! (`shim/fp8_attention.cpp`) for `examples/fp8_check`. `methods.fp8_attention` is not built:
//! none of those ops takes FP8 in libtorch 2.11 (docs/gpu.md says why and what it would take).

use super::Path;
use crate::shim::error::call;
use crate::shim::fp8::{
    mr_fp8_attention_probe, mr_fp8_cast, mr_fp8_cast_transpose, mr_fp8_linear,
    mr_fp8_quantize_dequantize,
};
use anyhow::{bail, Result};
use tch::{Device, Kind, Tensor};

/// The variable that lets a run take the emulated FP8 path (tests, CI, a CPU run of the CLI).
pub const EMULATE_FP8: &str = "MLPERF_RUN_TEST_EMULATE_FP8";

/// E4M3's largest finite value (activations and weights).
pub const E4M3_MAX: f64 = 448.0;
/// E5M2's largest finite value (gradients).
pub const E5M2_MAX: f64 = 57344.0;
/// Transformer Engine's default amax history length.
pub const DEFAULT_AMAX_HISTORY_LEN: i64 = 1024;
/// Transformer Engine's default margin.
pub const DEFAULT_MARGIN: i64 = 0;

/// An FP8 format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// 4 exponent bits, 3 mantissa bits, no infinities (activations and weights).
    E4M3,
    /// 5 exponent bits, 2 mantissa bits (gradients).
    E5M2,
}

impl Format {
    fn code(self) -> i32 {
        match self {
            Format::E4M3 => 0,
            Format::E5M2 => 1,
        }
    }

    /// The largest finite value.
    pub fn max(self) -> f64 {
        match self {
            Format::E4M3 => E4M3_MAX,
            Format::E5M2 => E5M2_MAX,
        }
    }
}

/// The delayed-scaling recipe's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recipe {
    /// Steps of amax history each scale is computed from.
    pub amax_history_len: i64,
    /// The scale is divided by `2^margin` (headroom).
    pub margin: i64,
    /// Reduce each step's amaxes (max) across the data-parallel ranks before the update, so
    /// every rank's scales agree (Transformer Engine's `reduce_amax`, default true).
    pub reduce_amax: bool,
}

impl Default for Recipe {
    fn default() -> Self {
        Recipe {
            amax_history_len: DEFAULT_AMAX_HISTORY_LEN,
            margin: DEFAULT_MARGIN,
            reduce_amax: true,
        }
    }
}

/// The scales and amax histories of `n` FP8 linear layers, on the device: `scale` `[n, 3]` and
/// `history` `[len, n, 3]` fp32 (columns: input, weight, gradient).
#[derive(Debug)]
pub struct Fp8State {
    pub scale: Tensor,
    pub history: Tensor,
    /// `[3]` the formats' largest values (E4M3, E4M3, E5M2).
    max: Tensor,
    pub recipe: Recipe,
}

/// One layer's views of the state: `scale` `[3]`, `history` `[len, 3]`.
#[derive(Debug)]
pub struct Fp8Slot {
    pub scale: Tensor,
    pub history: Tensor,
}

impl Fp8State {
    /// Scales of 1 and an empty history for `n` layers.
    pub fn new(n: i64, recipe: Recipe, device: Device) -> Fp8State {
        let opts = (Kind::Float, device);
        Fp8State {
            scale: Tensor::ones([n, 3], opts),
            history: Tensor::zeros([recipe.amax_history_len.max(1), n, 3], opts),
            max: Tensor::from_slice(&[E4M3_MAX as f32, E4M3_MAX as f32, E5M2_MAX as f32])
                .to_device(device),
            recipe,
        }
    }

    /// Layer `i`'s views.
    pub fn slot(&self, i: i64) -> Fp8Slot {
        Fp8Slot {
            scale: self.scale.select(0, i),
            history: self.history.select(1, i),
        }
    }

    /// This step's amaxes, `[n, 3]`: row 0 of the history, a view (the tensor to reduce
    /// across ranks before [`Fp8State::update`]).
    pub fn step_amax(&self) -> Tensor {
        self.history.get(0)
    }

    /// The recipe's update after a step (module docs), in place on the device.
    pub fn update(&self) {
        tch::no_grad(|| {
            let new = scales_from(&self.history, &self.scale, &self.max, self.recipe.margin);
            let mut scale = self.scale.shallow_clone();
            scale.copy_(&new);
            let mut history = self.history.shallow_clone();
            if history.size()[0] > 1 {
                history.copy_(&self.history.roll([-1], [0]));
            }
            let _ = history.get(0).fill_(0.0);
        })
    }
}

/// The scales an amax history `[len, ...]` sets: `(max * 2^-margin) / amax` in fp32 (as
/// Transformer Engine's update kernel computes it) where `amax` (the history's maximum, NaN
/// entries ignored) is finite and > 0, else `scale`; a quotient that overflows fp32 (an amax
/// below `max / f32::MAX`, e.g. 448 / 3.4e38 = 1.3e-36) is `f32::MAX`, as that kernel sets it
/// (an infinite scale would cast every zero to NaN, `0 * inf`, and dequantise with `1 / inf =
/// 0`).
pub fn scales_from(history: &Tensor, scale: &Tensor, max: &Tensor, margin: i64) -> Tensor {
    // NaN entries are ignored, as the fmaxf of Transformer Engine's kernel ignores them
    let amax = history
        .nan_to_num(0.0, f64::INFINITY, f64::NEG_INFINITY)
        .amax([0], false);
    let sf = ((max * 2f64.powi(-(margin as i32))) / &amax).clamp_max(f32::MAX as f64);
    let ok = amax.gt(0.0).logical_and(&amax.isfinite());
    sf.where_self(&ok, scale)
}

/// An FP8 linear's input already cast to E4M3 with that linear's input scale, by the kernel
/// that wrote the input (a fused epilogue: [`crate::fused::epilogue::bias_dropout_add_ln_fp8`]),
/// so the linear does not pass over it again.
#[derive(Debug)]
pub struct Quantized {
    /// The input in E4M3 (`Kind::Float8e4m3fn`), shaped like it.
    pub q: Tensor,
    /// `max |input|` (one fp32 value on the device), the amax the linear records for it.
    pub amax: Tensor,
}

/// `x W^T + b` through FP8 with `slot`'s scales (2-d `x`), recording this call's amaxes;
/// `path`: `Reference` emulates (ATen's casts, fp32 matmuls), `Emulated` the same with every
/// cast made by the kernel path's one-pass cast kernels on the CPU emulator (tests, CPU
/// tensors), anything else runs `_scaled_mm` with the cast kernels where they take the tensor.
pub fn linear(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    slot: &Fp8Slot,
    path: Path,
) -> Result<Tensor> {
    linear_cast(x, None, w, b, slot, path)
}

/// [`linear`] with `x` possibly already cast (`pre`: E4M3 with `slot`'s input scale, and its
/// amax, which the op records instead of computing it); `x` still takes the input's gradient.
pub fn linear_cast(
    x: &Tensor,
    pre: Option<&Quantized>,
    w: &Tensor,
    b: Option<&Tensor>,
    slot: &Fp8Slot,
    path: Path,
) -> Result<Tensor> {
    let mode = match path {
        Path::Auto | Path::Fast => 0,
        Path::Reference => 1,
        Path::Emulated => 2,
    };
    let null = std::ptr::null();
    let mut out = std::ptr::null_mut();
    // SAFETY: every pointer is a live tensor for the call (b and pre's may be null); the shim
    // hands back a new tensor on success.
    call("", |err| unsafe {
        mr_fp8_linear(
            x.as_ptr(),
            w.as_ptr(),
            b.map_or(null, |b| b.as_ptr()),
            slot.scale.as_ptr(),
            slot.history.as_ptr(),
            pre.map_or(null, |p| p.q.as_ptr()),
            pre.map_or(null, |p| p.amax.as_ptr()),
            mode,
            &mut out,
            err,
        )
    })?;
    // SAFETY: on success the shim returned a new at::Tensor that we now own.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// `t` cast to `format` with `scale` (one fp32 value on `t`'s device; saturating, round to
/// nearest even) as the FP8 linear casts, with `max |t|` recorded into `amax` (one fp32 value,
/// in place: the max with what it holds, a NaN winning), as the linear records into its amax
/// history. `path`: `Reference` ATen's ops; `Emulated` the kernel path's one-pass cast kernels
/// on the CPU emulator (or an error); `Fast` those kernels on the GPU (or an error); `Auto` the
/// kernels where they take `t`. `max_blocks` > 0 caps the kernel's grid (tests: several turns
/// of its grid-stride loop on a small tensor); 0 the default. Returns the FP8 tensor and whether
/// the kernels ran.
pub fn cast(
    t: &Tensor,
    scale: &Tensor,
    format: Format,
    amax: &Tensor,
    path: Path,
    max_blocks: i64,
) -> Result<(Tensor, bool)> {
    let mut out = std::ptr::null_mut();
    let mut used = 0;
    // SAFETY: t, scale and amax are live for the call; a new tensor comes back on success.
    call("fp8", |err| unsafe {
        mr_fp8_cast(
            t.as_ptr(),
            scale.as_ptr(),
            format.code(),
            amax.as_ptr(),
            path.code(),
            max_blocks,
            &mut out,
            &mut used,
            err,
        )
    })?;
    // SAFETY: on success the shim returned a new at::Tensor that we now own.
    Ok((unsafe { Tensor::from_ptr(out) }, used != 0))
}

/// The cast-transpose kernel the FP8 linear's backward GEMMs read from (tests): `t` [rows, cols]
/// (a float type) cast as [`cast`] casts it, in both layouts: `q` [rows_out, cols] and its
/// transpose `qt` [cols, rows_out], rows past `rows` zero in both (the GEMM's padding), with
/// `max |t|` recorded into `amax`. For an FP8 `t`, only its transpose `qt` (`q` is `None`;
/// `scale` and `amax` are not read). `path`: `Emulated` the kernel on the CPU emulator, `Fast`
/// on the GPU; an error where the kernel does not take `t` (columns and `rows_out` a multiple of
/// 4, `rows_out >= rows`, contiguous) or for another path.
pub fn cast_transpose(
    t: &Tensor,
    scale: &Tensor,
    format: Format,
    amax: &Tensor,
    path: Path,
    rows_out: i64,
) -> Result<(Option<Tensor>, Tensor)> {
    let mut q = std::ptr::null_mut();
    let mut qt = std::ptr::null_mut();
    // SAFETY: t, scale and amax are live for the call; new tensors come back on success (q may
    // be null).
    call("fp8", |err| unsafe {
        mr_fp8_cast_transpose(
            t.as_ptr(),
            scale.as_ptr(),
            format.code(),
            amax.as_ptr(),
            path.code(),
            rows_out,
            &mut q,
            &mut qt,
            err,
        )
    })?;
    // SAFETY: on success the shim returned new at::Tensors (q possibly null) that we now own.
    let q = (!q.is_null()).then(|| unsafe { Tensor::from_ptr(q) });
    Ok((q, unsafe { Tensor::from_ptr(qt) }))
}

/// `t` cast to `format` with `scale` (saturating, round to nearest even) and back to fp32
/// (`q / scale`): the op's own casts, for tests.
pub fn quantize_dequantize(t: &Tensor, scale: f64, format: Format) -> Result<Tensor> {
    let s = Tensor::from(scale as f32).to_device(t.device());
    let mut out = std::ptr::null_mut();
    // SAFETY: t and s are live for the call; a new tensor comes back on success.
    call("fp8", |err| unsafe {
        mr_fp8_quantize_dequantize(t.as_ptr(), s.as_ptr(), format.code(), &mut out, err)
    })?;
    // SAFETY: on success the shim returned a new at::Tensor that we now own.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// Whether the test mode [`EMULATE_FP8`] is on ("1"; unset or "0": off; anything else is an
/// error).
pub fn emulation_requested() -> Result<bool> {
    match std::env::var(EMULATE_FP8) {
        Err(_) => Ok(false),
        Ok(v) => match v.trim() {
            "" | "0" => Ok(false),
            "1" => Ok(true),
            other => {
                bail!("{EMULATE_FP8} must be 0 or 1 (got {other:?}); unset it for a normal run")
            }
        },
    }
}

/// The path `methods.fp8` takes on `device`: the emulated one (`Reference`) in the test mode,
/// else `_scaled_mm` (`Auto`) where a probe of it runs; an error naming the reason otherwise.
pub fn path_for(device: Device) -> Result<Path> {
    if emulation_requested()? {
        tracing::warn!(
            "test mode: {EMULATE_FP8}=1: methods.fp8 runs the emulated FP8 path (quantise and \
             dequantise in fp32); for testing, not for submissions"
        );
        return Ok(Path::Reference);
    }
    let why = match device {
        Device::Cuda(_) => match probe(device) {
            Ok(()) => return Ok(Path::Auto),
            Err(e) => format!(
                "this GPU or libtorch cannot run FP8 matmuls (ATen's _scaled_mm needs compute \
                 capability 8.9 or 9.0+, e.g. an H100; an A100 has no FP8): {e:#}"
            ),
        },
        Device::Cpu => "FP8 matmuls need an NVIDIA GPU with FP8 tensor cores (H100 / H200, \
                        compute capability 8.9 or 9.0+): this run is on the CPU"
            .to_string(),
        other => format!(
            "FP8 matmuls need an NVIDIA GPU with FP8 tensor cores (H100 / H200, compute \
             capability 8.9 or 9.0+): this run is on {other:?}"
        ),
    };
    bail!(
        "methods.fp8 cannot run: {why}. Turn methods.fp8 off (bf16 runs everywhere); tests \
         only: {EMULATE_FP8}=1 runs the emulated FP8 path"
    )
}

/// One small `_scaled_mm` (forward and backward through the op) on `device`.
fn probe(device: Device) -> Result<()> {
    let state = Fp8State::new(1, Recipe::default(), device);
    let x = Tensor::randn([16, 32], (Kind::Float, device)).set_requires_grad(true);
    let w = Tensor::randn([16, 32], (Kind::Float, device)).set_requires_grad(true);
    let y = linear(&x, &w, None, &state.slot(0), Path::Auto)?;
    y.to_kind(Kind::Float).sum(Kind::Float).f_backward()?;
    Ok(())
}

/// The attention ops [`attention_probe`] tries with FP8 q, k, v (`methods.fp8_attention`'s
/// question, docs/gpu.md): none of them takes FP8 in libtorch 2.11 alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionProbe {
    /// `_scaled_dot_product_flash_attention.quantized` (per-head descales): FA3's entry point,
    /// whose libtorch kernel refuses unless FA3 was registered from Python.
    FlashQuantized,
    /// `_scaled_dot_product_flash_attention`: FlashAttention-2 (fp16 / bf16).
    Flash,
    /// `_scaled_dot_product_efficient_attention` (fp32 / fp16 / bf16).
    Efficient,
    /// `scaled_dot_product_attention` with only the cuDNN backend enabled.
    SdpaCudnn,
    /// `scaled_dot_product_attention` with only flash enabled and the FA3 flag set.
    SdpaFlashFa3,
    /// `scaled_dot_product_attention` as it is (all backends; math last).
    Sdpa,
}

impl AttentionProbe {
    /// Every probe, in the order the check prints them.
    pub const ALL: [AttentionProbe; 6] = [
        AttentionProbe::FlashQuantized,
        AttentionProbe::Flash,
        AttentionProbe::Efficient,
        AttentionProbe::SdpaCudnn,
        AttentionProbe::SdpaFlashFa3,
        AttentionProbe::Sdpa,
    ];

    /// The op as the check's lines name it.
    pub fn name(self) -> &'static str {
        match self {
            AttentionProbe::FlashQuantized => "_scaled_dot_product_flash_attention.quantized",
            AttentionProbe::Flash => "_scaled_dot_product_flash_attention",
            AttentionProbe::Efficient => "_scaled_dot_product_efficient_attention",
            AttentionProbe::SdpaCudnn => "scaled_dot_product_attention (cuDNN backend only)",
            AttentionProbe::SdpaFlashFa3 => {
                "scaled_dot_product_attention (flash only, FA3 flag set)"
            }
            AttentionProbe::Sdpa => "scaled_dot_product_attention (all backends)",
        }
    }
}

/// The output of `op` on `q`, `k`, `v` ([B, heads, S, head_dim]; FP8 for the probe), or its
/// refusal on one line (with the SDPA dispatcher's reasons). It sets the process's SDPA backend
/// switches and warning handler for the call (and restores them): not while other threads run
/// attention.
pub fn attention_probe(op: AttentionProbe, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    // the variants' order (0-5) is the shim's op numbers
    let code = op as i32;
    let mut out = std::ptr::null_mut();
    // SAFETY: q, k and v are live for the call; a new tensor comes back on success.
    call("", |err| unsafe {
        mr_fp8_attention_probe(code, q.as_ptr(), k.as_ptr(), v.as_ptr(), &mut out, err)
    })?;
    // SAFETY: on success the shim returned a new at::Tensor that we now own.
    Ok(unsafe { Tensor::from_ptr(out) })
}
