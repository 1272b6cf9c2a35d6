//! `methods.fp8` on the CPU (`src/fused/fp8.rs`, `shim/fp8.cpp`), through its emulated path
//! (the same casts, scales and amax history as the `_scaled_mm` path, dequantised in fp32):
//! - quantise-dequantise lands exactly on the E4M3 / E5M2 grids: a rounding reference written
//!   here (round to nearest even, saturation at 448 / 57344, subnormals, NaN kept as NaN) over
//!   named values and a sweep;
//! - the amax history and the scales follow Transformer Engine's delayed-scaling recipe, against
//!   a reference implementation of it written here (roll, max over the window, margin, the old
//!   scale kept for a zero, infinite or NaN amax);
//! - the FP8 linear records this call's amaxes and computes its output and gradients from the
//!   quantised operands with the scales it was given (against the reference casts);
//! - a tiny BERT trains through every encoder linear in FP8 (plain and fused-epilogue parts),
//!   every layer's scales move off 1, and the method is closed-legal;
//! - the kernel path's one-pass cast kernels (cast and amax in one read of the tensor), run on
//!   the CPU emulator of CUDA, give ATen's casts and amaxes bit for bit, alone and as every cast
//!   of the FP8 linear and of a tiny BERT's training; so does the cast-transpose kernel that
//!   gives the backward's GEMMs their operands in both layouts.
//!
//! The `_scaled_mm` path needs an H100 / H200: scripts/bench_gpu.sh part q checks it there.
#![cfg(feature = "torch")]

use crate::common::rng::rng_turn;
use mlperf_run::fused::epilogue::vectorised_launches;
use mlperf_run::fused::fp8::{
    cast, cast_transpose, linear, path_for, quantize_dequantize, Format, Fp8State, Recipe,
    EMULATE_FP8,
};
use mlperf_run::fused::Path;
use mlperf_run::methods::{BertMethods, MethodSet};
use mlperf_run::models::bert::{BertConfig, BertForPreTraining, KernelSwitches, MlmOn};
use tch::{nn, Device, Kind, Tensor};

/// `v` rounded to the FP8 grid with `mbits` mantissa bits, smallest normal `2^min_exp`,
/// saturated at `max`, ties to even; NaN stays NaN.
fn grid(v: f64, mbits: i32, min_exp: i32, max: f64) -> f64 {
    if v.is_nan() {
        return f64::NAN;
    }
    let a = v.abs().min(max);
    let e = if a < 2f64.powi(min_exp) {
        min_exp
    } else {
        a.log2().floor() as i32
    };
    let step = 2f64.powi(e - mbits);
    ((a / step).round_ties_even() * step).min(max).copysign(v)
}

fn reference(v: f32, scale: f32, f: Format) -> f32 {
    let scaled = (v * scale) as f64;
    let q = match f {
        Format::E4M3 => grid(scaled, 3, -6, 448.0),
        Format::E5M2 => grid(scaled, 2, -14, 57344.0),
    };
    (q as f32) * (1.0 / scale)
}

fn values(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.to_kind(Kind::Float).flatten(0, -1)).unwrap()
}

fn qdq(v: &[f32], scale: f64, f: Format) -> Vec<f32> {
    values(&quantize_dequantize(&Tensor::from_slice(v), scale, f).unwrap())
}

