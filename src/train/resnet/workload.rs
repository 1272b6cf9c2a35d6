//! The ResNet-50 workload: model, optimizer and data from a [`ResnetRunConfig`], trained by
//! the generic [`super::engine`]. [`run_once`] is the library entry point for one run.

use super::config::{Amp, DataSource, DecayKind, OptName, OptimizerConfig, ResnetRunConfig};
use super::data::{
    Batch, BatchIter, FolderImages, FolderOptions, ImageData, Shard, SyntheticImages,
};
use crate::data::handoff::{self, Prefetcher};
use crate::data::imagenet::device_augment::DeviceAugment;
use crate::data::imagenet::ImagenetDir;
use crate::distributed::{GradSource, GradSync, Peers};
use crate::gpu::amp::{self, maybe_autocast, LowPrecision};
use crate::gpu::cuda_graph::{GraphStats, StepGraphs};
use crate::methods::ema::Ema;
use crate::models::resnet::{self, Normalize, Resnet, ResnetSpec};
use crate::optim::lars::{Lars, LarsConfig};
use crate::optim::loss::cross_entropy_smoothed;
use crate::optim::loss_scale::{DynamicLossScale, LossScaleReport};
use crate::optim::schedule::{Decay, Schedule};
use crate::optim::sgd::{Sgd, SgdConfig};
use crate::optim::{foreach, Optimizer, ParamGroups};
use crate::rules::Division;
use crate::train::engine::{self, Block, BuildContext, RunOptions, RunOutcome, Workload};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tch::nn::{ModuleT, VarStore};
use tch::{Device, Kind, Tensor};

/// One ResNet run's inputs besides the [`RunOptions`].
pub struct ResnetRun<'a> {
    pub config: &'a ResnetRunConfig,
    pub division: Division,
    /// ImageFolder root (train/, val/); unused for synthetic-memory data.
    pub data_dir: Option<PathBuf>,
    /// `data_dir` as [`list_data`] listed it before the first run of a set; None: each run lists
    /// it.
    pub listed: Option<Arc<ImagenetDir>>,
}

/// What an ImageFolder config needs besides itself.
const NEEDS_DATA: &str = "data.source = \"imagefolder\" needs --data DIR (with train/ and val/)";

/// The ImageFolder set of `cfg` at `data_dir` listed once, before the first run, and checked
/// against the batch and the model ([`ResnetRunConfig::check_folder_sizes`],
/// [`ResnetRunConfig::check_folder_classes`]): a set that cannot feed a run is
/// refused here, not by every run of a set. None for synthetic data.
pub fn list_data(
    cfg: &ResnetRunConfig,
    data_dir: Option<&Path>,
) -> Result<Option<Arc<ImagenetDir>>> {
    if cfg.data.source != DataSource::Imagefolder {
        return Ok(None);
    }
    let root = data_dir.context(NEEDS_DATA)?;
    let listed = ImagenetDir::open(root)?;
    cfg.check_folder_sizes(root, listed.train.len(), listed.val.len())?;
    cfg.check_folder_classes(root, listed.num_classes())?;
    Ok(Some(Arc::new(listed)))
}

/// Open the configured data set.
pub fn open_data(cfg: &ResnetRunConfig, data_dir: Option<&Path>) -> Result<Box<dyn ImageData>> {
    open_listed(cfg, data_dir, None)
}

