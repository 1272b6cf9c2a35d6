//! The generic trainer: one MLPerf run of any [`Workload`], logging exactly what the rules ask.
//!
//! ```text
//! cache clear (logged true/false) -> init_start -> submission_* -> seed -> hyperparameters
//! -> build model, optimizer, data -> init_stop -> run_start
//! -> blocks: block_start, steps, block_stop, tracked_stats, eval_start, eval_accuracy, eval_stop
//! -> run_stop (success at target; aborted on NaN, epoch/time limit or error)
//! ```
//! Errors after the log is open still end it with `run_stop` aborted (the error goes in the
//! run_stop metadata and in the outcome's [`Status::Aborted`]).

use crate::distributed::{GradSync, NoSync, Peers};
use crate::gpu::cuda_graph::{CaptureFailed, CapturePeers, StepGraphs};
use crate::meta;
use crate::mllog::{keys, Emitter, Sink};
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Instant;

/// Facts a workload gets when it builds.
pub struct BuildContext {
    pub seed: u64,
    pub device: tch::Device,
    pub rank: usize,
    pub world_size: usize,
    /// Run the steps through the CPU twin of `methods.cuda_graph` with this many warm-up steps
    /// per shape ([`crate::gpu::cuda_graph::StepGraphs::emulated`]; tests, `--emulate-cuda-graph`).
    pub emulate_cuda_graph: Option<u32>,
    /// Make this rank's CUDA graph captures fail (tests; `MLPERF_RUN_INJECT_FAULT=capture:RANK`).
    pub fail_captures: bool,
    /// The multi-process test modes this process runs in ([`crate::distributed::TestMode`]).
    pub test_mode: crate::distributed::TestMode,
}

impl BuildContext {
    /// The run's step graphs ([`StepGraphs::for_run`]) for a workload whose config says
    /// `cuda_graph`.
    pub fn step_graphs(&self, cuda_graph: bool) -> Result<Option<StepGraphs>> {
        self.test_mode
            .check_cuda_graph(self.device, self.world_size, cuda_graph)?;
        let graphs = StepGraphs::for_run(
            cuda_graph,
            self.emulate_cuda_graph,
            self.device,
            self.world_size,
        )?;
        Ok(match graphs {
            Some(g) if self.fail_captures => Some(g.fail_captures()),
            other => other,
        })
    }
}

/// The gradient exchange is how a rank hears of the others' captures (on the host, through
/// the group's store).
impl CapturePeers for dyn GradSync + '_ {
    fn before_capture(&mut self, device: tch::Device) -> Result<()> {
        // a capture begins with a device synchronize, which no watchdog covers: the replays
        // queued before it (a new shape mid-run) may wait for a dead peer
        wait_for_device_or_abandon(self, device, "the steps queued before a CUDA graph capture")
    }
    fn capture_failures(&mut self, failure: Option<&str>) -> Result<Vec<(usize, String)>> {
        self.share_failures(failure)
    }
}

/// A training block: `epoch_count` epochs (or samples) from `first_epoch_num`, then an eval
/// logged at `eval_epoch_num`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub first_epoch_num: u64,
    pub epoch_count: u64,
    pub eval_epoch_num: u64,
}