fn same(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

#[test]
fn quantize_dequantize_is_exact_to_the_e4m3_and_e5m2_grids() {
    let inf = f32::INFINITY;
    // E4M3: max 448, 3 mantissa bits, smallest subnormal 2^-9, no infinities (saturated)
    let e4m3: &[(f32, f32)] = &[
        (448.0, 448.0),
        (500.0, 448.0),             // saturation
        (-1000.0, -448.0),          // saturation, negative
        (inf, 448.0),               // infinity saturates
        (1.0625, 1.0),              // a tie: to the even mantissa (1.000)
        (1.1875, 1.25),             // a tie: to the even mantissa (1.010)
        (0.001953125, 0.001953125), // 2^-9, the smallest subnormal
        (0.0009765625, 0.0),        // 2^-10: a tie between 0 and 2^-9, to 0
        (0.0029296875, 0.00390625), // 3 * 2^-10: a tie, to 2^-8 (even)
        (0.015625, 0.015625),       // 2^-6, the smallest normal
        (-0.0, -0.0),
    ];
    let (x, want): (Vec<f32>, Vec<f32>) = e4m3.iter().copied().unzip();
    let got = qdq(&x, 1.0, Format::E4M3);
    for ((x, w), g) in x.iter().zip(&want).zip(&got) {
        assert!(same(*w, *g), "E4M3 {x}: want {w}, got {g}");
    }
    // E5M2: max 57344, 2 mantissa bits, smallest subnormal 2^-16
    let e5m2: &[(f32, f32)] = &[
        (57344.0, 57344.0),
        (60000.0, 57344.0),
        (-1e6, -57344.0),
        (-inf, -57344.0),
        (1.125, 1.0),                     // a tie, to even
        (1.375, 1.5),                     // a tie, to even
        (2f32.powi(-16), 2f32.powi(-16)), // 2^-16
        (2f32.powi(-17), 0.0),            // 2^-17: a tie, to 0
    ];
    let (x, want): (Vec<f32>, Vec<f32>) = e5m2.iter().copied().unzip();
    let got = qdq(&x, 1.0, Format::E5M2);
    for ((x, w), g) in x.iter().zip(&want).zip(&got) {
        assert!(same(*w, *g), "E5M2 {x}: want {w}, got {g}");
    }
    // NaN stays NaN in both
    for f in [Format::E4M3, Format::E5M2] {
        assert!(qdq(&[f32::NAN], 1.0, f)[0].is_nan(), "{f:?} NaN");
    }
    // a scale: 100 * 4 = 400 lies halfway between 384 and 416 and goes to 384 (even): 96
    assert_eq!(qdq(&[100.0], 4.0, Format::E4M3), [96.0]);
    // a sweep over six decades and several scales (not only powers of two) against the reference
    let _turn = rng_turn();
    tch::manual_seed(7);
    let x = (Tensor::randn([4096], (Kind::Float, Device::Cpu))
        * Tensor::randint(12, [4096], (Kind::Float, Device::Cpu)).exp2()
        / 64.0)
        .to_kind(Kind::Float);
    let xs = values(&x);
    for f in [Format::E4M3, Format::E5M2] {
        for scale in [1.0f32, 0.25, 3.0, 448.0 / 37.5, 1e-3] {
            let got = qdq(&xs, scale as f64, f);
            for (v, g) in xs.iter().zip(&got) {
                let w = reference(*v, scale, f);
                assert!(same(w, *g), "{f:?} scale {scale}: {v} -> {g}, want {w}");
            }
        }
    }
}

/// Transformer Engine's delayed-scaling update, written out: the history rolls by one (row 0,
/// the current step's, goes to the end; the new row 0 is zeroed), the scale comes from the max
/// over the window before the roll.
struct RecipeRef {
    history: Vec<[f32; 3]>,
    scale: [f32; 3],
    margin: i32,
}

impl RecipeRef {
    fn update(&mut self) {
        let max = [448.0f32, 448.0, 57344.0];
        for c in 0..3 {
            // fmaxf: NaN ignored
            let amax = self.history.iter().fold(0.0f32, |a, h| a.max(h[c]));
            if amax.is_finite() && amax > 0.0 {
                // an amax so small the quotient overflows: fp32's largest value
                self.scale[c] = ((max[c] * 2f32.powi(-self.margin)) / amax).min(f32::MAX);
            }
        }
        self.history.rotate_left(1);
        self.history[0] = [0.0; 3];
    }
}

#[test]
fn the_amax_history_and_scales_follow_the_delayed_scaling_recipe() {
    for (len, margin) in [(4, 0), (4, 1), (1, 0), (1024, 0)] {
        let state = Fp8State::new(
            2,
            Recipe {
                amax_history_len: len,
                margin,
                ..Recipe::default()
            },
            Device::Cpu,
        );
        let mut r = RecipeRef {
            history: vec![[0.0; 3]; len as usize],
            scale: [1.0; 3],
            margin: margin as i32,
        };
        // steps of amaxes (slot 1; slot 0 stays empty): growing, a spike, a zero, NaN, inf
        let steps: [[f32; 3]; 10] = [
            [1.0, 0.5, 1e-4],
            [2.0, 0.5, 2e-4],
            [300.0, 0.6, 1e-4],
            [1.5, 0.6, 0.0],
            [0.0, 0.0, 0.0],
            [f32::NAN, 0.7, 3e-5],
            [1.0, f32::INFINITY, 3e-5],
            [1.2, 0.7, 5e-5],
            [0.9, 0.7, 4e-5],
            // amaxes so small that max / amax overflows fp32 (len 1: the scale from them alone)
            [1e-37, 1e-38, 1e-35],
        ];
        for (i, a) in steps.iter().enumerate() {
            let mut row0 = state.slot(1).history.get(0);
            row0.copy_(&Tensor::from_slice(a));
            r.history[0] = *a;
            state.update();
            r.update();
            let scale = values(&state.scale);
            let history = values(&state.history);
            for c in 0..3 {
                assert!(
                    same(scale[3 + c], r.scale[c]),
                    "len {len} margin {margin} step {i} col {c}: scale {} want {}",
                    scale[3 + c],
                    r.scale[c]
                );
                assert_eq!(scale[c], 1.0, "slot 0 has no amax: its scale stays 1");
                for (row, h) in r.history.iter().enumerate() {
                    assert!(same(history[row * 6 + 3 + c], h[c]), "history row {row}");
                }
            }
        }
    }
}

/// An amax so small that `max / amax` overflows fp32 sets the scale to fp32's largest value
/// (Transformer Engine's update kernel), not infinity: with an infinite scale a zero casts to
/// NaN (`0 * inf`) and the matmul dequantises with `1 / inf = 0`.
#[test]
fn a_tiny_amax_sets_the_largest_finite_scale_not_infinity() {
    let state = Fp8State::new(1, Recipe::default(), Device::Cpu);
    let slot = state.slot(0);
    // 448 / 1e-37 and 57344 / 1e-35 overflow fp32; 448 / 0.5 does not
    slot.history
        .get(0)
        .copy_(&Tensor::from_slice(&[1e-37f32, 0.5, 1e-35]));
    state.update();
    assert_eq!(values(&state.scale), [f32::MAX, 896.0, f32::MAX]);
    // the cast with that scale: zero stays zero, the amax lands inside the format
    for (v, f) in [(1e-37f32, Format::E4M3), (1e-35, Format::E5M2)] {
        let q = qdq(&[0.0, v, -v], f32::MAX as f64, f);
        assert!(q.iter().all(|x| x.is_finite()), "{f:?}: {q:?}");
        assert_eq!(q[0], 0.0);
    }
}

#[test]
fn the_fp8_linear_records_amaxes_and_computes_from_the_quantised_operands() {
    let _turn = rng_turn();
    tch::manual_seed(3);
    let state = Fp8State::new(1, Recipe::default(), Device::Cpu);
    let slot = state.slot(0);
    let scales = [2.0f32, 8.0, 1024.0];
    slot.scale
        .shallow_clone()
        .copy_(&Tensor::from_slice(&scales));
    let opts = (Kind::Float, Device::Cpu);
    let x = (Tensor::randn([24, 32], opts) * 3.0).set_requires_grad(true);
    let w = (Tensor::randn([16, 32], opts) * 0.05).set_requires_grad(true);
    let b = Tensor::randn([16], opts).set_requires_grad(true);
    let y = linear(&x, &w, Some(&b), &slot, Path::Reference).unwrap();
    assert_eq!(y.kind(), Kind::Float);
    let q = |t: &Tensor, s: f32, f: Format| quantize_dequantize(t, s as f64, f).unwrap();
    let xq = q(&x.detach(), scales[0], Format::E4M3);
    let wq = q(&w.detach(), scales[1], Format::E4M3);
    let want = xq.mm(&wq.tr()) + b.detach();
    assert!(y.detach().allclose(&want, 1e-6, 1e-6, false));
    // this call's amaxes in row 0, the gradient's after the backward
    let amax = |t: &Tensor| f32::try_from(t.detach().abs().max()).unwrap();
    let row0 = values(&slot.history.get(0));
    assert_eq!(row0, [amax(&x), amax(&w), 0.0]);
    let g = Tensor::randn([24, 16], opts) * 1e-3;
    // d loss / d y = g exactly
    (&y * &g).sum(Kind::Float).backward();
    let row0 = values(&slot.history.get(0));
    assert_eq!(row0[2], amax(&g));
    let gq = q(&g, scales[2], Format::E5M2);
    assert!(x.grad().allclose(&gq.mm(&wq), 1e-6, 1e-7, false));
    assert!(w.grad().allclose(&gq.tr().mm(&xq), 1e-6, 1e-7, false));
    // the bias's gradient from the unquantised gradient
    assert!(b
        .grad()
        .allclose(&g.sum_dim_intlist(0, false, Kind::Float), 1e-6, 1e-7, false));
    // without a bias
    let y0 = linear(&x, &w, None, &slot, Path::Reference).unwrap();
    assert!(y0.detach().allclose(&xq.mm(&wq.tr()), 1e-6, 1e-6, false));
    // the E5M2 cast did round the gradient (the test would not see a missing cast otherwise)
    assert!(!gq.allclose(&g, 1e-6, 0.0, false));
}

/// With gradient accumulation a layer runs once per micro-batch in a step: row 0 of its history
/// holds the largest amax of the step's calls, whichever came first (each call overwrote it
/// before: the last micro-batch's amax alone set the next scale).
#[test]
fn the_step_amax_is_the_largest_over_the_steps_micro_batches() {
    let _turn = rng_turn();
    tch::manual_seed(5);
    let opts = (Kind::Float, Device::Cpu);
    let w = (Tensor::randn([16, 32], opts) * 0.05).set_requires_grad(true);
    let small = Tensor::randn([16, 32], opts) * 0.5;
    let large = Tensor::randn([16, 32], opts) * 8.0;
    let amax = |t: &Tensor| f32::try_from(t.abs().max()).unwrap();
    for (k, order) in [[&small, &large], [&large, &small]].into_iter().enumerate() {
        let state = Fp8State::new(1, Recipe::default(), Device::Cpu);
        let slot = state.slot(0);
        let mut grad_amax = 0f32;
        for (i, x) in order.into_iter().enumerate() {
            let x = x.shallow_clone().set_requires_grad(true);
            let y = linear(&x, &w, None, &slot, Path::Reference).unwrap();
            let g = Tensor::randn([16, 16], opts) * (1e-3 * (1 + 9 * i) as f64);
            grad_amax = grad_amax.max(amax(&g));
            (&y * &g).sum(Kind::Float).backward();
        }
        let row0 = values(&slot.history.get(0));
        assert_eq!(
            row0,
            [amax(&large), amax(&w.detach()), grad_amax],
            "order {k}"
        );
        // the update starts the next step from 0
        state.update();
        assert_eq!(values(&slot.history.get(0)), [0.0, 0.0, 0.0]);
    }
}

fn tiny() -> BertConfig {
    BertConfig {
        vocab_size: 61,
        hidden_size: 32,
        num_layers: 2,
        num_heads: 4,
        intermediate_size: 64,
        max_position: 16,
        type_vocab_size: 2,
        hidden_dropout: 0.0,
        attention_dropout: 0.0,
        layer_norm_eps: 1e-12,
    }
}

/// Adam steps of a tiny BERT on one fixed batch through emulated FP8; the losses and the scales.
fn train_fp8(fused_epilogues: bool, fused_qkv: bool, steps: usize) -> (Vec<f64>, Vec<f32>) {
    let (losses, scales, _) = train_fp8_with(fused_epilogues, fused_qkv, steps, |_| {});
    (losses, scales)
}

/// [`train_fp8`] with the kernel switches set by `kernels` (after the emulated FP8 path); the
/// losses, the scales and the amax history.
fn train_fp8_with(
    fused_epilogues: bool,
    fused_qkv: bool,
    steps: usize,
    kernels: impl Fn(&mut KernelSwitches),
) -> (Vec<f64>, Vec<f32>, Vec<f32>) {
    let _turn = rng_turn();
    tch::manual_seed(21);
    let vs = nn::VarStore::new(Device::Cpu);
    let methods = BertMethods {
        fp8: true,
        fused_epilogues,
        fused_qkv,
        fp8_amax_history_len: 16,
        ..BertMethods::default()
    };
    let mut m = BertForPreTraining::new(&vs.root(), &tiny(), &methods).unwrap();
    m.configure(|_, k| {
        k.fp8_path = Path::Reference;
        kernels(k);
    });
    use nn::OptimizerConfig;
    let mut opt = nn::Adam::default().build(&vs, 3e-3).unwrap();
    let (b, s, preds) = (4, 16, 3);
    let c = (Kind::Int64, Device::Cpu);
    let ids = Tensor::randint(61, [b, s], c);
    let seg = Tensor::randint(2, [b, s], c);
    let mask = Tensor::ones([b, s], c);
    let pos = Tensor::randint(s, [b, preds], c);
    let labels = Tensor::randint(61, [b, preds], c);
    let mut losses = Vec::new();
    for _ in 0..steps {
        let (mlm, _) = m
            .forward(&ids, &seg, Some(&mask), MlmOn::Positions(&pos), true)
            .unwrap();
        let loss = mlm
            .reshape([-1, 61])
            .cross_entropy_for_logits(&labels.reshape([-1]));
        opt.zero_grad();
        loss.backward();
        opt.step();
        m.fp8_update();
        losses.push(f64::try_from(&loss).unwrap());
    }
    let state = m.fp8_state();
    (losses, values(&state.scale), values(&state.history))
}

#[test]
fn a_tiny_bert_trains_through_emulated_fp8_linears() {
    // plain parts; fused epilogues with fused QKV (one FP8 linear over the stacked weights)
    for fused in [false, true] {
        let (losses, scales) = train_fp8(fused, fused, 30);
        let (first, last) = (losses[0], *losses.last().unwrap());
        assert!(
            last < 0.7 * first,
            "fused_epilogues={fused}: {first} -> {last}"
        );
        // 2 layers x 6 linears x (input, weight, gradient): every scale moved off 1 (fused QKV
        // uses the query's: the key's and value's stay 1)
        assert_eq!(scales.len(), 36);
        for (i, s) in scales.iter().enumerate() {
            let unused = fused && matches!((i / 3) % 6, 1 | 2);
            assert_eq!(
                s.is_finite() && *s != 1.0,
                !unused,
                "fused={fused} slot {} col {}: {s}",
                i / 3,
                i % 3
            );
        }
    }
}

#[test]
fn fp8_is_closed_legal_refused_on_a_cpu_without_the_test_mode_and_not_with_fused_bias_gelu() {
    let on = BertMethods {
        fp8: true,
        ..BertMethods::default()
    };
    on.validate().unwrap();
    on.refuse_in_closed().unwrap();
    let keys = on.log_keys();
    assert!(keys.contains(&("method_fp8", serde_json::Value::Bool(true))));
    let both = BertMethods {
        fused_bias_gelu: true,
        ..on.clone()
    };
    let e = both.validate().unwrap_err().to_string();
    assert!(e.contains("methods.fused_bias_gelu"), "{e}");
    if std::env::var(EMULATE_FP8).is_err() {
        let e = path_for(Device::Cpu).unwrap_err().to_string();
        assert!(
            e.contains("methods.fp8 cannot run") && e.contains("CPU") && e.contains(EMULATE_FP8),
            "{e}"
        );
    }
}

/// `methods.fp8` with fused epilogues: the LayerNorm epilogue that feeds an FP8 linear also
/// writes the linear's E4M3 input and its amax (`KernelSwitches::fp8_fused_cast`), so the linear
/// skips its own cast. That is the same arithmetic: training with the cast fused and with the
/// linears casting for themselves gives the same losses, scales and amax histories bit for bit,
/// on the composite path and through the CUDA kernels on the CPU emulator (whose vectorised
/// forward writes the cast itself).
#[test]
fn the_fused_epilogues_cast_for_the_fp8_linears_with_the_same_bits() {
    for path in [Path::Reference, Path::Emulated] {
        let run = |fused_cast: bool| {
            train_fp8_with(true, true, 8, |k| {
                k.fused_epilogue_path = path;
                k.fp8_fused_cast = fused_cast;
            })
        };
        let launches = vectorised_launches().0;
        let (fused_losses, fused_scales, fused_history) = run(true);
        if path == Path::Emulated {
            assert!(
                vectorised_launches().0 > launches,
                "the vectorised forward ran"
            );
        }
        let (losses, scales, history) = run(false);
        assert_eq!(fused_losses, losses, "{path:?}: losses");
        assert_eq!(fused_scales, scales, "{path:?}: scales");
        assert_eq!(fused_history, history, "{path:?}: amax history");
        assert!(losses.last().unwrap() < &losses[0], "{path:?}: {losses:?}");
    }
}

/// The fused epilogue's E4M3 output, byte for byte, against ATen's cast of the op's own output
/// (`(y * scale).clamp(-448, 448)` to `Float8_e4m3fn`, as the FP8 linear casts its input), and
/// its amax against `max |y|`: with gamma 0 the LayerNorm's output is beta, so beta carries the
/// values to cast: every E4M3 value and the midpoints between neighbours (ties to even) with
/// the floats either side of them, subnormals and fp32 denormals, both zeros, values past 448,
/// infinities, through the vectorised kernel on the emulator and the composite path, fp32 and
/// bf16 outputs, three scales. A NaN makes the amax NaN, as ATen's max does.
#[test]
fn the_fused_epilogues_e4m3_output_is_atens_cast_bit_for_bit() {
    let values = e4m3_probe_values();
    let cols = 256_i64;
    let chunks: Vec<&[f32]> = values.chunks(cols as usize).collect();
    for path in [Path::Emulated, Path::Reference] {
        for out in [Kind::Float, Kind::BFloat16] {
            for scale in [1.0f32, 0.37, 1024.0] {
                for chunk in &chunks {
                    check_e4m3_output(chunk, cols, path, out, scale);
                }
            }
        }
    }
    // a NaN in the output: its amax is NaN and its byte E4M3's NaN
    let mut with_nan = vec![1.5f32; cols as usize];
    with_nan[7] = f32::NAN;
    let (y, q, amax) = epilogue_fp8(&with_nan, cols, Path::Emulated, Kind::Float, 1.0);
    assert!(f32::try_from(&amax).unwrap().is_nan(), "amax {amax:?}");
    let bytes = Vec::<u8>::try_from(q.view_dtype(Kind::Uint8).reshape([-1])).unwrap();
    assert!(f32::try_from(y.get(0).get(7)).unwrap().is_nan());
    assert_eq!(bytes[7] & 0x7f, 0x7f, "E4M3's NaN");
}

/// Values to cast for a format: every value of its grid (`value` of the codes up to `top`, its
/// largest finite one), the midpoints of neighbours and the floats either side of each (up to
/// `past`, the next step past the largest), then `extra`; both signs.
fn probe_values(top: u8, value: impl Fn(u8) -> f32, past: f32, extra: &[f32]) -> Vec<f32> {
    let mut grid: Vec<f32> = (0u8..=top).map(value).collect();
    grid.push(past);
    let mut v = Vec::new();
    for w in grid.windows(2) {
        let mid = (w[0] + w[1]) / 2.0;
        v.extend([
            w[0],
            mid,
            f32::from_bits(mid.to_bits() - 1),
            f32::from_bits(mid.to_bits() + 1),
        ]);
    }
    v.extend(extra);
    let negative: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(negative);
    v
}

/// E4M3's: its grid, past 448, infinities, zero, subnormals, fp32 denormals.
fn e4m3_probe_values() -> Vec<f32> {
    let extra = [
        448.0,
        449.0,
        463.9,
        464.0,
        500.0,
        1e30,
        f32::INFINITY,
        0.0,
        1e-40,
        1e-45,
        2f32.powi(-10),
        2f32.powi(-11),
        3.0 * 2f32.powi(-11),
        2f32.powi(-12),
    ];
    probe_values(0x7e, e4m3_value, 480.0, &extra)
}

/// The E4M3 value of `code` (sign bit clear): 4 exponent bits (bias 7), 3 mantissa bits.
fn e4m3_value(code: u8) -> f32 {
    let (e, m) = (i32::from(code >> 3), f32::from(code & 7));
    if e == 0 {
        m * 2f32.powi(-9)
    } else {
        (1.0 + m / 8.0) * 2f32.powi(e - 7)
    }
}

/// The fused epilogue (gamma 0, beta = `values` padded to `cols` with 0) over 3 rows with an FP8
/// scale: its output, the E4M3 cast and the amax.
fn epilogue_fp8(
    values: &[f32],
    cols: i64,
    path: Path,
    out: Kind,
    scale: f32,
) -> (Tensor, Tensor, Tensor) {
    use mlperf_run::fused::epilogue::{bias_dropout_add_ln_fp8, Epilogue};
    let mut beta = values.to_vec();
    beta.resize(cols as usize, 0.0);
    let beta = Tensor::from_slice(&beta);
    let gamma = Tensor::zeros([cols], (Kind::Float, Device::Cpu));
    // no draws from the shared generator (train_fp8's runs depend on theirs)
    let h = Tensor::arange(3 * cols, (Kind::Float, Device::Cpu))
        .reshape([3, cols])
        .sin();
    let residual = h.cos();
    let e = Epilogue {
        residual: &residual,
        gamma: &gamma,
        beta: &beta,
        eps: 1e-12,
        p: 0.0,
        train: false,
        mask: None,
        path,
        out: Some(out),
    };
    let s = Tensor::from(scale);
    let (y, cast, used) = bias_dropout_add_ln_fp8(&h, None, &e, &s).unwrap();
    assert_eq!(used, path == Path::Emulated);
    assert_eq!(y.kind(), out);
    (y, cast.q, cast.amax)
}

fn check_e4m3_output(values: &[f32], cols: i64, path: Path, out: Kind, scale: f32) {
    let (y, q, amax) = epilogue_fp8(values, cols, path, out, scale);
    let s = Tensor::from(scale);
    let want = (y.to_kind(Kind::Float) * &s)
        .clamp(-448.0, 448.0)
        .to_kind(Kind::Float8e4m3fn);
    let bytes = |t: &Tensor| Vec::<u8>::try_from(t.view_dtype(Kind::Uint8).reshape([-1])).unwrap();
    let (got, want) = (bytes(&q), bytes(&want));
    let yv = Vec::<f32>::try_from(y.to_kind(Kind::Float).reshape([-1])).unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g,
            w,
            "{path:?} {out:?} scale {scale}: y {} (bits {:#x}) cast to {g:#04x}, ATen {w:#04x}",
            yv[i],
            yv[i].to_bits()
        );
    }
    let want_amax = f32::try_from(y.abs().max().to_kind(Kind::Float)).unwrap();
    assert_eq!(
        f32::try_from(&amax).unwrap(),
        want_amax,
        "{path:?} {out:?} amax"
    );
}