/// [`open_data`], from the listing of [`list_data`] where there is one.
fn open_listed(
    cfg: &ResnetRunConfig,
    data_dir: Option<&Path>,
    listed: Option<&Arc<ImagenetDir>>,
) -> Result<Box<dyn ImageData>> {
    match cfg.data.source {
        DataSource::SyntheticMemory => {
            let s = cfg
                .data
                .synthetic
                .as_ref()
                .context("data.synthetic is missing")?;
            Ok(Box::new(SyntheticImages::new(
                cfg.model.classes as usize,
                s.train_per_class,
                s.eval_per_class,
                s.noise,
            )))
        }
        DataSource::Imagefolder => {
            let options = FolderOptions {
                decoder: cfg.data.decoder,
                augment: cfg.data.augment,
                hw_decoder_load: cfg.data.hw_decoder_load,
                gpu_cache_mb: cfg.data.gpu_cache_mb.max(0) as u64,
                // one batch beyond those staged on the device (the one being handed off)
                prefetch_batches: cfg.data.prefetch() + 1,
            };
            if let Some(listed) = listed {
                return Ok(Box::new(FolderImages::listed(
                    listed.clone(),
                    cfg.data.workers,
                    options,
                )));
            }
            let dir = data_dir.context(NEEDS_DATA)?;
            Ok(Box::new(FolderImages::open(
                dir,
                cfg.data.workers,
                options,
            )?))
        }
    }
}

/// Carry out one ResNet run (cache clear to run_stop) and return what happened.
pub fn run_once(run: &ResnetRun<'_>, opts: RunOptions) -> Result<RunOutcome> {
    let data = open_listed(run.config, run.data_dir.as_deref(), run.listed.as_ref())?;
    let mut w = ResnetWorkload::new(run.config.clone(), run.division, data);
    engine::run_once(&mut w, opts)
}

/// One ResNet run in a single process that trains as `world` data-parallel ranks would
/// ([`ResnetWorkload::emulate_world`]): the reference for the data-parallel equivalence check.
pub fn run_once_emulating(
    run: &ResnetRun<'_>,
    mut opts: RunOptions,
    world: usize,
) -> Result<RunOutcome> {
    let data = open_listed(run.config, run.data_dir.as_deref(), run.listed.as_ref())?;
    let mut w = ResnetWorkload::new(run.config.clone(), run.division, data).emulate_world(world);
    opts.distributed_from_env = false;
    engine::run_once(&mut w, opts)
}

struct State {
    device: Device,
    vs: VarStore,
    net: Resnet,
    params: ParamGroups,
    opt: Box<dyn Optimizer>,
    schedule: Schedule,
    ema: Option<Ema>,
    seed: u64,
    /// This process's shard: eval, and training unless emulating ranks.
    shard: Shard,
    /// The shards whose micro-batches each step trains on: this process's, or every
    /// emulated rank's (see [`ResnetWorkload::emulate_world`]).
    train_shards: Vec<Shard>,
    local_batch: usize,
    steps_per_epoch: u64,
    global_step: u64,
    epoch: u64,
    step_in_epoch: u64,
    /// One training batch stream per entry of `train_shards` (empty between epochs).
    iters: Vec<Prefetcher<(Tensor, Tensor)>>,
    normalize: Normalize,
    /// `methods.amp`: forward passes in an autocast region of this precision.
    autocast: Option<LowPrecision>,
    /// `methods.amp = "fp16"`: the loss is scaled before the backward, and overflowing steps
    /// are skipped on the device.
    loss_scale: Option<DynamicLossScale>,
    /// `methods.cuda_graph`: the step captured and replayed (or its CPU twin in tests).
    graphs: Option<StepGraphs>,
    /// `data.augment = "gpu"`: the hand-off's crop + resize + normalisation on the device.
    augment: DeviceAugment,
    /// Batches staged on the device ahead of the step (`data.prefetch_batches`).
    prefetch: usize,
}

pub struct ResnetWorkload {
    cfg: ResnetRunConfig,
    division: Division,
    data: Box<dyn ImageData>,
    state: Option<State>,
    timing: StepTiming,
    /// (data wait, whole step) in seconds of each training step since the last report.
    step_waits: Vec<(f64, f64)>,
    emulate_world: usize,
}

/// Where training-step time goes (seconds, summed over all steps).
#[derive(Debug, Clone, Copy, Default)]
pub struct StepTiming {
    /// Waiting for the data pipeline's next batch.
    pub data_wait: f64,
    /// Hand-off: u8 batch to a normalised device tensor.
    pub handoff: f64,
    /// Forward, backward, gradient sync, optimizer, EMA, loss read-back.
    pub compute: f64,
}

