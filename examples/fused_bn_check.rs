//! GPU check of `methods.fused_bn_relu`: the fused op (`shim/fused_bn.cpp`) against the unfused
//! chain (`apply_t(&bn)`, `+= z`, `relu_()`) on ResNet-50's BN shapes, in training mode.
//!
//! For every dtype (bf16, fp16) and every distinct BN of ResNet-50 (channels x spatial size at
//! `--size`, with the residual add where the bottleneck's last BN has one), both sides get the
//! same channels-last input, residual, upstream gradient and BN state. Printed per case: which
//! path the fused op took (cuDNN, or composite and why), the max abs and relative difference of
//! y, dx, dz, dweight, dbias and the running statistics, and the median forward + backward time
//! of each side over `--rounds` (CUDA-synchronised around each timed call). Each of y and the
//! gradients is also compared, on both sides, with an fp32 reference: the unfused chain in fp32
//! on the same (rounded) inputs. That tells which side is off where they differ: the eager chain
//! rounds bn(x) to the activation dtype before the residual add, so its ReLU gate flips where
//! bn(x) + z is within a rounding of 0 (rel L2 of dx about 3e-2 in bf16, 1e-2 in fp16;
//! scripts/bench/bn_add_relu_rounding.py shows it on the CPU), while a fused kernel adds in fp32.
//! Then one JSON line per dtype and side (`impl` = fused-bf16, unfused-bf16, ...) with
//! `img_per_s` = batch / (sum of the cases' medians), for scripts/bench_gpu.sh part f. Exit 1
//! when a difference exceeds the bounds below (a wrong result, not a slow one: against the
//! unfused side, and the fused side never much farther from fp32 than the unfused one), or when
//! an fp16 case eligible for cuDNN ran the composite path (the fused kernels' documented case:
//! the cuDNN path is broken).
//!
//! cargo run --release --example fused_bn_check -- [--device cuda|cpu]
//!     [--batch 256] [--size 224] [--rounds 20] [--dtypes bf16,fp16]
//!
//! On a CPU (no cuDNN) it checks the plumbing: both sides run the same calls there.

mod common;

use anyhow::{bail, Context, Result};
use clap::Parser;
use mlperf_run::fused::bn_relu;
use mlperf_run::models::to_channels_last;
use std::time::Instant;
use tch::nn;
use tch::{Device, Kind, Tensor};

const MOMENTUM: f64 = 0.1;
const EPS: f64 = 1e-5;

/// cuDNN's fused BN + (add) + ReLU against the unfused chain on ResNet-50's shapes.
#[derive(Parser)]
struct Args {
    #[arg(long, value_parser = common::parse_device, default_value = "cuda")]
    device: Device,
    #[arg(long, default_value_t = 256)]
    batch: i64,
    #[arg(long, default_value_t = 224)]
    size: i64,
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Activation dtypes: bf16, fp16, fp32.
    #[arg(long, value_delimiter = ',', value_parser = parse_dtype, default_value = "bf16,fp16")]
    dtypes: Vec<Kind>,
}

fn parse_dtype(d: &str) -> Result<Kind> {
    match d {
        "bf16" => Ok(Kind::BFloat16),
        "fp16" => Ok(Kind::Half),
        "fp32" => Ok(Kind::Float),
        _ => bail!("bf16, fp16 or fp32"),
    }
}

fn parse_args() -> Result<Args> {
    let a = Args::parse();
    if a.rounds == 0 || a.batch < 2 || a.size < 32 {
        bail!("--rounds >= 1, --batch >= 2, --size >= 32");
    }
    Ok(a)
}

/// ResNet-50's distinct BNs as (channels, spatial divisor of the image size, residual add):
/// the stem, then per stage the 1x1-reduce BN (at the stage's input size), the 3x3 BN and the
/// last BN with the residual (v1.5: the stride sits on the 3x3 conv).
const CASES: [(i64, i64, bool); 13] = [
    (64, 2, false),
    (64, 4, false),
    (256, 4, true),
    (128, 4, false),
    (128, 8, false),
    (512, 8, true),
    (256, 8, false),
    (256, 16, false),
    (1024, 16, true),
    (512, 16, false),
    (512, 32, false),
    (2048, 32, true),
    // a BN at the stage-1 size with no residual and many channels (the projection BN's shape)
    (256, 4, false),
];

struct Side {
    y: Tensor,
    dx: Tensor,
    dz: Option<Tensor>,
    dw: Tensor,
    db: Tensor,
    rm: Tensor,
    rv: Tensor,
}