/// The bias + GELU op's E4M3 output (`methods.fp8`: the output dense's input), byte for byte
/// against ATen's cast of the op's own output, and its amax against `max |y|`, through the
/// kernel on the emulator (whose threads each take 4 columns of a chunk of rows, so the amax is
/// a max over partials) and the composite path, fp32 and bf16, three scales; the output itself
/// is the same with the cast asked for and without.
#[test]
fn the_bias_gelu_ops_e4m3_output_is_atens_cast_bit_for_bit() {
    use mlperf_run::fused::epilogue::bias_gelu;
    // no draws from the shared generator: a spread of values from about -60 to 60
    let (rows, cols) = (37_i64, 64_i64);
    let base = Tensor::arange(rows * cols, (Kind::Float, Device::Cpu)).reshape([rows, cols]);
    let z0 = (&base * 0.37).sin() * (&base * 0.011).exp().clamp(0.0, 60.0);
    let b = Tensor::arange(cols, (Kind::Float, Device::Cpu)) * 0.05 - 1.0;
    for path in [Path::Emulated, Path::Reference] {
        for kind in [Kind::Float, Kind::BFloat16] {
            let z = z0.to_kind(kind);
            let (plain, none, _) = bias_gelu(&z, &b, None, path).unwrap();
            assert!(none.is_none());
            for scale in [1.0f32, 0.37, 1024.0] {
                let s = Tensor::from(scale);
                let (y, cast, used) = bias_gelu(&z, &b, Some(&s), path).unwrap();
                assert_eq!(used, path == Path::Emulated, "{path:?}");
                assert!(y.equal(&plain), "{path:?} {kind:?}: the output changed");
                let cast = cast.unwrap();
                let want = (y.to_kind(Kind::Float) * &s)
                    .clamp(-448.0, 448.0)
                    .to_kind(Kind::Float8e4m3fn);
                let bytes = |t: &Tensor| {
                    Vec::<u8>::try_from(t.view_dtype(Kind::Uint8).reshape([-1])).unwrap()
                };
                assert_eq!(
                    bytes(&cast.q),
                    bytes(&want),
                    "{path:?} {kind:?} scale {scale}"
                );
                let want_amax = f32::try_from(y.abs().max().to_kind(Kind::Float)).unwrap();
                assert_eq!(
                    f32::try_from(&cast.amax).unwrap(),
                    want_amax,
                    "{path:?} {kind:?}"
                );
                // at this scale the largest values saturate (448)
                if scale == 1024.0 {
                    assert!(bytes(&cast.q).iter().any(|b| b & 0x7f == 0x7e));
                }
            }
        }
    }
}

