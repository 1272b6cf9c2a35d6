//! `mlperf-run dist-selftest` (hidden): checks the c10d path end to end on the machine it runs
//! on. Start it under `mlperf-run launch`, torchrun or srun; alone it is a world of one.
//!
//! Modes: `collectives` checks every collective's result; `equiv` trains a tiny conv+BN+linear
//! model through [`BucketedGradSync`] and saves its trainable parameters (the CI equivalence
//! test compares a 2-process run with a 1-process run accumulating the same micro-batches, and
//! the overlapped all-reduce with the blocking one); `loop` allreduces forever-ish, and
//! `--die-rank` makes one rank exit mid-run (failure tests); `overlap` measures the fraction of
//! the gradient all-reduce time hidden behind the backward for a ResNet.
use super::{SelftestArgs, SelftestMode, SelftestModel};
use crate::distributed::{
    broadcast_from_root, Backend, BucketedGradSync, Buckets, GradSource, GradSync, ProcessGroup,
    ReduceOp, Rendezvous, Timeouts, DEFAULT_BUCKET_BYTES,
};
use crate::models::resnet::{self, ResnetSpec};
use crate::optim::ParamGroups;
use crate::util::ExitStatus;
use anyhow::{bail, ensure, Context, Result};
use std::time::{Duration, Instant};
use tch::nn::ModuleT;
use tch::{nn, nn::OptimizerConfig, Device, Kind, Tensor};

