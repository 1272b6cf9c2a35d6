//! BERT-Large phase-2 pre-training as a [`Workload`] of the generic trainer (its config:
//! [`super::config`]).
//!
//! - Model: [`crate::models::bert`], optionally initialised from the converted reference
//!   checkpoint (`--init-checkpoint`, safetensors from `scripts/convert_bert_checkpoint`).
//! - Data: [`crate::data::bert`] (reference HDF5 shards in `DIR/train`, the eval set in `DIR/eval`);
//!   with `methods.balance_tokens` (open) each global micro-batch is split among the ranks by
//!   token count ([`crate::data::bert::balance`]).
//! - Optimizer: LAMB (closed) or LAMB/AdamW (open) with the reference's warmup + polynomial
//!   schedule, global-norm clip; hyperparameter keys logged from the loaded config.
//! - Eval: masked-LM accuracy = correct masked tokens / all masked tokens over the eval set;
//!   closed: every FLOOR(0.05*(230.23*GBS + 3,000,000), 25,000) samples (from
//!   benchmarks/bert/benchmark.toml); open: `train.eval_interval_samples`. `epoch_num` is the
//!   number of training samples seen.

use super::config::*;
use crate::data::bert::packing::{self, PackSpec, PackedBatch, PackedHostBatch, PackedLoader};
use crate::data::bert::{
    common_shape, shard_files, step_attention_mask, Assignment, BertBatch, EvalSet, HostBatch,
    ModelFit, TrainLoader,
};
use crate::data::handoff::{DeviceTensors, Prefetcher};
use crate::distributed::{GradSource, GradSync, Peers};
use crate::gpu::amp::{self, maybe_autocast, LowPrecision};
use crate::gpu::cuda_graph::{GraphStats, StepGraphs};
use crate::models::bert::{mlm_correct, pretraining_loss, BertForPreTraining, MlmOn, PackedInputs};
use crate::optim::lamb::{Lamb, LambConfig, PolyWarmup};
use crate::optim::{Optimizer, ParamGroups};
use crate::rules::Division;
use crate::train::config::local_batch;
use crate::train::engine::{self, Block, BuildContext, RunOptions, RunOutcome, Workload};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use tch::nn::VarStore;
use tch::Device;

/// The training batches: one sequence per row, or packed rows (`methods.packing`).
enum Batches {
    Padded(Prefetcher<BertBatch>),
    Packed(Prefetcher<PackedBatch>),
}

struct State {
    vs: VarStore,
    model: BertForPreTraining,
    /// Trainable parameters sorted by name (the gradient exchange's and the optimizer's order).
    params: ParamGroups,
    /// Every variable sorted by name (broadcast from rank 0 at start).
    all_vars: Vec<tch::Tensor>,
    /// LAMB or AdamW.
    opt: Lamb,
    schedule: PolyWarmup,
    /// Training batches from the loader, handed over ahead of use ([`crate::data::handoff`]).
    batches: Batches,
    /// Training sequences seen over all ranks (counted with packing, where steps differ).
    samples_trained: u64,
    /// Samples in the training set (all ranks).
    train_samples: u64,
    eval_batches: Vec<BertBatch>,
    micro_batches: u64,
    /// Samples per optimizer step on this process (all micro-batches).
    per_process_batch: u64,
    step: i64,
    seq_len: i64,
    /// `methods.amp = "bf16"`: forward passes in a bf16 autocast region.
    autocast: Option<LowPrecision>,
    /// `methods.cuda_graph`: the step captured and replayed (or its CPU twin in tests).
    graphs: Option<StepGraphs>,
    /// Which training batches attend without a mask.
    masks: MaskPolicy,
}

/// Which training batches without padding attend without a mask (FlashAttention on a GPU). A
/// CUDA graph is keyed by its step's input shapes, and a batch without a mask has another key
/// (`BertBatch::into_step_inputs`), so with graphs the choice must not flip back and forth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MaskPolicy {
    /// No graphs: each batch as it is.
    PerBatch,
    /// Graphs, one process: batches drop the mask until the first one with padding; every later
    /// batch carries its mask. So at most one more graph is captured: the key changes once, or
    /// twice when that step's micro-batches are mixed, and that one step runs eagerly in its
    /// warm-up. A data set without padding never carries a mask.
    UntilPadding { seen: bool },
    /// Graphs, several ranks: every batch carries its mask. The ranks must capture at the same
    /// step, and their batches' padding differs.
    Always,
}

