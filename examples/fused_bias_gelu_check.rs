//! GPU check of `methods.fused_bias_gelu`: the fused feed-forward op
//! `gelu_tanh(x W1^T + b1) W2^T`, its cuBLASLt path (GELU_AUX_BIAS in the forward matmul,
//! DGELU_BGRAD in the backward's) against its composite (ATen) path at BERT-Large shapes under
//! bf16 autocast: max abs / rel differences of the output and of every gradient (x, W1, b1, W2),
//! which path each side really ran, the distance of both to BERT's erf GELU, and the median
//! forward + backward time of each side (and of the unfused `linear` + erf `gelu` + `linear`,
//! today's BERT feed-forward block) over rounds, each round bracketed by device synchronisations.
//!
//! cargo run --release --example fused_bias_gelu_check -- [--device cuda|cpu]
//!     [--tokens 28672] [--hidden 1024] [--inner 4096] [--rounds 20] [--no-bf16]
//!
//! Tokens 28,672 = 56 x 512 (a BERT-Large micro-batch), hidden 1024 -> inner 4096 -> hidden
//! 1024 (the intermediate and output denses; the output dense's bias is not part of the op). Prints one JSON line per side (`side`: cublaslt, composite, unfused_erf;
//! `seq_per_s` counts 512-token sequences) and a final line with the differences and `ok`. Exit
//! status 1 when cuBLASLt did not run on CUDA or a relative difference to the composite path
//! exceeds 2e-2 (bf16: the epilogue applies the GELU to the fp32 accumulator, the composite path
//! to the bf16-rounded matmul output). On a CPU both sides run the composite path (plumbing only).

mod common;

use anyhow::{bail, Result};
use clap::Parser;
use common::{OpShape, OpShapeArgs};
use mlperf_run::fused::bias_gelu::{dense_gelu_dense, lt_built, lt_probe, GeluPath};
use mlperf_run::gpu::amp::{maybe_autocast, LowPrecision};
use tch::{Kind, Tensor};

/// cuBLASLt's fused bias + GELU feed-forward op against the composite path.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    shape: OpShapeArgs,
}

fn parse_args() -> Result<OpShape> {
    Ok(Args::parse().shape.resolve(4096))
}

const NAMES: [&str; 5] = ["z", "d_x", "d_w1", "d_b1", "d_w2"];

/// Which computation a side runs.
#[derive(Clone, Copy)]
enum Side {
    Fused(GeluPath),
    /// `linear` + erf `gelu` + `linear`: BERT's feed-forward block without the method
    UnfusedErf,
}

fn main() -> Result<()> {
    let a = parse_args()?;
    let d = a.device;
    tch::manual_seed(0);
    let f = (Kind::Float, d);
    let leaf = |s: &[i64], scale: f64| (Tensor::randn(s, f) * scale).set_requires_grad(true);
    // LayerNorm-scaled activations and BERT's initialiser scale
    let x = leaf(&[a.tokens, a.hidden], 1.0);
    let w1 = leaf(&[a.inner, a.hidden], 0.02 * 2.0);
    let b1 = leaf(&[a.inner], 0.1);
    let w2 = leaf(&[a.hidden, a.inner], 0.02);
    let dz = Tensor::randn([a.tokens, a.hidden], f);
    let precision = a.bf16.then_some(LowPrecision::BFloat16);
    let leaves = [&x, &w1, &b1, &w2];

    // one forward + backward; returns the output, the grads and whether cuBLASLt ran
    let run = |side: Side| -> Result<(Vec<Tensor>, bool)> {
        common::zero_grads(&leaves);
        let (y, lt) = maybe_autocast(d, precision, || -> Result<(Tensor, bool)> {
            match side {
                Side::Fused(path) => dense_gelu_dense(&x, &w1, &b1, &w2, path),
                Side::UnfusedErf => Ok((
                    x.linear(&w1, Some(&b1))
                        .gelu("none")
                        .linear::<&Tensor>(&w2, None),
                    false,
                )),
            }
        })??;
        (&y * dz.to_kind(y.kind())).sum(y.kind()).backward();
        let mut out = vec![y.detach()];
        out.extend(leaves.iter().map(|t| t.grad().copy()));
        Ok((out, lt))
    };

    // the fused side: cuBLASLt on CUDA with bf16 operands (an error, forward or backward, says
    // why it cannot run), Auto elsewhere (the epilogues take no fp32 operands)
    let lt_path = if d.is_cuda() && a.bf16 {
        GeluPath::CublasLt
    } else {
        GeluPath::Auto
    };
    let (fused, lt_ran) = run(Side::Fused(lt_path))?;
    let (composite, composite_lt) = run(Side::Fused(GeluPath::Composite))?;
    assert!(!composite_lt);
    let (erf, _) = run(Side::UnfusedErf)?;
    let (vs_composite, worst_rel) = common::max_diffs(&fused, &composite, &NAMES);
    let (vs_erf, worst_rel_erf) = common::max_diffs(&fused, &erf, &NAMES);
    let (composite_vs_erf, _) = common::max_diffs(&composite, &erf, &NAMES);

    // timing: each side `rounds` times after 3 warm-up rounds, device-synchronised per round
    let mut medians = Vec::new();
    for (name, side) in [
        ("cublaslt", Side::Fused(lt_path)),
        ("composite", Side::Fused(GeluPath::Composite)),
        ("unfused_erf", Side::UnfusedErf),
    ] {
        let (times, (_, ran)) = common::time_rounds(d, 3, a.rounds, || run(side))?;
        let med = common::median(&times);
        medians.push(med);
        println!(
            "{}",
            serde_json::json!({
                "side": name,
                "path_ran": match side { Side::Fused(_) if ran => "cublaslt", Side::Fused(_) => "composite", Side::UnfusedErf => "unfused_erf" },
                "median_ms": med * 1e3, "rounds_ms": times.iter().map(|t| t * 1e3).collect::<Vec<_>>(),
                "seq_per_s": a.tokens as f64 / 512.0 / med,
                "tokens": a.tokens, "hidden": a.hidden, "inner": a.inner, "bf16": a.bf16,
                "device": format!("{d:?}"),
            })
        );
    }
    let ok = worst_rel < 2e-2 && (lt_ran || !d.is_cuda() || !a.bf16);
    println!(
        "{}",
        serde_json::json!({
            "check": "fused_bias_gelu", "ok": ok, "lt_ran": lt_ran, "lt_built": lt_built(),
            "lt_probe": lt_probe().err().map(|e| format!("{e:#}")).unwrap_or_else(|| "ok".into()),
            "worst_rel": worst_rel, "diffs": vs_composite,
            "worst_rel_vs_erf_unfused": worst_rel_erf, "diffs_vs_erf_unfused": vs_erf,
            "composite_vs_erf_unfused": composite_vs_erf,
            "speedup_lt_vs_unfused_erf": medians[2] / medians[0],
            "speedup_lt_vs_composite": medians[1] / medians[0],
        })
    );
    if !ok {
        bail!("fused bias+GELU check failed: cuBLASLt ran {lt_ran}, worst relative difference {worst_rel:e}");
    }
    Ok(())
}
