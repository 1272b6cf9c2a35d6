//! BERT training-step throughput: our model and optimizer (the step of `mlperf-run bert`:
//! forward, MLM + NSP loss, backward, global clip 1.0 + AdamW with the LayerNorm/bias
//! exclusions), on one fixed batch. Our side of scripts/bench_bert_step.sh (CPU) and
//! scripts/bench_gpu.sh (CUDA). Same inputs, optimizer and padding layout as
//! scripts/bench/bert_ref.py `bench` and scripts/bench/hf_bert_step.py.
//!
//! cargo run --release --example bert_bench_step -- [--layers 24] [--hidden 1024] [--heads 16]
//!     [--inter 4096] [--vocab 30528] [--batch 32] [--seq 512] [--preds 76] [--steps 20]
//!     [--warmup 5] [--pad 0.0] [--unpad] [--threads 0] [--device cpu|cuda] [--bf16] [--lamb]
//!     [--cuda-graph] [--fused-epilogues] [--fused-qkv] [--bf16-residual] [--keep-mask]
//!     [--scatter-attention] [--flash-varlen] [--data DIR]
//!
//! --data DIR: the fixed batch is the first training batch of a BERT data directory (seed 0, one
//! rank), e.g. `mlperf-run data synth-bert --lengths realistic --seq-len 512`: real lengths
//! (about half padding) instead of --pad's equal ones; --seq and --preds come from its shards.
//!
//! Timed window: --warmup steps, a device sync, --steps steps, one device sync at the end (never
//! per step); the loss is read only after that. --bf16: bf16 autocast around forward + loss, as
//! `mlperf-run bert` does with methods.bf16. --lamb: LAMB (layer-wise trust ratio) instead of
//! AdamW, as `mlperf-run bert` trains with optimizer.name = "lamb". Prints one JSON line:
//! seq_per_s, step_ms, window_unix, and on the CPU (where host time is compute time) the median
//! step and phase times (median_step_s, forward_s, backward_s, optimizer_s).
//! --cuda-graph: the step (zero_grad, forward, backward, optimizer kernels) captured once after
//! the warm-up steps and replayed, as `mlperf-run bert` with methods.cuda_graph; on a CPU its
//! twin (`StepGraphs::emulated`, plumbing only); the phase times are then 0.
//! --fused-epilogues: each layer's dense bias + dropout + residual + LayerNorm as one op, as
//! `mlperf-run bert` with methods.fused_epilogues (CUDA kernels via NVRTC on a GPU), and the
//! intermediate dense's bias + GELU as one op too; --no-gelu-epilogue leaves that one unfused
//! (to measure it).
//! --fused-bias-gelu: each layer's intermediate dense + bias + tanh GELU as one op, as
//! `mlperf-run bert --division open` with methods.fused_bias_gelu (cuBLASLt's GELU epilogue on a
//! GPU).
//! --fused-qkv: each layer's query, key and value projections as one matmul, as `mlperf-run bert`
//! with methods.fused_qkv. --bf16-residual (with --bf16): the residual stream in bf16, as with
//! methods.bf16_residual. --unpad attends within each packed sequence with FlashAttention's
//! varlen kernel on a GPU (bf16); --scatter-attention takes the scatter path instead (q/k/v
//! scattered to [B, S], SDPA with the mask), to compare.
//! A batch without padding (--pad 0) attends without a mask, as `mlperf-run bert` does with such
//! batches (`BertBatch::attention_mask`), so a GPU runs FlashAttention; --keep-mask passes its
//! all-ones mask anyway (the memory-efficient kernel on a GPU), to measure that difference.
//! --flash-varlen: such a batch attends through FlashAttention-2's varlen kernel, every sequence
//! at full length, instead of SDPA (cuDNN's attention on an H100 / H200), to compare the two.

mod common;

use anyhow::{bail, Result};
use common::Flags;
use mlperf_run::amp::{maybe_autocast, LowPrecision};
use mlperf_run::cuda_graph::StepGraphs;
use mlperf_run::data::bert::{
    shard_files, step_attention_mask, step_mask_slot, Shard, TrainLoader,
};
use mlperf_run::models::bert::{pretraining_loss, BertConfig, BertForPreTraining, MlmOn};
use mlperf_run::models::varlen_attention::{varlen_failed, VarlenPath};
use mlperf_run::optim::lamb::{Lamb, LambConfig};
use std::time::{Instant, SystemTime};
use tch::{nn, Device, Kind, Tensor};

