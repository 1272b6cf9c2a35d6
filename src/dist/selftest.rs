//! `mlperf-run dist-selftest` (hidden): checks the c10d path end to end on the machine it runs
//! on. Start it under `mlperf-run launch`, torchrun or srun; alone it is a world of one.
//!
//! Modes: `collectives` checks every collective's result; `equiv` trains a tiny conv+BN+linear
//! model through [`BucketedGradSync`] and saves its trainable parameters (the CI equivalence
//! test compares a 2-process run with a 1-process run accumulating the same micro-batches);
//! `loop` allreduces forever-ish, and `--die-rank` makes one rank exit mid-run (failure tests).
use super::{
    broadcast_from_root, Backend, BucketedGradSync, Buckets, ProcessGroup, ReduceOp, Rendezvous,
};
use crate::launch::{SelftestArgs, SelftestMode};
use crate::train::engine::GradSync;
use anyhow::{bail, ensure, Context, Result};
use std::process::ExitCode;
use std::time::Duration;
use tch::{nn, nn::OptimizerConfig, Device, Kind, Tensor};

pub fn run(args: &SelftestArgs) -> Result<ExitCode> {
    let rdv = match Rendezvous::from_env()? {
        Some(r) => r,
        None => Rendezvous {
            master_port: crate::launch::free_local_port()?,
            ..Rendezvous::single()
        },
    };
    if !(args.timeout_s > 0.0 && args.timeout_s.is_finite()) {
        bail!("--timeout-s must be a positive number of seconds");
    }
    let backend = if args.nccl {
        Backend::Nccl
    } else {
        Backend::Gloo
    };
    let mut pg = ProcessGroup::new(&rdv, backend, Duration::from_secs_f64(args.timeout_s))?;
    let who = format!("rank {} of {} ({})", pg.rank(), pg.size(), backend.name());
    let device = match backend {
        Backend::Gloo => Device::Cpu,
        Backend::Nccl => Device::Cuda(rdv.local_rank),
    };
    match args.mode {
        SelftestMode::Collectives => collectives(&mut pg, device)?,
        SelftestMode::Equiv => equiv(pg, device, args)?,
        SelftestMode::Loop => run_loop(&mut pg, device, args)?,
    }
    println!("dist-selftest ok: {who}");
    Ok(ExitCode::SUCCESS)
}

fn values(t: &Tensor) -> Result<Vec<f64>> {
    Ok(Vec::<f64>::try_from(
        &t.to_device(Device::Cpu)
            .to_kind(Kind::Double)
            .flatten(0, -1),
    )?)
}

fn expect_all(t: &Tensor, want: f64, what: &str) -> Result<()> {
    let v = values(t)?;
    ensure!(
        v.iter().all(|x| (x - want).abs() < 1e-9),
        "{what}: got {v:?}, expected every value {want}"
    );
    Ok(())
}

fn collectives(pg: &mut ProcessGroup, dev: Device) -> Result<()> {
    let (r, n) = (pg.rank() as f64, pg.size() as f64);
    let opts = (Kind::Float, dev);
    let t = Tensor::full([5], r + 1.0, opts);
    pg.allreduce(&[&t], ReduceOp::Sum)?;
    expect_all(&t, n * (n + 1.0) / 2.0, "allreduce sum")?;
    for (op, want) in [
        (ReduceOp::Avg, (n - 1.0) / 2.0),
        (ReduceOp::Max, n - 1.0),
        (ReduceOp::Min, 0.0),
    ] {
        let t = Tensor::full([3, 2], r, opts);
        pg.allreduce(&[&t], op)?;
        expect_all(&t, want, &format!("allreduce {op:?}"))?;
    }
    // Several tensors of different sizes and kinds in one call.
    let a = Tensor::full([7], r, (Kind::Double, dev));
    let b = Tensor::full([2, 2], 1, (Kind::Int64, dev));
    pg.allreduce(&[&a, &b], ReduceOp::Sum)?;
    expect_all(&a, n * (n - 1.0) / 2.0, "allreduce f64")?;
    expect_all(&b, n, "allreduce i64")?;
    // Broadcast from the last rank.
    let root = pg.size() - 1;
    let t = Tensor::arange(6, opts) * (r + 1.0);
    pg.broadcast(&[&t], root)?;
    let want: Vec<f64> = (0..6).map(|i| i as f64 * n).collect();
    ensure!(
        values(&t)? == want,
        "broadcast: got {:?}, expected {want:?}",
        values(&t)?
    );
    // Buckets: tiny buckets force several allreduces; shapes must survive the round trip.
    let ts: Vec<Tensor> = (1..=6)
        .map(|i| Tensor::full([i, 3], r * i as f64, opts))
        .collect();
    let mut bk = Buckets::new(&ts, 40)?;
    ensure!(
        bk.len() >= 4,
        "expected several 40-byte buckets, got {}",
        bk.len()
    );
    bk.allreduce(pg, &ts, ReduceOp::Avg)?;
    for (i, t) in ts.iter().enumerate() {
        let i = (i + 1) as f64;
        expect_all(t, i * (n - 1.0) / 2.0, "bucketed allreduce avg")?;
    }
    broadcast_from_root(pg, &ts)?;
    expect_all(&ts[5], 6.0 * (n - 1.0) / 2.0, "broadcast_from_root")?;
    // Eval reduction and stop agreement.
    let (c, tot) = pg.reduce_counts(r, 10.0)?;
    ensure!(
        (c, tot) == (n * (n - 1.0) / 2.0, 10.0 * n),
        "reduce_counts gave ({c}, {tot})"
    );
    ensure!(
        pg.any(pg.rank() + 1 == pg.size())?,
        "any(): one rank's true flag was lost"
    );
    ensure!(!pg.any(false)?, "any(): all false flags gave true");
    // Bad input is refused before it reaches c10d, and the group stays usable.
    let strided = Tensor::zeros([4, 4], opts).transpose(0, 1);
    ensure!(
        pg.allreduce(&[&strided], ReduceOp::Sum).is_err(),
        "non-contiguous tensor accepted"
    );
    pg.barrier()?;
    Ok(())
}