/// One forward + backward of one side with a fresh copy of the BN state; returns the results
/// and the seconds it took (synchronised).
fn one(
    fused: bool,
    bn: &nn::BatchNorm,
    x0: &Tensor,
    z0: Option<&Tensor>,
    gy: &Tensor,
) -> Result<(Side, f64)> {
    let x = x0.detach().set_requires_grad(true);
    let z = z0.map(|z| z.detach().set_requires_grad(true));
    for p in [bn.ws.as_ref(), bn.bs.as_ref()].into_iter().flatten() {
        mlperf_run::gpu::amp::set_grad_none(p)?;
    }
    let device = x0.device();
    mlperf_run::gpu::cuda::synchronize(device);
    let t0 = Instant::now();
    let y = if fused {
        bn_relu::f_bn_add_relu(&x, z.as_ref(), bn, MOMENTUM, EPS, true)?
    } else {
        let mut y = x.apply_t(bn, true);
        if let Some(z) = &z {
            y += z;
        }
        let _ = y.relu_();
        y
    };
    // both sides pay the same sum(y * gy) to get a non-uniform upstream gradient
    (&y * gy).sum(Kind::Float).backward();
    mlperf_run::gpu::cuda::synchronize(device);
    let secs = t0.elapsed().as_secs_f64();
    let side = Side {
        y: y.detach(),
        dx: x.grad(),
        dz: z.map(|z| z.grad()),
        dw: bn.ws.as_ref().context("affine BN")?.grad(),
        db: bn.bs.as_ref().context("affine BN")?.grad(),
        rm: bn.running_mean.copy(),
        rv: bn.running_var.copy(),
    };
    Ok((side, secs))
}

fn new_bn(vs: &nn::VarStore, c: i64) -> nn::BatchNorm {
    nn::batch_norm2d(
        vs.root() / "bn",
        c,
        nn::BatchNormConfig {
            eps: EPS,
            momentum: MOMENTUM,
            ws_init: nn::Init::Const(1.0),
            ..Default::default()
        },
    )
}

/// (max abs diff, that over max |reference|, relative L2).
fn diff(reference: &Tensor, other: &Tensor) -> (f64, f64, f64) {
    let r = reference.to_kind(Kind::Float);
    let o = other.to_kind(Kind::Float);
    let d = (&r - &o).abs();
    let max_abs = d.max().double_value(&[]);
    let scale = r.abs().max().double_value(&[]).max(1e-12);
    let l2 = (&r - &o).norm().double_value(&[]) / r.norm().double_value(&[]).max(1e-12);
    (max_abs, max_abs / scale, l2)
}