/// How long the training steps since the last report waited for their batches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WaitReport {
    pub steps: usize,
    /// Mean and 95th percentile of the wait per step, seconds.
    pub mean: f64,
    pub p95: f64,
    /// The waits' share of the steps' time.
    pub share: f64,
}

impl WaitReport {
    /// The report of (wait, step) pairs in seconds; None without steps.
    pub fn of(steps: &[(f64, f64)]) -> Option<WaitReport> {
        if steps.is_empty() {
            return None;
        }
        let mut waits: Vec<f64> = steps.iter().map(|s| s.0).collect();
        waits.sort_by(f64::total_cmp);
        let total_wait: f64 = waits.iter().sum();
        let total_step: f64 = steps.iter().map(|s| s.1).sum();
        // nearest rank
        let rank = ((0.95 * waits.len() as f64).ceil() as usize).clamp(1, waits.len());
        Some(WaitReport {
            steps: steps.len(),
            mean: total_wait / steps.len() as f64,
            p95: waits[rank - 1],
            share: if total_step > 0.0 {
                total_wait / total_step
            } else {
                0.0
            },
        })
    }
}

impl std::fmt::Display for WaitReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "data wait per training step: mean {:.2} ms, p95 {:.2} ms, {:.1}% of the step time \
             ({} steps since the last report)",
            self.mean * 1e3,
            self.p95 * 1e3,
            self.share * 100.0,
            self.steps
        )
    }
}

impl ResnetWorkload {
    pub fn new(cfg: ResnetRunConfig, division: Division, data: Box<dyn ImageData>) -> Self {
        ResnetWorkload {
            cfg,
            division,
            data,
            state: None,
            timing: StepTiming::default(),
            step_waits: Vec::new(),
            emulate_world: 1,
        }
    }

    /// How the training steps went through `methods.cuda_graph` (None when it is off).
    pub fn graph_stats(&self) -> Option<GraphStats> {
        self.state.as_ref()?.graphs.as_ref().map(StepGraphs::stats)
    }

    /// The fp16 loss scale and the steps it skipped so far (None unless `methods.amp =
    /// "fp16"`). Reads the device.
    pub fn loss_scale_report(&self) -> Result<Option<LossScaleReport>> {
        let Some(s) = self.state.as_ref() else {
            return Ok(None);
        };
        s.loss_scale.as_ref().map(|l| l.report()).transpose()
    }

    /// In a single process, train as `n` data-parallel ranks would: every step accumulates the
    /// micro-batches of all `n` rank shards (local batch = global batch / n, each micro-batch
    /// through batch norm on its own), so the trainable parameters match an `n`-process run.
    /// The data-parallel equivalence check uses it.
    pub fn emulate_world(mut self, n: usize) -> Self {
        self.emulate_world = n.max(1);
        self
    }

    /// Time spent in the parts of the training steps so far.
    pub fn timing(&self) -> StepTiming {
        self.timing
    }

    fn state(&mut self) -> Result<&mut State> {
        self.state.as_mut().context("the workload was not built")
    }

    /// Training image size of 0-based `epoch` (progressive resizing or the full size).
    pub fn train_size(&self, epoch: u64) -> i64 {
        let full = self.cfg.data.train_image_size;
        match &self.cfg.methods.progressive_resizing {
            Some(p) => p.size(
                (epoch as f64 / self.cfg.optimizer.schedule_epochs).min(1.0),
                full,
            ),
            None => full,
        }
    }

    fn channels_last(&self) -> bool {
        self.cfg.methods.channels_last
    }
}

