//! GPU check of `methods.fp8` (`src/fused/fp8.rs`, `shim/fp8.cpp`): each of BERT-Large's encoder
//! linear shapes (QKV 1024 -> 3072 as `fused_qkv` stacks it, attention output 1024 -> 1024, FFN
//! in 1024 -> 4096, FFN out 4096 -> 1024) over `--tokens` tokens, through
//! - `bf16`: `linear` under bf16 autocast (the reference the method replaces),
//! - `fp8`: the `_scaled_mm` path with delayed scaling, its scales set by one earlier step's
//!   amaxes (the recipe's update), as in training after the first step,
//! - `emulated`: the emulated path with the same scales (quantise-dequantise in fp32),
//! - `broken`: the `_scaled_mm` path with the amax history off by 16x (scales 16x too large:
//!   a control that must fail).
//!
//! It reports the relative error `|a - b| / |b|` (Frobenius) of the output and the x, W and bias
//! gradients against bf16, and the median forward + backward time of bf16 and fp8.
//!
//! cargo run --release --example fp8_check -- [--device cuda|cpu] [--tokens 16384] [--rounds 10]
//!
//! Prints one JSON line per shape (`tflops`: the fp8 side's fwd+bwd TFLOP/s) and a final line
//! with `ok`: fp8 within `--tol` (0.1)
//! of bf16 for the output and the x and W gradients, the emulated path within 2e-2 of the
//! kernel, the broken control beyond the tolerance. Exit status 1 otherwise. On a CPU (or where
//! `_scaled_mm` cannot run) the `fp8` side is the emulated one (MLPERF_RUN_TEST_EMULATE_FP8=1
//! needed): the plumbing, not the kernel.
//!
//! Then, on a GPU, the one-pass cast kernels (`mr_fe_fp8_cast` + `mr_fe_amax_record`, the casts
//! of the kernel path) against ATen's ops (the reference path's casts) on each shape's tensors
//! (x bf16 and W fp32 to E4M3, the output gradient bf16 to E5M2): one JSON line per cast with
//! `"cast"`, whether every byte and the amax are equal (they must be), and both sides' median
//! time with the kernel's effective GB/s (bytes read plus written). Then the cast-transpose
//! kernel (`mr_fe_fp8_cast_transpose`: the cast in both layouts the backward's FP8 GEMMs read,
//! the token rows padded to a multiple of 16) against ATen's cast and `.t().contiguous()` on the
//! same tensors: one JSON line each with `"cast_transpose"`, bytes and amax equal (they must be),
//! the times of both ways and of the transpose alone of an FP8 tensor (kernel vs ATen's copy).
//!
//! Before that last line, on a GPU, a probe for `methods.fp8_attention` (not built; docs/gpu.md):
//! each candidate attention op of libtorch ([`AttentionProbe`]) on FP8 (E4M3) q, k, v of BERT's
//! shape ([2, 16, 512, 64]), one plain-text line each, `fp8 attention probe: <op>: runs (<ms>)`
//! or `...: refused: <why>`, then the bf16 SDPA of the same shape for reference. A refusal does
//! not fail the check.

mod common;

use anyhow::{bail, Context, Result};
use clap::Parser;
use mlperf_run::fused::fp8::{
    attention_probe, cast, cast_transpose, linear, path_for, AttentionProbe, Format, Fp8State,
    Recipe,
};
use mlperf_run::fused::Path;
use mlperf_run::gpu::amp::{Autocast, LowPrecision};
use tch::{Device, Kind, Tensor};

/// FP8 linears with delayed scaling against bf16 at BERT-Large shapes.
#[derive(Parser)]
struct Args {
    #[arg(long, value_parser = common::parse_device, default_value = "auto")]
    device: Device,
    #[arg(long, default_value_t = 16384)]
    tokens: i64,
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Largest relative error of fp8 against bf16 that passes.
    #[arg(long, default_value_t = 0.1)]
    tol: f64,
}

/// One side's output and gradients (x, W, b), fp32.
struct Out {
    y: Tensor,
    grads: [Tensor; 3],
}