/// What a benchmark supplies to the trainer.
pub trait Workload {
    /// `submission_benchmark`.
    fn benchmark(&self) -> &'static str;
    /// Hyperparameter keys to log before init_stop, from the loaded config.
    fn hyperparameters(&self) -> Vec<(&'static str, Value)>;
    /// Process-wide settings (CPU binding, libtorch's threads, the device's switches), applied
    /// once the run's device is known and before the process group starts its threads, so
    /// that they and NCCL's placement see the binding.
    fn configure_process(&self, _device: tch::Device) -> Result<()> {
        Ok(())
    }
    /// Build model, optimizer and data (untimed init). Weights are seeded by the trainer
    /// (`tch::manual_seed(seed)`) just before this call.
    fn build(&mut self, ctx: &BuildContext) -> Result<()>;
    /// The training blocks up to the epoch (or sample) limit, in order; an error (a config
    /// that gives no blocks) ends the run as aborted with that error, named.
    fn blocks(&self) -> Result<Vec<Block>>;
    /// Prepare `block`; returns its number of optimizer steps.
    fn start_block(&mut self, block: &Block) -> Result<u64>;
    /// Training samples per optimizer step over all processes (the global batch size): the
    /// block's `tracked_stats` throughput is steps x this / training seconds.
    fn samples_per_step(&self) -> u64;
    /// The training samples seen so far over all processes, where a step's count varies (BERT
    /// with packed sequences: a step has a fixed number of rows, each of one to three
    /// sequences). Then the log's `epoch_num` / `first_epoch_num` and the throughput count these
    /// rather than the planned blocks' steps x [`Self::samples_per_step`]. None (the default):
    /// every step is `samples_per_step` samples.
    fn samples_trained(&self) -> Option<u64> {
        None
    }
    /// One optimizer step (all its micro-batches); returns the step's loss as a 0-dim tensor
    /// on the training device, not read back: the trainer reads losses in batches at its own
    /// cadence so that the host never waits for the device inside a block of steps.
    fn train_step(&mut self, sync: &mut dyn GradSync) -> Result<tch::Tensor>;
    /// Evaluate; returns the accuracy (a fraction), reduced across ranks.
    fn evaluate(&mut self, peers: &mut dyn Peers) -> Result<f64>;
    /// The accuracy at which the run succeeds.
    fn target(&self) -> f64;
    /// Every parameter and buffer, in the same order on every rank: rank 0's values are
    /// broadcast to the other ranks after `build`.
    fn state_tensors(&self) -> Vec<tch::Tensor> {
        Vec::new()
    }
    /// The batch one process trains on per optimizer step (all its micro-batches), for
    /// messages such as the out-of-memory advice.
    fn per_process_batch(&self) -> Option<u64> {
        None
    }
    /// The trainable parameters by name (for `RunOptions::dump_params`).
    fn named_parameters(&self) -> Vec<(String, tch::Tensor)> {
        Vec::new()
    }
    /// Drop the run's CUDA graphs (called when the run ends, before the process group is shut
    /// down: NCCL does not destroy a communicator while a graph that captured its collectives
    /// exists, so the shutdown would hang).
    fn release_step_graphs(&mut self) {}
}

/// Submission identity logged by every run.
#[derive(Debug, Clone)]
pub struct Submission {
    pub org: String,
    pub platform: String,
    pub division: String,
    pub status: String,
}

/// How one run is carried out (beyond the workload's own config).
pub struct RunOptions {
    /// The run's seed; None draws one from the OS.
    pub seed: Option<u64>,
    /// Where the MLPerf log goes (appended, flushed per line); None: standard output.
    pub log_path: Option<PathBuf>,
    pub device: tch::Device,
    pub submission: Submission,
    /// Shell command that drops caches before the run; None: no cache clear (logged false).
    pub cache_clear_command: Option<String>,
    pub time_limit: Option<std::time::Duration>,
    /// A loss above this (or non-finite) aborts the run as diverged.
    pub divergence_loss: f64,
    /// Step losses stay on the device and are read back (one read for all pending steps)
    /// every this many steps and at the end of each block; the divergence check and the
    /// ranks' stop agreement happen at those reads. Default 8.
    pub loss_check_steps: u64,
    pub grad_sync: Box<dyn GradSync>,
    /// Extra sink for the log (e.g. echo to stdout); tests use memory sinks.
    pub extra_sinks: Vec<Sink>,
    /// Join a data-parallel process group when the environment describes one
    /// ([`crate::distributed::Rendezvous::from_env`]: `mlperf-run launch`, torchrun, Slurm) and
    /// `grad_sync` is single-process. Default true.
    pub distributed_from_env: bool,
    /// The recipe applied to the config (`--recipe`), logged as `recipe` after the
    /// hyperparameters.
    pub recipe: Option<String>,
    /// What tests (and the hidden CLI flags) ask of a run beyond training it.
    pub test_hooks: TestHooks,
}

/// The hooks tests use, in one place (the CLI's hidden flags and `MLPERF_RUN_INJECT_FAULT`
/// set them too): none changes what a run computes unless asked.
#[derive(Debug, Clone, Default)]
pub struct TestHooks {
    /// Make a libtorch op fail inside training step N (1-based): a check that errors inside a
    /// step end the run as aborted (`MLPERF_RUN_INJECT_FAULT=step:N` on the CLI).
    pub inject_fault_at_step: Option<u64>,
    /// Make the CUDA graph captures fail on this rank (how the other ranks end;
    /// `MLPERF_RUN_INJECT_FAULT=capture:RANK` on the CLI).
    pub inject_capture_failure_on_rank: Option<usize>,
    /// Write the final trainable parameters (safetensors) here when the run ends without an
    /// error (aborted runs included); ranks other than 0 write `<path>.rank<r>` (the hidden
    /// `--dump-params`).
    pub dump_params: Option<PathBuf>,
    /// Train through the CPU twin of `methods.cuda_graph` (warm-up steps per shape): the
    /// graphs' static buffers and step sequence on machines without a GPU (the hidden
    /// `--emulate-cuda-graph N`).
    pub emulate_cuda_graph: Option<u32>,
}

impl RunOptions {
    pub fn new(device: tch::Device, submission: Submission) -> RunOptions {
        RunOptions {
            seed: None,
            log_path: None,
            device,
            submission,
            cache_clear_command: None,
            time_limit: None,
            divergence_loss: 1e4,
            loss_check_steps: 8,
            grad_sync: Box::new(NoSync::default()),
            extra_sinks: Vec::new(),
            distributed_from_env: true,
            recipe: None,
            test_hooks: TestHooks::default(),
        }
    }
}

pub use crate::runs::{RunOutcome, Status};

fn open_log(opts: &mut RunOptions, rank: usize) -> Result<Emitter> {
    let mut sinks = std::mem::take(&mut opts.extra_sinks);
    if rank != 0 {
        return Ok(Emitter::null());
    }
    match &opts.log_path {
        Some(p) => sinks.push(
            Sink::file(p, false).with_context(|| format!("cannot open log {}", p.display()))?,
        ),
        None if sinks.is_empty() => sinks.push(Sink::Stdout),
        None => {}
    }
    Ok(Emitter::new(sinks))
}

/// Runs `system.cache_clear_command` (none or blank: nothing, `false`); an error names the
/// command and the fix. Each run calls it at its start; the run set once more before the
/// first run, so a failing command is refused before any log is written.
pub fn clear_caches(cmd: Option<&str>) -> Result<bool> {
    let Some(cmd) = cmd.filter(|c| !c.trim().is_empty()) else {
        return Ok(false);
    };
    let status = std::process::Command::new("sh")
        .args(["-c", cmd])
        .status()
        .with_context(|| format!("cannot run the cache clear command `{cmd}`"))?;
    if !status.success() {
        anyhow::bail!("the cache clear command `{cmd}` failed ({status}); fix it or set system.cache_clear_command = \"\"");
    }
    Ok(true)
}

/// Log the run's seed. One call site on purpose: the closed seed rule compares the
/// file/lineno of `seed` events across the runs of a set.
fn log_seed(log: &mut Emitter, seed: u64) -> std::io::Result<()> {
    log.event(keys::SEED, seed)
}

/// Log a block's training throughput after its block_stop, as the record holders' logs do
/// (NVIDIA's BERT: `tracked_stats` {"throughput": seq/s}): `{"throughput": samples / seconds}`
/// in samples per second (ResNet: images/s, BERT: sequences/s) of the block's training part
/// (block_start to its last loss read; the eval is not in it), metadata `step` = the block's
/// first_epoch_num (ResNet: its first epoch; BERT: samples trained before it). One call site,
/// so file/lineno are the same in every run. Nothing is logged for a block without a step.
fn log_block_throughput(
    log: &mut Emitter,
    block: &Block,
    samples: u64,
    seconds: f64,
) -> std::io::Result<()> {
    if samples == 0 || seconds.is_nan() || seconds <= 0.0 {
        return Ok(());
    }
    log.event_with(
        keys::TRACKED_STATS,
        Value::Object(
            std::iter::once((
                keys::THROUGHPUT.to_string(),
                json!(samples as f64 / seconds),
            ))
            .collect(),
        ),
        meta! {"step" => block.first_epoch_num},
    )
}

/// The abort reason of a run cut by Ctrl-C (or SIGTERM) on any rank: it did not end on its
/// own merits, so its set stops and `--resume` runs it again.
pub const INTERRUPTED: &str = "interrupted";

/// Carry out one run of `w`.
pub fn run_once(w: &mut dyn Workload, mut opts: RunOptions) -> Result<RunOutcome> {
    super::allocator::keep_freed_host_memory();
    let seed = match opts.seed {
        Some(s) => s,
        None => crate::runs::os_seed(&Default::default())?,
    };
    // a multi-process environment: the rank decides who logs; the group itself is formed
    // after the log is open, so a failed rendezvous still ends rank 0's log as aborted
    let test_mode = crate::distributed::TestMode::from_env()?;
    let rendezvous = if opts.distributed_from_env && opts.grad_sync.world_size() == 1 {
        crate::distributed::Rendezvous::from_env()?
            .filter(|r| test_mode.forms_group(r.world_size))
            .map(|r| (r, test_mode))
    } else {
        None
    };
    let rank = match &rendezvous {
        Some((r, _)) => r.rank,
        None => opts.grad_sync.rank(),
    };
    let mut log = open_log(&mut opts, rank)?;
    let mut out = RunOutcome {
        log_path: opts.log_path.clone(),
        ..RunOutcome::new(seed, Status::Aborted("not started".into()))
    };
    let mut run_start: Option<Instant> = None;
    // a libtorch error inside tch's panicking API (CUDA out of memory, a bad device) becomes an
    // error like any other: the run ends aborted with the cause, the set goes on
    let result = crate::util::libtorch_errors::catching(|| {
        run_inner(
            w,
            &mut opts,
            rendezvous,
            &mut log,
            seed,
            &mut out,
            &mut run_start,
        )
    });
    // a CUDA graph capture that failed on a device, on this rank (true) or another
    let capture = result
        .as_ref()
        .err()
        .and_then(|e| e.downcast_ref::<CaptureFailed>())
        .map(|c| (c.this_rank, c.to_string()));
    // a peer that died, was cut off or never came: the set cannot go on in this process
    let group_failure = result
        .as_ref()
        .err()
        .and_then(|e| e.downcast_ref::<crate::distributed::GroupFailure>())
        .map(|p| p.to_string());
    let result = result.map_err(|e| {
        crate::util::libtorch_errors::advise(e, w.per_process_batch(), opts.grad_sync.world_size())
    });
    // before `opts` (and its process group) goes at the end of this function
    w.release_step_graphs();
    if matches!(capture, Some((true, _))) {
        // the failed capture may have recorded collectives that will never run: the group is
        // aborted when it goes, not shut down (a shutdown would wait for them)
        opts.grad_sync.abandon();
    }
    out.run_seconds = run_start.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0);
    let stop_meta = match &result {
        Ok(()) => match &out.status {
            Status::Success => meta! {"status" => keys::STATUS_SUCCESS},
            Status::Aborted(why) => {
                meta! {"status" => keys::STATUS_ABORTED, "reason" => why.clone()}
            }
        },
        Err(e) => {
            out.status = Status::Aborted(format!("error: {e:#}"));
            meta! {"status" => keys::STATUS_ABORTED, "reason" => format!("error: {e:#}")}
        }
    };
    if let Err(e) = &result {
        tracing::error!("rank {rank}: run aborted: {e:#}");
    }
    log.end(keys::RUN_STOP, Value::Null, stop_meta)
        .context("cannot write run_stop to the log")?;
    out.stop_set = why_the_run_was_cut(rank, capture, group_failure, &out.status);
    if let Some(path) = &opts.test_hooks.dump_params {
        match &result {
            Ok(()) => dump_params(w, path, rank)?,
            // the device may be stuck (a dead peer's collectives) or broken: reading the
            // parameters back could wait forever
            Err(_) => tracing::warn!(
                "rank {rank}: the run ended with an error: its parameters are not written to {}",
                path.display()
            ),
        }
    }
    // an error is recorded in the log and the outcome; the caller decides what it means
    Ok(out)
}