const USAGE: &str = "bert_bench_step [--layers 24] [--hidden 1024] [--heads 16] [--inter 4096] \
[--vocab 30528] [--batch 32] [--seq 512] [--preds 76] [--steps 20] [--warmup 5] [--pad 0.0] \
[--unpad] [--threads 0] [--device cpu|cuda] [--bf16] [--lamb] [--cuda-graph] [--fused-epilogues] [--no-gelu-epilogue] \
[--fused-bias-gelu] [--fused-qkv] [--bf16-residual] [--keep-mask] [--scatter-attention] \
[--flash-varlen] [--data DIR]";

struct Args {
    cfg: BertConfig,
    batch: i64,
    seq: i64,
    preds: i64,
    steps: usize,
    warmup: usize,
    pad: f64,
    unpad: bool,
    threads: i32,
    device: Device,
    bf16: bool,
    lamb: bool,
    cuda_graph: bool,
    fused_epilogues: bool,
    no_gelu_epilogue: bool,
    fused_bias_gelu: bool,
    fused_qkv: bool,
    bf16_residual: bool,
    keep_mask: bool,
    scatter_attention: bool,
    flash_varlen: bool,
    data: Option<std::path::PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        cfg: BertConfig {
            vocab_size: 30528,
            ..BertConfig::large()
        },
        batch: 32,
        seq: 512,
        preds: 76,
        steps: 20,
        warmup: 5,
        pad: 0.0,
        unpad: false,
        threads: 0,
        device: Device::Cpu,
        bf16: false,
        lamb: false,
        cuda_graph: false,
        fused_epilogues: false,
        no_gelu_epilogue: false,
        fused_bias_gelu: false,
        fused_qkv: false,
        bf16_residual: false,
        keep_mask: false,
        scatter_attention: false,
        flash_varlen: false,
        data: None,
    };
    let mut f = Flags::new(USAGE);
    while let Some(flag) = f.next() {
        match flag.as_str() {
            "--unpad" => a.unpad = true,
            "--bf16" => a.bf16 = true,
            "--lamb" => a.lamb = true,
            "--cuda-graph" => a.cuda_graph = true,
            "--fused-epilogues" => a.fused_epilogues = true,
            "--no-gelu-epilogue" => a.no_gelu_epilogue = true,
            "--fused-bias-gelu" => a.fused_bias_gelu = true,
            "--keep-mask" => a.keep_mask = true,
            "--scatter-attention" => a.scatter_attention = true,
            "--fused-qkv" => a.fused_qkv = true,
            "--bf16-residual" => a.bf16_residual = true,
            "--flash-varlen" => a.flash_varlen = true,
            "--layers" => a.cfg.num_layers = f.parse()?,
            "--hidden" => a.cfg.hidden_size = f.parse()?,
            "--heads" => a.cfg.num_heads = f.parse()?,
            "--inter" => a.cfg.intermediate_size = f.parse()?,
            "--vocab" => a.cfg.vocab_size = f.parse()?,
            "--batch" => a.batch = f.parse()?,
            "--seq" => a.seq = f.parse()?,
            "--preds" => a.preds = f.parse()?,
            "--steps" => a.steps = f.parse()?,
            "--warmup" => a.warmup = f.parse()?,
            "--pad" => a.pad = f.parse()?,
            "--data" => a.data = Some(f.value()?.into()),
            "--threads" => a.threads = f.parse()?,
            "--device" => a.device = f.device()?,
            _ => return Err(f.unknown()),
        }
    }
    if let Some(dir) = &a.data {
        let first = shard_files(&dir.join("train"))?[0].clone();
        let shard = Shard::read(&first)?;
        (a.seq, a.preds) = (shard.seq as i64, shard.preds as i64);
    }
    a.cfg.max_position = a.cfg.max_position.max(a.seq);
    a.cfg.validate()?;
    if a.bf16_residual && !a.bf16 {
        bail!("--bf16-residual keeps the residual stream in bf16 inside bf16 autocast: add --bf16");
    }
    if a.cuda_graph && a.unpad {
        bail!("--cuda-graph needs fixed shapes: not with --unpad");
    }
    if a.steps == 0 || a.batch < 1 || !(0.0..1.0).contains(&a.pad) {
        bail!("need --steps >= 1, --batch >= 1 and --pad in [0, 1)");
    }
    Ok(a)
}

