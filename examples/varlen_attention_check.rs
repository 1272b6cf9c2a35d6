//! GPU check of unpadded attention (`methods.unpad`, `src/fused/varlen_attention.rs`):
//! FlashAttention's varlen kernel against the scatter path (q/k/v scattered to `[B, S]`, SDPA
//! with the key-padding mask, rows gathered back) at BERT-Large shapes in bf16, without dropout
//! so both compute the same thing: max abs / rel differences of the output and of the q, k and v
//! gradients, and the median forward + backward time of each side over rounds, each round
//! bracketed by device synchronisations.
//!
//! cargo run --release --example varlen_attention_check -- [--device cuda|cpu] [--batch 56]
//!     [--seq 512] [--heads 16] [--head-dim 64] [--fill 0.5] [--rounds 20]
//!
//! Sequence lengths: batch lengths spread evenly from 1 to seq, shuffled, scaled so the real
//! tokens are about --fill of batch x seq (0.5: about what phase-2 data has). Prints one JSON
//! line per side (`side`: varlen, scatter; `seq_per_s` counts sequences of the batch per second
//! of forward + backward) and a final line with the differences and `ok`. Exit status 1 when
//! the varlen kernel did not run on CUDA or a relative difference exceeds 2e-2 (bf16 rounding).
//! On a CPU the varlen side is skipped (the kernel is CUDA-only) and the scatter side is timed.

mod common;

use anyhow::{bail, Result};
use clap::Parser;
use mlperf_run::fused::varlen_attention::{forward_backward, Packing, VarlenPath};
use tch::{Device, Kind, Tensor};

/// FlashAttention's varlen kernel against the scatter path on packed sequences.
#[derive(Parser)]
struct Args {
    #[arg(long, value_parser = common::parse_device, default_value = "auto")]
    device: Device,
    #[arg(long, default_value_t = 56)]
    batch: i64,
    #[arg(long, default_value_t = 512)]
    seq: i64,
    #[arg(long, default_value_t = 16)]
    heads: i64,
    #[arg(long, default_value_t = 64)]
    head_dim: i64,
    /// Share of the tokens that are real.
    #[arg(long, default_value_t = 0.5)]
    fill: f64,
    #[arg(long, default_value_t = 20)]
    rounds: usize,
}

fn parse_args() -> Result<Args> {
    let a = Args::parse();
    if a.batch < 1 || a.seq < 1 || !(a.fill > 0.0 && a.fill <= 1.0) || a.rounds == 0 {
        bail!("need --batch >= 1, --seq >= 1, --fill in (0, 1] and --rounds >= 1");
    }
    Ok(a)
}

/// Lengths spread over 1..=seq, scaled to about `fill` of the tokens, in a seeded shuffle.
fn lengths(a: &Args) -> Vec<i64> {
    let n = a.batch;
    let even: Vec<f64> = (0..n).map(|i| (i + 1) as f64 / n as f64).collect();
    let mean = even.iter().sum::<f64>() / n as f64;
    let mut out: Vec<i64> = even
        .iter()
        .map(|&x| ((x * a.fill / mean * a.seq as f64).round() as i64).clamp(1, a.seq))
        .collect();
    let perm = Vec::<i64>::try_from(Tensor::randperm(n, (Kind::Int64, Device::Cpu)))
        .unwrap_or_else(|_| (0..n).collect());
    out = perm.iter().map(|&i| out[i as usize]).collect();
    out
}

const NAMES: [&str; 4] = ["out", "d_q", "d_k", "d_v"];

fn main() -> Result<()> {
    let a = parse_args()?;
    let d = a.device;
    tch::manual_seed(0);
    let lens = lengths(&a);
    let mask = Tensor::arange(a.seq, (Kind::Int64, Device::Cpu))
        .unsqueeze(0)
        .lt_tensor(&Tensor::from_slice(&lens).unsqueeze(1))
        .to_kind(Kind::Int64)
        .to_device(d);
    let pack = Packing::from_mask(&mask);
    let t: i64 = lens.iter().sum();
    let kind = if d.is_cuda() {
        Kind::BFloat16
    } else {
        Kind::Float
    };
    let leaf = || {
        Tensor::randn([t, a.heads, a.head_dim], (Kind::Float, d))
            .to_kind(kind)
            .set_requires_grad(true)
    };
    let (q, k, v) = (leaf(), leaf(), leaf());
    let dy = Tensor::randn([t, a.heads, a.head_dim], (Kind::Float, d)).to_kind(kind);
    let run = |path: VarlenPath| forward_backward(&q, &k, &v, &dy, &pack, path);
    let scatter = run(VarlenPath::Scatter)?;
    let varlen = if d.is_cuda() {
        Some(run(VarlenPath::Varlen)?)
    } else {
        None
    };
    let (diffs, worst_rel) = match &varlen {
        Some(v) => common::max_diffs(v, &scatter, &NAMES),
        None => (serde_json::Map::new(), 0.0),
    };

    let mut medians = Vec::new();
    for (side, path) in [
        ("varlen", VarlenPath::Varlen),
        ("scatter", VarlenPath::Scatter),
    ] {
        if path == VarlenPath::Varlen && varlen.is_none() {
            continue;
        }
        let (times, _) = common::time_rounds(d, 3, a.rounds, || run(path))?;
        let med = common::median(&times);
        medians.push(med);
        println!(
            "{}",
            serde_json::json!({
                "side": side, "median_ms": med * 1e3, "seq_per_s": a.batch as f64 / med,
                "batch": a.batch, "seq": a.seq, "tokens": t, "heads": a.heads,
                "head_dim": a.head_dim, "dtype": format!("{kind:?}"), "device": format!("{d:?}"),
            })
        );
    }
    let ok = worst_rel < 2e-2 && (varlen.is_some() || !d.is_cuda());
    println!(
        "{}",
        serde_json::json!({
            "check": "varlen_attention", "ok": ok, "varlen_ran": varlen.is_some(),
            "worst_rel": worst_rel, "diffs": diffs, "real_token_fraction": t as f64 / (a.batch * a.seq) as f64,
            "speedup_varlen_vs_scatter": (medians.len() == 2).then(|| medians[1] / medians[0]),
        })
    );
    if !ok {
        bail!("varlen attention check failed: worst relative difference {worst_rel:e}");
    }
    Ok(())
}