impl MaskPolicy {
    fn new(graphs: bool, world_size: usize) -> MaskPolicy {
        match (graphs, world_size) {
            (false, _) => MaskPolicy::PerBatch,
            (true, 1) => MaskPolicy::UntilPadding { seen: false },
            (true, _) => MaskPolicy::Always,
        }
    }

    /// Whether `b` carries its mask; updates the policy's state.
    fn apply(&mut self, b: &mut BertBatch) {
        match self {
            MaskPolicy::PerBatch => {}
            MaskPolicy::UntilPadding { seen } => {
                *seen |= b.padded;
                b.padded |= *seen;
            }
            MaskPolicy::Always => b.padded = true,
        }
    }
}

/// BERT as a trainer workload.
pub struct BertWorkload {
    pub cfg: BertRunConfig,
    pub division: Division,
    pub data_dir: PathBuf,
    pub init_checkpoint: Option<PathBuf>,
    state: Option<State>,
}

impl BertWorkload {
    pub fn new(
        cfg: BertRunConfig,
        division: Division,
        data_dir: PathBuf,
        init_checkpoint: Option<PathBuf>,
    ) -> Self {
        BertWorkload {
            cfg,
            division,
            data_dir,
            init_checkpoint,
            state: None,
        }
    }

    /// How the training steps went through `methods.cuda_graph` (None when it is off).
    pub fn graph_stats(&self) -> Option<GraphStats> {
        self.state.as_ref()?.graphs.as_ref().map(StepGraphs::stats)
    }

    fn state(&mut self) -> Result<&mut State> {
        self.state
            .as_mut()
            .context("the BERT workload was not built")
    }
}

/// LAMB (or AdamW: LAMB without the trust ratio) and its warm-up + polynomial schedule, from
/// `[optimizer]`.
fn lamb(o: &BertOptimizerConfig) -> Result<(Lamb, PolyWarmup)> {
    let opt = Lamb::new(LambConfig {
        beta1: o.beta1,
        beta2: o.beta2,
        eps: o.epsilon,
        weight_decay: o.weight_decay,
        // bucket-wise clipping happens in the gradient exchange, before the all-reduce
        max_grad_norm: (o.gradient_clipping == GradientClipping::Global).then_some(o.max_grad_norm),
        trust_ratio: o.name == BertOpt::Lamb,
    })?;
    let schedule = PolyWarmup {
        base_lr: o.base_learning_rate,
        end_lr: o.end_learning_rate,
        power: o.poly_power,
        total_steps: o.training_steps,
        warmup_steps: o.warmup_steps,
        start_warmup_step: o.start_warmup_step,
    };
    Ok((opt, schedule))
}

impl BertWorkload {
    /// This rank's training batches from DIR/train, prefetched to the device: packed rows
    /// (`methods.packing`) or one sequence per row (`local` of them per micro-batch), with the
    /// number of training samples. `shape`: the data's (sequence length, predictions per
    /// sequence).
    fn training_batches(
        &self,
        ctx: &BuildContext,
        local: usize,
        (seq_len, preds): (usize, usize),
    ) -> Result<(Batches, u64)> {
        let (cfg, t) = (&self.cfg, &self.cfg.train);
        let train_dir = self.data_dir.join("train");
        if cfg.methods.packing {
            let rows = t.global_batch_size / t.packing_factor;
            let per_rank = local_batch(
                &format!("train.global_batch_size / train.packing_factor ({rows} packed rows)"),
                rows,
                ctx.world_size as u64,
                t.gradient_accumulation_steps,
            )?;
            let spec = PackSpec::new(seq_len, cfg.data.max_sequences_per_row, preds)?;
            let loader = PackedLoader::new(
                &train_dir,
                ctx.seed,
                ctx.rank,
                ctx.world_size,
                per_rank as usize,
                spec,
            )?
            .with_expected_factor(t.packing_factor as f64)
            .with_fit(model_fit(cfg));
            let n = loader.total_samples as u64;
            Ok((Batches::Packed(prefetch_packed(loader, ctx.device)?), n))
        } else {
            let loader = TrainLoader::new(
                &train_dir,
                ctx.seed,
                ctx.rank,
                ctx.world_size,
                local,
                ctx.device,
            )?
            .with_assignment(if cfg.methods.balance_tokens {
                Assignment::TokenBalanced
            } else {
                Assignment::Strided
            })
            .with_fit(model_fit(cfg));
            let n = loader.total_samples as u64;
            Ok((Batches::Padded(prefetch(loader, ctx.device)?), n))
        }
    }
}