/// conv(3->8) + batch norm + ReLU + global pool + linear(8->10).
struct Tiny {
    conv: nn::Conv2D,
    bn: nn::BatchNorm,
    fc: nn::Linear,
}

impl Tiny {
    fn new(p: &nn::Path) -> Tiny {
        let cfg = nn::ConvConfig {
            padding: 1,
            ..Default::default()
        };
        Tiny {
            conv: nn::conv2d(p / "conv", 3, 8, 3, cfg),
            bn: nn::batch_norm2d(p / "bn", 8, Default::default()),
            fc: nn::linear(p / "fc", 8, 10, Default::default()),
        }
    }

    fn forward(&self, xs: &Tensor) -> Tensor {
        xs.apply(&self.conv)
            .apply_t(&self.bn, true)
            .relu()
            .adaptive_avg_pool2d([1, 1])
            .flatten(1, -1)
            .apply(&self.fc)
    }
}

/// Variables sorted by name (HashMap order differs between processes).
fn sorted_vars(vs: &nn::VarStore, trainable_only: bool) -> Vec<(String, Tensor)> {
    let mut v: Vec<(String, Tensor)> = vs
        .variables()
        .into_iter()
        .filter(|(_, t)| !trainable_only || t.requires_grad())
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Every rank handles `accum` micro-batches of `MICRO` samples per step; the global batch is
/// world x accum micro-batches, identical on every rank (seeded by step), so a 2x1 run and a
/// 1x2 run see the same micro-batches.
fn equiv(pg: ProcessGroup, dev: Device, args: &SelftestArgs) -> Result<()> {
    const MICRO: i64 = 4;
    ensure!(args.accum >= 1, "--accum must be at least 1");
    let (rank, world) = (pg.rank() as i64, pg.size() as i64);
    let accum = args.accum as i64;
    // A different init per rank, so the start-of-run broadcast is what makes them agree.
    tch::manual_seed(1000 + rank);
    let vs = nn::VarStore::new(dev);
    let model = Tiny::new(&vs.root());
    let all: Vec<Tensor> = sorted_vars(&vs, false)
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    let params: Vec<Tensor> = sorted_vars(&vs, true).into_iter().map(|(_, t)| t).collect();
    let mut pg = pg;
    broadcast_from_root(&mut pg, &all)?;
    let mut sync = BucketedGradSync::new(pg, args.bucket_bytes)?;
    let mut opt = nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(&vs, 0.1)?;
    for step in 0..args.steps {
        tch::manual_seed(7_000 + step as i64);
        let n = world * accum * MICRO;
        let xs = Tensor::randn([n, 3, 8, 8], (Kind::Float, dev));
        let ys = Tensor::randint(10, [n], (Kind::Int64, dev));
        opt.zero_grad();
        for a in 0..accum {
            let start = (rank * accum + a) * MICRO;
            let x = xs.narrow(0, start, MICRO);
            let y = ys.narrow(0, start, MICRO);
            let loss = model.forward(&x).cross_entropy_for_logits(&y) / accum as f64;
            loss.backward();
        }
        let grads: Vec<Tensor> = params.iter().map(|p| p.grad()).collect();
        sync.all_reduce_grads(&grads)?;
        opt.step();
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("rank{rank}.safetensors"));
        let named = sorted_vars(&vs, true);
        Tensor::write_safetensors(&named, &path)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!(
        "equiv: {} steps, {} buckets",
        args.steps,
        sync.num_buckets()
    );
    Ok(())
}

fn run_loop(pg: &mut ProcessGroup, dev: Device, args: &SelftestArgs) -> Result<()> {
    let n = pg.size() as f64;
    for step in 0..args.steps {
        if args.die_rank == Some(pg.rank()) && step == args.die_after {
            eprintln!(
                "rank {} exiting on purpose at step {step} (--die-rank)",
                pg.rank()
            );
            std::process::exit(3);
        }
        let t = Tensor::ones([1024], (Kind::Float, dev));
        pg.allreduce(&[&t], ReduceOp::Sum)
            .with_context(|| format!("step {step}"))?;
        expect_all(&t, n, "loop allreduce")?;
        println!("step {step} ok");
        std::thread::sleep(Duration::from_millis(args.step_ms));
    }
    Ok(())
}
