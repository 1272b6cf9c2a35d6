//! ResNet training steps through our real trainer (engine + ResNet workload + MLPerf logging to
//! a file) on one fixed pre-made u8 batch, so the data pipeline's own speed is out of the
//! picture (each step still pays the hand-off: batch copy, host -> device, normalisation).
//!
//! The data set is 2 epochs of `--steps` batches each, with an eval after every epoch: epoch 1
//! is the warm-up, epoch 2 is timed. On a GPU steps run asynchronously, so the timed window is
//! the whole training part of epoch 2, `RunOutcome::block_seconds[1]`: block_start to after the
//! block's final loss read (a device sync), not a sum of per-step host times.
//! Prints one JSON line: img_per_s, step_ms, steps_per_s, window_unix (wall-clock bounds of the
//! window, for GPU-utilisation sampling), host_step_ms (each timed step's enqueue time on the
//! host), host_outside_steps_ms (the rest of the window: the block's start and the loss reads)
//! and, on the CPU (where host time is compute time), the trainer's overhead shares.
//!
//! cargo run --release --example resnet_bench_step -- [--device cpu|cuda] [--batch 8]
//!     [--size 112] [--steps 30] [--opt sgd|lars] [--threads 2] [--width 64]
//!     [--blocks 3,4,6,3] [--classes 1000]
//!     [--methods amp=fp16,channels_last,cuda_graph,fused_bn_relu,...] [--short-warmup]
//!
//! --methods: ResNet's methods as a config's `[methods]` table names them
//! ([`mlperf_run::methods::ResnetMethods`]): a bare name turns one on, `name=value` sets one.
//! cuda_graph: the step captured once and replayed (on a CPU its twin, `StepGraphs::emulated`,
//! which only checks the plumbing). fused_bn_relu: BN + residual + ReLU as one op (cuDNN's fused
//! kernels on a GPU with fp16 channels-last activations: cuDNN's fused batch norm is documented
//! for fp16). amp=fp16: autocast fp16, dynamic loss scale skipping overflowing steps on the
//! device (sgd and lars).
//! --short-warmup (with cuda_graph): the batches of the warm-up and the capture step (the
//! first 4) and the second batch of epoch 2 have one image fewer, as when a loader skips an
//! unreadable image. The graph is then captured "cold" on the full shape (cuDNN benchmark mode
//! off: no eager step ran it), the short batches run eagerly beside it, and the full ones
//! replay it. The run fails unless the graph's counts are exactly that; they are in the JSON
//! line's "graph" either way.

mod common;

use anyhow::{bail, Context, Result};
use clap::Parser;
use mlperf_run::data::rng::Rng;
use mlperf_run::gpu::cuda_graph::{GraphStats, DEFAULT_WARMUP_STEPS};
use mlperf_run::methods::ResnetMethods;
use mlperf_run::rules::Division;
use mlperf_run::train::engine::{self, RunOptions, Submission};
use mlperf_run::train::resnet::config::ResnetRunConfig;
use mlperf_run::train::resnet::data::{Batch, BatchIter, ImageData, Shard};
use mlperf_run::train::resnet::ResnetWorkload;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// When the trainer asked for each epoch's batches and for each eval: which epoch a batch
/// request belongs to (short batches), and a check that both epochs and evals ran.
#[derive(Default)]
struct Calls {
    train_epoch: Vec<SystemTime>,
    eval: Vec<SystemTime>,
}

/// The same pre-made batch every step (a memcpy per batch, like a prefetch queue hand-off).
struct FixedImages {
    classes: usize,
    len: usize,
    batch: Batch,
    /// Eval batch: the same images with other labels, so no eval can reach the target (a
    /// memorised training batch would otherwise end the run after epoch 1).
    eval_batch: Batch,
    calls: Arc<Mutex<Calls>>,
    /// Steps (counted over the run, from 0) whose batch has one image fewer.
    short_steps: Vec<usize>,
}