impl Workload for BertWorkload {
    fn benchmark(&self) -> &'static str {
        "bert"
    }

    fn hyperparameters(&self) -> Vec<(&'static str, Value)> {
        let (n, s) = self
            .state
            .as_ref()
            .map(|s| (s.train_samples, s.seq_len))
            .unwrap_or((0, 0));
        self.cfg.hyperparameters(self.division, n, s)
    }

    fn configure_process(&self, device: tch::Device) -> Result<()> {
        self.cfg.system.configure_process(device)
    }

    fn build(&mut self, ctx: &BuildContext) -> Result<()> {
        let cfg = &self.cfg;
        let vs = VarStore::new(ctx.device);
        let mut model = BertForPreTraining::new(&vs.root(), &cfg.model, &cfg.methods)?;
        if cfg.methods.fp8 {
            // the kernel where it runs (else an error naming why), or the test mode's emulation
            let path = crate::fused::fp8::path_for(ctx.device)?;
            model.configure(|_, k| k.fp8_path = path);
        }
        if let Some(ck) = &self.init_checkpoint {
            let r = model.load_reference(&vs, ck)?;
            tracing::info!(
                "loaded {} tensors from {} (padded vocabulary: {:?})",
                r.loaded,
                ck.display(),
                r.padded_vocab
            );
        }
        let world = ctx.world_size as u64;
        let t = &cfg.train;
        let local = local_batch(
            &format!("train.global_batch_size ({})", t.global_batch_size),
            t.global_batch_size,
            world,
            t.gradient_accumulation_steps,
        )? as usize;
        let eval = load_eval(cfg, &self.data_dir)?;
        let eval_batches = eval.batches(
            cfg.data.eval_batch_size,
            ctx.rank,
            ctx.world_size,
            ctx.device,
        )?;
        // from the shards: a rank may get no eval batch
        let (seq_len, preds) = eval.shape();
        let (batches, train_samples) = self.training_batches(ctx, local, (seq_len, preds))?;
        let seq_len = seq_len as i64;
        let (opt, schedule) = lamb(&cfg.optimizer)?;
        let graphs = ctx.step_graphs(cfg.methods.cuda_graph)?;
        // sorted by name: the same order on every rank (buckets, broadcast)
        let mut names: Vec<(String, tch::Tensor)> = vs.variables().into_iter().collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        self.state = Some(State {
            all_vars: names.into_iter().map(|(_, t)| t).collect(),
            params: ParamGroups::from_var_store(&vs),
            vs,
            model,
            opt,
            schedule,
            train_samples,
            batches,
            samples_trained: 0,
            eval_batches,
            micro_batches: t.gradient_accumulation_steps,
            per_process_batch: t.global_batch_size / world,
            masks: MaskPolicy::new(graphs.is_some(), ctx.world_size),
            step: 0,
            seq_len,
            autocast: amp::bf16_switch(cfg.methods.bf16(), ctx.device, "methods.amp"),
            graphs,
        });
        Ok(())
    }

    fn blocks(&self) -> Result<Vec<Block>> {
        self.cfg.blocks(self.division)
    }

    fn start_block(&mut self, block: &Block) -> Result<u64> {
        Ok(block.epoch_count / self.cfg.train.global_batch_size)
    }

    fn samples_per_step(&self) -> u64 {
        self.cfg.train.global_batch_size
    }

    fn samples_trained(&self) -> Option<u64> {
        if !self.cfg.methods.packing {
            return None;
        }
        self.state.as_ref().map(|s| s.samples_trained)
    }

    fn train_step<'s>(&mut self, sync: &'s mut (dyn GradSync + 's)) -> Result<tch::Tensor> {
        let bucket_clip = (self.cfg.optimizer.gradient_clipping == GradientClipping::Bucket)
            .then_some(self.cfg.optimizer.max_grad_norm);
        let s = self.state()?;
        // this step's micro-batches, 7 tensors each (`BertBatch::into_step_inputs`), or 10 packed
        // (`PackedBatch::into_step_inputs`)
        let per_micro = match s.batches {
            Batches::Padded(_) => 7,
            Batches::Packed(_) => packing::STEP_INPUTS,
        };
        let mut inputs: Vec<tch::Tensor> = Vec::with_capacity(per_micro * s.micro_batches as usize);
        let mut sequences = 0u64;
        for _ in 0..s.micro_batches {
            match &mut s.batches {
                Batches::Padded(p) => {
                    let mut b = next_training_batch(p)?;
                    s.masks.apply(&mut b);
                    inputs.extend(b.into_step_inputs());
                }
                Batches::Packed(p) => {
                    let b = next_training_batch(p)?;
                    sequences += b.global_sequences;
                    inputs.extend(b.into_step_inputs());
                }
            }
        }
        sync.set_bucket_clip(bucket_clip)?;
        s.opt.begin_step(&s.params, s.schedule.lr_at(s.step))?;
        let micro = s.micro_batches as f64;
        let device = s.vs.device();
        // forward, backward, gradient exchange and update: kernels only, no host state
        // (what methods.cuda_graph captures)
        let mut body = |ins: &[tch::Tensor],
                        sync: &mut (dyn GradSync + 's)|
         -> Result<Vec<tch::Tensor>> {
            // set_to_none: the first backward writes the gradients, later ones add to them
            s.params.zero_grad()?;
            let mut total: Option<tch::Tensor> = None;
            let last = ins.len() / per_micro - 1;
            for (m, b) in ins.chunks(per_micro).enumerate() {
                let loss =
                    maybe_autocast(device, s.autocast, || micro_batch_loss(&s.model, b))?? / micro;
                if m == last {
                    // the last backward may start the gradient all-reduces (hooks on .grad)
                    let params = s.params.tensors();
                    sync.before_last_backward(&params, GradSource::GradBuffers)?;
                }
                loss.backward();
                let l = loss.detach();
                total = Some(match total {
                    Some(t) => t + l,
                    None => l,
                });
            }
            // the .grad buffers, averaged in place (a parameter the loss did not reach gets a
            // zero gradient in the exchange, so every rank sends the same list), then the
            // update from this list: LAMB/AdamW clip the global norm of the averaged gradients
            let grads: Vec<tch::Tensor> = s
                .params
                .params
                .iter()
                .map(|p| {
                    let g = p.tensor.grad();
                    if g.defined() {
                        g
                    } else {
                        p.tensor.zeros_like()
                    }
                })
                .collect();
            sync.all_reduce_grads(&grads)?;
            s.opt.apply(&mut s.params, &grads)?;
            // methods.fp8: the scales from the amax histories (this step's amaxes agreed across
            // the ranks first, unless fp8_reduce_amax = false), on the device
            if let Some(amax) = s.model.fp8_amax_to_reduce() {
                sync.all_reduce_max(&[amax])?;
            }
            s.model.fp8_update();
            Ok(vec![
                total.context("train.gradient_accumulation_steps is 0")?
            ])
        };
        let mut out = match s.graphs.as_mut() {
            Some(g) => g.run_with_peers(&inputs, sync, &mut body)?,
            None => body(&inputs, sync)?,
        };
        s.step += 1;
        s.samples_trained += sequences;
        Ok(out.remove(0))
    }

    fn evaluate(&mut self, peers: &mut dyn Peers) -> Result<f64> {
        let s = self.state()?;
        // counts summed on the device, read once
        let mut counts = tch::Tensor::zeros([2], (tch::Kind::Int64, s.vs.device()));
        maybe_autocast(s.vs.device(), s.autocast, || {
            tch::no_grad(|| {
                for b in &s.eval_batches {
                    let (mlm, _) = s.model.forward(
                        &b.input_ids,
                        &b.segment_ids,
                        b.attention_mask(),
                        MlmOn::Positions(&b.masked_positions),
                        false,
                    )?;
                    counts += mlm_correct(&mlm, &b.masked_ids, &b.masked_weights);
                }
                Ok::<_, anyhow::Error>(())
            })
        })??;
        let counts = Vec::<i64>::try_from(counts.to_device(Device::Cpu))?;
        let mut v = [counts[0] as f64, counts[1] as f64];
        peers.all_reduce_sum(&mut v)?;
        if v[1] == 0.0 {
            bail!("the eval set has no masked tokens");
        }
        Ok(v[0] / v[1])
    }

    fn target(&self) -> f64 {
        self.cfg.train.target
    }

    fn state_tensors(&self) -> Vec<tch::Tensor> {
        self.state
            .as_ref()
            .map(|s| s.all_vars.iter().map(|t| t.shallow_clone()).collect())
            .unwrap_or_default()
    }

    fn per_process_batch(&self) -> Option<u64> {
        self.state.as_ref().map(|s| s.per_process_batch)
    }

    fn release_step_graphs(&mut self) {
        if let Some(g) = self.state.as_mut().and_then(|s| s.graphs.as_mut()) {
            g.release();
        }
    }

    /// The trainable parameters, and with `methods.fp8` the FP8 scales and amax histories
    /// (`fp8_state.scale`, `fp8_state.history`: the state the ranks must agree on).
    fn named_parameters(&self) -> Vec<(String, tch::Tensor)> {
        let Some(s) = self.state.as_ref() else {
            return Vec::new();
        };
        let mut named = s.params.named();
        if s.model.methods().fp8 {
            let f = s.model.fp8_state();
            named.push(("fp8_state.scale".into(), f.scale.shallow_clone()));
            named.push(("fp8_state.history".into(), f.history.shallow_clone()));
        }
        named
    }
}

