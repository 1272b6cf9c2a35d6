//! No host sync inside a block of steps: a tiny ResNet run reads step losses back once per
//! `loss_check_steps` steps (the engine's batched reads), and nothing else in a training step
//! reads a device value on the host. Reads are counted by a libtorch RecordFunction callback
//! (`train::host_reads`: item / double_value / int64_value / bool conversions); a control run
//! that reads its loss every step shows the counter sees such reads.
//!
//! The counter counts every thread of the process, and the other modules of this test binary
//! train on parallel threads of the same process: each test here runs in a process of its own
//! (`common::alone`).
#![cfg(feature = "torch")]

use crate::common;
use crate::common::alone::run_alone;

use mlperf_run::distributed::{GradSync, Peers};
use mlperf_run::rules::Division;
use mlperf_run::train::engine::{self, Block, BuildContext, Workload};
use mlperf_run::train::host_reads;
use mlperf_run::train::resnet::config::ResnetRunConfig;
use mlperf_run::train::resnet::data::SyntheticImages;
use mlperf_run::train::resnet::ResnetWorkload;
use serde_json::Value;
use std::path::PathBuf;

/// A workload that reads its loss on the host every step (what the trainer must not do).
struct ReadsEveryStep(ResnetWorkload);

impl Workload for ReadsEveryStep {
    fn benchmark(&self) -> &'static str {
        self.0.benchmark()
    }
    fn hyperparameters(&self) -> Vec<(&'static str, Value)> {
        self.0.hyperparameters()
    }
    fn build(&mut self, ctx: &BuildContext) -> anyhow::Result<()> {
        self.0.build(ctx)
    }
    fn blocks(&self) -> anyhow::Result<Vec<Block>> {
        self.0.blocks()
    }
    fn start_block(&mut self, block: &Block) -> anyhow::Result<u64> {
        self.0.start_block(block)
    }
    fn samples_per_step(&self) -> u64 {
        self.0.samples_per_step()
    }
    fn train_step(&mut self, sync: &mut dyn GradSync) -> anyhow::Result<tch::Tensor> {
        let loss = self.0.train_step(sync)?;
        let _ = loss.double_value(&[]);
        Ok(loss)
    }
    fn evaluate(&mut self, peers: &mut dyn Peers) -> anyhow::Result<f64> {
        self.0.evaluate(peers)
    }
    fn target(&self) -> f64 {
        self.0.target()
    }
}

fn tiny() -> ResnetRunConfig {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu.toml");
    let mut cfg = ResnetRunConfig::load(&path, Division::Closed).unwrap();
    cfg.train.target = 0.999; // train every epoch: more steps to count
    cfg.train.max_epochs = 4;
    cfg
}

fn workload(cfg: &ResnetRunConfig) -> ResnetWorkload {
    let s = cfg.data.synthetic.as_ref().unwrap();
    let data = SyntheticImages::new(
        cfg.model.classes as usize,
        s.train_per_class,
        s.eval_per_class,
        s.noise,
    );
    ResnetWorkload::new(cfg.clone(), Division::Closed, Box::new(data))
}

/// The counter is process-wide: the tests of this file count one at a time (each in a process
/// of its own, where nothing else runs).
static COUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// (outcome, host reads counted during the run)
fn counted(
    w: &mut dyn Workload,
    cfg: &ResnetRunConfig,
    check_every: u64,
) -> (engine::RunOutcome, i64) {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = common::train::cpu_run_options(
        &cfg.system,
        Division::Closed,
        3,
        &dir.path().join("log.txt"),
    );
    opts.loss_check_steps = check_every;
    opts.distributed_from_env = false;
    let _one_at_a_time = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    host_reads::install().unwrap();
    let before = host_reads::count();
    let out = engine::run_once(w, opts).unwrap();
    (out, host_reads::count() - before)
}

#[test]
fn a_block_of_steps_reads_losses_once_per_check_interval() {
    run_alone!();
    let cfg = tiny();
    let n = 4u64;
    let (out, reads) = counted(&mut workload(&cfg), &cfg, n);
    let steps = out.steps as i64;
    let evals = out.evals.len() as i64;
    assert!(steps >= 4 * n as i64, "too few steps to tell ({steps})");
    assert_eq!(
        out.losses.len() as i64,
        steps,
        "every step's loss is still recorded"
    );
    // the engine's batched reads: at most one per n steps plus one per block end
    let bound = steps / n as i64 + evals;
    assert!(
        (out.loss_reads as i64) <= bound,
        "{} loss reads for {steps} steps (interval {n}, {evals} blocks)",
        out.loss_reads
    );
    // nothing else reads a device value inside the steps: one read per eval (its count) only
    eprintln!(
        "{steps} steps, {evals} evals: {reads} host reads counted, {} batched loss reads",
        out.loss_reads
    );
    assert!(
        reads <= evals + 2,
        "{reads} host reads of device values in a run of {steps} steps and {evals} evals"
    );
}

#[test]
fn the_counter_sees_a_read_per_step() {
    run_alone!();
    // control: the same run with a workload that reads its loss every step must count them
    let cfg = tiny();
    let (out, reads) = counted(&mut ReadsEveryStep(workload(&cfg)), &cfg, 4);
    assert!(
        reads >= out.steps as i64,
        "a read per step was not counted: {reads} reads for {} steps",
        out.steps
    );
}
