//! Whole-step CUDA graphs (`methods.cuda_graph`): the training step (forward, backward,
//! optimizer kernels) is captured once per input shape and replayed, so the host launches one
//! graph per step instead of thousands of kernels. Over `shim/graph.cpp`
//! (`at::cuda::CUDAGraph`, built with the cargo feature `cuda`).
//!
//! The protocol is PyTorch's whole-network capture:
//! 1. the first `warmup_steps` steps of a shape run eagerly (real training steps: cuDNN picks its
//!    algorithms, optimizer buffers are created);
//! 2. the next step copies its inputs into static buffers and is captured (recorded, not run),
//!    then replayed once: it is a real step too;
//! 3. every later step of that shape copies its inputs into the static buffers and replays.
//!
//! What the step body may do follows from that: take its inputs only from the slice it is given,
//! keep host-side bookkeeping (learning rate, step counters, reading values) out of it (see
//! [`crate::optim::Optimizer::begin_step`]), and return its results as tensors: they are copied
//! out after each replay (the graph overwrites its outputs on the next one). A new shape (a
//! progressive-resizing step) drops the previous graph and its memory before it is captured.
//!
//! A short batch (a training batch that skipped unreadable images: the same shapes with fewer
//! rows) is not a new shape: it runs eagerly beside the graph, which the next full batch replays
//! again. In a warm-up it counts as a warm-up step, and at the capture step the graph is captured
//! on full-size buffers while the short batch itself runs eagerly. So a rank that meets an
//! unreadable image keeps capturing and replaying at the same steps as the others, whose replayed
//! all-reduces its eager ones meet. The workload tells the graphs its full rows
//! ([`StepGraphs::with_full_rows`]), so a rank whose warm-up batches were all short still
//! captures the full shape. Such a capture is cold (no eager step ran the shape, so cuDNN's
//! benchmark never timed its convolutions, and it cannot inside a capture): it is captured with
//! cuDNN benchmark mode off, that is, with cuDNN's heuristic algorithm choices.
//!
//! [`StepGraphs::emulated`] is the CPU twin for tests: the same static buffers and the same
//! warm-up/capture/replay sequence, with the body run again in place of a replay.
use crate::shim::error::call;
use crate::shim::graph::{
    mr_capture_check_begin, mr_capture_check_end, mr_graph_capture_begin, mr_graph_capture_end,
    mr_graph_free, mr_graph_new, mr_graph_replay, mr_graph_supported, MrGraph,
};
use anyhow::{bail, Context, Result};
use std::os::raw::c_int;
use std::sync::OnceLock;
use tch::{Device, Kind, Tensor};

/// The error of the first real CUDA graph capture that failed in this process.
static FAILED_CAPTURE: OnceLock<String> = OnceLock::new();

/// Why this process cannot train with CUDA graphs again, if a capture failed in it. libtorch
/// (2.11) does not undo a failed capture: the caching allocator keeps the freed graph's pool
/// callback and the CUDA random generator stays in capture mode (later dropout calls fail). So
/// the trainer stops a run set after such a run (it resumes in a new process) and
/// [`StepGraphs::new`] refuses.
pub fn failed_capture() -> Option<&'static str> {
    FAILED_CAPTURE.get().map(String::as_str)
}

/// The error of a step whose CUDA graph capture failed on a device: on this rank
/// (`this_rank`: the process cannot train with graphs again, see [`failed_capture`]) or on
/// another one. It travels in the run's error; the trainer ends the run set after such a run
/// (the failed rank's set stops, and the others' with it, since their next run could not form a
/// group without it) and the set resumes in new processes.
#[derive(Debug)]
pub struct CaptureFailed {
    pub this_rank: bool,
    message: String,
}

impl std::fmt::Display for CaptureFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CaptureFailed {}

/// The ranks of a data-parallel run, as a capture needs them: after its capture each rank
/// learns whether every rank captured, before any replays. A rank replaying a graph whose
/// all-reduces a failed rank never joins would otherwise wait until the group's timeout.
pub trait CapturePeers {
    /// Before a capture on `device`, which starts by waiting for the device: make sure that
    /// wait ends (a data-parallel run bounds it by the group's timeout). Default: nothing.
    fn before_capture(&mut self, _device: Device) -> Result<()> {
        Ok(())
    }
    /// Every rank's capture failure (rank, message), this rank's being `failure`; empty when
    /// every rank captured its step.
    fn capture_failures(&mut self, failure: Option<&str>) -> Result<Vec<(usize, String)>>;
}

/// A training step's body with the ranks it exchanges gradients with: the step's inputs (or
/// their static copies) in, its results out.
pub type StepBody<'a, P> = dyn FnMut(&[Tensor], &mut P) -> Result<Vec<Tensor>> + 'a;

/// What [`CapturePeers::capture_failures`] says where `rank` has no one else to hear from: its
/// own failure, if any.
pub fn own_failure(rank: usize, failure: Option<&str>) -> Vec<(usize, String)> {
    failure
        .map(|f| vec![(rank, f.to_string())])
        .unwrap_or_default()
}

/// One process: no one else to hear from.
pub struct OneProcess;

impl CapturePeers for OneProcess {
    fn capture_failures(&mut self, failure: Option<&str>) -> Result<Vec<(usize, String)>> {
        Ok(own_failure(0, failure))
    }
}

/// Whether this build can capture CUDA graphs (the cargo feature `cuda`).
pub fn supported() -> bool {
    // SAFETY: no arguments, no state.
    unsafe { mr_graph_supported() != 0 }
}

/// One captured CUDA graph (freed with its memory pool when dropped).
struct Graph {
    ptr: *mut MrGraph,
}

impl Graph {
    fn new() -> Result<Graph> {
        let mut ptr = std::ptr::null_mut();
        call("creating a CUDA graph", |err| unsafe {
            // SAFETY: out-pointer to a local.
            mr_graph_new(&mut ptr, err)
        })?;
        Ok(Graph { ptr })
    }

    fn capture_begin(&mut self, device: usize) -> Result<()> {
        call("beginning a CUDA graph capture", |err| unsafe {
            // SAFETY: a live graph from mr_graph_new.
            mr_graph_capture_begin(self.ptr, device as c_int, err)
        })
    }

    fn capture_end(&mut self) -> Result<()> {
        call("ending a CUDA graph capture", |err| unsafe {
            // SAFETY: a live graph from mr_graph_new.
            mr_graph_capture_end(self.ptr, err)
        })
    }

    fn replay(&mut self) -> Result<()> {
        call("replaying a CUDA graph", |err| unsafe {
            // SAFETY: a live graph from mr_graph_new.
            mr_graph_replay(self.ptr, err)
        })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: allocated by mr_graph_new, freed once.
        unsafe { mr_graph_free(self.ptr) }
    }
}