/// The training stream's next batch; its end is an error (the loaders repeat epochs endlessly).
fn next_training_batch<T: DeviceTensors + Send + 'static>(p: &mut Prefetcher<T>) -> Result<T> {
    p.next_batch()
        .context("the BERT training data stream ended")?
}

/// One micro-batch's loss (mean masked-LM loss over its masked tokens + mean NSP loss over its
/// sequences, as the reference): 7 step inputs of a padded batch, or 10 of packed rows.
fn micro_batch_loss(model: &BertForPreTraining, b: &[tch::Tensor]) -> Result<tch::Tensor> {
    let ((mlm, nsp_logits), masked_ids, weights, nsp) = match b {
        [ids, seg, mask, pos, masked_ids, weights, nsp] => (
            model.forward(
                ids,
                seg,
                step_attention_mask(mask),
                MlmOn::Positions(pos),
                true,
            )?,
            masked_ids,
            weights,
            nsp,
        ),
        [ids, seg, positions, slots, cu, cls, nsp, pos, masked_ids, weights] => {
            let x = PackedInputs {
                input_ids: ids,
                segment_ids: seg,
                position_ids: positions,
                slots,
                cu_seqlens: cu,
                cls_positions: cls,
                masked_positions: pos,
            };
            (model.forward_packed(&x, true)?, masked_ids, weights, nsp)
        }
        _ => bail!(
            "a BERT micro-batch has 7 tensors (10 packed), got {}",
            b.len()
        ),
    };
    Ok(pretraining_loss(
        &mlm,
        &nsp_logits,
        masked_ids,
        weights,
        nsp,
    ))
}