/// Batches handed over to the device ahead of use ([`handoff`]): u8 NHWC images and labels,
/// or, for ragged batches of decoded regions (`data.augment = "gpu"`), the regions decoded by
/// nvJPEG into the batch's device arena and the host's copied in, then cropped, resized, flipped
/// and normalised on the device by `augment`, all on the hand-off's stream.
fn prefetch(
    iter: BatchIter,
    device: Device,
    depth: usize,
    augment: DeviceAugment,
) -> Result<Prefetcher<(Tensor, Tensor)>> {
    Prefetcher::spawn(device, depth, iter, move |b: Batch, t| {
        if b.crops.is_empty() {
            let (height, width) = (b.height as usize, b.width as usize);
            if b.images.len() != b.len() * height * width * 3 {
                bail!(
                    "a batch of {} labels carries {} image bytes at {}x{}",
                    b.len(),
                    b.images.len(),
                    height,
                    width
                );
            }
            return handoff::image_batch(&b.images, &b.labels, height, width, t);
        }
        if b.crops.len() != b.len() {
            bail!(
                "a batch of {} labels carries {} crop boxes",
                b.len(),
                b.crops.len()
            );
        }
        let y = t.tensor(&b.labels, &[b.len() as i64])?;
        let x = augment.ragged_batch(&b.crops, &b.images, b.engine, b.cache, b.size, t)?;
        Ok((x, y))
    })
}

/// The training batches of `s.epoch` at image size `size`, one pipeline per shard, handed over
/// ahead of use.
fn epoch_batches(
    data: &dyn ImageData,
    s: &State,
    size: usize,
) -> Result<Vec<Prefetcher<(Tensor, Tensor)>>> {
    s.train_shards
        .iter()
        .map(|shard| {
            let iter = data.train_epoch(s.epoch, size, s.local_batch, s.seed, *shard)?;
            prefetch(iter, s.device, s.prefetch, s.augment.clone())
        })
        .collect()
}

/// The step's `micro` micro-batches from the epoch's pipelines, round robin (images, labels,
/// images, labels, ...), and the seconds spent waiting for them.
fn next_micro_batches(s: &mut State, micro: usize) -> Result<(Vec<Tensor>, f64)> {
    let n_iters = s.iters.len();
    let mut data_wait = 0.0;
    let mut inputs: Vec<Tensor> = Vec::with_capacity(2 * micro);
    for m in 0..micro {
        let t0 = Instant::now();
        let (images, y) = match s.iters[m % n_iters].next_batch() {
            Some(b) => b?,
            None => bail!("the data pipeline ran out of batches in epoch {}", s.epoch),
        };
        data_wait += t0.elapsed().as_secs_f64();
        inputs.extend([images, y]);
    }
    Ok((inputs, data_wait))
}

/// The optimizer's update with the all-reduced `grads`; with the fp16 loss scale they are
/// unscaled first and an overflowing step is skipped (an overflow on any rank is in every
/// rank's all-reduced gradients, so all ranks skip the same steps).
fn apply_update(
    opt: &mut dyn Optimizer,
    params: &mut ParamGroups,
    loss_scale: Option<&mut DynamicLossScale>,
    grads: &[Tensor],
) -> Result<()> {
    match loss_scale {
        Some(ls) => {
            let found_inf = ls.unscale(grads)?;
            opt.apply_or_skip(params, grads, found_inf)?;
            ls.update()
        }
        None => opt.apply(params, grads),
    }
}

/// After a step: the EMA update and the step and epoch counts. At an epoch's end the next
/// epoch's first batches are requested: read, decoded and copied while this epoch's last steps
/// and its eval run, so its first step finds them ready instead of the GPU waiting for them (a
/// new pipeline per epoch otherwise starts cold).
fn end_step(data: &dyn ImageData, s: &mut State, next_size: usize, max_epochs: u64) -> Result<()> {
    s.global_step += 1;
    if let Some(ema) = &mut s.ema {
        ema.update(&s.vs, s.global_step)?;
    }
    s.step_in_epoch += 1;
    if s.step_in_epoch == s.steps_per_epoch {
        s.step_in_epoch = 0;
        s.epoch += 1;
        s.iters = if s.epoch < max_epochs {
            epoch_batches(data, s, next_size)?
        } else {
            Vec::new()
        };
    }
    Ok(())
}

