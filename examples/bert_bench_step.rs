//! BERT training-step throughput: our model and optimizer (the step of `mlperf-run bert`:
//! forward, MLM + NSP loss, backward, global clip 1.0 + AdamW with the LayerNorm/bias
//! exclusions), on one fixed batch. Our side of scripts/bench_bert_step.sh (CPU) and
//! scripts/bench_gpu.sh (CUDA). Same inputs, optimizer and padding layout as
//! scripts/bench/bert_ref.py `bench` and scripts/bench/hf_bert_step.py.
//!
//! cargo run --release --example bert_bench_step -- [--layers 24] [--hidden 1024] [--heads 16]
//!     [--inter 4096] [--vocab 30528] [--batch 32] [--seq 512] [--preds 76] [--steps 20]
//!     [--warmup 5] [--pad 0.0] [--threads 0] [--device cpu|cuda] [--lamb]
//!     [--methods amp=bf16,cuda_graph,fused_epilogues,fused_qkv,bf16_residual,...]
//!     [--no-gelu-epilogue] [--no-fp8-fused-cast] [--keep-mask] [--scatter-attention] [--flash-varlen] [--data DIR]
//!
//! --methods: BERT's methods as a config's `[methods]` table names them
//! ([`mlperf_run::methods::BertMethods`]): a bare name turns one on, `name=value` sets one
//! (`amp=bf16`). The model takes them whole, as `mlperf-run bert` does.
//!
//! --data DIR: the fixed batch is the first training batch of a BERT data directory (seed 0, one
//! rank), e.g. `mlperf-run data synth-bert --lengths realistic --seq-len 512`: real lengths
//! (about half padding) instead of --pad's equal ones; --seq and --preds come from its shards.
//!
//! Timed window: --warmup steps, a device sync, --steps steps, one device sync at the end (never
//! per step); the loss is read only after that. amp=bf16: bf16 autocast around forward + loss, as
//! `mlperf-run bert` does with methods.amp = "bf16". --lamb: LAMB (layer-wise trust ratio) instead of
//! AdamW, as `mlperf-run bert` trains with optimizer.name = "lamb". Prints one JSON line:
//! seq_per_s, step_ms, window_unix, and on the CPU (where host time is compute time) the median
//! step and phase times (median_step_s, forward_s, backward_s, optimizer_s).
//! cuda_graph: the step (zero_grad, forward, backward, optimizer kernels) captured once after
//! the warm-up steps and replayed, as `mlperf-run bert` with methods.cuda_graph; on a CPU its
//! twin (`StepGraphs::emulated`, plumbing only); the phase times are then 0.
//! fused_epilogues: each layer's dense bias + dropout + residual + LayerNorm as one op, as
//! `mlperf-run bert` with methods.fused_epilogues (CUDA kernels via NVRTC on a GPU), and the
//! intermediate dense's bias + GELU as one op too; --no-gelu-epilogue leaves that one unfused
//! (to measure it). With fp8 too, the fused ops also write the E4M3 cast and amax of what they
//! feed an FP8 linear; --no-fp8-fused-cast leaves the casts to the linears (to measure them).
//! fused_bias_gelu: each layer's intermediate dense + bias + tanh GELU as one op, as
//! `mlperf-run bert --division open` with methods.fused_bias_gelu (cuBLASLt's GELU epilogue on a
//! GPU).
//! fused_qkv: each layer's query, key and value projections as one matmul, as `mlperf-run bert`
//! with methods.fused_qkv. bf16_residual (with amp=bf16): the residual stream in bf16, as with
//! methods.bf16_residual. unpad attends within each packed sequence with FlashAttention's
//! varlen kernel on a GPU (bf16); --scatter-attention takes the scatter path instead (q/k/v
//! scattered to [B, S], SDPA with the mask), to compare.
//! A batch without padding (--pad 0) attends without a mask, as `mlperf-run bert` does with such
//! batches (`BertBatch::attention_mask`), so a GPU runs FlashAttention; --keep-mask passes its
//! all-ones mask anyway (the memory-efficient kernel on a GPU), to measure that difference.
//! --flash-varlen: such a batch attends through FlashAttention-2's varlen kernel, every sequence
//! at full length, instead of SDPA (cuDNN's attention on an H100 / H200), to compare the two.