fn main() -> Result<()> {
    let a = parse_args()?;
    if a.device.is_cuda() && !tch::Cuda::is_available() {
        bail!("no CUDA device (use --device cpu to check the plumbing)");
    }
    println!(
        "fused_bn_check: device {:?}, batch {}, size {}, rounds {}, cuDNN path compiled: {}",
        a.device,
        a.batch,
        a.size,
        a.rounds,
        bn_relu::cudnn_compiled()
    );
    tch::manual_seed(0);
    let mut failed = Vec::new();
    for &kind in &a.dtypes {
        let (mut t_fused, mut t_unfused) = (0.0, 0.0);
        for &(c, div, residual) in &CASES {
            let hw = (a.size / div).max(1);
            let shape = [a.batch, c, hw, hw];
            let opts = (Kind::Float, a.device);
            let cl = |t: Tensor| to_channels_last(&t.to_kind(kind));
            let x = cl(Tensor::randn(shape, opts) * 2.0 + 0.5);
            let z = residual.then(|| cl(Tensor::randn(shape, opts)));
            let gy = cl(Tensor::randn(shape, opts));
            // both sides start from the same BN state (fresh var stores)
            let (vs_f, vs_u) = (nn::VarStore::new(a.device), nn::VarStore::new(a.device));
            let (bn_f, bn_u) = (new_bn(&vs_f, c), new_bn(&vs_u, c));
            let path = match bn_relu::cudnn_eligible(&x, z.as_ref(), &bn_f)? {
                Ok(()) => "cuDNN eligible".to_string(),
                Err(why) => format!("composite ({why})"),
            };
            // first call of each side: the compared results (same state on both sides)
            let (before, _) = bn_relu::counts();
            let (f, _) = one(true, &bn_f, &x, z.as_ref(), &gy)?;
            let (after, _) = bn_relu::counts();
            let (u, _) = one(false, &bn_u, &x, z.as_ref(), &gy)?;
            let vs_r = nn::VarStore::new(a.device);
            let bn_r = new_bn(&vs_r, c);
            let fp32 = |t: &Tensor| t.to_kind(Kind::Float);
            let (r, _) = one(
                false,
                &bn_r,
                &fp32(&x),
                z.as_ref().map(fp32).as_ref(),
                &fp32(&gy),
            )?;
            let ran_cudnn = after > before;
            // fp16 NHWC is the documented case of cuDNN's fused kernels: eligible but not run
            // means the cuDNN path is broken, and the bounds below (composite vs unfused, equal)
            // would not show it. bf16 may be refused by cuDNN: reported, not a failure.
            if path == "cuDNN eligible" && !ran_cudnn && kind == Kind::Half {
                failed.push(format!(
                    "{kind:?} C={c} {hw}x{hw} residual={residual}: eligible for cuDNN but ran \
                     composite ({})",
                    bn_relu::fallback_reason().unwrap_or_default()
                ));
            }
            let ran = if ran_cudnn {
                "ran on cuDNN".to_string()
            } else {
                match bn_relu::fallback_reason() {
                    Some(r) if path == "cuDNN eligible" => format!("ran composite: {r}"),
                    _ => "ran composite".to_string(),
                }
            };
            // (name, unfused, fused, fp32 reference: None for the statistics, kept in fp32)
            let mut pairs = vec![
                ("y", &u.y, &f.y, Some(&r.y)),
                ("dx", &u.dx, &f.dx, Some(&r.dx)),
                ("dweight", &u.dw, &f.dw, Some(&r.dw)),
                ("dbias", &u.db, &f.db, Some(&r.db)),
                ("running_mean", &u.rm, &f.rm, None),
                ("running_var", &u.rv, &f.rv, None),
            ];
            if let (Some(p), Some(q), Some(o)) = (&u.dz, &f.dz, &r.dz) {
                pairs.push(("dz", p, q, Some(o)));
            }
            // timing: alternate the sides, median of each
            let (mut tf, mut tu) = (Vec::new(), Vec::new());
            for _ in 0..a.rounds {
                tf.push(one(true, &bn_f, &x, z.as_ref(), &gy)?.1);
                tu.push(one(false, &bn_u, &x, z.as_ref(), &gy)?.1);
            }
            let (mf, mu) = (common::median(&tf), common::median(&tu));
            t_fused += mf;
            t_unfused += mu;
            println!(
                "{kind:?} C={c} {hw}x{hw} residual={residual}: {path}, {ran}; fwd+bwd median \
                 fused {:.3} ms, unfused {:.3} ms ({:.2}x)",
                1e3 * mf,
                1e3 * mu,
                mu / mf
            );
            for (name, p, q, reference) in pairs {
                let (abs, rel, l2) = diff(p, q);
                // bounds: outputs and statistics within a few roundings of the activation
                // dtype; gradients by relative L2, since a ReLU gate can flip where bn(x) + z
                // rounds to about 0 (single elements then differ by O(1))
                let eps = if kind == Kind::Half { 1e-3 } else { 8e-3 };
                let mut bad = match name {
                    "y" => rel > 4.0 * eps,
                    "running_mean" | "running_var" => rel > 1e-3,
                    _ => l2 > 0.05,
                };
                // and against fp32: the fused side at most a quarter (and a quarter of a
                // rounding) farther from it than the unfused side
                let to_fp32 = reference.map(|o| (diff(o, q).2, diff(o, p).2));
                let farther = to_fp32.is_some_and(|(fl, ul)| fl > 1.25 * ul + eps / 4.0);
                bad |= farther;
                let verdict = if bad { "  <-- OUT OF BOUNDS" } else { "" };
                let fp32_note = to_fp32.map_or(String::new(), |(fl, ul)| {
                    format!("  | rel L2 to fp32: fused {fl:.3e}, unfused {ul:.3e}")
                });
                println!(
                    "    {name:<13} max abs {abs:.3e}  max abs / max |ref| {rel:.3e}  rel L2 {l2:.3e}{fp32_note}{verdict}"
                );
                if bad {
                    let why = if farther {
                        " (fused farther from fp32 than unfused)"
                    } else {
                        ""
                    };
                    failed.push(format!(
                        "{kind:?} C={c} {hw}x{hw} residual={residual}: {name}{why}"
                    ));
                }
            }
        }
        let name = match kind {
            Kind::BFloat16 => "bf16",
            Kind::Half => "fp16",
            _ => "fp32",
        };
        for (side, t) in [("fused", t_fused), ("unfused", t_unfused)] {
            println!(
                "{}",
                serde_json::json!({
                    "impl": format!("{side}-{name}"),
                    "img_per_s": a.batch as f64 / t,
                    "ms_all_cases": 1e3 * t,
                    "cases": CASES.len(),
                    "rounds": a.rounds,
                })
            );
        }
        println!(
            "{name}: all {} cases fwd+bwd: fused {:.2} ms, unfused {:.2} ms ({:.2}x)",
            CASES.len(),
            1e3 * t_fused,
            1e3 * t_unfused,
            t_unfused / t_fused
        );
    }
    let (cudnn, composite) = bn_relu::counts();
    println!("fused op training calls: {cudnn} on cuDNN, {composite} composite");
    if let Some(r) = bn_relu::fallback_reason() {
        println!("fallback: {r}");
    }
    if !failed.is_empty() {
        bail!(
            "{} differences out of bounds: {}",
            failed.len(),
            failed.join("; ")
        );
    }
    println!("fused_bn_check: all differences within bounds");
    Ok(())
}