/// The packed loader's endless micro-batches, handed over to `device` ahead of use.
fn prefetch_packed(mut loader: PackedLoader, device: Device) -> Result<Prefetcher<PackedBatch>> {
    let items = std::iter::from_fn(move || Some(loader.next_host_batch()));
    Prefetcher::spawn(device, 2, items, |b: PackedHostBatch, t| b.to_device(t))
}

impl DeviceTensors for PackedBatch {
    fn tensors(&self) -> Vec<&tch::Tensor> {
        PackedBatch::tensors(self)
    }
}

/// The loader's endless batches, handed over to `device` ahead of use.
fn prefetch(mut loader: TrainLoader, device: Device) -> Result<Prefetcher<BertBatch>> {
    let items = std::iter::from_fn(move || Some(loader.next_host_batch()));
    Prefetcher::spawn(device, 2, items, |b: HostBatch, t| b.to_device(t))
}

impl DeviceTensors for BertBatch {
    fn tensors(&self) -> Vec<&tch::Tensor> {
        vec![
            &self.input_ids,
            &self.segment_ids,
            &self.input_mask,
            &self.masked_positions,
            &self.masked_ids,
            &self.masked_weights,
            &self.nsp_labels,
        ]
    }
}

/// What the model of `cfg` takes from a shard: its vocabulary and token types.
fn model_fit(cfg: &BertRunConfig) -> ModelFit {
    ModelFit {
        vocab_size: cfg.model.vocab_size,
        type_vocab_size: cfg.model.type_vocab_size,
    }
}