fn rel(a: &Tensor, b: &Tensor) -> f64 {
    let d = (a - b).norm().double_value(&[]);
    d / b.norm().double_value(&[]).max(1e-30)
}

/// Forward and backward of one side on (x, w, b) with the output gradient g.
fn side(
    d: Device,
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    g: &Tensor,
    f: impl Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Out> {
    let [x, w, b] = [x, w, b].map(|t| t.detach().set_requires_grad(true));
    let y = {
        let _ac = Autocast::enter(d, LowPrecision::BFloat16)?;
        f(&x, &w, &b)?
    };
    (y.to_kind(Kind::Float) * g).sum(Kind::Float).backward();
    Ok(Out {
        y: y.detach().to_kind(Kind::Float),
        grads: [x.grad(), w.grad(), b.grad()].map(|t| t.to_kind(Kind::Float)),
    })
}

fn errors(a: &Out, b: &Out) -> [f64; 4] {
    [
        rel(&a.y, &b.y),
        rel(&a.grads[0], &b.grads[0]),
        rel(&a.grads[1], &b.grads[1]),
        rel(&a.grads[2], &b.grads[2]),
    ]
}

/// The checks of one shape; returns whether they passed.
fn check(a: &Args, path: Path, name: &str, k: i64, n: i64) -> Result<bool> {
    let d = a.device;
    let opts = (Kind::Float, d);
    // LayerNorm-like inputs, the reference's init, gradients of a loss's scale
    let x = Tensor::randn([a.tokens, k], opts).to_kind(Kind::BFloat16);
    let w = Tensor::randn([n, k], opts) * 0.02;
    let b = Tensor::randn([n], opts) * 0.02;
    let g = Tensor::randn([a.tokens, n], opts) * 1e-4;
    let state = Fp8State::new(1, Recipe::default(), d);
    let slot = state.slot(0);
    // one step's amaxes, then the recipe's update: the scales training has after step 1
    side(d, &x, &w, &b, &g, |x, w, b| {
        linear(x, w, Some(b), &slot, path)
    })?;
    state.update();
    let bf16 = side(d, &x, &w, &b, &g, |x, w, b| Ok(x.linear(w, Some(b))))?;
    let fp8 = side(d, &x, &w, &b, &g, |x, w, b| {
        linear(x, w, Some(b), &slot, path)
    })?;
    let emu = side(d, &x, &w, &b, &g, |x, w, b| {
        linear(x, w, Some(b), &slot, Path::Reference)
    })?;
    // the control: the history 16x too small, so the scales come out 16x too large
    let broken = Fp8State::new(1, Recipe::default(), d);
    let bslot = broken.slot(0);
    side(d, &x, &w, &b, &g, |x, w, b| {
        linear(x, w, Some(b), &bslot, path)
    })?;
    tch::no_grad(|| {
        let mut h = bslot.history.shallow_clone();
        let _ = h.g_mul_scalar_(1.0 / 16.0);
    });
    broken.update();
    let bad = side(d, &x, &w, &b, &g, |x, w, b| {
        linear(x, w, Some(b), &bslot, path)
    })?;
    let (e_fp8, e_emu, e_bad) = (errors(&fp8, &bf16), errors(&emu, &fp8), errors(&bad, &bf16));
    let time = |f: &dyn Fn() -> Result<Out>| -> Result<f64> {
        let (t, _) = common::time_rounds(d, 2, a.rounds, || f().map(|_| ()))?;
        Ok(common::median(&t))
    };
    let t_bf16 = time(&|| side(d, &x, &w, &b, &g, |x, w, b| Ok(x.linear(w, Some(b)))))?;
    let t_fp8 = time(&|| {
        side(d, &x, &w, &b, &g, |x, w, b| {
            linear(x, w, Some(b), &slot, path)
        })
    })?;
    let pass = e_fp8[..3].iter().all(|e| *e < a.tol)
        && e_emu[..3].iter().all(|e| *e < 2e-2)
        && e_bad[..3].iter().any(|e| *e > a.tol);
    let names = ["y", "dx", "dw", "db"];
    let m = |e: [f64; 4]| -> serde_json::Value {
        names
            .iter()
            .zip(e)
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(v)))
            .collect()
    };
    let flops = 6.0 * (a.tokens * k * n) as f64;
    println!(
        "{}",
        serde_json::json!({
            "shape": name, "tokens": a.tokens, "in": k, "out": n, "ok": pass,
            "fp8_vs_bf16": m(e_fp8), "emulated_vs_fp8": m(e_emu), "broken_vs_bf16": m(e_bad),
            "scales": Vec::<f32>::try_from(state.scale.flatten(0, -1).to_device(Device::Cpu))?,
            "median_ms_bf16": t_bf16 * 1e3, "median_ms_fp8": t_fp8 * 1e3,
            "tflops_bf16": flops / t_bf16 / 1e12, "tflops": flops / t_fp8 / 1e12,
            "speedup_fp8": t_bf16 / t_fp8,
        })
    );
    Ok(pass)
}