pub fn run(args: &SelftestArgs) -> Result<ExitStatus> {
    let rdv = match Rendezvous::from_env()? {
        Some(r) => r,
        None => Rendezvous {
            master_port: super::free_local_port()?,
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
    // NCCL: the rank's GPU by the trainer's rule (its local rank's, or the one it is bound to)
    let device = match backend {
        Backend::Gloo => Device::Cpu,
        Backend::Nccl => crate::distributed::TestMode::default().rank_device(
            Device::Cuda(0),
            rdv.local_rank,
            tch::Cuda::device_count(),
        )?,
    };
    let mut pg = ProcessGroup::new(
        &rdv,
        backend,
        device,
        Timeouts::both(Duration::from_secs_f64(args.timeout_s)),
    )?;
    let who = format!("rank {} of {} ({})", pg.rank(), pg.size(), backend.name());
    match args.mode {
        SelftestMode::Collectives => collectives(&mut pg, device)?,
        SelftestMode::Equiv => equiv(pg, device, args)?,
        SelftestMode::Loop => run_loop(&mut pg, device, args)?,
        SelftestMode::Overlap => overlap(pg, device, args)?,
    }
    println!("dist-selftest ok: {who}");
    Ok(ExitStatus::Success)
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
    let overlap = args.overlap.unwrap_or(false);
    let mut sync =
        BucketedGradSync::new(pg, args.bucket_bytes.unwrap_or(1024))?.with_overlap(overlap);
    sync.set_bucket_clip(args.bucket_clip)?;
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
        // the returned-gradients path sums the micro-batches here, as the ResNet trainer does
        let mut summed: Vec<Tensor> = Vec::new();
        for a in 0..accum {
            let start = (rank * accum + a) * MICRO;
            let x = xs.narrow(0, start, MICRO);
            let y = ys.narrow(0, start, MICRO);
            let loss = model.forward(&x).cross_entropy_for_logits(&y) / accum as f64;
            let last = a + 1 == accum;
            if !args.returned_grads {
                if last {
                    sync.before_last_backward(&params, GradSource::GradBuffers)?;
                }
                loss.backward();
                continue;
            }
            let hooked = last
                && sync.before_last_backward(&params, GradSource::Returned { accum: &summed })?;
            let g =
                Tensor::f_run_backward(&[&loss], &params.iter().collect::<Vec<_>>(), false, false)?;
            if summed.is_empty() || hooked {
                summed = g;
            } else {
                tch::no_grad(|| crate::optim::foreach::add_list_(&summed, &g, 1.0))?;
            }
        }
        let grads: Vec<Tensor> = if args.returned_grads {
            summed
        } else {
            params.iter().map(|p| p.grad()).collect()
        };
        sync.all_reduce_grads(&grads)?;
        if args.returned_grads {
            // hand the averages to the optimizer through .grad (unset after zero_grad): the
            // backward of sum(p * g) hands over exactly 1 * g
            for (p, g) in params.iter().zip(&grads) {
                (p * g.detach()).sum(Kind::Float).backward();
            }
        }
        opt.step();
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("rank{rank}.safetensors"));
        let named = sorted_vars(&vs, true);
        Tensor::write_safetensors(&named, &path)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let (count, bytes) = sync.allreduce_counts();
    println!(
        "equiv: {} steps, {} buckets, overlap {overlap}, {count} gradient all-reduces of {bytes} \
         bytes",
        args.steps,
        sync.num_buckets()
    );
    Ok(())
}

/// Trains a ResNet on random data through [`BucketedGradSync`] with per-bucket timestamps and
/// prints, per step and on average over the steps after the first (whose buckets are rebuilt in
/// gradient order): the backward's seconds, the seconds any all-reduce was in flight, the
/// fraction of those hidden behind the backward, and the seconds the step waited after the
/// backward. With `--overlap false` it times the blocking path (all-reduces after the backward).
fn overlap(pg: ProcessGroup, dev: Device, args: &SelftestArgs) -> Result<()> {
    ensure!(
        args.steps >= 2,
        "--steps must be at least 2 (the first step builds the buckets)"
    );
    ensure!(
        args.batch >= 1 && args.image_size >= 8,
        "--batch >= 1 and --image-size >= 8"
    );
    let spec = match args.model {
        SelftestModel::Tiny => ResnetSpec {
            classes: 10,
            width: 8,
            blocks: [1, 1, 1, 1],
            zero_init_last_bn: true,
            methods: Default::default(),
        },
        SelftestModel::Resnet50 => ResnetSpec::resnet50(1000),
    };
    tch::manual_seed(1);
    let (vs, net) = resnet::build(&spec, dev);
    let params = ParamGroups::from_var_store(&vs);
    let tensors = params.tensors();
    let mut pg = pg;
    broadcast_from_root(
        &mut pg,
        &sorted_vars(&vs, false)
            .into_iter()
            .map(|(_, t)| t)
            .collect::<Vec<_>>(),
    )?;
    let overlap = args.overlap.unwrap_or(true);
    let bucket_bytes = args.bucket_bytes.unwrap_or(DEFAULT_BUCKET_BYTES);
    let mut sync = BucketedGradSync::new(pg, bucket_bytes)?
        .with_overlap(overlap)
        .with_timing(true);
    let n_params: i64 = tensors.iter().map(|t| t.numel() as i64).sum();
    println!(
        "overlap: {:?}, {n_params} parameters, batch {} at {} px, buckets of {bucket_bytes} \
         bytes, overlap {overlap}",
        args.model, args.batch, args.image_size
    );
    let (mut sum_bwd, mut sum_step, mut sum_comm, mut sum_hidden, mut sum_exposed) =
        (0.0, 0.0, 0.0, 0.0, 0.0);
    let mut counted = 0usize;
    for step in 0..args.steps {
        tch::manual_seed(100 + step as i64);
        let x = Tensor::randn(
            [args.batch, 3, args.image_size, args.image_size],
            (Kind::Float, dev),
        );
        let y = Tensor::randint(spec.classes, [args.batch], (Kind::Int64, dev));
        let loss = net.forward_t(&x, true).cross_entropy_for_logits(&y);
        let t0 = Instant::now();
        let hooked = sync.before_last_backward(&tensors, GradSource::Returned { accum: &[] })?;
        let grads = params.gradients_of(&loss)?;
        let backward = t0.elapsed().as_secs_f64();
        sync.all_reduce_grads(&grads)?;
        let total = t0.elapsed().as_secs_f64();
        let timings = if hooked {
            sync.last_timings().cloned()
        } else {
            None
        };
        let (comm, hidden, exposed) = match &timings {
            Some(t) => (t.comm_seconds(), t.hidden_fraction(), t.exposed_seconds()),
            // blocking: every all-reduce runs after the backward
            None => (total - backward, 0.0, total - backward),
        };
        println!(
            "step {step}: {} buckets, backward {backward:.4} s, step {total:.4} s, all-reduce in \
             flight {comm:.4} s, hidden {:.1}%, waited after backward {exposed:.4} s",
            sync.num_buckets(),
            hidden * 100.0
        );
        if step >= 1 {
            counted += 1;
            sum_bwd += backward;
            sum_step += total;
            sum_comm += comm;
            sum_hidden += hidden;
            sum_exposed += exposed;
        }
    }
    let n = counted as f64;
    println!(
        "overlap summary ({counted} steps after the first): backward {:.4} s, step {:.4} s, \
         all-reduce in flight {:.4} s, hidden {:.1}%, waited after backward {:.4} s",
        sum_bwd / n,
        sum_step / n,
        sum_comm / n,
        100.0 * sum_hidden / n,
        sum_exposed / n
    );
    Ok(())
}

/// The status a rank that `--die-rank` kills exits with: on purpose not one of
/// [`crate::util::ExitStatus`], as it stands for a crash (no verdict, no error message); `launch`
/// must pass it on and stop the other ranks.
pub const DIED_ON_PURPOSE: i32 = 3;

fn run_loop(pg: &mut ProcessGroup, dev: Device, args: &SelftestArgs) -> Result<()> {
    let n = pg.size() as f64;
    for step in 0..args.steps {
        if args.die_rank == Some(pg.rank()) && step == args.die_after {
            eprintln!(
                "rank {} exiting on purpose at step {step} (--die-rank)",
                pg.rank()
            );
            std::process::exit(DIED_ON_PURPOSE);
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