/// E5M2's: its grid (subnormals in steps of 2^-16), past 57344, infinities, zero, fp32
/// denormals, below its smallest subnormal.
fn e5m2_probe_values() -> Vec<f32> {
    let value = |code: u8| {
        let (e, m) = (i32::from(code >> 2), f32::from(code & 3));
        if e == 0 {
            m * 2f32.powi(-16)
        } else {
            (1.0 + m / 4.0) * 2f32.powi(e - 15)
        }
    };
    let extra = [
        57344.0,
        57345.0,
        61439.0,
        61440.0,
        1e30,
        f32::INFINITY,
        0.0,
        1e-40,
        1e-45,
        2f32.powi(-17),
        3.0 * 2f32.powi(-18),
        2f32.powi(-18),
    ];
    probe_values(0x7b, value, 65536.0, &extra)
}

/// `values` padded with zeros to a multiple of 4 (the kernels' groups), as `kind`.
fn cast_input(values: &[f32], kind: Kind) -> Tensor {
    let mut v = values.to_vec();
    v.resize(v.len().div_ceil(4) * 4, 0.0);
    Tensor::from_slice(&v).to_kind(kind)
}

/// `t` cast on `path` with `scale`, the amax recorded into a cell that held `prior`: the FP8
/// bytes, the cell's value after, and whether the kernels ran.
fn cast_bytes(
    t: &Tensor,
    scale: f32,
    format: Format,
    prior: f32,
    path: Path,
    max_blocks: i64,
) -> (Vec<u8>, f32, bool) {
    let cell = Tensor::from(prior);
    let (q, used) = cast(t, &Tensor::from(scale), format, &cell, path, max_blocks).unwrap();
    let want_kind = match format {
        Format::E4M3 => Kind::Float8e4m3fn,
        Format::E5M2 => Kind::Float8e5m2,
    };
    assert_eq!(q.kind(), want_kind);
    assert_eq!(q.size(), t.size());
    let bytes = Vec::<u8>::try_from(q.view_dtype(Kind::Uint8).reshape([-1])).unwrap();
    (bytes, f32::try_from(&cell).unwrap(), used)
}