/// The cast kernels against ATen's casts for one tensor (module docs): whether bytes and amax
/// agree. A refusal of the kernels (NVRTC missing, say) prints its reason and fails.
fn check_cast(a: &Args, what: &str, t: &Tensor, format: Format) -> Result<bool> {
    let d = a.device;
    // a scale a trained step would have: the format's largest value over the tensor's amax
    let amax = t.abs().max().to_kind(Kind::Float).double_value(&[]);
    let scale = Tensor::from((format.max() / amax.max(1e-30)) as f32).to_device(d);
    let run = |path: Path| -> Result<(Tensor, Tensor)> {
        let cell = Tensor::from(0f32).to_device(d);
        let (q, _) = cast(t, &scale, format, &cell, path, 0)?;
        Ok((q, cell))
    };
    let (want, want_amax) = run(Path::Reference)?;
    let (got, got_amax) = match run(Path::Fast) {
        Ok(r) => r,
        Err(e) => {
            println!(
                "{}",
                serde_json::json!({"cast": what, "ok": false, "refused": format!("{e:#}")})
            );
            return Ok(false);
        }
    };
    let bytes = |q: &Tensor| q.view_dtype(Kind::Uint8);
    let differing = bytes(&got)
        .ne_tensor(&bytes(&want))
        .sum(Kind::Int64)
        .int64_value(&[]);
    let amax_equal = got_amax.to_device(Device::Cpu).double_value(&[]).to_bits()
        == want_amax.to_device(Device::Cpu).double_value(&[]).to_bits();
    let time = |path: Path| -> Result<f64> {
        let (t, _) = common::time_rounds(d, 2, a.rounds, || run(path).map(|_| ()))?;
        Ok(common::median(&t))
    };
    let (t_kernel, t_aten) = (time(Path::Fast)?, time(Path::Reference)?);
    let moved = t.numel() as f64 * (t.kind().elt_size_in_bytes() + 1) as f64;
    let ok = differing == 0 && amax_equal;
    println!(
        "{}",
        serde_json::json!({
            "cast": what, "format": format!("{format:?}"), "elements": t.numel(), "ok": ok,
            "bytes_differing": differing, "amax_equal": amax_equal,
            "median_ms_kernel": t_kernel * 1e3, "median_ms_aten": t_aten * 1e3,
            "speedup": t_aten / t_kernel, "kernel_gb_per_s": moved / t_kernel / 1e9,
        })
    );
    Ok(ok)
}