/// The shapes and kinds of a step's inputs: one graph each.
type Key = Vec<(Vec<i64>, Kind)>;

fn key_of(inputs: &[Tensor]) -> Key {
    inputs.iter().map(|t| (t.size(), t.kind())).collect()
}

/// How a step's input shapes stand to the current graph's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    Same,
    /// The same kinds and shapes but for fewer rows (dimension 0) in some inputs: a short batch.
    Short,
    /// The current shapes are a short batch of these (the shape's first steps were short).
    Fuller,
    /// Other shapes or kinds (progressive resizing).
    Other,
}

fn fit(current: &Key, step: &Key) -> Fit {
    if current == step {
        return Fit::Same;
    }
    let rows_only = current.len() == step.len()
        && current.iter().zip(step).all(|((a, ka), (b, kb))| {
            ka == kb && a.len() == b.len() && (a == b || (!a.is_empty() && a[1..] == b[1..]))
        });
    if !rows_only {
        return Fit::Other;
    }
    let rows = || {
        current
            .iter()
            .zip(step)
            .map(|((a, _), (b, _))| (a.first(), b.first()))
    };
    if rows().all(|(a, b)| b <= a) {
        Fit::Short
    } else if rows().all(|(a, b)| a <= b) {
        Fit::Fuller
    } else {
        Fit::Other
    }
}

/// `key` with every input's rows (dimension 0) raised to `rows` where it has fewer: the full
/// shape of a step that may be a short batch.
fn widened(mut key: Key, rows: i64) -> Key {
    for (size, _) in &mut key {
        if let Some(r) = size.first_mut() {
            *r = (*r).max(rows);
        }
    }
    key
}

/// Zero-filled tensors of `key`'s shapes and kinds on `device`: the static buffers of a graph
/// captured at a short batch (their contents do not matter: a capture records, it does not run).
fn buffers_of(key: &Key, device: Device) -> Result<Vec<Tensor>> {
    key.iter()
        .map(|(size, kind)| Tensor::f_zeros(size.as_slice(), (*kind, device)))
        .collect::<Result<Vec<_>, _>>()
        .context("allocating a CUDA graph's static input buffers")
}

#[derive(Clone, Copy)]
enum Backend {
    Cuda(usize),
    /// The CPU twin: no graph, the body runs again on the static buffers.
    Emulated,
}

enum Phase {
    Warming {
        /// Eager steps so far.
        steps: u32,
        /// Whether one of them had the graph's shape (not a short batch): cuDNN's benchmark
        /// timed its convolutions then.
        shape_ran: bool,
    },
    Captured {
        graph: Option<Graph>,
        statics: Vec<Tensor>,
        outputs: Vec<Tensor>,
    },
}

/// How the steps of one run went through the graphs (for logs and tests).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GraphStats {
    pub eager_steps: u64,
    pub captures: u64,
    pub replays: u64,
    /// Captured graphs dropped by [`StepGraphs::release`] (the trainer's end of a run).
    pub releases: u64,
    /// Short batches (skipped unreadable images), run eagerly beside the graph or at its
    /// capture; counted in `eager_steps` or `captures` too.
    pub short_batches: u64,
    /// Captures of a shape that no eager step of this rank ran, because every warm-up batch
    /// was short: captured with cuDNN benchmark mode off. Counted in `captures` too.
    pub cold_captures: u64,
}

/// The step graphs of one run: one per input shape, the current one kept.
pub struct StepGraphs {
    backend: Backend,
    warmup_steps: u32,
    current: Option<(Key, Phase)>,
    /// The rows of every input of a full batch, where the workload knows them
    /// ([`StepGraphs::with_full_rows`]).
    full_rows: Option<i64>,
    stats: GraphStats,
    /// Fail every capture (tests: `MLPERF_RUN_INJECT_FAULT=capture:RANK`).
    fail_captures: bool,
}

/// Eager steps of each new shape before its capture (PyTorch's examples use 3).
pub const DEFAULT_WARMUP_STEPS: u32 = 3;

/// Eager steps before a data-parallel capture. PyTorch asks 11 of DDP (its reducer changes
/// its own state during the first iterations); ours changes only after step 1 (the bucket
/// rebuild), so 3 would do: the margin costs nothing measurable in a run of thousands of
/// steps and keeps NCCL's lazily created communicators and buffers out of the capture.
pub const DATA_PARALLEL_WARMUP_STEPS: u32 = 11;
const _: () = assert!(
    DATA_PARALLEL_WARMUP_STEPS >= 2,
    "the bucket rebuild (after step 1) must precede the capture"
);