impl ImageData for FixedImages {
    fn num_classes(&self) -> usize {
        self.classes
    }
    fn train_len(&self) -> usize {
        self.len
    }
    fn eval_len(&self) -> usize {
        self.eval_batch.len()
    }
    fn train_epoch(
        &self,
        _e: u64,
        _size: usize,
        batch: usize,
        _seed: u64,
        _s: Shard,
    ) -> Result<BatchIter> {
        let epochs_before = match self.calls.lock() {
            Ok(mut c) => {
                c.train_epoch.push(SystemTime::now());
                c.train_epoch.len() - 1
            }
            Err(_) => bail!("lock poisoned"),
        };
        let (b, steps) = (self.batch.clone(), self.len / batch);
        let short = self.short_steps.clone();
        Ok(Box::new((0..steps).map(move |i| {
            let mut one = b.clone();
            if short.contains(&(epochs_before * steps + i)) {
                let n = one.len() - 1;
                let per_image = one.image(0).len();
                one.labels.truncate(n);
                one.indices.truncate(n);
                one.images.truncate(n * per_image);
            }
            Ok(one)
        })))
    }
    fn eval(&self, _size: usize, _batch: usize, _s: Shard) -> Result<BatchIter> {
        if let Ok(mut c) = self.calls.lock() {
            c.eval.push(SystemTime::now());
        }
        Ok(Box::new(std::iter::once(Ok(self.eval_batch.clone()))))
    }
}

/// ResNet training steps through the real trainer on one fixed batch (prints one JSON line).
#[derive(Parser)]
struct Args {
    #[arg(long, value_parser = common::parse_device, default_value = "cpu")]
    device: tch::Device,
    #[arg(long, default_value_t = 8)]
    batch: usize,
    #[arg(long, default_value_t = 112)]
    size: usize,
    #[arg(long, default_value_t = 30)]
    steps: usize,
    /// libtorch intra-op threads (0: its default).
    #[arg(long, default_value_t = 2)]
    threads: i32,
    #[arg(long, default_value_t = 64)]
    width: i64,
    #[arg(long, default_value_t = 1000)]
    classes: usize,
    /// Bottlenecks per stage.
    #[arg(long, value_delimiter = ',', default_value = "3,4,6,3")]
    blocks: Vec<i64>,
    #[arg(long, value_parser = ["sgd", "lars"], default_value = "sgd")]
    opt: String,
    /// The methods, as a config's [methods] names them: e.g. amp=fp16,channels_last,cuda_graph.
    #[arg(long, value_parser = common::parse_methods::<ResnetMethods>, default_value = "")]
    methods: ResnetMethods,
    /// With cuda_graph: the warm-up's and the capture step's batches one image short.
    #[arg(long)]
    short_warmup: bool,
}

fn parse_args() -> Result<Args> {
    let a = Args::parse();
    if a.steps == 0 || a.batch == 0 || a.blocks.len() != 4 {
        bail!("--steps and --batch must be at least 1, --blocks needs 4 numbers");
    }
    if a.short_warmup && (!a.methods.cuda_graph || a.steps < 2 || a.batch < 2) {
        bail!("--short-warmup needs --methods cuda_graph, --steps 2 or more and --batch 2 or more");
    }
    Ok(a)
}

/// The steps whose batch is short under --short-warmup: the warm-up's and the capture step's,
/// and the second of epoch 2 (beside the graph).
fn short_steps(a: &Args) -> Vec<usize> {
    if !a.short_warmup {
        return Vec::new();
    }
    let warm = DEFAULT_WARMUP_STEPS as usize;
    let mut s: Vec<usize> = (0..=warm).chain([a.steps + 1]).collect();
    s.retain(|&x| x < 2 * a.steps);
    s.dedup();
    s
}