fn unix_now() -> f64 {
    common::unix_seconds(SystemTime::now())
}

fn main() -> Result<()> {
    let a = parse_args()?;
    let (cfg, dev) = (&a.cfg, a.device);
    let (b, s, p) = (a.batch, a.seq, a.preds);
    // as every `mlperf-run` training run (engine::run_once) does
    mlperf_run::train::allocator::keep_freed_host_memory();
    if a.threads > 0 {
        tch::set_num_threads(a.threads);
    }
    tch::manual_seed(0);
    let vs = nn::VarStore::new(dev);
    let mut model = BertForPreTraining::new(&vs.root(), cfg)?;
    model.unpad = a.unpad;
    model.fused_epilogues = a.fused_epilogues;
    model.fused_gelu_epilogue = !a.no_gelu_epilogue;
    model.fused_qkv = a.fused_qkv;
    model.bf16_residual = a.bf16_residual;
    if a.scatter_attention {
        model.varlen_path = VarlenPath::Scatter;
    }
    model.fused_bias_gelu = a.fused_bias_gelu;
    model.flash_varlen_unpadded = a.flash_varlen;
    // AdamW (no trust ratio; LAMB with --lamb) with global clip 1.0 and the LayerNorm/bias
    // exclusions
    let mut opt = Lamb::new(
        vs.variables(),
        LambConfig {
            eps: 1e-6,
            weight_decay: 0.01,
            max_grad_norm: Some(1.0),
            trust_ratio: a.lamb,
            ..LambConfig::default()
        },
    )?;
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
    let precision = a.bf16.then_some(LowPrecision::BFloat16);
    let inputs = [ids, seg, step_mask_slot(mask, padded), pos, mids, w, nsp];
    let mut graphs = match (a.cuda_graph, dev) {
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
            mlperf_run::cuda::synchronize(dev);
            (t_window, w0) = (Instant::now(), unix_now());
        }
        let t0 = Instant::now();
        opt.begin_step(1e-4)?;
        let (mut t1, mut t2) = (t0, t0);
        // the step's kernels (what --cuda-graph captures)
        let mut body = |ins: &[Tensor]| -> Result<Vec<Tensor>> {
            let [ids, seg, mask, pos, mids, w, nsp] = ins else {
                bail!("the step takes 7 input tensors");
            };
            opt.zero_grad()?;
            let loss = maybe_autocast(dev, precision, || {
                let mask = step_attention_mask(mask);
                let (mlm, nspl) = model.forward(ids, seg, mask, MlmOn::Positions(pos), true);
                pretraining_loss(&mlm, &nspl, mids, w, nsp)
            })?;
            t1 = Instant::now();
            loss.backward();
            t2 = Instant::now();
            let _grad_norm = opt.apply()?;
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
    mlperf_run::cuda::synchronize(dev);
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
        "bf16": a.bf16, "unpad": a.unpad, "cuda_graph": a.cuda_graph, "fused_epilogues": a.fused_epilogues, "gelu_epilogue": a.fused_epilogues && !a.no_gelu_epilogue, "fused_bias_gelu": a.fused_bias_gelu, "fused_qkv": a.fused_qkv, "bf16_residual": a.bf16_residual, "attention_mask": padded, "flash_varlen": a.flash_varlen, "unpad_attention": if !a.unpad { "none" } else if a.scatter_attention || varlen_failed() { "scatter" } else if dev.is_cuda() && a.bf16 { "varlen" } else { "scatter" }, "opt": if a.lamb { "lamb" } else { "adamw" }, "batch": b, "seq": s, "steps": a.steps, "warmup": a.warmup,
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