/// The final trainable parameters as safetensors (`<path>.rank<r>` on ranks other than 0).
fn dump_params(w: &dyn Workload, path: &std::path::Path, rank: usize) -> Result<()> {
    let path = if rank == 0 {
        path.to_path_buf()
    } else {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".rank{rank}"));
        PathBuf::from(p)
    };
    let named = w.named_parameters();
    if named.is_empty() {
        anyhow::bail!("this workload has no parameters to dump (not built?)");
    }
    let named: Vec<(String, tch::Tensor)> = named
        .into_iter()
        .map(|(n, t)| (n, t.detach().to_device(tch::Device::Cpu)))
        .collect();
    tch::Tensor::write_safetensors(&named, &path)
        .with_context(|| format!("cannot write the parameters to {}", path.display()))
}

/// Before a loss read in a data-parallel GPU run: the device must finish the `steps` queued
/// steps within the group's timeout. NCCL's watchdog times eager collectives out, but not those
/// replayed from a CUDA graph; without this, a dead peer would hold every other rank in the
/// blocking read below forever. On timeout the group is abandoned (aborted when the run ends,
/// which also frees the device) and the run ends with an error.
fn wait_for_peers(opts: &mut RunOptions, steps: usize) -> Result<()> {
    wait_for_device_or_abandon(
        opts.grad_sync.as_mut(),
        opts.device,
        &format!("the last {steps} steps"),
    )
}