/// Whether ProcessGroupNCCL's blocking wait is on (TORCH_NCCL_BLOCKING_WAIT, or its old name
/// NCCL_BLOCKING_WAIT, set to a true value as c10d reads it).
fn nccl_blocking_wait(var: impl Fn(&str) -> Option<String>) -> bool {
    ["TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"]
        .iter()
        .filter_map(|k| var(k))
        .any(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true"))
}

/// The warm-up of a run with `world_size` processes.
pub fn warmup_steps(world_size: usize) -> u32 {
    if world_size > 1 {
        DATA_PARALLEL_WARMUP_STEPS
    } else {
        DEFAULT_WARMUP_STEPS
    }
}

impl StepGraphs {
    /// Graphs on `device`. Refused on a CPU and in a build without the feature `cuda`, with
    /// what to do.
    pub fn new(device: Device, warmup_steps: u32) -> Result<StepGraphs> {
        let index = Self::usable_on(device)?;
        Ok(Self::with_backend(Backend::Cuda(index), warmup_steps))
    }

    /// Whether graphs can be captured on `device` in this process (its CUDA index), else why
    /// not and what to do: what [`StepGraphs::new`] refuses, for a check before the first run.
    pub fn usable_on(device: Device) -> Result<usize> {
        let index = match device {
            Device::Cuda(i) => i,
            Device::Cpu => bail!(
                "methods.cuda_graph = true needs a CUDA device, and this run trains on the CPU: \
                 set methods.cuda_graph = false (CUDA graphs save GPU kernel launches; on a CPU \
                 there is nothing to save)"
            ),
            other => bail!(
                "methods.cuda_graph = true needs a CUDA device, and this run trains on {other:?}: \
                 set methods.cuda_graph = false"
            ),
        };
        if let Some(why) = failed_capture() {
            bail!(
                "a CUDA graph capture failed earlier in this process ({why}); libtorch leaves its \
                 allocator and random generator in capture state after that: start a new process \
                 (a run set resumes where it stopped), with methods.cuda_graph = false if the \
                 step cannot be captured"
            );
        }
        if !supported() {
            bail!(
                "methods.cuda_graph = true, but this mlperf-run was built without CUDA graph \
                 support (`--no-default-features --features torch`): rebuild it with the default \
                 features (`scripts/mlperf-run`, or `cargo build --release` after `source \
                 scripts/setup.sh`; docs/gpu.md), or set methods.cuda_graph = false"
            );
        }
        Ok(index)
    }

    /// A run's step graphs: with `methods.cuda_graph` on, real graphs on `device`; else the
    /// CPU twin when a test asked for it (`emulate`: its warm-up steps); else none (eager
    /// steps).
    ///
    /// Data-parallel runs (`world_size` > 1) capture the gradient exchange too: on a CUDA
    /// device the process group is NCCL, whose collectives can be captured (ProcessGroupNCCL
    /// keeps captured work out of its watchdog) and whose waits are stream-ordered
    /// (shim/dist_group.hpp `wait_one`), so the bucket all-reduces issued by the backward's
    /// hooks are recorded in the graph and replayed in the same order on every rank. The
    /// buckets are rebuilt in gradient order after the first step, which lies inside the
    /// eager warm-up. Every rank captures at the same step: they all see the same shapes.
    pub fn for_run(
        cuda_graph: bool,
        emulate: Option<u32>,
        device: Device,
        world_size: usize,
    ) -> Result<Option<StepGraphs>> {
        let warmup = warmup_steps(world_size);
        if cuda_graph && world_size > 1 && nccl_blocking_wait(|k| std::env::var(k).ok()) {
            bail!(
                "methods.cuda_graph = true with TORCH_NCCL_BLOCKING_WAIT set: a blocking wait \
                 polls the all-reduces' events from the host, which breaks their capture; unset \
                 TORCH_NCCL_BLOCKING_WAIT (the group's timeout still applies to eager \
                 collectives) or set methods.cuda_graph = false"
            );
        }
        match (cuda_graph, emulate) {
            (true, _) => Ok(Some(StepGraphs::new(device, warmup)?)),
            (false, Some(w)) => Ok(Some(StepGraphs::emulated(w))),
            (false, None) => Ok(None),
        }
    }

    /// The CPU twin (tests): same buffers and sequence, no graph.
    pub fn emulated(warmup_steps: u32) -> StepGraphs {
        Self::with_backend(Backend::Emulated, warmup_steps)
    }

    fn with_backend(backend: Backend, warmup_steps: u32) -> StepGraphs {
        StepGraphs {
            backend,
            // at least one eager step: optimizer state is created lazily on the first
            warmup_steps: warmup_steps.max(1),
            current: None,
            full_rows: None,
            stats: GraphStats::default(),
            fail_captures: false,
        }
    }

    /// Makes every capture of these graphs fail once the step was recorded, as a capture whose
    /// end fails would (tests of what the ranks do then; `MLPERF_RUN_INJECT_FAULT=capture:RANK`).
    pub fn fail_captures(mut self) -> StepGraphs {
        self.fail_captures = true;
        self
    }

    /// Tells the graphs that every input of a full batch has `rows` rows (ResNet: the images
    /// and labels of one micro-batch). A new shape's graph then has the full shape from its
    /// first step, so short batches never become its shape, even when every warm-up step of
    /// this rank is short: the rank captures and replays at the same steps as the others.
    /// Without it the first full batch seen is taken for the shape.
    pub fn with_full_rows(mut self, rows: i64) -> StepGraphs {
        self.full_rows = Some(rows);
        self
    }

    pub fn stats(&self) -> GraphStats {
        self.stats
    }

    /// Drops the current graph, its static buffers and its memory pool (the stats stay). The
    /// next step starts a new warm-up.
    pub fn release(&mut self) {
        if let Some((_, Phase::Captured { .. })) = self.current {
            self.stats.releases += 1;
        }
        self.current = None;
    }

    /// One training step on `inputs` in one process: [`StepGraphs::run_with_peers`] alone.
    pub fn run(
        &mut self,
        inputs: &[Tensor],
        body: &mut dyn FnMut(&[Tensor]) -> Result<Vec<Tensor>>,
    ) -> Result<Vec<Tensor>> {
        self.run_with_peers(inputs, &mut OneProcess, &mut |ins, _| body(ins))
    }

    /// One training step on `inputs`: eagerly, captured, or replayed (see the module docs).
    /// `body` computes the step from the tensors it is handed (the inputs themselves, or their
    /// static copies) with `peers` (the gradient exchange) and returns its results; what comes
    /// back are copies of them. A capture step shares its outcome with the other ranks before
    /// it replays: when any rank failed, every rank ends with an error that names it.
    pub fn run_with_peers<P: CapturePeers + ?Sized>(
        &mut self,
        inputs: &[Tensor],
        peers: &mut P,
        body: &mut StepBody<'_, P>,
    ) -> Result<Vec<Tensor>> {
        let step_key = key_of(inputs);
        if let Some(rows) = self.full_rows {
            if let Some(r) = step_key
                .iter()
                .filter_map(|(s, _)| s.first())
                .find(|&&r| r > rows)
            {
                bail!(
                    "a training step's input has {r} rows, more than the {rows} of a full batch \
                     its CUDA graphs were told of: a workload's batch must not grow (report \
                     this as a bug; methods.cuda_graph = false runs the step eagerly)"
                );
            }
        }
        let fit = self.current.as_ref().map(|(k, _)| fit(k, &step_key));
        match (fit, self.current.as_mut()) {
            (Some(Fit::Same | Fit::Short), _) => {}
            // the warm-up goes on with the full shape: every rank captures at the same step
            (Some(Fit::Fuller), Some((k, Phase::Warming { shape_ran, .. }))) => {
                *k = step_key.clone();
                *shape_ran = false;
            }
            // a new shape (or a graph captured on short batches): the previous graph and its
            // memory go first
            _ => {
                let full = match self.full_rows {
                    Some(rows) => widened(step_key.clone(), rows),
                    None => step_key.clone(),
                };
                let warming = Phase::Warming {
                    steps: 0,
                    shape_ran: false,
                };
                self.current = Some((full, warming));
            }
        }
        let warmup = self.warmup_steps;
        let (key, phase) = self.current.as_mut().expect("set above");
        // fewer rows than the graph's shape (Same, Short or Fuller was settled above)
        let short = *key != step_key;
        if short {
            self.stats.short_batches += 1;
        }
        match phase {
            Phase::Warming { steps, shape_ran } if *steps < warmup => {
                *steps += 1;
                *shape_ran |= !short;
                self.stats.eager_steps += 1;
                body(inputs, peers)
            }
            Phase::Warming { shape_ran, .. } => {
                let step = CaptureStep {
                    backend: self.backend,
                    fail_captures: self.fail_captures,
                    short,
                    cold: !*shape_ran,
                };
                let (captured, out) =
                    capture_step(step, &mut self.stats, key, inputs, peers, body)?;
                *phase = captured;
                Ok(out)
            }
            Phase::Captured { .. } if short => {
                self.stats.eager_steps += 1;
                short_step(inputs, &mut |ins| body(ins, &mut *peers))
            }
            Phase::Captured {
                graph,
                statics,
                outputs,
            } => {
                for (s, t) in statics.iter_mut().zip(inputs) {
                    s.f_copy_(t)
                        .context("copying a step's inputs into the graph's buffers")?;
                }
                match graph {
                    Some(g) => g.replay()?,
                    None => *outputs = body(statics, peers)?,
                }
                self.stats.replays += 1;
                copies(outputs)
            }
        }
    }
}

/// How a capture step goes: on which backend, whether its capture must fail (tests), whether
/// its batch is short (fewer rows than the graph's shape), and whether it is cold (no eager step
/// of this rank ran the shape).
#[derive(Clone, Copy)]
struct CaptureStep {
    backend: Backend,
    fail_captures: bool,
    short: bool,
    cold: bool,
}

/// The capture step of a shape, after its warm-up: the inputs copied into static buffers (or
/// full-size buffers for a short batch, which then runs eagerly after the capture), the step
/// captured (cold: with cuDNN's heuristics, as its benchmark would time the convolutions by
/// running them, which a capture cannot), every rank's outcome shared before any replays, then
/// the first replay. Returns the captured phase and the step's outputs.
fn capture_step<P: CapturePeers + ?Sized>(
    step: CaptureStep,
    stats: &mut GraphStats,
    key: &Key,
    inputs: &[Tensor],
    peers: &mut P,
    body: &mut StepBody<'_, P>,
) -> Result<(Phase, Vec<Tensor>)> {
    // a shape no eager step of this rank ran (every warm-up batch was short):
    // captured with cuDNN's heuristics, as its benchmark would time the
    // convolutions by running them, which a capture cannot
    if step.cold {
        stats.cold_captures += 1;
    }
    // a short batch cannot be the graph's shape: the graph gets full-size buffers
    // and the short batch runs eagerly after the capture
    let statics = if step.short {
        buffers_of(key, inputs[0].device())
    } else {
        inputs
            .iter()
            .map(|t| t.f_detach_copy())
            .collect::<Result<Vec<_>, _>>()
            .context("copying a step's inputs into static buffers")
    };
    let prepared = statics.and_then(|statics| {
        if let Backend::Cuda(device) = step.backend {
            peers.before_capture(Device::Cuda(device))?;
        }
        Ok(statics)
    });
    let statics = match prepared {
        Ok(s) => s,
        Err(e) => {
            // no capture began; the other ranks wait for this rank's outcome at
            // their capture step: they end too (a broken group fails at once)
            let _ = peers.capture_failures(Some(&format!("{e:#}")));
            return Err(e);
        }
    };
    let on_device = matches!(step.backend, Backend::Cuda(_));
    let captured = {
        let mut run = |ins: &[Tensor]| body(ins, &mut *peers);
        match step.backend {
            Backend::Cuda(device) => step
                .cold
                .then(crate::gpu::cuda::CudnnBenchmarkOff::new)
                .transpose()
                .and_then(|_heuristics| capture(device, &statics, &mut run))
                .map(|(graph, outputs)| (Some(graph), outputs)),
            // the twin runs what it captures: the short batch itself
            Backend::Emulated => {
                emulated_capture(if step.short { inputs } else { &statics }, &mut run)
                    .map(|o| (None, o))
            }
        }
        .and_then(|c| {
            // as when ending a capture fails: the step was recorded (the twin ran
            // its collectives, as every rank's capture did), the graph is not usable
            if step.fail_captures {
                bail!("the capture failed on purpose (MLPERF_RUN_INJECT_FAULT=capture)")
            }
            Ok(c)
        })
    };
    let mine = captured.as_ref().err().map(|e| format!("{e:#}"));
    if let (true, Some(why)) = (on_device, &mine) {
        let _ = FAILED_CAPTURE.set(why.clone());
    }
    // before any rank replays: did every rank capture?
    let shared = peers.capture_failures(mine.as_deref());
    let (mut graph, outputs) = captured.map_err(|e| capture_error(on_device, true, e))?;
    let failed = shared.context("sharing this rank's CUDA graph capture with the other ranks")?;
    if !failed.is_empty() {
        let e = anyhow::anyhow!("{}", peers_failed_message(&failed));
        return Err(capture_error(on_device, false, e));
    }
    stats.captures += 1;
    let out = match (graph.as_mut(), step.short) {
        (Some(g), false) => {
            g.replay()?;
            copies(&outputs)?
        }
        // where the other ranks replay, this one's eager all-reduces meet theirs
        (Some(_), true) => short_step(inputs, &mut |ins| body(ins, &mut *peers))?,
        // the twin ran the step in its capture
        (None, _) => copies(&outputs)?,
    };
    let captured = Phase::Captured {
        graph,
        statics,
        outputs,
    };
    Ok((captured, out))
}

/// The error of a failed capture on this rank or another: a [`CaptureFailed`] on a device (the
/// trainer ends the set after the run), the error itself in the CPU twin.
fn capture_error(on_device: bool, this_rank: bool, e: anyhow::Error) -> anyhow::Error {
    if on_device {
        CaptureFailed {
            this_rank,
            message: format!("{e:#}"),
        }
        .into()
    } else {
        e
    }
}

/// A short batch's eager step beside a captured graph, whose memory pool stays reserved: an
/// out-of-memory error says so.
fn short_step(
    inputs: &[Tensor],
    body: &mut dyn FnMut(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<Vec<Tensor>> {
    body(inputs).map_err(|e| {
        if !crate::util::libtorch_errors::is_out_of_memory(&e) {
            return e;
        }
        e.context(
            "a short training batch (unreadable images were skipped: see the warnings) ran \
             eagerly beside the captured CUDA graph, which keeps its memory: remove or repair \
             the unreadable images, or set methods.cuda_graph = false",
        )
    })
}

impl Drop for StepGraphs {
    /// Says how the run's steps went (`-v`): how many ran eagerly, were captured, replayed.
    fn drop(&mut self) {
        let s = self.stats;
        let (what, cudnn) = match self.backend {
            Backend::Cuda(_) => ("CUDA graphs", ", with cuDNN benchmark mode off"),
            Backend::Emulated => ("CUDA graphs (CPU twin)", ""),
        };
        let mut short = match s.short_batches {
            0 => String::new(),
            n => format!("; {n} short batch(es), run eagerly"),
        };
        if s.cold_captures > 0 {
            short += &format!(
                "; {} capture(s) of a shape no eager step had run (every warm-up batch \
                 short){cudnn}",
                s.cold_captures
            );
        }
        tracing::info!(
            "{what}: {} eager steps, {} captures, {} replays{short}",
            s.eager_steps,
            s.captures,
            s.replays
        );
    }
}

/// Captures `body` on `statics` into a new graph; a failure inside ends the capture first. The
/// capture check runs alongside: when the capture fails, the error names the first op of the
/// step (forward or host code: the backward runs on autograd's device threads) that a capture
/// cannot take. When it succeeds, CUDA is trusted (the same op on a CPU tensor is harmless).
fn capture(
    device: usize,
    statics: &[Tensor],
    body: &mut dyn FnMut(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<(Graph, Vec<Tensor>)> {
    let mut graph = Graph::new()?;
    let check = CaptureCheck::begin()?;
    graph.capture_begin(device)?;
    let outputs = crate::util::libtorch_errors::catching(|| body(statics));
    let uncapturable = check.end();
    let outputs = match outputs {
        Ok(o) => o,
        Err(e) => {
            // the capture is broken: end it (its own error says less than the body's)
            let _ = graph.capture_end();
            return Err(match uncapturable {
                Some((op, hits)) => e.context(uncapturable_message(&op, hits)),
                None => e.context(
                    "capturing the training step in a CUDA graph (an operation in the step \
                     cannot be captured, or failed: set methods.cuda_graph = false to run it \
                     eagerly)",
                ),
            });
        }
    };
    let ended = graph.capture_end();
    match (ended, uncapturable) {
        (Ok(()), None) => {}
        // such an op on a CPU tensor is fine in a capture: CUDA had no complaint
        (Ok(()), Some((op, hits))) => tracing::debug!(
            "CUDA graph captured although the step ran {op} ({hits}x): on CPU tensors, then"
        ),
        (Err(e), None) => return Err(e),
        (Err(e), Some((op, hits))) => bail!("{} ({e:#})", uncapturable_message(&op, hits)),
    }
    Ok((graph, outputs))
}

/// This rank captured its step, and these ranks could not.
fn peers_failed_message(failed: &[(usize, String)]) -> String {
    let ranks: Vec<String> = failed.iter().map(|(r, _)| r.to_string()).collect();
    let why: Vec<String> = failed
        .iter()
        .map(|(r, m)| format!("rank {r}: {m}"))
        .collect();
    format!(
        "rank(s) {} could not capture the training step in a CUDA graph, so every rank ends \
         this run (a replayed graph's all-reduces would wait for them): {}",
        ranks.join(", "),
        why.join("; ")
    )
}

fn uncapturable_message(op: &str, hits: i64) -> String {
    format!(
        "the training step cannot be captured in a CUDA graph: it runs {op} ({hits} such op(s) \
         in the step), which makes the host wait for the device (a value read back, or an output \
         sized from the data); keep such work out of the step body (read the step's outputs \
         after it), or set methods.cuda_graph = false"
    )
}

/// The CPU twin's capture step: the body runs as usual, and an op that could not be captured on
/// a GPU (a value read back to the host, an output sized from the data: `shim/graph.cpp` lists
/// them) makes it fail, naming the op. So the twin's tests check that a step can be captured.
/// It is stricter than a GPU: on the CPU it cannot tell a read of a host tensor (harmless in a
/// capture) from a read of a device one.
fn emulated_capture(
    statics: &[Tensor],
    body: &mut dyn FnMut(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<Vec<Tensor>> {
    let check = CaptureCheck::begin()?;
    let outputs = body(statics)?;
    if let Some((op, hits)) = check.end() {
        bail!("{}", uncapturable_message(&op, hits));
    }
    Ok(outputs)
}

/// Counts this thread's uncapturable ops from `begin` to `end` (or to the drop, on an error).
struct CaptureCheck;

impl CaptureCheck {
    fn begin() -> Result<CaptureCheck> {
        // SAFETY: an out-pointer for the error message.
        call("checking the CUDA graph capture", |err| unsafe {
            mr_capture_check_begin(err)
        })?;
        Ok(CaptureCheck)
    }

    /// The first uncapturable op and how many ran, if any did. (The drop that follows stops
    /// again: a no-op once the check has ended.)
    fn end(self) -> Option<(String, i64)> {
        Self::stop()
    }

    fn stop() -> Option<(String, i64)> {
        let mut first = std::ptr::null_mut();
        // SAFETY: ends this thread's check (0 when none runs); `first` is set (malloc'd) only
        // when an op was counted.
        let hits = unsafe { mr_capture_check_end(&mut first) };
        // SAFETY: set by the shim when hits > 0.
        (hits > 0).then(|| (unsafe { crate::shim::error::take(first) }, hits))
    }
}

impl Drop for CaptureCheck {
    fn drop(&mut self) {
        let _ = Self::stop();
    }
}

fn copies(outputs: &[Tensor]) -> Result<Vec<Tensor>> {
    outputs
        .iter()
        .map(|t| t.f_detach_copy().context("copying a step's output"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_on_a_cpu_with_what_to_do() {
        let e = StepGraphs::new(Device::Cpu, 3).err().expect("refused");
        let msg = format!("{e:#}");
        assert!(msg.contains("needs a CUDA device"), "{msg}");
        assert!(msg.contains("methods.cuda_graph = false"), "{msg}");
    }

    #[test]
    fn data_parallel_is_not_refused_for_itself_and_warms_up_longer() {
        // a CPU run is refused for being on the CPU, not for having several processes
        let e = StepGraphs::for_run(true, None, Device::Cpu, 8)
            .err()
            .expect("refused");
        let msg = format!("{e:#}");
        assert!(msg.contains("needs a CUDA device"), "{msg}");
        assert!(!msg.contains("single-process"), "{msg}");
        assert_eq!(warmup_steps(1), DEFAULT_WARMUP_STEPS);
        assert_eq!(warmup_steps(8), DATA_PARALLEL_WARMUP_STEPS);
    }

    #[test]
    fn emulated_sequence_warms_captures_replays_and_recaptures_on_a_new_shape() {
        let mut g = StepGraphs::emulated(2);
        let mut calls = 0;
        let mut seen: Vec<f32> = Vec::new();
        for step in 0..6 {
            let x = Tensor::from_slice(&[step as f32, 1.0]);
            let out = g
                .run(&[x], &mut |ins| {
                    calls += 1;
                    Ok(vec![ins[0].sum(Kind::Float)])
                })
                .unwrap();
            seen.push(f32::try_from(&out[0]).unwrap());
        }
        // every step saw its own input, through the static buffer after the capture
        assert_eq!(seen, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(calls, 6);
        assert_eq!(
            g.stats(),
            GraphStats {
                eager_steps: 2,
                captures: 1,
                replays: 3,
                releases: 0,
                short_batches: 0,
                cold_captures: 0,
            }
        );
        // a new shape warms up again
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
        g.run(&[x], &mut |ins| Ok(vec![ins[0].sum(Kind::Float)]))
            .unwrap();
        assert_eq!(g.stats().eager_steps, 3);
        // releasing while warming up drops no graph
        g.release();
        assert_eq!(g.stats().releases, 0);
    }

    /// A batch of `rows` (images 2 wide, labels), the values counting from `from`.
    fn batch(rows: i64, from: f32) -> Vec<Tensor> {
        let images =
            Tensor::arange(2 * rows, (Kind::Float, Device::Cpu)).view([rows, 2]) + from as f64;
        let labels = Tensor::arange(rows, (Kind::Int64, Device::Cpu));
        vec![images, labels]
    }

    /// Runs `rows` through `g`: what the step returned (its images' sum), and the rows the body
    /// saw.
    fn step_rows(g: &mut StepGraphs, rows: i64, from: f32) -> (f64, i64) {
        let ins = batch(rows, from);
        let mut seen = 0;
        let out = g
            .run(&ins, &mut |b| {
                seen = b[0].size()[0];
                Ok(vec![b[0].sum(Kind::Double)])
            })
            .unwrap();
        (out[0].double_value(&[]), seen)
    }

    fn sum_of(rows: i64, from: f32) -> f64 {
        batch(rows, from)[0].sum(Kind::Double).double_value(&[])
    }

    #[test]
    fn input_shapes_are_told_apart_by_their_rows() {
        let key = |rows: &[i64]| -> Key {
            rows.iter()
                .map(|&r| (vec![r, 3, 8, 8], Kind::Uint8))
                .chain([(vec![rows[0]], Kind::Int64)])
                .collect()
        };
        assert_eq!(fit(&key(&[4, 4]), &key(&[4, 4])), Fit::Same);
        assert_eq!(fit(&key(&[4, 4]), &key(&[3, 4])), Fit::Short);
        assert_eq!(fit(&key(&[4, 4]), &key(&[1, 1])), Fit::Short);
        assert_eq!(fit(&key(&[3, 4]), &key(&[4, 4])), Fit::Fuller);
        // some inputs shorter and some longer: another shape
        assert_eq!(fit(&key(&[3, 5]), &key(&[4, 4])), Fit::Other);
        // other image sizes, kinds, or inputs: another shape
        let mut resized = key(&[4, 4]);
        resized[0].0[2] = 16;
        assert_eq!(fit(&key(&[4, 4]), &resized), Fit::Other);
        let mut as_float = key(&[4, 4]);
        as_float[0].1 = Kind::Float;
        assert_eq!(fit(&key(&[4, 4]), &as_float), Fit::Other);
        assert_eq!(fit(&key(&[4, 4]), &key(&[4])), Fit::Other);
        // scalars have no rows
        let scalar = |k| vec![(vec![], k)];
        assert_eq!(fit(&scalar(Kind::Float), &scalar(Kind::Float)), Fit::Same);
        assert_eq!(fit(&scalar(Kind::Float), &scalar(Kind::Double)), Fit::Other);
        assert_eq!(
            fit(&scalar(Kind::Float), &vec![(vec![1], Kind::Float)]),
            Fit::Other
        );
    }

    #[test]
    fn a_short_batch_runs_eagerly_beside_the_graph_which_then_replays_again() {
        let mut g = StepGraphs::emulated(1);
        assert_eq!(step_rows(&mut g, 4, 0.0), (sum_of(4, 0.0), 4)); // eager
        assert_eq!(step_rows(&mut g, 4, 1.0), (sum_of(4, 1.0), 4)); // captured
        assert_eq!(step_rows(&mut g, 4, 2.0), (sum_of(4, 2.0), 4)); // replayed
                                                                    // the short batch itself, not the graph's buffers
        assert_eq!(step_rows(&mut g, 3, 3.0), (sum_of(3, 3.0), 3));
        assert_eq!(step_rows(&mut g, 4, 4.0), (sum_of(4, 4.0), 4)); // replayed: no new warm-up
        assert_eq!(
            g.stats(),
            GraphStats {
                eager_steps: 2,
                captures: 1,
                replays: 2,
                releases: 0,
                short_batches: 1,
                cold_captures: 0,
            }
        );
    }

    /// What keeps the ranks of a data-parallel run together: a rank meeting short batches
    /// captures at the same step as one that does not, and replays at the same steps.
    #[test]
    fn short_batches_in_the_warm_up_keep_the_capture_step_and_its_full_shape() {
        let full = [4, 4, 4, 4, 4, 4];
        let with_short = [3, 4, 2, 4, 1, 4]; // short first, at the capture, after it
        let mut stats = Vec::new();
        for rows in [full, with_short] {
            let mut g = StepGraphs::emulated(2);
            let mut after = Vec::new();
            for (i, &r) in rows.iter().enumerate() {
                let (out, seen) = step_rows(&mut g, r, i as f32);
                assert_eq!((out, seen), (sum_of(r, i as f32), r), "{rows:?} step {i}");
                after.push(g.stats());
            }
            stats.push(after);
        }
        for (step, (a, b)) in stats[0].iter().zip(&stats[1]).enumerate() {
            assert_eq!(a.captures, b.captures, "step {step}: {a:?} {b:?}");
        }
        // the graph was captured at the full shape: the full batches after it replay it
        let last = stats[1].last().unwrap();
        assert_eq!(
            *last,
            GraphStats {
                eager_steps: 3,
                captures: 1,
                replays: 2,
                releases: 0,
                // steps 2 and 4 (shorter than the shape); step 0 was the shape until step 1
                short_batches: 2,
                cold_captures: 0,
            }
        );
    }

    #[test]
    fn a_graph_captured_on_short_batches_gives_way_to_the_full_shape() {
        // a graph not told its full rows, every warm-up step short: the graph has the short
        // shape, and the full one needs its own warm-up (the case where a rank's capture step
        // moves, which `with_full_rows` rules out)
        let mut g = StepGraphs::emulated(1);
        step_rows(&mut g, 3, 0.0);
        step_rows(&mut g, 3, 1.0);
        assert_eq!(g.stats().captures, 1);
        assert_eq!(step_rows(&mut g, 4, 2.0), (sum_of(4, 2.0), 4));
        let s = g.stats();
        assert_eq!((s.eager_steps, s.captures, s.replays), (2, 1, 0), "{s:?}");
    }

    /// A workload that knows its full batch: every warm-up step short still gives a graph of
    /// the full shape, captured at the usual step, which the full batches then replay.
    #[test]
    fn a_graph_told_its_full_rows_is_never_captured_on_a_short_shape() {
        let mut g = StepGraphs::emulated(1).with_full_rows(4);
        assert_eq!(step_rows(&mut g, 3, 0.0), (sum_of(3, 0.0), 3)); // eager
        assert_eq!(step_rows(&mut g, 2, 1.0), (sum_of(2, 1.0), 2)); // captured
        assert_eq!(g.stats().captures, 1);
        assert_eq!(step_rows(&mut g, 4, 2.0), (sum_of(4, 2.0), 4)); // replayed
        assert_eq!(step_rows(&mut g, 3, 3.0), (sum_of(3, 3.0), 3)); // eager beside it
        assert_eq!(step_rows(&mut g, 4, 4.0), (sum_of(4, 4.0), 4)); // replayed
        assert_eq!(
            g.stats(),
            GraphStats {
                eager_steps: 2,
                captures: 1,
                replays: 2,
                releases: 0,
                short_batches: 3,
                // the graph's shape had not run: cuDNN's benchmark was off for its capture
                cold_captures: 1,
            }
        );
        // a new shape (progressive resizing) is widened too: its full batch is no new shape
        let mut g = StepGraphs::emulated(1).with_full_rows(4);
        step_rows(&mut g, 4, 0.0);
        step_rows(&mut g, 4, 1.0);
        let resized = |rows: i64| {
            vec![
                Tensor::ones([rows, 3], (Kind::Float, Device::Cpu)),
                Tensor::zeros([rows], (Kind::Int64, Device::Cpu)),
            ]
        };
        for rows in [1, 1, 4] {
            g.run(&resized(rows), &mut |b| Ok(vec![b[0].sum(Kind::Double)]))
                .unwrap();
        }
        let s = g.stats();
        assert_eq!(
            (s.captures, s.replays, s.short_batches, s.cold_captures),
            (2, 1, 2, 1),
            "{s:?}"
        );
    }

    /// The first batch of the graph's shape comes at the capture step, after short ones: the
    /// capture is cold, told the full rows or not.
    #[test]
    fn a_shape_first_seen_at_the_capture_step_is_captured_cold() {
        for told in [true, false] {
            let mut g = StepGraphs::emulated(1);
            if told {
                g = g.with_full_rows(4);
            }
            assert_eq!(step_rows(&mut g, 3, 0.0), (sum_of(3, 0.0), 3)); // eager
            assert_eq!(step_rows(&mut g, 4, 1.0), (sum_of(4, 1.0), 4)); // captured
            assert_eq!(step_rows(&mut g, 4, 2.0), (sum_of(4, 2.0), 4)); // replayed
            let s = g.stats();
            assert_eq!(
                (s.eager_steps, s.captures, s.replays, s.cold_captures),
                (1, 1, 1, 1),
                "told {told}: {s:?}"
            );
        }
        // a full batch in the warm-up: not cold
        let mut g = StepGraphs::emulated(2).with_full_rows(4);
        for rows in [3, 4, 3, 4] {
            step_rows(&mut g, rows, 0.0);
        }
        let s = g.stats();
        assert_eq!((s.captures, s.replays, s.cold_captures), (1, 1, 0), "{s:?}");
    }

    #[test]
    fn a_batch_larger_than_the_full_rows_is_an_error_not_a_new_shape() {
        let mut g = StepGraphs::emulated(1).with_full_rows(4);
        step_rows(&mut g, 4, 0.0);
        let err = g
            .run(&batch(5, 1.0), &mut |b| Ok(vec![b[0].sum(Kind::Double)]))
            .unwrap_err();
        assert!(
            format!("{err:#}").contains("5 rows, more than the 4"),
            "{err:#}"
        );
        assert_eq!(g.stats().eager_steps, 1);
    }

    #[test]
    fn widening_raises_only_the_rows_that_are_fewer() {
        let key: Key = vec![
            (vec![3, 2], Kind::Float),
            (vec![5], Kind::Int64),
            (vec![], Kind::Float),
        ];
        assert_eq!(
            widened(key, 4),
            vec![
                (vec![4, 2], Kind::Float),
                (vec![5], Kind::Int64),
                (vec![], Kind::Float),
            ]
        );
    }

    #[test]
    fn nccl_blocking_wait_is_read_as_c10d_reads_it() {
        // an environment with one variable set
        let only = |name: &'static str, value: &'static str| {
            move |k: &str| (k == name).then(|| value.to_string())
        };
        assert!(nccl_blocking_wait(only("TORCH_NCCL_BLOCKING_WAIT", "1")));
        assert!(nccl_blocking_wait(only("NCCL_BLOCKING_WAIT", "True")));
        assert!(!nccl_blocking_wait(only("TORCH_NCCL_BLOCKING_WAIT", "0")));
        assert!(!nccl_blocking_wait(|_: &str| None));
    }

    #[test]
    fn a_released_graph_is_gone_and_the_next_step_warms_up_again() {
        let mut g = StepGraphs::emulated(1);
        let x = Tensor::from_slice(&[1.0f32, 2.0]);
        let step = |g: &mut StepGraphs| {
            g.run(std::slice::from_ref(&x), &mut |ins| {
                Ok(vec![ins[0].sum(Kind::Float)])
            })
            .unwrap()
        };
        step(&mut g); // eager
        step(&mut g); // captured
        step(&mut g); // replayed
        g.release();
        assert_eq!(g.stats().releases, 1);
        step(&mut g); // eager again: no graph is held
        step(&mut g); // captured anew
        assert_eq!(
            g.stats(),
            GraphStats {
                eager_steps: 2,
                captures: 2,
                replays: 1,
                releases: 1,
                short_batches: 0,
                cold_captures: 0,
            }
        );
    }

    /// The twin's capture step refuses what a GPU capture cannot take, naming the op; eager
    /// warm-up steps may do anything.
    fn capture_error(body: &mut dyn FnMut(&[Tensor]) -> Result<Vec<Tensor>>) -> Option<String> {
        let mut g = StepGraphs::emulated(1);
        let x = Tensor::from_slice(&[0.0f32, 2.0, -1.0, 3.0]);
        g.run(std::slice::from_ref(&x), body)
            .expect("an eager warm-up step is not checked");
        g.run(std::slice::from_ref(&x), body)
            .err()
            .map(|e| format!("{e:#}"))
    }

    #[test]
    fn the_capture_step_refuses_host_reads_and_data_sized_outputs() {
        // a value read back (the step's own code)
        let msg = capture_error(&mut |ins| {
            let _ = ins[0].sum(Kind::Float).double_value(&[]);
            Ok(vec![ins[0].shallow_clone()])
        })
        .expect("refused");
        assert!(msg.contains("cannot be captured in a CUDA graph"), "{msg}");
        assert!(msg.contains("aten::item"), "{msg}");
        assert!(msg.contains("methods.cuda_graph = false"), "{msg}");
        // a comparison answered on the host
        let msg = capture_error(&mut |ins| {
            let _ = ins[0].equal(&ins[0]);
            Ok(vec![ins[0].shallow_clone()])
        })
        .expect("refused");
        assert!(msg.contains("aten::equal"), "{msg}");
        // an output sized from the data, also nested in another op (boolean-mask indexing)
        let msg = capture_error(&mut |ins| Ok(vec![ins[0].nonzero()])).expect("refused");
        assert!(msg.contains("aten::nonzero"), "{msg}");
        let msg = capture_error(&mut |ins| Ok(vec![ins[0].masked_select(&ins[0].gt(0.5))]))
            .expect("refused");
        assert!(msg.contains("aten::masked_select"), "{msg}");
        let msg = capture_error(&mut |ins| {
            let mask = ins[0].gt(0.5);
            Ok(vec![ins[0].index(&[Some(mask)])])
        })
        .expect("refused");
        assert!(msg.contains("aten::nonzero"), "{msg}");
        // what a step does is fine: arithmetic, reductions, in-place updates, fixed-size indexing
        let err = capture_error(&mut |ins| {
            let mut y = (&ins[0] * 2.0).relu();
            let _ = y.f_add_(&ins[0])?;
            let idx = Tensor::from_slice(&[0i64, 2]);
            Ok(vec![y.index_select(0, &idx).sum(Kind::Float), y.max()])
        });
        assert_eq!(err, None);
    }

    #[test]
    fn a_failed_capture_step_stops_counting() {
        // the body fails after an uncapturable op: its error is the one reported, and the next
        // shape's capture starts from a clean count
        let mut g = StepGraphs::emulated(1);
        let x = Tensor::from_slice(&[1.0f32, 0.0]);
        let mut failing = |ins: &[Tensor]| -> Result<Vec<Tensor>> {
            let _ = ins[0].nonzero();
            bail!("the body's own error")
        };
        let _ = g.run(std::slice::from_ref(&x), &mut |ins| {
            Ok(vec![ins[0].shallow_clone()])
        });
        let e = g.run(std::slice::from_ref(&x), &mut failing).unwrap_err();
        assert!(format!("{e:#}").contains("the body's own error"), "{e:#}");
        let y = Tensor::from_slice(&[1.0f32, 0.0, 2.0]);
        let mut fine = |ins: &[Tensor]| Ok(vec![ins[0].sum(Kind::Float)]);
        g.run(std::slice::from_ref(&y), &mut fine).unwrap();
        g.run(std::slice::from_ref(&y), &mut fine)
            .expect("a clean capture after a failed one");
    }

    /// Ranks as a capture hears of them: what this rank said, and the others' failures.
    struct Peers {
        heard: Vec<Option<String>>,
        others: Vec<(usize, String)>,
    }

    impl CapturePeers for Peers {
        fn capture_failures(&mut self, failure: Option<&str>) -> Result<Vec<(usize, String)>> {
            self.heard.push(failure.map(str::to_string));
            let mut all = self.others.clone();
            all.extend(failure.map(|f| (1, f.to_string())));
            Ok(all)
        }
    }

    /// Steps of a one-element input through `g` with `peers` until one fails or 4 ran; how
    /// many the body ran, and the first error.
    fn steps_with(g: &mut StepGraphs, peers: &mut Peers) -> (usize, Option<String>) {
        let mut calls = 0;
        for _ in 0..4 {
            let x = Tensor::from_slice(&[1.0f32]);
            let r = g.run_with_peers(&[x], peers, &mut |ins, _| {
                calls += 1;
                Ok(vec![&ins[0] * 2.0])
            });
            if let Err(e) = r {
                return (calls, Some(format!("{e:#}")));
            }
        }
        (calls, None)
    }

    #[test]
    fn every_rank_hears_of_each_capture_before_it_replays() {
        // all captured: told once, at the capture step, and the graph replays
        let mut g = StepGraphs::emulated(1);
        let mut peers = Peers {
            heard: vec![],
            others: vec![],
        };
        assert_eq!(steps_with(&mut g, &mut peers), (4, None));
        assert_eq!(peers.heard, vec![None]);
        assert_eq!(g.stats().replays, 2);

        // another rank failed: this rank's capture worked, yet its run ends naming that rank
        let mut g = StepGraphs::emulated(1);
        let mut peers = Peers {
            heard: vec![],
            others: vec![(3, "out of memory".into())],
        };
        let (calls, err) = steps_with(&mut g, &mut peers);
        let msg = err.expect("the run ends");
        assert_eq!(calls, 2, "warm-up and capture ran, nothing was replayed");
        assert!(msg.contains("rank(s) 3 could not capture"), "{msg}");
        assert!(msg.contains("rank 3: out of memory"), "{msg}");
        assert!(msg.contains("so every rank ends this run"), "{msg}");
        assert_eq!(peers.heard, vec![None]);
        assert_eq!(g.stats().captures, 0);
        // the twin's process is not poisoned: only a real capture marks it
        assert_eq!(failed_capture(), None);

        // this rank's capture fails: the others hear why, and its own error is the one it gets
        let mut g = StepGraphs::emulated(1).fail_captures();
        let mut peers = Peers {
            heard: vec![],
            others: vec![],
        };
        let (calls, err) = steps_with(&mut g, &mut peers);
        let msg = err.expect("the run ends");
        assert_eq!(calls, 2, "the warm-up step and the recorded one");
        assert!(msg.contains("failed on purpose"), "{msg}");
        assert!(!msg.contains("could not capture"), "{msg}");
        assert_eq!(peers.heard.len(), 1);
        let said = peers.heard[0].clone().unwrap_or_default();
        assert!(said.contains("failed on purpose"), "{said}");
        assert_eq!(failed_capture(), None);
    }

    #[test]
    fn outputs_are_copies_that_later_steps_do_not_overwrite() {
        let mut g = StepGraphs::emulated(1);
        let mut kept = Vec::new();
        for step in 0..4 {
            let x = Tensor::from_slice(&[step as f32]);
            kept.extend(g.run(&[x], &mut |ins| Ok(vec![&ins[0] * 2.0])).unwrap());
        }
        let vals: Vec<f32> = kept.iter().map(|t| f32::try_from(t).unwrap()).collect();
        assert_eq!(vals, vec![0.0, 2.0, 4.0, 6.0]);
    }
}