/// The one-pass cast kernels (`mr_fe_fp8_cast` and `mr_fe_amax_record`, on the CPU emulator)
/// against ATen's ops (the reference path: `(t * scale).clamp(-max, max)` cast to the format,
/// and `max(cell, max |t|)`), byte for byte: both formats over every value of each grid, the
/// midpoints (ties to even) and the floats either side of them, subnormals, fp32 denormals,
/// saturation, infinities; fp32, bf16 and fp16 inputs; four scales; a grid capped at 1 and 2
/// blocks (the grid-stride loop turns several times) and the default grid; the cell holding 0
/// (a step's first call) or a larger earlier amax (a later micro-batch).
#[test]
fn the_one_pass_fp8_cast_kernels_give_atens_casts_and_amax_bit_for_bit() {
    for (format, values) in [
        (Format::E4M3, e4m3_probe_values()),
        (Format::E5M2, e5m2_probe_values()),
    ] {
        for kind in [Kind::Float, Kind::BFloat16, Kind::Half] {
            let t = cast_input(&values, kind);
            for scale in [1.0f32, 0.37, 1024.0, 3.0e-3] {
                for prior in [0.0f32, 1.0e38] {
                    let (want, want_amax, used) =
                        cast_bytes(&t, scale, format, prior, Path::Reference, 0);
                    assert!(!used, "the reference path ran the kernels");
                    for max_blocks in [1, 2, 0] {
                        let what = format!(
                            "{format:?} {kind:?} scale {scale} prior {prior} grid cap {max_blocks}"
                        );
                        let (got, amax, used) =
                            cast_bytes(&t, scale, format, prior, Path::Emulated, max_blocks);
                        assert!(used, "{what}: the kernels did not run");
                        let tv = values_of(&t);
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(
                                g,
                                w,
                                "{what}: {} (bits {:#x}) cast to {g:#04x}, ATen {w:#04x}",
                                tv[i],
                                tv[i].to_bits()
                            );
                        }
                        assert_eq!(amax.to_bits(), want_amax.to_bits(), "{what}: amax");
                    }
                }
            }
        }
    }
}