/// In a data-parallel GPU run, the device must finish its queued work (`what`) within the
/// group's timeout; else the group is abandoned and the run ends with an error.
fn wait_for_device_or_abandon(sync: &mut dyn Peers, device: tch::Device, what: &str) -> Result<()> {
    let Some(timeout) = sync.peer_timeout() else {
        return Ok(());
    };
    if !device.is_cuda() || crate::gpu::cuda::wait_for_device(device, timeout)? {
        return Ok(());
    }
    sync.abandon();
    Err(crate::distributed::GroupFailure::new(format!(
        "rank {}: the GPU did not finish {what} within the process group's timeout of {:.0} s \
         (MLPERF_RUN_DIST_TIMEOUT_S): a peer process probably died or stopped while the step's \
         all-reduces waited for it; the group is aborted and this run ends",
        sync.rank(),
        timeout.as_secs_f64()
    ))
    .into())
}

/// The losses of `pending` steps in one device-to-host read.
fn read_losses(pending: &[tch::Tensor]) -> Result<Vec<f64>> {
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let all = tch::Tensor::f_stack(pending, 0)?
        .f_to_kind(tch::Kind::Double)?
        .f_to_device(tch::Device::Cpu)?;
    Ok(Vec::<f64>::try_from(all.flatten(0, -1))?)
}

