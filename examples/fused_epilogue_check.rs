//! GPU check of `methods.fused_epilogues`: the fused "dense + bias + dropout + residual +
//! LayerNorm" op's CUDA kernel path against its composite (ATen) path at BERT-Large shapes under
//! bf16 autocast, with the SAME dropout mask for both: max abs / rel differences of the output
//! and of every gradient (x, W, b, residual, gamma, beta), which path each side really ran, and
//! the median forward + backward time of each (and of the unfused ops) over rounds, each round
//! bracketed by device synchronisations.
//!
//! cargo run --release --example fused_epilogue_check -- [--device cuda|cpu]
//!     [--tokens 28672] [--hidden 1024] [--inner 1024] [--p 0.1] [--rounds 20] [--no-bf16]
//!
//! Tokens 28,672 = 56 x 512 (a BERT-Large micro-batch); --inner 1024 is the attention output
//! dense, --inner 4096 the feed-forward output dense. Prints one JSON line per side
//! (`side`: kernel, composite, unfused; `seq_per_s` counts 512-token sequences) and a final line
//! with the differences and `ok`. Exit status 1 when the kernel path did not run on CUDA or a
//! relative difference exceeds 2e-2 (bf16 rounding: the composite rounds h + bias and the dropout
//! product to bf16 where the kernel keeps fp32). On a CPU both sides run the composite path
//! (plumbing only). It also checks the mask the kernel draws itself when none is given (the
//! vectorised forward's Philox draw): about 1 - p kept and 2p(1-p) of the positions changed on a
//! second call (each within 5 binomial standard deviations), and the composite path given
//! exactly that mask agreeing within 2e-2 (`check: drawn_mask`; a failure fails the check).
//! And the intermediate dense's bias + GELU op ([`dense_bias_gelu`]: x [tokens, hidden] through
//! a [4 hidden, hidden] weight): its kernel path against the unfused `linear(x, w, b).gelu()`,
//! the output and the x, W, b gradients within 2e-2, and both timed (`check: bias_gelu`; a
//! failure fails the check).

mod common;

use anyhow::{bail, Result};
use clap::Parser;
use common::{OpShape, OpShapeArgs};
use mlperf_run::fused::epilogue::{
    bias_dropout_add_ln, dense_bias_gelu, dense_dropout_add_ln, kernel_built, Epilogue, FusedPath,
};
use mlperf_run::gpu::amp::{maybe_autocast, LowPrecision};
use tch::{Kind, Tensor};

/// The fused epilogue ops against their composite paths.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    shape: OpShapeArgs,
    /// The dropout probability.
    #[arg(long, default_value_t = 0.1)]
    p: f64,
}

struct Args {
    shape: OpShape,
    /// the dropout probability
    p: f64,
}

fn parse_args() -> Result<Args> {
    let c = Cli::parse();
    Ok(Args {
        shape: c.shape.resolve(1024),
        p: c.p,
    })
}

struct Leaves {
    x: Tensor,
    w: Tensor,
    b: Tensor,
    residual: Tensor,
    gamma: Tensor,
    beta: Tensor,
}

impl Leaves {
    /// The op's arguments beside h (or the dense layer): training with dropout p.
    fn epilogue<'a>(&'a self, p: f64, path: FusedPath, mask: Option<&'a Tensor>) -> Epilogue<'a> {
        Epilogue {
            residual: &self.residual,
            gamma: &self.gamma,
            beta: &self.beta,
            eps: 1e-12,
            p,
            train: true,
            mask,
            path,
            out: None,
        }
    }

    fn all(&self) -> [&Tensor; 6] {
        [
            &self.x,
            &self.w,
            &self.b,
            &self.residual,
            &self.gamma,
            &self.beta,
        ]
    }
}

const NAMES: [&str; 7] = ["y", "d_x", "d_w", "d_b", "d_residual", "d_gamma", "d_beta"];