/// The cast-transpose kernel against ATen's cast and transpose for one [rows, cols] tensor
/// (module docs): both layouts byte for byte (rows padded to a multiple of 16 with zeros) and
/// the amax; then the times of what the backward's GEMM operands cost each way: the kernel (one
/// pass, both layouts) vs ATen's cast then `.t().contiguous()`, and the transpose alone of an
/// FP8 tensor (the fused epilogues' casts): the kernel vs ATen's copy.
fn check_cast_transpose(a: &Args, what: &str, t: &Tensor, format: Format) -> Result<bool> {
    let d = a.device;
    let rows = t.size()[0];
    let rows_out = rows + (16 - rows % 16) % 16;
    let amax = t.abs().max().to_kind(Kind::Float).double_value(&[]);
    let scale = Tensor::from((format.max() / amax.max(1e-30)) as f32).to_device(d);
    let kernel = || -> Result<(Tensor, Tensor, Tensor)> {
        let cell = Tensor::from(0f32).to_device(d);
        let (q, qt) = cast_transpose(t, &scale, format, &cell, Path::Fast, rows_out)?;
        Ok((q.context("no q")?, qt, cell))
    };
    let aten = || -> Result<(Tensor, Tensor, Tensor)> {
        let cell = Tensor::from(0f32).to_device(d);
        let (q, _) = cast(t, &scale, format, &cell, Path::Reference, 0)?;
        let q = q
            .view_dtype(Kind::Uint8)
            .constant_pad_nd([0, 0, 0, rows_out - rows]);
        let qt = q.tr().contiguous();
        Ok((q, qt, cell))
    };
    let (got_q, got_qt, got_amax) = match kernel() {
        Ok(r) => r,
        Err(e) => {
            println!(
                "{}",
                serde_json::json!({"cast_transpose": what, "ok": false, "refused": format!("{e:#}")})
            );
            return Ok(false);
        }
    };
    let (want_q, want_qt, want_amax) = aten()?;
    let differ = |g: &Tensor, w: &Tensor| {
        g.view_dtype(Kind::Uint8)
            .ne_tensor(w)
            .sum(Kind::Int64)
            .int64_value(&[])
    };
    let differing = differ(&got_q, &want_q) + differ(&got_qt, &want_qt);
    let amax_equal = got_amax.to_device(Device::Cpu).double_value(&[]).to_bits()
        == want_amax.to_device(Device::Cpu).double_value(&[]).to_bits();
    let median = |f: &dyn Fn() -> Result<()>| -> Result<f64> {
        let (t, _) = common::time_rounds(d, 2, a.rounds, f)?;
        Ok(common::median(&t))
    };
    let t_kernel = median(&|| kernel().map(|_| ()))?;
    let t_aten = median(&|| aten().map(|_| ()))?;
    let fp8 = got_q.narrow(0, 0, rows).contiguous();
    let cell = Tensor::from(0f32).to_device(d);
    let t_transpose_kernel =
        median(&|| cast_transpose(&fp8, &scale, format, &cell, Path::Fast, rows_out).map(|_| ()))?;
    let t_transpose_aten = median(&|| {
        let _ = fp8.tr().f_contiguous()?;
        Ok(())
    })?;
    // the kernel's traffic: the input once, the two FP8 layouts written
    let moved = t.numel() as f64 * (t.kind().elt_size_in_bytes() + 2) as f64;
    let ok = differing == 0 && amax_equal;
    println!(
        "{}",
        serde_json::json!({
            "cast_transpose": what, "format": format!("{format:?}"), "rows": rows,
            "rows_out": rows_out, "cols": t.size()[1], "ok": ok, "bytes_differing": differing,
            "amax_equal": amax_equal, "median_ms_kernel": t_kernel * 1e3,
            "median_ms_aten_cast_then_transpose": t_aten * 1e3, "speedup": t_aten / t_kernel,
            "kernel_gb_per_s": moved / t_kernel / 1e9,
            "median_ms_transpose_only_kernel": t_transpose_kernel * 1e3,
            "median_ms_transpose_only_aten": t_transpose_aten * 1e3,
        })
    );
    Ok(ok)
}

/// The FP8 attention probe's median time of `f` in ms (after 2 warm-up rounds).
fn probe_ms(a: &Args, f: impl Fn() -> Result<Tensor>) -> Result<f64> {
    let (t, _) = common::time_rounds(a.device, 2, a.rounds, f)?;
    Ok(common::median(&t) * 1e3)
}