fn values_of(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.to_kind(Kind::Float).reshape([-1])).unwrap()
}

/// A NaN: its byte is the format's NaN (0x7f with the sign) and the amax NaN, on both paths;
/// a cell that holds a NaN keeps it. A larger tensor (many warps' partials, several blocks)
/// gives its amax exactly, and a shifted scale (the control) changes the bytes. The kernels
/// refuse what they cannot take (a length not a multiple of 4) on the emulated path, and the
/// automatic path takes ATen's ops on the CPU.
#[test]
fn the_fp8_cast_kernels_handle_nan_large_tensors_and_refusals() {
    let _turn = rng_turn();
    for format in [Format::E4M3, Format::E5M2] {
        let mut v = vec![1.5f32; 64];
        v[9] = f32::NAN;
        v[10] = -f32::NAN;
        let t = Tensor::from_slice(&v);
        for path in [Path::Reference, Path::Emulated] {
            let (bytes, amax, _) = cast_bytes(&t, 1.0, format, 0.0, path, 0);
            assert!(amax.is_nan(), "{format:?} {path:?}: amax {amax}");
            assert_eq!(bytes[9], 0x7f, "{format:?} {path:?}");
            assert_eq!(bytes[10], 0xff, "{format:?} {path:?}");
            let (_, amax, _) = cast_bytes(
                &Tensor::ones([8], (Kind::Float, Device::Cpu)),
                1.0,
                format,
                f32::NAN,
                path,
                0,
            );
            assert!(
                amax.is_nan(),
                "{format:?} {path:?}: a NaN cell lost its NaN"
            );
        }
    }
    tch::manual_seed(9);
    // 3 x 2,048 groups of 4: 24 blocks of 256 threads, 192 warps' partials; the largest value
    // placed in the last warp's share
    let t = Tensor::randn([24_576], (Kind::Float, Device::Cpu));
    let _ = t.get(24_571).fill_(-9.75);
    let t = t.to_kind(Kind::BFloat16);
    let (want, want_amax, _) = cast_bytes(&t, 20.0, Format::E5M2, 0.0, Path::Reference, 0);
    let (got, amax, used) = cast_bytes(&t, 20.0, Format::E5M2, 0.0, Path::Emulated, 0);
    assert!(used);
    assert_eq!(want_amax, 9.75);
    assert_eq!(amax, 9.75);
    assert!(got == want, "the large tensor's bytes differ");
    // the control: a scale off by 16x gives other bytes (the comparison can fail)
    let (shifted, _, _) = cast_bytes(&t, 20.0 * 16.0, Format::E5M2, 0.0, Path::Emulated, 0);
    assert!(shifted != want, "a 16x scale changed no byte");
    // refusals and the fallback
    let odd = Tensor::ones([6], (Kind::Float, Device::Cpu));
    let cell = Tensor::from(0f32);
    let e = cast(
        &odd,
        &Tensor::from(1f32),
        Format::E4M3,
        &cell,
        Path::Emulated,
        0,
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("do not take"), "{e:#}");
    let (_, used) = cast(
        &odd,
        &Tensor::from(1f32),
        Format::E4M3,
        &cell,
        Path::Auto,
        0,
    )
    .unwrap();
    assert!(!used, "the automatic path ran kernels on the CPU");
    assert_eq!(f32::try_from(&cell).unwrap(), 1.0);
}