mod common;

use anyhow::{bail, Result};
use clap::Parser;
use mlperf_run::data::bert::{
    shard_files, step_attention_mask, step_mask_slot, Shard, TrainLoader,
};
use mlperf_run::fused::varlen_attention::varlen_failed;
use mlperf_run::gpu::amp::{maybe_autocast, LowPrecision};
use mlperf_run::gpu::cuda_graph::StepGraphs;
use mlperf_run::methods::BertMethods;
use mlperf_run::models::bert::{pretraining_loss, BertConfig, BertForPreTraining, MlmOn};
use mlperf_run::optim::lamb::{Lamb, LambConfig};
use mlperf_run::optim::{Optimizer, ParamGroups};
use std::time::{Instant, SystemTime};
use tch::{nn, Device, Kind, Tensor};

/// BERT training-step throughput (one fixed batch; prints one JSON line).
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    shape: common::BertShapeArgs,
    #[arg(long, default_value_t = 32)]
    batch: i64,
    #[arg(long, default_value_t = 512)]
    seq: i64,
    #[arg(long, default_value_t = 76)]
    preds: i64,
    #[arg(long, default_value_t = 20)]
    steps: usize,
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Share of each sequence that is padding (equal lengths), in [0, 1).
    #[arg(long, default_value_t = 0.0)]
    pad: f64,
    /// libtorch intra-op threads (0: its default).
    #[arg(long, default_value_t = 0)]
    threads: i32,
    #[arg(long, value_parser = common::parse_device, default_value = "cpu")]
    device: Device,
    /// LAMB (layer-wise trust ratio) instead of AdamW.
    #[arg(long)]
    lamb: bool,
    /// The methods, as a config's [methods] names them: e.g. amp=bf16,cuda_graph,fused_qkv.
    #[arg(long, value_parser = common::parse_methods::<BertMethods>, default_value = "")]
    methods: BertMethods,
    /// With fused_epilogues: leave the intermediate dense's bias + GELU unfused (to measure it).
    #[arg(long)]
    no_gelu_epilogue: bool,
    /// With fp8 and fused_epilogues: each FP8 linear casts its own input instead of the fused
    /// op that wrote it (KernelSwitches::fp8_fused_cast off, to measure the fused casts).
    #[arg(long)]
    no_fp8_fused_cast: bool,
    /// Pass a batch's all-ones mask anyway (the memory-efficient kernel on a GPU).
    #[arg(long)]
    keep_mask: bool,
    /// With unpad: the scatter path (q/k/v scattered to [B, S], SDPA with the mask).
    #[arg(long)]
    scatter_attention: bool,
    /// A batch without padding attends through FlashAttention-2's varlen kernel.
    #[arg(long)]
    flash_varlen: bool,
    /// The fixed batch is the first training batch of this BERT data directory.
    #[arg(long)]
    data: Option<std::path::PathBuf>,
}

/// The arguments, checked; the model shape they give.
fn parse_args() -> Result<(Args, BertConfig)> {
    let mut a = Args::parse();
    let mut cfg = a.shape.config();
    if let Some(dir) = &a.data {
        let first = shard_files(&dir.join("train"))?[0].clone();
        let shard = Shard::read(&first)?;
        (a.seq, a.preds) = (shard.seq as i64, shard.preds as i64);
    }
    cfg.max_position = cfg.max_position.max(a.seq);
    cfg.validate()?;
    a.methods.validate()?;
    if a.steps == 0 || a.batch < 1 || !(0.0..1.0).contains(&a.pad) {
        bail!("need --steps >= 1, --batch >= 1 and --pad in [0, 1)");
    }
    Ok((a, cfg))
}

fn unix_now() -> f64 {
    common::unix_seconds(SystemTime::now())
}