/// `runs (<ms>)`, or `<failed> <the error's first line>`.
fn outcome(r: Result<f64>, failed: &str) -> String {
    match r {
        Ok(ms) => format!("runs ({ms:.3} ms)"),
        Err(e) => format!(
            "{failed}: {}",
            format!("{e:#}").lines().next().unwrap_or("")
        ),
    }
}

/// One line per candidate attention op on FP8 q, k, v of BERT's shape, then bf16 SDPA's time
/// (the reference): `methods.fp8_attention`'s question (docs/gpu.md). Never fails the check.
fn attention_probes(a: &Args) {
    let d = a.device;
    if !matches!(d, Device::Cuda(_)) {
        println!("fp8 attention probe: skipped: needs a CUDA device (this run is on {d:?})");
        return;
    }
    let bf16: [Tensor; 3] =
        std::array::from_fn(|_| Tensor::randn([2, 16, 512, 64], (Kind::BFloat16, d)));
    let fp8: Vec<Tensor> = match bf16
        .iter()
        .map(|t| t.f_to_kind(Kind::Float8e4m3fn))
        .collect()
    {
        Ok(v) => v,
        Err(e) => {
            println!("fp8 attention probe: skipped: no E4M3 tensor on {d:?}: {e}");
            return;
        }
    };
    for op in AttentionProbe::ALL {
        let r = probe_ms(a, || attention_probe(op, &fp8[0], &fp8[1], &fp8[2]));
        println!(
            "fp8 attention probe: {}: {}",
            op.name(),
            outcome(r, "refused")
        );
    }
    let [q, k, v] = &bf16;
    let none = None::<Tensor>;
    let sdpa = || {
        Ok(Tensor::f_scaled_dot_product_attention(
            q,
            k,
            v,
            none.as_ref(),
            0.0,
            false,
            None,
            false,
        )?)
    };
    println!(
        "fp8 attention probe: bf16 scaled_dot_product_attention (reference): {}",
        outcome(probe_ms(a, sdpa), "failed")
    );
}

fn main() -> Result<()> {
    let a = Args::parse();
    if a.tokens < 16 || a.rounds == 0 {
        bail!("need --tokens >= 16 and --rounds >= 1");
    }
    tch::manual_seed(0);
    let path = path_for(a.device)?;
    let mut ok = true;
    for (name, k, n) in [
        ("qkv", 1024, 3072),
        ("attention_out", 1024, 1024),
        ("ffn_in", 1024, 4096),
        ("ffn_out", 4096, 1024),
    ] {
        ok &= check(&a, path, name, k, n)?;
    }
    if a.device.is_cuda() {
        let opts = (Kind::Float, a.device);
        for (name, k, n) in [("qkv", 1024, 3072), ("ffn_out", 4096, 1024)] {
            let x = Tensor::randn([a.tokens, k], opts).to_kind(Kind::BFloat16);
            let w = Tensor::randn([n, k], opts) * 0.02;
            let g = (Tensor::randn([a.tokens, n], opts) * 1e-4).to_kind(Kind::BFloat16);
            ok &= check_cast(&a, &format!("{name} x"), &x, Format::E4M3)?;
            ok &= check_cast(&a, &format!("{name} W"), &w, Format::E4M3)?;
            ok &= check_cast(&a, &format!("{name} grad"), &g, Format::E5M2)?;
            ok &= check_cast_transpose(&a, &format!("{name} x"), &x, Format::E4M3)?;
            ok &= check_cast_transpose(&a, &format!("{name} W"), &w, Format::E4M3)?;
            ok &= check_cast_transpose(&a, &format!("{name} grad"), &g, Format::E5M2)?;
        }
    } else {
        println!("fp8 cast kernels: skipped: they run on a CUDA device (this run is on {:?}); the tests run them on the CPU emulator", a.device);
    }
    attention_probes(&a);
    println!(
        "{}",
        serde_json::json!({"check": "fp8", "ok": ok, "kernel": path != Path::Reference, "device": format!("{:?}", a.device)})
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