/// The cast-transpose kernel (`mr_fe_fp8_cast_transpose`, on the CPU emulator), which feeds the
/// FP8 GEMMs of the backward their operands row-major as cuBLASLt wants them: `q` and `qt` are
/// ATen's cast (the reference path) and its transpose, byte for byte, rows past the input's zero
/// in both (the GEMM's padding), the amax ATen's; for shapes of one partial tile, several whole
/// and partial tiles in both directions, and no padding; fp32, bf16 and fp16 inputs, both
/// formats, a NaN. The transpose-only mode (an FP8 input: the fused epilogues' casts) gives the
/// transpose of its input. Shapes the kernel cannot take are refused with the reason.
#[test]
fn the_cast_transpose_kernel_gives_atens_cast_and_its_transpose_bit_for_bit() {
    let _turn = rng_turn();
    tch::manual_seed(12);
    let bytes = |t: &Tensor| Vec::<u8>::try_from(t.view_dtype(Kind::Uint8).reshape([-1])).unwrap();
    for (rows, cols, rows_out) in [(5, 4, 16), (37, 68, 48), (64, 128, 64), (70, 132, 80)] {
        for kind in [Kind::Float, Kind::BFloat16, Kind::Half] {
            for format in [Format::E4M3, Format::E5M2] {
                let what = format!("[{rows}, {cols}] -> {rows_out} rows, {kind:?} {format:?}");
                let t = Tensor::randn([rows, cols], (Kind::Float, Device::Cpu)) * 40.0;
                if rows * cols > 100 {
                    let _ = t.get(rows - 1).get(cols - 3).fill_(f64::NAN);
                }
                let t = t.to_kind(kind);
                let scale = Tensor::from(3.5f32);
                let want_cell = Tensor::from(0f32);
                let (want, _) = cast(&t, &scale, format, &want_cell, Path::Reference, 0).unwrap();
                let want_padded = Tensor::cat(
                    &[
                        want.view_dtype(Kind::Uint8),
                        Tensor::zeros([rows_out - rows, cols], (Kind::Uint8, Device::Cpu)),
                    ],
                    0,
                );
                let cell = Tensor::from(0f32);
                let (q, qt) =
                    cast_transpose(&t, &scale, format, &cell, Path::Emulated, rows_out).unwrap();
                let q = q.expect("a cast gives q");
                assert_eq!(q.size(), [rows_out, cols], "{what}");
                assert_eq!(qt.size(), [cols, rows_out], "{what}");
                assert_eq!(q.kind(), want.kind(), "{what}");
                assert!(
                    bytes(&q) == bytes(&want_padded),
                    "{what}: q differs from ATen's cast"
                );
                assert!(
                    bytes(&qt) == bytes(&want_padded.tr().contiguous()),
                    "{what}: qt is not the transpose of ATen's cast"
                );
                let (amax, want_amax) = (
                    f32::try_from(&cell).unwrap(),
                    f32::try_from(&want_cell).unwrap(),
                );
                assert!(
                    amax.to_bits() == want_amax.to_bits() || amax.is_nan() && want_amax.is_nan(),
                    "{what}: amax {amax} vs ATen's {want_amax}"
                );
                assert_eq!(rows * cols > 100, amax.is_nan(), "{what}: amax {amax}");
                // the transpose of a cast tensor alone
                let (none, wt) =
                    cast_transpose(&want, &scale, format, &cell, Path::Emulated, rows_out).unwrap();
                assert!(none.is_none(), "{what}: the transpose-only mode returned q");
                assert_eq!(wt.kind(), want.kind(), "{what}");
                assert!(
                    bytes(&wt) == bytes(&qt),
                    "{what}: the transpose-only mode differs"
                );
            }
        }
    }
    // refusals: columns not a multiple of 4, fewer output rows than rows, the reference path
    let t = Tensor::ones([8, 6], (Kind::Float, Device::Cpu));
    let (s, c) = (Tensor::from(1f32), Tensor::from(0f32));
    for (t, rows_out, path) in [
        (&t, 8, Path::Emulated),
        (&t.narrow(1, 0, 4).contiguous(), 4, Path::Emulated),
        (&t.narrow(1, 0, 4).contiguous(), 8, Path::Reference),
    ] {
        let e = cast_transpose(t, &s, Format::E4M3, &c, path, rows_out).unwrap_err();
        assert!(
            format!("{e:#}").contains("does not take") || format!("{e:#}").contains("mode"),
            "{e:#}"
        );
    }
}