fn main() -> Result<()> {
    let (a, cfg) = parse_args()?;
    let (cfg, dev) = (&cfg, a.device);
    let m = &a.methods;
    let (b, s, p) = (a.batch, a.seq, a.preds);
    // as every `mlperf-run` training run (engine::run_once) does
    mlperf_run::train::allocator::keep_freed_host_memory();
    if a.threads > 0 {
        tch::set_num_threads(a.threads);
    }
    tch::manual_seed(0);
    let vs = nn::VarStore::new(dev);
    let mut model = BertForPreTraining::new(&vs.root(), cfg, m)?;
    model.configure(|_, k| {
        k.fused_gelu_epilogue = !a.no_gelu_epilogue;
        k.fp8_fused_cast = !a.no_fp8_fused_cast;
        if a.scatter_attention {
            k.varlen_path = mlperf_run::fused::Path::Reference;
        }
        k.flash_varlen_unpadded = a.flash_varlen;
    });
    if m.fp8 {
        // the _scaled_mm kernel, or (MLPERF_RUN_TEST_EMULATE_FP8=1, e.g. the smoke run) the
        // emulated path; refused elsewhere
        let path = mlperf_run::fused::fp8::path_for(dev)?;
        model.configure(|_, k| k.fp8_path = path);
    }
    // AdamW (no trust ratio; LAMB with --lamb) with global clip 1.0 and the LayerNorm/bias
    // exclusions (the 1-d parameters)
    let mut params = ParamGroups::from_var_store(&vs);
    let mut opt = Lamb::new(LambConfig {
        eps: 1e-6,
        weight_decay: 0.01,
        max_grad_norm: Some(1.0),
        trust_ratio: a.lamb,
        ..LambConfig::default()
    })?;
    let len = ((s as f64) * (1.0 - a.pad)).round() as i64;
    if len < p + 1 {
        bail!("{len} real tokens per sequence cannot hold {p} predictions");
    }
    let cpu = (Kind::Int64, Device::Cpu);
    let mask = Tensor::arange(s, cpu)
        .lt(len)
        .to_kind(Kind::Int64)
        .unsqueeze(0)
        .expand([b, s], false)
        .contiguous();
    let ids = Tensor::randint_low(5, cfg.vocab_size, [b, s], cpu) * &mask;
    let seg = ids.zeros_like();
    let pos = Tensor::stack(
        &(0..b)
            .map(|_| Tensor::randperm(len - 1, cpu).narrow(0, 0, p) + 1)
            .collect::<Vec<_>>(),
        0,
    )
    .sort(1, false)
    .0;
    let mids = ids.gather(1, &pos, false);
    let w = mids.ones_like().to_kind(Kind::Float);
    let nsp = Tensor::randint(2, [b], cpu);
    let [ids, seg, mask, pos, mids, w, nsp] = match &a.data {
        Some(dir) => {
            // the data's own masks: `padded` is recomputed below, as for --pad
            let d = TrainLoader::new(&dir.join("train"), 0, 0, 1, b as usize, Device::Cpu)?
                .next_batch()?;
            [
                d.input_ids,
                d.segment_ids,
                d.input_mask,
                d.masked_positions,
                d.masked_ids,
                d.masked_weights,
                d.nsp_labels,
            ]
        }
        None => [ids, seg, mask, pos, mids, w, nsp],
    };
    let real_tokens = mask.sum(Kind::Int64).int64_value(&[]);
    // what the batch hand-off decides on the host (`BertBatch::padded`)
    let padded = real_tokens < b * s || a.keep_mask;
    let [ids, seg, mask, pos, mids, w, nsp] =
        [ids, seg, mask, pos, mids, w, nsp].map(|t| t.to_device(dev));
    let precision = m.bf16().then_some(LowPrecision::BFloat16);
    let inputs = [ids, seg, step_mask_slot(mask, padded), pos, mids, w, nsp];
    let mut graphs = match (m.cuda_graph, dev) {
        (false, _) => None,
        (true, Device::Cuda(_)) => Some(StepGraphs::new(dev, a.warmup.min(3) as u32)?),
        (true, _) => Some(StepGraphs::emulated(a.warmup.min(3) as u32)),
    };

    // (step, forward+loss, backward, optimizer) host seconds per timed step: compute time on
    // the CPU only (on CUDA the host runs ahead of the device)
    let mut times: Vec<[f64; 4]> = Vec::new();
    let mut loss = Tensor::zeros([], (Kind::Float, dev));
    // the first step's loss, read after the timed window (the report's training check)
    let mut first: Option<Tensor> = None;
    let (mut t_window, mut w0) = (Instant::now(), unix_now());
    for i in 0..a.warmup + a.steps {
        if i == a.warmup {
            mlperf_run::gpu::cuda::synchronize(dev);
            (t_window, w0) = (Instant::now(), unix_now());
        }
        let t0 = Instant::now();
        opt.begin_step(&params, 1e-4)?;
        let (mut t1, mut t2) = (t0, t0);
        // the step's kernels (what --cuda-graph captures)
        let mut body = |ins: &[Tensor]| -> Result<Vec<Tensor>> {
            let [ids, seg, mask, pos, mids, w, nsp] = ins else {
                bail!("the step takes 7 input tensors");
            };
            params.zero_grad()?;
            let loss = maybe_autocast(dev, precision, || {
                let mask = step_attention_mask(mask);
                let (mlm, nspl) = model.forward(ids, seg, mask, MlmOn::Positions(pos), true)?;
                Ok::<_, anyhow::Error>(pretraining_loss(&mlm, &nspl, mids, w, nsp))
            })??;
            t1 = Instant::now();
            loss.backward();
            t2 = Instant::now();
            let grads = params.grads();
            opt.apply(&mut params, &grads)?;
            model.fp8_update();
            Ok(vec![loss.detach()])
        };
        let mut out = match graphs.as_mut() {
            Some(g) => g.run(&inputs, &mut body)?,
            None => body(&inputs)?,
        };
        loss = out.remove(0);
        if i == 0 {
            first = Some(loss.shallow_clone());
        }
        let t3 = Instant::now();
        if i >= a.warmup {
            times.push([
                (t3 - t0).as_secs_f64(),
                (t1 - t0).as_secs_f64(),
                (t2 - t1).as_secs_f64(),
                (t3 - t2.max(t1)).as_secs_f64(),
            ]);
        }
    }
    mlperf_run::gpu::cuda::synchronize(dev);
    let window = t_window.elapsed().as_secs_f64();
    let w1 = unix_now();
    let last = loss.double_value(&[]);
    if !last.is_finite() {
        bail!("non-finite loss {last}");
    }
    let first = first.map(|t| t.double_value(&[]));
    let steps = a.steps as f64;
    let mut json = serde_json::json!({
        "impl": "mlperf-run",
        "device": if dev.is_cuda() { "cuda" } else { "cpu" },
        "bf16": m.bf16(), "unpad": m.unpad, "cuda_graph": m.cuda_graph, "fused_epilogues": m.fused_epilogues, "gelu_epilogue": m.fused_epilogues && !a.no_gelu_epilogue, "fused_bias_gelu": m.fused_bias_gelu, "fused_qkv": m.fused_qkv, "bf16_residual": m.bf16_residual, "fp8": m.fp8, "fp8_fused_cast": m.fp8 && m.fused_epilogues && !a.no_fp8_fused_cast, "attention_mask": padded, "flash_varlen": a.flash_varlen, "unpad_attention": if !m.unpad { "none" } else if a.scatter_attention || varlen_failed() { "scatter" } else if dev.is_cuda() && m.bf16() { "varlen" } else { "scatter" }, "opt": if a.lamb { "lamb" } else { "adamw" }, "batch": b, "seq": s, "steps": a.steps, "warmup": a.warmup,
        "seq_per_s": b as f64 * steps / window,
        "step_ms": 1000.0 * window / steps,
        "window_unix": [w0, w1],
        "loss": last,
        "losses_first_last": [first, last],
        "real_token_fraction": real_tokens as f64 / (b * s) as f64,
        "data": a.data.as_ref().map(|d| d.display().to_string()),
    });
    if !dev.is_cuda() {
        let med = |k: usize| common::median(&times.iter().map(|t| t[k]).collect::<Vec<_>>());
        if let Some(o) = json.as_object_mut() {
            for (k, i) in [
                ("median_step_s", 0),
                ("forward_s", 1),
                ("backward_s", 2),
                ("optimizer_s", 3),
            ] {
                o.insert(k.into(), med(i).into());
            }
        }
    }
    println!("{json}");
    Ok(())
}
