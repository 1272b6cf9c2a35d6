//! Benchmark b: one ResNet training step on CPU through our trainer (engine + ResNet workload
//! + MLPerf logging to a file), on fixed pre-made u8 batches so the data pipeline's own speed
//! is out of the picture. Prints one JSON line: steps/s and where the step time went.
//!
//! cargo run --release --example resnet_bench_step -- [--batch 8] [--size 112] [--steps 30]
//!     [--warmup 5] [--threads 2] [--width 64] [--blocks 3,4,6,3] [--classes 1000]

use anyhow::{Context, Result};
use mlperf_run::data::rng::Rng;
use mlperf_run::train::config::{Division, ResnetRunConfig};
use mlperf_run::train::data::{Batch, BatchIter, ImageData, Shard};
use mlperf_run::train::engine::{self, RunOptions, Submission};
use mlperf_run::train::resnet::ResnetWorkload;

/// The same pre-made batch every step (a memcpy per batch, like a prefetch queue hand-off).
struct FixedImages {
    classes: usize,
    len: usize,
    batch: Batch,
}

impl ImageData for FixedImages {
    fn num_classes(&self) -> usize {
        self.classes
    }
    fn train_len(&self) -> usize {
        self.len
    }
    fn eval_len(&self) -> usize {
        self.batch.len()
    }
    fn train_epoch(
        &self,
        _e: u64,
        _size: usize,
        batch: usize,
        _seed: u64,
        _s: Shard,
    ) -> Result<BatchIter> {
        let b = self.batch.clone();
        Ok(Box::new((0..self.len / batch).map(move |_| Ok(b.clone()))))
    }
    fn eval(&self, _size: usize, _batch: usize, _s: Shard) -> Result<BatchIter> {
        Ok(Box::new(std::iter::once(Ok(self.batch.clone()))))
    }
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let batch: usize = arg(&args, "--batch", 8);
    let size: usize = arg(&args, "--size", 112);
    let steps: usize = arg(&args, "--steps", 30);
    let warmup: usize = arg(&args, "--warmup", 5);
    let threads: i32 = arg(&args, "--threads", 2);
    let width: i64 = arg(&args, "--width", 64);
    let classes: usize = arg(&args, "--classes", 1000);
    let blocks: String = arg(&args, "--blocks", "3,4,6,3".to_string());
    let blocks: Vec<i64> = blocks
        .split(',')
        .map(|b| b.parse())
        .collect::<Result<_, _>>()
        .context("--blocks")?;
    tch::set_num_threads(threads);

    let (out, t) = bench_once(
        warmup + steps,
        batch,
        size,
        threads,
        width,
        classes,
        &blocks,
    )?;
    // steady state: the steps after the warm-up ones, as the PyTorch peer measures, plus the
    // trainer's own overhead share (hand-off, loop, logging) over the whole run
    let overhead = (out.train_seconds - t.compute) / out.train_seconds;
    let timed = &out.step_times[warmup.min(out.step_times.len() - 1)..];
    let per_step_compute = timed.iter().sum::<f64>() / timed.len() as f64;
    let per_step_total =
        per_step_compute / (1.0 - (out.train_seconds - out.step_seconds) / out.train_seconds);
    let handoff = t.handoff / out.train_seconds;
    let loop_other = (out.train_seconds - out.step_seconds) / out.train_seconds;
    println!(
        "{}",
        serde_json::json!({
            "impl": "mlperf-run", "steps": out.steps, "threads": threads, "batch": batch, "size": size,
            "steps_per_s": 1.0 / per_step_total,
            "train_step_call_per_s": 1.0 / per_step_compute,
            "overhead_pct": 100.0 * overhead,
            "handoff_pct": 100.0 * handoff,
            "data_wait_pct": 100.0 * t.data_wait / out.train_seconds,
            "loop_and_logging_pct": 100.0 * loop_other,
            "losses_first_last": [out.losses.first(), out.losses.last()],
        })
    );
    Ok(())
}

fn bench_once(
    total_steps: usize,
    batch: usize,
    size: usize,
    threads: i32,
    width: i64,
    classes: usize,
    blocks: &[i64],
) -> Result<(engine::RunOutcome, mlperf_run::train::resnet::StepTiming)> {
    let mut rng = Rng::from_state(1);
    let images: Vec<u8> = (0..batch * size * size * 3)
        .map(|_| rng.next_u64() as u8)
        .collect();
    let labels: Vec<i64> = (0..batch)
        .map(|_| rng.below(classes as u64) as i64)
        .collect();
    let data = FixedImages {
        classes,
        len: batch * total_steps,
        batch: Batch {
            images,
            labels,
            height: size,
            width: size,
        },
    };

    let cfg_text = format!(
        r#"
description = "bench"
[system]
submission_org = "bench"
submission_platform = "cpu"
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
train_per_class = 1
eval_per_class = 1
noise = 0.0
[train]
target = 0.999
global_batch_size = {batch}
gradient_accumulation_steps = 1
max_epochs = 1
eval_offset = 0
eval_period = 1
[optimizer]
name = "sgd"
base_lr = 0.1
end_lr = 0.0001
warmup_epochs = 0.0
decay = "poly"
schedule_epochs = 1.0
momentum = 0.9
weight_decay = 0.00005
"#
    );
    let cfg = ResnetRunConfig::parse(&cfg_text, Division::Open)?;
    let mut w = ResnetWorkload::new(cfg, Division::Open, Box::new(data));
    let dir = std::env::temp_dir().join(format!("mlperf-run-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut opts = RunOptions::new(
        tch::Device::Cpu,
        Submission {
            org: "bench".into(),
            platform: "cpu".into(),
            division: "open".into(),
            status: "research".into(),
        },
    );
    opts.seed = Some(1);
    opts.log_path = Some(dir.join("bench_log.txt"));
    let out = engine::run_once(&mut w, opts)?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.losses.iter().all(|l| l.is_finite()) {
        anyhow::bail!("non-finite loss in the benchmark");
    }
    Ok((out, w.timing()))
}