/// Rank 0's seed on every rank (a seed drawn from the OS differs per process): weights start
/// from the same seed everywhere and each rank derives its data stream from (seed, rank).
fn agree_on_seed(sync: &mut dyn Peers, seed: u64) -> Result<u64> {
    if sync.world_size() == 1 {
        return Ok(seed);
    }
    // two 32-bit halves: exact in f64
    let mut v = if sync.rank() == 0 {
        [(seed >> 32) as f64, (seed & 0xffff_ffff) as f64]
    } else {
        [0.0, 0.0]
    };
    sync.all_reduce_sum(&mut v)
        .context("sharing rank 0's seed")?;
    Ok(((v[0] as u64) << 32) | v[1] as u64)
}

/// Joins the process group `rdv` describes on `device` (this rank's own): Gloo on CPU, NCCL on
/// CUDA (Gloo where ranks share a GPU in a test mode), with the timeouts of the environment
/// (MLPERF_RUN_RENDEZVOUS_TIMEOUT_S, MLPERF_RUN_DIST_TIMEOUT_S), which it logs.
fn join_group(
    rdv: &crate::distributed::Rendezvous,
    device: tch::Device,
    test_mode: crate::distributed::TestMode,
) -> Result<Box<dyn GradSync>> {
    use crate::distributed::{overlap_from_env, BucketedGradSync, ProcessGroup, Timeouts};
    let timeouts = Timeouts::from_env()?;
    let backend = test_mode.backend(device);
    tracing::info!(
        "rank {} of {}: joining the {} process group at {}:{} (rendezvous timeout {} s, \
         collective timeout {} s)",
        rdv.rank,
        rdv.world_size,
        backend.name(),
        rdv.master_addr,
        rdv.master_port,
        timeouts.rendezvous.as_secs_f64(),
        timeouts.collective.as_secs_f64()
    );
    let pg = ProcessGroup::new(rdv, backend, device, timeouts)?;
    tracing::info!(
        "rank {} of {}: joined the {} process group",
        pg.rank(),
        pg.size(),
        pg.backend().name()
    );
    Ok(Box::new(
        BucketedGradSync::with_default_buckets(pg).with_overlap(overlap_from_env()?),
    ))
}