/// The forward passes' autocast region of `methods.amp` on `device` (and a warning when
/// `fused_bn_relu` cannot fuse: cuDNN's fused kernels take fp16 and bf16 activations, bf16 ran
/// on cuDNN 9 with torch 2.11 on an H200; fp32 ones take the unfused chain).
fn autocast(cfg: &ResnetRunConfig, device: Device) -> Option<LowPrecision> {
    let autocast = amp::precision_switch(
        match cfg.methods.amp {
            Amp::None => None,
            Amp::Bf16 => Some(LowPrecision::BFloat16),
            Amp::Fp16 => Some(LowPrecision::Float16),
        },
        device,
        "methods.amp",
    );
    if cfg.methods.fused_bn_relu && device.is_cuda() && cfg.methods.amp == Amp::None {
        tracing::warn!(
            "methods.fused_bn_relu with methods.amp = \"none\": cuDNN's fused NHWC batch \
             norm takes fp16 or bf16 activations, so the batch norms will take the unfused \
             path; set methods.amp = \"bf16\" or \"fp16\" to fuse them"
        );
    }
    autocast
}

/// The optimizer `[optimizer]` names (LARS or SGD with momentum).
fn optimizer(o: &OptimizerConfig) -> Box<dyn Optimizer> {
    match o.name {
        OptName::Lars => Box::new(Lars::new(LarsConfig {
            momentum: o.momentum,
            weight_decay: o.weight_decay,
            eta: o.lars_eta,
            epsilon: o.lars_epsilon,
            nesterov: o.nesterov,
        })),
        OptName::Sgd => Box::new(Sgd::new(SgdConfig {
            momentum: o.momentum,
            weight_decay: o.weight_decay,
            nesterov: o.nesterov,
            decay_bn_bias: o.decay_bn_bias,
        })),
    }
}

/// The learning-rate schedule of `[optimizer]` in steps: warm-up, then the decay to
/// `schedule_epochs`.
fn schedule(o: &OptimizerConfig, steps_per_epoch: u64) -> Schedule {
    let warmup_steps = (o.warmup_epochs * steps_per_epoch as f64).round() as u64;
    let total = (o.schedule_epochs * steps_per_epoch as f64).round() as u64;
    Schedule {
        base: o.base_lr,
        end: o.end_lr,
        warmup_steps,
        decay_steps: total.saturating_sub(warmup_steps).max(1),
        decay: match o.decay {
            DecayKind::Poly => Decay::Poly {
                power: o.poly_power,
            },
            DecayKind::Cosine => Decay::Cosine,
        },
    }
}

impl ResnetWorkload {
    /// The shards this process trains: its own, or every emulated rank's (one process
    /// emulating data-parallel ranks in tests).
    fn train_shards(&self, ctx: &BuildContext) -> Vec<Shard> {
        if self.emulate_world > 1 {
            (0..self.emulate_world)
                .map(|rank| Shard {
                    rank,
                    world_size: self.emulate_world,
                })
                .collect()
        } else {
            vec![Shard {
                rank: ctx.rank,
                world_size: ctx.world_size,
            }]
        }
    }
}