fn main() -> Result<()> {
    let Args { shape: a, p } = parse_args()?;
    let d = a.device;
    tch::manual_seed(0);
    let f = (Kind::Float, d);
    let leaf = |s: &[i64], scale: f64, shift: f64| {
        (Tensor::randn(s, f) * scale + shift).set_requires_grad(true)
    };
    let l = Leaves {
        x: leaf(&[a.tokens, a.inner], 1.0, 0.0),
        w: leaf(&[a.hidden, a.inner], 0.02, 0.0),
        b: leaf(&[a.hidden], 0.1, 0.0),
        residual: leaf(&[a.tokens, a.hidden], 1.0, 0.0),
        gamma: leaf(&[a.hidden], 0.1, 1.0),
        beta: leaf(&[a.hidden], 0.1, 0.0),
    };
    let dy = Tensor::randn([a.tokens, a.hidden], f);
    let mask = Tensor::rand([a.tokens, a.hidden], f).ge(p);
    let precision = a.bf16.then_some(LowPrecision::BFloat16);

    // one forward + backward; returns the output, the grads and whether the kernel ran
    let run = |path: Option<FusedPath>, mask: Option<&Tensor>| -> Result<(Vec<Tensor>, bool)> {
        common::zero_grads(&l.all());
        let (y, kernel) = maybe_autocast(d, precision, || -> Result<(Tensor, bool)> {
            match path {
                Some(path) => dense_dropout_add_ln(&l.x, &l.w, &l.b, &l.epilogue(p, path, mask)),
                None => {
                    let h = l.x.linear(&l.w, Some(&l.b)).dropout(p, true);
                    let y = (h + &l.residual).layer_norm(
                        [a.hidden],
                        Some(&l.gamma),
                        Some(&l.beta),
                        1e-12,
                        true,
                    );
                    Ok((y, false))
                }
            }
        })??;
        (&y * dy.to_kind(y.kind())).sum(y.kind()).backward();
        let mut out = vec![y.detach()];
        out.extend(l.all().iter().map(|t| t.grad().copy()));
        Ok((out, kernel))
    };

    // the kernel side: Kernel on CUDA (an error says why it cannot run), Auto elsewhere
    let kernel_path = if d.is_cuda() {
        FusedPath::Kernel
    } else {
        FusedPath::Auto
    };
    let (fused, kernel_ran) = run(Some(kernel_path), Some(&mask))?;
    let (composite, composite_kernel) = run(Some(FusedPath::Composite), Some(&mask))?;
    assert!(!composite_kernel);
    let (diffs, worst_rel) = common::max_diffs(&fused, &composite, &NAMES);

    // the mask the kernel draws itself (no mask given; the vectorised forward's Philox draw on a
    // GPU): about 1 - p kept, a new one per call, and the composite path given exactly that
    // mask agrees with it
    let h0 = Tensor::randn([a.tokens, a.hidden], f).to_kind(Kind::BFloat16);
    let drawn = |path: FusedPath, mask: Option<&Tensor>| -> Result<(Vec<Tensor>, bool)> {
        let h = h0.detach().set_requires_grad(true);
        let (y, kernel) = maybe_autocast(d, precision, || {
            bias_dropout_add_ln(&h, Some(&l.b), &l.epilogue(p, path, mask))
        })??;
        (&y * dy.to_kind(y.kind())).sum(y.kind()).backward();
        Ok((vec![y.detach(), h.grad().copy()], kernel))
    };
    let (first, drew) = drawn(kernel_path, None)?;
    let kept_mask = first[1].ne(0.0);
    let n = (a.tokens * a.hidden) as f64;
    let kept = kept_mask.sum(Kind::Double).double_value(&[]) / n;
    let (second, _) = drawn(kernel_path, None)?;
    let changed = second[1]
        .ne(0.0)
        .ne_tensor(&kept_mask)
        .sum(Kind::Double)
        .double_value(&[])
        / n;
    let (given, _) = drawn(FusedPath::Composite, Some(&kept_mask))?;
    let (mask_diffs, mask_rel) = common::max_diffs(&first, &given, &["y", "d_h"]);
    // 2p(1-p) of the positions differ between two independent masks; both shares within 5
    // standard deviations of a binomial share
    let q = 2.0 * p * (1.0 - p);
    let mask_ok = (kept - (1.0 - p)).abs() < 5.0 * (p * (1.0 - p) / n).sqrt()
        && (changed - q).abs() < 5.0 * (q * (1.0 - q) / n).sqrt()
        && mask_rel < 2e-2;
    println!(
        "{}",
        serde_json::json!({
            "check": "drawn_mask", "ok": mask_ok, "kernel_ran": drew, "kept": kept,
            "changed_between_calls": changed, "expected_changed": 2.0 * p * (1.0 - p),
            "worst_rel_vs_composite_with_that_mask": mask_rel, "diffs": mask_diffs,
        })
    );

    // the intermediate dense's bias + GELU: kernel path vs the unfused ops, same inputs
    let inter = 4 * a.hidden;
    let gx = leaf(&[a.tokens, a.hidden], 1.0, 0.0);
    let gw = leaf(&[inter, a.hidden], 0.02, 0.0);
    let gb = leaf(&[inter], 0.1, 0.0);
    let gdy = Tensor::randn([a.tokens, inter], f);
    let gelu_run = |path: Option<FusedPath>| -> Result<(Vec<Tensor>, bool)> {
        common::zero_grads(&[&gx, &gw, &gb]);
        let (y, kernel) = maybe_autocast(d, precision, || -> Result<(Tensor, bool)> {
            match path {
                Some(path) => dense_bias_gelu(&gx, &gw, &gb, path),
                None => Ok((gx.linear(&gw, Some(&gb)).gelu("none"), false)),
            }
        })??;
        (&y * gdy.to_kind(y.kind())).sum(y.kind()).backward();
        Ok((
            vec![
                y.detach(),
                gx.grad().copy(),
                gw.grad().copy(),
                gb.grad().copy(),
            ],
            kernel,
        ))
    };
    let (gelu_fused, gelu_ran) = gelu_run(Some(kernel_path))?;
    let (gelu_unfused, _) = gelu_run(None)?;
    let (gelu_diffs, gelu_rel) =
        common::max_diffs(&gelu_fused, &gelu_unfused, &["y", "d_x", "d_w", "d_b"]);
    let (gk, _) = common::time_rounds(d, 3, a.rounds, || gelu_run(Some(kernel_path)))?;
    let (gu, _) = common::time_rounds(d, 3, a.rounds, || gelu_run(None))?;
    let (gk, gu) = (common::median(&gk), common::median(&gu));
    let gelu_ok = gelu_rel < 2e-2 && (gelu_ran || !d.is_cuda());
    println!(
        "{}",
        serde_json::json!({
            "check": "bias_gelu", "ok": gelu_ok, "kernel_ran": gelu_ran,
            "worst_rel_vs_unfused": gelu_rel, "diffs": gelu_diffs,
            "kernel_median_ms": gk * 1e3, "unfused_median_ms": gu * 1e3,
            "speedup_kernel_vs_unfused": gu / gk, "tokens": a.tokens, "hidden": a.hidden,
            "intermediate": inter,
        })
    );

    // timing: each side `rounds` times after 3 warm-up rounds, device-synchronised per round
    let mut medians = Vec::new();
    for (side, path) in [
        ("kernel", Some(kernel_path)),
        ("composite", Some(FusedPath::Composite)),
        ("unfused", None),
    ] {
        let (times, (_, ran)) = common::time_rounds(d, 3, a.rounds, || run(path, None))?;
        let med = common::median(&times);
        medians.push((side, med));
        println!(
            "{}",
            serde_json::json!({
                "side": side, "path_ran": if ran { "kernel" } else if path.is_some() { "composite" } else { "unfused" },
                "median_ms": med * 1e3, "seq_per_s": a.tokens as f64 / 512.0 / med,
                "tokens": a.tokens, "hidden": a.hidden, "inner": a.inner, "bf16": a.bf16,
                "device": format!("{d:?}"),
            })
        );
    }
    let ok = worst_rel < 2e-2 && (kernel_ran || !d.is_cuda()) && mask_ok && gelu_ok;
    println!(
        "{}",
        serde_json::json!({
            "check": "fused_epilogue", "ok": ok, "kernel_ran": kernel_ran,
            "kernel_built": kernel_built(), "worst_rel": worst_rel, "diffs": diffs,
            "speedup_kernel_vs_unfused": medians[2].1 / medians[0].1,
            "speedup_kernel_vs_composite": medians[1].1 / medians[0].1,
        })
    );
    if !ok {
        bail!(
            "fused epilogue check failed: kernel ran {kernel_ran}, worst relative difference \
             {worst_rel:e}, drawn mask ok {mask_ok} (kept {kept:.4}, changed {changed:.4}, \
             {mask_rel:e} off the composite path with that mask), bias + GELU ok {gelu_ok} \
             (kernel ran {gelu_ran}, {gelu_rel:e} off the unfused ops)"
        );
    }
    Ok(())
}