/// Why the run was cut rather than ended on its own merits (see `RunOutcome::stop_set`), said
/// in the log: a failed CUDA graph capture (this rank's or another's), a process group that
/// could not form or failed, an interrupt on any rank.
fn why_the_run_was_cut(
    rank: usize,
    capture: Option<(bool, String)>,
    group_failure: Option<String>,
    status: &Status,
) -> Option<String> {
    if let Some((this_rank, why)) = capture {
        return Some(stop_after_failed_capture(rank, this_rank, why));
    }
    if let Some(why) = group_failure {
        tracing::error!(
            "rank {rank}: the set stops on every rank (a peer failed or could not be reached): \
             run the same command with --resume once every node is back"
        );
        return Some(why);
    }
    match status {
        Status::Aborted(why) if why == INTERRUPTED => Some(why.clone()),
        _ => None,
    }
}

/// Why the set stops after a run whose CUDA graph capture failed on a device, logged. This
/// rank's: the process cannot train again (crate::gpu::cuda_graph::failed_capture), its set
/// stops here as if interrupted and resumes with its next run in a new process. Another rank's:
/// the failed rank stops its set, this one stops with it (its next run could not form a group
/// without that rank), and they resume together.
fn stop_after_failed_capture(rank: usize, this_rank: bool, why: String) -> String {
    if this_rank {
        tracing::error!(
            "rank {rank}: a CUDA graph capture failed ({why}); libtorch keeps its allocator \
             and random generator in capture state after that, so this process stops after \
             this run: run the same command again to resume the set (with \
             methods.cuda_graph = false if the step cannot be captured)"
        );
        format!("a CUDA graph capture failed on rank {rank}: {why}")
    } else {
        tracing::error!(
            "rank {rank}: {why}; the set stops on every rank: run the same command again to \
             resume it"
        );
        why
    }
}

fn run_inner(
    w: &mut dyn Workload,
    opts: &mut RunOptions,
    rendezvous: Option<(crate::distributed::Rendezvous, crate::distributed::TestMode)>,
    log: &mut Emitter,
    seed: u64,
    out: &mut RunOutcome,
    run_start: &mut Option<Instant>,
) -> Result<()> {
    init(w, opts, rendezvous, log, seed, out)?;
    log.start(keys::RUN_START, Value::Null, meta! {})?;
    let started = Instant::now();
    *run_start = Some(started);
    let target = w.target();
    for planned in w.blocks()? {
        // the samples seen where the workload counts them (packed sequences), else the plan
        let mut block = planned;
        if let Some(seen) = w.samples_trained() {
            block.first_epoch_num = seen;
        }
        if let Some(reason) = train_block(w, opts, log, &block, started, out)? {
            out.status = Status::Aborted(reason);
            return Ok(());
        }
        if let Some(seen) = w.samples_trained() {
            block.eval_epoch_num = seen;
        }
        let acc = eval_block(w, opts, log, &block)?;
        out.evals.push((block.eval_epoch_num, acc));
        tracing::info!("epoch {}: eval accuracy {acc:.4}", block.eval_epoch_num);
        if acc >= target {
            out.status = Status::Success;
            return Ok(());
        }
    }
    out.status = Status::Aborted("epoch limit reached before the target".into());
    Ok(())
}