impl Workload for ResnetWorkload {
    fn benchmark(&self) -> &'static str {
        "resnet"
    }

    fn hyperparameters(&self) -> Vec<(&'static str, Value)> {
        let (steps, world) = match &self.state {
            Some(s) => (
                s.steps_per_epoch,
                (s.shard.world_size * s.train_shards.len()) as u64,
            ),
            None => (0, 1),
        };
        self.cfg.hyperparameters(
            self.division,
            steps,
            self.data.train_len() as u64,
            self.data.eval_len() as u64,
            world,
        )
    }

    fn configure_process(&self, device: tch::Device) -> Result<()> {
        self.cfg.system.configure_process(device)
    }

    fn build(&mut self, ctx: &BuildContext) -> Result<()> {
        let cfg = &self.cfg;
        if self.data.num_classes() as i64 != cfg.model.classes {
            bail!(
                "the data set has {} classes but model.classes is {}",
                self.data.num_classes(),
                cfg.model.classes
            );
        }
        let autocast = autocast(cfg, ctx.device);
        // device-augmented batches arrive in the forward's dtype: what autocast would cast the
        // normalised fp32 input to for the first convolution
        let augment = DeviceAugment::new(
            ctx.device,
            match autocast {
                Some(LowPrecision::BFloat16) => Kind::BFloat16,
                Some(LowPrecision::Float16) => Kind::Half,
                None => Kind::Float,
            },
            cfg.methods.channels_last,
        )?;
        self.data.use_device(ctx.device);
        let (vs, net) = resnet::build(&model_spec(cfg), ctx.device);
        if self.channels_last() {
            resnet::convert_channels_last(&vs);
        }
        let params = ParamGroups::from_var_store(&vs);
        let opt = optimizer(&cfg.optimizer);
        let loss_scale = match cfg.methods.amp {
            Amp::Fp16 => {
                let l = cfg.methods.loss_scale.unwrap_or_default();
                Some(DynamicLossScale::new(ctx.device, l.config())?)
            }
            _ => None,
        };
        if self.emulate_world > 1 && ctx.world_size > 1 {
            bail!("emulating data-parallel ranks needs a single process");
        }
        let world = (ctx.world_size * self.emulate_world) as u64;
        let local_batch = cfg.local_batch(world)? as usize;
        let train_shards = self.train_shards(ctx);
        let steps_per_epoch = self.data.train_len() as u64 / cfg.train.global_batch_size;
        if steps_per_epoch == 0 {
            bail!(
                "the training set ({} images) is smaller than train.global_batch_size ({})",
                self.data.train_len(),
                cfg.train.global_batch_size
            );
        }
        let schedule = schedule(&cfg.optimizer, steps_per_epoch);
        let ema = cfg
            .methods
            .ema
            .as_ref()
            .map(|e| Ema::new(&vs, e.half_life_steps, e.update_interval));
        // a short batch (skipped unreadable images) is never taken for the graph's shape
        let graphs = ctx
            .step_graphs(cfg.methods.cuda_graph)?
            .map(|g| g.with_full_rows(local_batch as i64));
        self.state = Some(State {
            device: ctx.device,
            vs,
            net,
            params,
            opt,
            schedule,
            ema,
            seed: ctx.seed,
            shard: Shard {
                rank: ctx.rank,
                world_size: ctx.world_size,
            },
            train_shards,
            local_batch,
            steps_per_epoch,
            global_step: 0,
            epoch: 0,
            step_in_epoch: 0,
            iters: Vec::new(),
            normalize: Normalize::new(ctx.device, self.cfg.methods.channels_last),
            augment,
            prefetch: cfg.data.prefetch(),
            autocast,
            loss_scale,
            graphs,
        });
        Ok(())
    }

    fn blocks(&self) -> Result<Vec<Block>> {
        let mut out = Vec::new();
        let mut first = 0u64;
        for e in self.cfg.eval_epochs() {
            out.push(Block {
                first_epoch_num: first + 1,
                epoch_count: e + 1 - first,
                eval_epoch_num: e + 1,
            });
            first = e + 1;
        }
        Ok(out)
    }

    fn start_block(&mut self, block: &Block) -> Result<u64> {
        let s = self.state()?;
        Ok(block.epoch_count * s.steps_per_epoch)
    }

    fn samples_per_step(&self) -> u64 {
        self.cfg.train.global_batch_size
    }

    fn train_step<'s>(&mut self, sync: &'s mut (dyn GradSync + 's)) -> Result<Tensor> {
        let accum = self.cfg.train.gradient_accumulation_steps;
        let smoothing = self.cfg.methods.label_smoothing;
        let (size, next_size) = {
            let epoch = self.state()?.epoch;
            (
                self.train_size(epoch) as usize,
                self.train_size(epoch + 1) as usize,
            )
        };
        let max_epochs = self.cfg.train.max_epochs;
        let s = self.state.as_mut().context("the workload was not built")?;
        if s.iters.is_empty() {
            s.iters = epoch_batches(&*self.data, s, size)?;
        }
        let micro = accum as usize * s.iters.len();
        let t_start = Instant::now();
        let (inputs, data_wait) = next_micro_batches(s, micro)?;
        let mut handoff = 0.0;
        s.opt.begin_step(&s.params, s.schedule.lr(s.global_step))?;
        // forward, backward, gradient exchange and update: kernels only, no host state
        // (what methods.cuda_graph captures)
        let mut body = |ins: &[Tensor], sync: &mut (dyn GradSync + 's)| -> Result<Vec<Tensor>> {
            let mut total: Option<Tensor> = None;
            let mut grads: Vec<Tensor> = Vec::new();
            let last = ins.len() / 2 - 1;
            for (m, pair) in ins.chunks(2).enumerate() {
                let t1 = Instant::now();
                // u8 pixels are normalised here; device-augmented batches come normalised
                let x = if pair[0].kind() == Kind::Uint8 {
                    s.normalize.apply(&pair[0])
                } else {
                    pair[0].shallow_clone()
                };
                handoff += t1.elapsed().as_secs_f64();
                let loss = maybe_autocast(s.device, s.autocast, || {
                    cross_entropy_smoothed(&s.net.forward_t(&x, true), &pair[1], smoothing)
                        / micro as f64
                })?;
                // the last micro-batch's backward may start the gradient all-reduces (hooks that
                // add each gradient into `grads` and hand the sum to its bucket)
                let hooked = if m == last {
                    let params = s.params.tensors();
                    sync.before_last_backward(&params, GradSource::Returned { accum: &grads })?
                } else {
                    false
                };
                let backward_from = match &s.loss_scale {
                    Some(ls) => ls.scale_loss(&loss)?,
                    None => loss.shallow_clone(),
                };
                // fresh gradient tensors (autograd.grad): nothing to zero, no accumulate pass
                let g = s.params.gradients_of(&backward_from)?;
                if grads.is_empty() || hooked {
                    grads = g;
                } else {
                    tch::no_grad(|| foreach::add_list_(&grads, &g, 1.0))?;
                }
                let l = loss.detach();
                total = Some(match total {
                    Some(t) => t + l,
                    None => l,
                });
            }
            sync.all_reduce_grads(&grads)?;
            apply_update(&mut *s.opt, &mut s.params, s.loss_scale.as_mut(), &grads)?;
            Ok(vec![total.context("a training step without micro-batches")?])
        };
        let mut out = match s.graphs.as_mut() {
            Some(g) => g.run_with_peers(&inputs, sync, &mut body)?,
            None => body(&inputs, sync)?,
        };
        end_step(&*self.data, s, next_size, max_epochs)?;
        let all = t_start.elapsed().as_secs_f64();
        self.timing.data_wait += data_wait;
        self.step_waits.push((data_wait, all));
        self.timing.handoff += handoff;
        self.timing.compute += all - data_wait - handoff;
        Ok(out.remove(0))
    }

    fn evaluate(&mut self, peers: &mut dyn Peers) -> Result<f64> {
        let size = self.cfg.data.eval_image_size as usize;
        if let Some(stats) = self.data.decoder_stats().filter(|d| d.loaded > 0) {
            // scripts/bench_gpu.sh part b reads this line (-v)
            tracing::info!("{}", stats.describe());
            if let Some(cache) = stats.cache {
                tracing::info!("{}", cache.describe());
            }
        }
        if let Some(w) = WaitReport::of(&self.step_waits) {
            // scripts/bench_gpu.sh part b reads this line (-v)
            tracing::info!("{w}");
        }
        self.step_waits.clear();
        let s = self.state.as_ref().context("the workload was not built")?;
        if let Some(ls) = s
            .loss_scale
            .as_ref()
            .filter(|_| tracing::enabled!(tracing::Level::INFO))
        {
            // reads the device: only when it is printed (-v)
            let r = ls.report()?;
            tracing::info!(
                "fp16 loss scale {}: {} of {} steps skipped (gradient overflow)",
                r.scale,
                r.skipped_steps,
                s.global_step
            );
        }
        let iter = self.data.eval(size, s.local_batch.max(1), s.shard)?;
        let mut batches = prefetch(iter, s.device, s.prefetch, s.augment.clone())?;
        let mut eval_all = || -> Result<[f64; 2]> {
            // correct predictions counted on the device, read once at the end
            let mut correct = Tensor::zeros([], (Kind::Int64, s.device));
            let mut seen = 0usize;
            tch::no_grad(|| -> Result<()> {
                while let Some(b) = batches.next_batch() {
                    let (images, y) = b?;
                    let x = if images.kind() == Kind::Uint8 {
                        s.normalize.apply(&images)
                    } else {
                        images
                    };
                    let logits =
                        maybe_autocast(s.device, s.autocast, || s.net.forward_t(&x, false))?;
                    let pred = logits.argmax(-1, false);
                    correct += pred.eq_tensor(&y).sum(Kind::Int64);
                    seen += y.size()[0] as usize;
                }
                Ok(())
            })?;
            Ok([correct.f_int64_value(&[])? as f64, seen as f64])
        };
        let mut counts = match &s.ema {
            Some(ema) => ema.with_ema_weights(&s.vs, eval_all)?,
            None => eval_all()?,
        };
        peers.all_reduce_sum(&mut counts)?;
        if counts[1] == 0.0 {
            bail!("the evaluation set is empty");
        }
        Ok(counts[0] / counts[1])
    }

    fn target(&self) -> f64 {
        self.cfg.train.target
    }

    fn state_tensors(&self) -> Vec<Tensor> {
        let Some(s) = &self.state else {
            return Vec::new();
        };
        let mut named: Vec<(String, Tensor)> = s.vs.variables().into_iter().collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named.into_iter().map(|(_, t)| t).collect()
    }

    fn per_process_batch(&self) -> Option<u64> {
        self.state.as_ref().map(|s| {
            (s.local_batch * s.train_shards.len()) as u64
                * self.cfg.train.gradient_accumulation_steps
        })
    }

    fn release_step_graphs(&mut self) {
        if let Some(g) = self.state.as_mut().and_then(|s| s.graphs.as_mut()) {
            g.release();
        }
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.state
            .as_ref()
            .map(|s| {
                s.params
                    .params
                    .iter()
                    .map(|p| (p.name.clone(), p.tensor.shallow_clone()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The model `cfg` configures.
fn model_spec(cfg: &ResnetRunConfig) -> ResnetSpec {
    ResnetSpec {
        classes: cfg.model.classes,
        width: cfg.model.width,
        blocks: cfg.model.blocks,
        zero_init_last_bn: cfg.model.zero_init_last_bn,
        methods: cfg.methods.clone(),
    }
}

/// Trainable parameters of the model `cfg` configures (built on the CPU to count them).
pub fn model_parameters(cfg: &ResnetRunConfig) -> i64 {
    let (vs, _) = resnet::build(&model_spec(cfg), Device::Cpu);
    crate::models::parameter_count(&vs)
}

#[cfg(test)]
mod tests {
    use super::WaitReport;

    #[test]
    fn the_wait_report_has_the_mean_the_nearest_rank_p95_and_the_share() {
        assert_eq!(WaitReport::of(&[]), None);
        // 20 steps of 0.1 s: waits 0, 0.001, ..., 0.019 s
        let steps: Vec<(f64, f64)> = (0..20).map(|i| (i as f64 * 1e-3, 0.1)).collect();
        let r = WaitReport::of(&steps).unwrap();
        assert_eq!(r.steps, 20);
        assert!((r.mean - 0.0095).abs() < 1e-12, "{r:?}");
        // the 19th of 20 sorted waits
        assert!((r.p95 - 0.018).abs() < 1e-12, "{r:?}");
        assert!((r.share - 0.095).abs() < 1e-12, "{r:?}");
        let line = r.to_string();
        assert!(
            line.contains("mean 9.50 ms") && line.contains("p95 18.00 ms"),
            "{line}"
        );
        assert!(line.contains("9.5% of the step time"), "{line}");
    }
}