/// One BERT run through the generic trainer.
/// The eval set of `data_dir` for `cfg`, checked against the config: data.eval_samples
/// samples there, every token id within model.vocab_size and segment id within
/// model.type_vocab_size, sequences no longer than model.max_position. The training shards are
/// checked by their headers (their data is read shard by shard during the run, and each shard
/// checked then): every dataset there with an integer type and a consistent shape, and without
/// methods.packing, one shape for all (they share batches) no longer than model.max_position.
/// `mlperf-run bert` calls it before the first run, so that a config that does not fit its data
/// is bad input (exit 2) rather than every run of a set ending aborted.
pub fn load_eval(cfg: &BertRunConfig, data_dir: &Path) -> Result<EvalSet> {
    let dir = data_dir.join("eval");
    let eval = EvalSet::load(&dir, cfg.data.eval_samples)?;
    eval.check_fits(&model_fit(cfg))?;
    let seq_len = eval.shape().0 as i64;
    if seq_len > cfg.model.max_position {
        bail!(
            "{}: the data's seq_len {seq_len} exceeds model.max_position {}: set \
             model.max_position to at least {seq_len}",
            dir.display(),
            cfg.model.max_position
        );
    }
    let train_dir = data_dir.join("train");
    let train_files = shard_files(&train_dir)?;
    let samples = if cfg.methods.packing {
        // packed rows take each sequence's tokens, whatever its shard's padded length; the
        // packer names a sequence longer than a row
        let mut samples = 0;
        for f in &train_files {
            samples += crate::data::bert::Shard::shape(f)?.samples;
        }
        samples
    } else {
        let train = common_shape(&train_files)?;
        if train.seq as i64 > cfg.model.max_position {
            bail!(
                "{}: the training shards' seq_len {} exceeds model.max_position {}: set \
                 model.max_position to at least {}, or give shards of seq_len {} or less",
                train_dir.display(),
                train.seq,
                cfg.model.max_position,
                train.seq,
                cfg.model.max_position
            );
        }
        train.samples
    };
    if samples == 0 {
        return Err(crate::data::bert::no_training_samples(
            &train_dir,
            train_files.len(),
        ));
    }
    Ok(eval)
}

pub fn run_once(
    cfg: &BertRunConfig,
    division: Division,
    data_dir: &Path,
    init_checkpoint: Option<&Path>,
    opts: RunOptions,
) -> Result<RunOutcome> {
    let mut w = BertWorkload::new(
        cfg.clone(),
        division,
        data_dir.to_path_buf(),
        init_checkpoint.map(Path::to_path_buf),
    );
    engine::run_once(&mut w, opts)
}

#[cfg(test)]
mod mask_policy_tests {
    use super::MaskPolicy;
    use crate::data::bert::BertBatch;
    use tch::Tensor;

    fn batch(padded: bool) -> BertBatch {
        let t = || Tensor::zeros([1, 2], (tch::Kind::Int64, tch::Device::Cpu));
        BertBatch {
            input_ids: t(),
            segment_ids: t(),
            input_mask: t(),
            masked_positions: t(),
            masked_ids: t(),
            masked_weights: t(),
            nsp_labels: t(),
            size: 1,
            padded,
        }
    }

    fn carried(mut p: MaskPolicy, padded: &[bool]) -> Vec<bool> {
        padded
            .iter()
            .map(|&x| {
                let mut b = batch(x);
                p.apply(&mut b);
                b.padded
            })
            .collect()
    }

    #[test]
    fn with_graphs_the_mask_choice_flips_at_most_once_and_never_across_ranks() {
        let stream = [false, false, true, false, true, false];
        // no graphs: each batch as it is
        assert_eq!(carried(MaskPolicy::new(false, 4), &stream), stream);
        // one process: mask-free until the first padded batch, masked from then on
        assert_eq!(
            carried(MaskPolicy::new(true, 1), &stream),
            [false, false, true, true, true, true]
        );
        assert_eq!(carried(MaskPolicy::new(true, 1), &[false; 4]), [false; 4]);
        // several ranks: always masked
        assert_eq!(carried(MaskPolicy::new(true, 8), &stream), [true; 6]);
    }
}