/// The graph's counts a --short-warmup run must end with (one process: the default warm-up).
fn expected_short_warmup_stats(a: &Args) -> GraphStats {
    let warm = DEFAULT_WARMUP_STEPS as u64;
    let short = short_steps(a);
    let beside = short.iter().filter(|&&x| x as u64 > warm).count() as u64;
    let eager = warm + beside;
    GraphStats {
        eager_steps: eager,
        captures: 1,
        replays: 2 * a.steps as u64 - eager - 1,
        releases: 1,
        short_batches: short.len() as u64,
        cold_captures: 1,
    }
}

fn main() -> Result<()> {
    let a = parse_args()?;
    if a.threads > 0 {
        tch::set_num_threads(a.threads);
    }
    let calls = Arc::new(Mutex::new(Calls::default()));
    let (out, t, graph) = bench_once(&a, calls.clone())?;
    if out.evals.len() != 2 || out.steps as usize != 2 * a.steps {
        bail!(
            "the run did not train 2 epochs of {} steps ({} steps, {} evals, status {:?})",
            a.steps,
            out.steps,
            out.evals.len(),
            out.status
        );
    }
    let calls = calls.lock().map_err(|_| anyhow::anyhow!("lock poisoned"))?;
    // block_start of epoch 2 to after its final loss read (a device sync)
    let timed = *out
        .block_seconds
        .get(1)
        .context("the run has no second block")?;
    if calls.train_epoch.len() < 2 || calls.eval.len() < 2 {
        bail!("the trainer did not ask for epoch 2 and its eval");
    }
    // the same span's wall-clock bounds, as the trainer took them
    let (start, end) = match out.block_windows.get(1) {
        Some((a, b)) => (common::unix_seconds(*a), common::unix_seconds(*b)),
        None => bail!("the run has no second block window"),
    };
    let steps = a.steps as f64;
    let epoch2_steps = &out.step_times[out.step_times.len().saturating_sub(a.steps)..];
    let mut json = serde_json::json!({
        "impl": "mlperf-run",
        "device": if a.device.is_cuda() { "cuda" } else { "cpu" },
        "amp": a.methods.amp.as_str(), "channels_last": a.methods.channels_last, "opt": a.opt,
        "cuda_graph": a.methods.cuda_graph, "fused_bn_relu": a.methods.fused_bn_relu,
        "steps": a.steps, "warmup": a.steps, "threads": a.threads, "batch": a.batch, "size": a.size,
        "img_per_s": steps * a.batch as f64 / timed,
        "step_ms": 1000.0 * timed / steps,
        "steps_per_s": steps / timed,
        "window_s": timed,
        "window_unix": [start, end],
        "losses_first_last": [out.losses.first(), out.losses.last()],
        // where the host spent the window: each step's enqueue (train_step) and the rest
        // (starting the block, the loss reads, which wait for the device)
        "host_step_ms": epoch2_steps.iter().map(|t| (t * 1e5).round() / 100.0).collect::<Vec<_>>(),
        "host_outside_steps_ms": 1000.0 * (timed - epoch2_steps.iter().sum::<f64>()),
    });
    if let (Some(g), Some(o)) = (graph, json.as_object_mut()) {
        o.insert(
            "graph".into(),
            serde_json::json!({
                "eager_steps": g.eager_steps, "captures": g.captures, "replays": g.replays,
                "short_batches": g.short_batches, "cold_captures": g.cold_captures,
            }),
        );
    }
    if a.short_warmup {
        let want = expected_short_warmup_stats(&a);
        if graph != Some(want) {
            bail!(
                "--short-warmup: the CUDA graph's counts are {graph:?}, expected {want:?} \
                 (result line: {json})"
            );
        }
    }
    if !a.device.is_cuda() {
        // CPU: host time is compute time, so the shares of the whole run mean something
        let run = out.train_seconds;
        let loop_other = (run - out.step_seconds) / run;
        let timed_steps = &out.step_times[a.steps..];
        let per_call = timed_steps.iter().sum::<f64>() / timed_steps.len() as f64;
        let extra = serde_json::json!({
            "train_step_call_per_s": 1.0 / per_call,
            "overhead_pct": 100.0 * (run - t.compute) / run,
            "handoff_pct": 100.0 * t.handoff / run,
            "data_wait_pct": 100.0 * t.data_wait / run,
            "loop_and_logging_pct": 100.0 * loop_other,
        });
        if let (Some(o), Some(e)) = (json.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
    }
    println!("{json}");
    Ok(())
}

fn bench_once(
    a: &Args,
    calls: Arc<Mutex<Calls>>,
) -> Result<(
    engine::RunOutcome,
    mlperf_run::train::resnet::StepTiming,
    Option<GraphStats>,
)> {
    let (batch, size, classes) = (a.batch, a.size, a.classes);
    let mut rng = Rng::from_state(1);
    let images: Vec<u8> = (0..batch * size * size * 3)
        .map(|_| rng.next_u64() as u8)
        .collect();
    let labels: Vec<i64> = (0..batch)
        .map(|_| rng.below(classes as u64) as i64)
        .collect();
    let eval_labels = labels.iter().map(|l| (l + 1) % classes as i64).collect();
    let batch_of =
        |labels| Batch::finished(images.clone(), labels, (0..batch).collect(), size as u32);
    let data = FixedImages {
        classes,
        len: batch * a.steps,
        batch: batch_of(labels),
        eval_batch: batch_of(eval_labels),
        calls,
        short_steps: short_steps(a),
    };
    let optimizer = match a.opt.as_str() {
        "lars" => {
            "name = \"lars\"\nbase_lr = 2.0\nlars_eta = 0.001\nlars_epsilon = 0.0\nmomentum = 0.9"
        }
        _ => "name = \"sgd\"\nbase_lr = 0.1\nmomentum = 0.9",
    };
    let cfg_text = format!(
        r#"
description = "bench"
[system]
submission_org = "bench"
submission_platform = "bench"
submission_status = "research"
threads = {threads}
time_limit_minutes = 60.0
[model]
classes = {classes}
width = {width}
blocks = {blocks:?}
[data]
source = "synthetic-memory"
train_image_size = {size}
eval_image_size = {size}
[data.synthetic]
train_per_class = {batch}
eval_per_class = 1
noise = 0.0
[train]
target = 0.999
global_batch_size = {batch}
gradient_accumulation_steps = 1
max_epochs = 2
eval_offset = 0
eval_period = 1
[optimizer]
{optimizer}
end_lr = 0.0001
warmup_epochs = 0.0
decay = "poly"
schedule_epochs = 2.0
weight_decay = 0.00005
"#,
        threads = a.threads,
        width = a.width,
        blocks = a.blocks,
    );
    let mut cfg = ResnetRunConfig::parse(&cfg_text, Division::Open)?;
    // the methods whole, as `mlperf-run resnet` takes them from [methods]; a CPU runs the CUDA
    // graph's twin (below) instead of the graph
    cfg.methods = ResnetMethods {
        cuda_graph: a.methods.cuda_graph && a.device.is_cuda(),
        ..a.methods.clone()
    };
    cfg.validate(Division::Open)?;
    let mut w = ResnetWorkload::new(cfg, Division::Open, Box::new(data));
    let dir = std::env::temp_dir().join(format!("mlperf-run-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut opts = RunOptions::new(
        a.device,
        Submission {
            org: "bench".into(),
            platform: "bench".into(),
            division: "open".into(),
            status: "research".into(),
        },
    );
    opts.seed = Some(1);
    opts.log_path = Some(dir.join("bench_log.txt"));
    opts.distributed_from_env = false;
    if a.methods.cuda_graph && !a.device.is_cuda() {
        opts.test_hooks.emulate_cuda_graph =
            Some(mlperf_run::gpu::cuda_graph::DEFAULT_WARMUP_STEPS);
    }
    let out = engine::run_once(&mut w, opts)?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.losses.iter().all(|l| l.is_finite()) {
        bail!("non-finite loss in the benchmark");
    }
    Ok((out, w.timing(), w.graph_stats()))
}