/// The untimed part, cache clear to init_stop: the submission keys, the process group, the
/// seed every rank agrees on, the model built from it (rank 0's weights broadcast) and the
/// hyperparameters.
fn init(
    w: &mut dyn Workload,
    opts: &mut RunOptions,
    rendezvous: Option<(crate::distributed::Rendezvous, crate::distributed::TestMode)>,
    log: &mut Emitter,
    seed: u64,
    out: &mut RunOutcome,
) -> Result<()> {
    let cleared = clear_caches(opts.cache_clear_command.as_deref())?;
    log.event(keys::CACHE_CLEAR, cleared)?;
    log.start(keys::INIT_START, Value::Null, meta! {})?;
    let s = &opts.submission;
    log.event(keys::SUBMISSION_BENCHMARK, w.benchmark())?;
    log.event(keys::SUBMISSION_ORG, s.org.as_str())?;
    log.event(keys::SUBMISSION_DIVISION, s.division.as_str())?;
    log.event(keys::SUBMISSION_STATUS, s.status.as_str())?;
    log.event(keys::SUBMISSION_PLATFORM, s.platform.as_str())?;
    let test_mode = rendezvous.as_ref().map(|(_, m)| *m).unwrap_or_default();
    if let Some((rdv, _)) = &rendezvous {
        if opts.device.is_cuda() {
            opts.device =
                test_mode.rank_device(opts.device, rdv.local_rank, tch::Cuda::device_count())?;
        }
        if let Some(warning) = test_mode.warning() {
            tracing::warn!("{warning}");
        }
    }
    w.configure_process(opts.device)?;
    if let Some((rdv, _)) = &rendezvous {
        opts.grad_sync = join_group(rdv, opts.device, test_mode)?;
    }
    let seed = agree_on_seed(opts.grad_sync.as_mut(), seed)?;
    out.seed = seed;
    log_seed(log, seed)?;

    let ctx = BuildContext {
        seed,
        device: opts.device,
        rank: opts.grad_sync.rank(),
        world_size: opts.grad_sync.world_size(),
        emulate_cuda_graph: opts.test_hooks.emulate_cuda_graph,
        fail_captures: opts.test_hooks.inject_capture_failure_on_rank
            == Some(opts.grad_sync.rank()),
        test_mode,
    };
    {
        // libtorch's generator is process-global: hold it while seeding and drawing the
        // initial weights so concurrent runs in one process (tests) cannot interleave draws
        static INIT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _guard = INIT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        tch::manual_seed(seed as i64);
        w.build(&ctx)?;
    }
    if opts.grad_sync.world_size() > 1 {
        // every rank drew the same weights from the same seed; rank 0's win anyway
        opts.grad_sync
            .broadcast_from_root(&w.state_tensors())
            .context("broadcasting rank 0's parameters and buffers")?;
    }
    for (k, v) in w.hyperparameters() {
        log.event(k, v)?;
    }
    if let Some(recipe) = &opts.recipe {
        log.event(keys::RECIPE, recipe.as_str())?;
    }
    log.end(keys::INIT_STOP, Value::Null, meta! {})?;
    Ok(())
}