/// The FP8 linear with every cast on the cast kernels (emulated) gives what it gives with
/// ATen's casts, bit for bit: output, the three gradients, and the amax history; and a tiny BERT
/// trained 6 steps that way (plain parts, and fused epilogues with fused QKV) has the same
/// losses, scales and history.
#[test]
fn the_fp8_linear_and_a_tiny_bert_on_the_cast_kernels_match_atens_casts() {
    let run = |path: Path| {
        let _turn = rng_turn();
        tch::manual_seed(4);
        let state = Fp8State::new(1, Recipe::default(), Device::Cpu);
        let slot = state.slot(0);
        slot.scale
            .shallow_clone()
            .copy_(&Tensor::from_slice(&[2.0f32, 8.0, 1024.0]));
        let opts = (Kind::Float, Device::Cpu);
        let x = (Tensor::randn([24, 32], opts) * 3.0).set_requires_grad(true);
        let w = (Tensor::randn([16, 32], opts) * 0.05).set_requires_grad(true);
        let b = Tensor::randn([16], opts).set_requires_grad(true);
        let y = linear(&x, &w, Some(&b), &slot, path).unwrap();
        let g = Tensor::randn([24, 16], opts) * 1e-3;
        (&y * &g).sum(Kind::Float).backward();
        [
            y.detach(),
            x.grad(),
            w.grad(),
            b.grad(),
            slot.history.get(0),
        ]
        .iter()
        .map(values_of)
        .collect::<Vec<_>>()
    };
    let (aten, kernels) = (run(Path::Reference), run(Path::Emulated));
    for (i, (a, k)) in aten.iter().zip(&kernels).enumerate() {
        assert!(
            a.iter().zip(k).all(|(a, k)| same(*a, *k)),
            "output {i} differs: {a:?} vs {k:?}"
        );
    }
    for (fused_epilogues, fused_qkv) in [(false, false), (true, true)] {
        let (l0, s0, h0) = train_fp8_with(fused_epilogues, fused_qkv, 6, |_| {});
        let (l1, s1, h1) = train_fp8_with(fused_epilogues, fused_qkv, 6, |k| {
            k.fp8_path = Path::Emulated
        });
        let what = format!("fused epilogues {fused_epilogues}, fused QKV {fused_qkv}");
        assert_eq!(l0, l1, "{what}: losses");
        assert_eq!(s0, s1, "{what}: scales");
        assert_eq!(h0, h1, "{what}: amax history");
        assert!(l1.last().unwrap() < &l1[0], "{what}: {l1:?}");
    }
}