/// Train one block: block_start, its steps (losses read every `loss_check_steps`, with the
/// divergence, interrupt and time-limit checks all ranks agree on), block_stop. Returns why the
/// run stops early, if it does.
fn train_block(
    w: &mut dyn Workload,
    opts: &mut RunOptions,
    log: &mut Emitter,
    block: &Block,
    started: Instant,
    out: &mut RunOutcome,
) -> Result<Option<String>> {
    let block_t0 = Instant::now();
    let block_wall0 = std::time::SystemTime::now();
    log.start(
        keys::BLOCK_START,
        Value::Null,
        meta! {"first_epoch_num" => block.first_epoch_num, "epoch_count" => block.epoch_count},
    )?;
    let steps = w.start_block(block)?;
    let counted_before = w.samples_trained();
    // the samples of the block's first `done` steps
    let block_samples = |w: &dyn Workload, done: u64| match (counted_before, w.samples_trained()) {
        (Some(before), Some(now)) => now.saturating_sub(before),
        _ => done * w.samples_per_step(),
    };
    let mut pending: Vec<tch::Tensor> = Vec::new();
    for i in 0..steps {
        let t0 = Instant::now();
        let loss = w.train_step(opts.grad_sync.as_mut())?;
        let dt = t0.elapsed().as_secs_f64();
        out.step_seconds += dt;
        out.step_times.push(dt);
        out.steps += 1;
        if opts.test_hooks.inject_fault_at_step == Some(out.steps) {
            // a real libtorch error through tch's panicking API
            let _ = tch::Tensor::zeros([2], (tch::Kind::Float, opts.device)).view([3]);
        }
        pending.push(loss);
        let last = i + 1 == steps;
        if !last && (pending.len() as u64) < opts.loss_check_steps.max(1) {
            continue;
        }
        // one host read for every pending step, then the checks
        let first_step = out.steps - pending.len() as u64 + 1;
        wait_for_peers(opts, pending.len())?;
        let losses = read_losses(&pending)?;
        pending.clear();
        out.loss_reads += 1;
        let diverged = losses
            .iter()
            .enumerate()
            .find(|(_, l)| !l.is_finite() || **l > opts.divergence_loss)
            .map(|(k, l)| format!("diverged: loss {l} at step {}", first_step + k as u64));
        out.losses.extend(losses);
        let interrupted = crate::util::interrupt::requested();
        let local_stop = if diverged.is_some() {
            diverged
        } else if interrupted {
            Some(INTERRUPTED.to_string())
        } else {
            opts.time_limit
                .filter(|limit| started.elapsed() > *limit)
                .map(|limit| {
                    format!(
                        "time limit of {:.1} min reached",
                        limit.as_secs_f64() / 60.0
                    )
                })
        };
        // all ranks stop together: one rank's reason stops every rank (the ranks read at
        // the same steps, so they agree at the same points); an interrupt on any rank cuts
        // the run on every rank (its log goes to interrupted/ and --resume runs it again)
        let mut votes = [local_stop.is_some() as u8 as f64, interrupted as u8 as f64];
        opts.grad_sync
            .all_reduce_sum(&mut votes)
            .context("agreeing on whether to stop")?;
        if votes[0] > 0.5 {
            let reason = match local_stop {
                Some(r) => r,
                None if votes[1] > 0.5 => INTERRUPTED.to_string(),
                None => format!("another rank stopped the run at step {}", out.steps),
            };
            // the steps this block did before the stop
            close_block(log, block, block_samples(&*w, i + 1), block_t0.elapsed())?;
            return Ok(Some(reason));
        }
    }
    let train_elapsed = block_t0.elapsed();
    out.block_seconds.push(train_elapsed.as_secs_f64());
    out.block_windows
        .push((block_wall0, block_wall0 + train_elapsed));
    out.train_seconds += train_elapsed.as_secs_f64();
    close_block(log, block, block_samples(&*w, steps), train_elapsed)?;
    Ok(None)
}

/// The one place a block ends in the log: block_stop, then the training throughput of the
/// `samples` it trained in `elapsed` ([`log_block_throughput`]).
fn close_block(
    log: &mut Emitter,
    block: &Block,
    samples: u64,
    elapsed: std::time::Duration,
) -> std::io::Result<()> {
    log.end(
        keys::BLOCK_STOP,
        Value::Null,
        meta! {"first_epoch_num" => block.first_epoch_num},
    )?;
    log_block_throughput(log, block, samples, elapsed.as_secs_f64())
}

/// Evaluate after `block`: eval_start, rank 0's buffers to every rank, the accuracy (reduced
/// across ranks), eval_stop.
fn eval_block(
    w: &mut dyn Workload,
    opts: &mut RunOptions,
    log: &mut Emitter,
    block: &Block,
) -> Result<f64> {
    log.start(
        keys::EVAL_START,
        Value::Null,
        meta! {"epoch_num" => block.eval_epoch_num},
    )?;
    if opts.grad_sync.world_size() > 1 {
        // like PyTorch DDP's broadcast_buffers: every rank evaluates with rank 0's buffers
        // (batch norm statistics), so the reduced accuracy is that of one model
        let buffers: Vec<tch::Tensor> = w
            .state_tensors()
            .into_iter()
            .filter(|t| !t.requires_grad())
            .collect();
        opts.grad_sync
            .broadcast_from_root(&buffers)
            .context("broadcasting rank 0's buffers before the eval")?;
    }
    let acc = w.evaluate(opts.grad_sync.as_mut())?;
    log.event_with(
        keys::EVAL_ACCURACY,
        json!(acc),
        meta! {"epoch_num" => block.eval_epoch_num},
    )?;
    log.end(
        keys::EVAL_STOP,
        Value::Null,
        meta! {"epoch_num" => block.eval_epoch_num},
    )?;
    Ok(acc)
}
