//! BERT training-step throughput on CPU (our side of scripts/bench_bert_step.sh).
//!
//! cargo run --release --example bert_bench_step -- LAYERS HIDDEN HEADS INTER VOCAB BATCH SEQ PREDS STEPS PAD_FRACTION UNPAD THREADS
//! Prints one JSON line: median seconds per step (forward, loss, backward, clip + AdamW step).
//! Same inputs, optimizer (AdamW with the LayerNorm/bias exclusions, global clip 1.0) and
//! padding layout as scripts/bench/bert_ref.py `bench`.

use mlperf_run::models::bert::{pretraining_loss, BertConfig, BertForPreTraining, MlmOn};
use mlperf_run::optim::lamb::{Lamb, LambConfig};
use std::time::Instant;
use tch::{nn, Device, Kind, Tensor};

fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() != 12 {
        anyhow::bail!("usage: bert_bench_step LAYERS HIDDEN HEADS INTER VOCAB BATCH SEQ PREDS STEPS PAD_FRACTION UNPAD(0|1) THREADS");
    }
    let n = |i: usize| -> anyhow::Result<i64> { Ok(a[i].parse()?) };
    let cfg = BertConfig {
        num_layers: n(0)?,
        hidden_size: n(1)?,
        num_heads: n(2)?,
        intermediate_size: n(3)?,
        vocab_size: n(4)?,
        ..BertConfig::large()
    };
    let (b, s, p, steps) = (n(5)?, n(6)?, n(7)?, n(8)? as usize);
    let pad: f64 = a[9].parse()?;
    let unpad = a[10] == "1";
    let threads = n(11)?;
    // as every `mlperf-run` training run (engine::run_once) does
    mlperf_run::train::allocator::keep_freed_host_memory();
    if threads > 0 {
        tch::set_num_threads(threads as i32);
    }
    tch::manual_seed(0);
    let vs = nn::VarStore::new(Device::Cpu);
    let mut model = BertForPreTraining::new(&vs.root(), &cfg)?;
    model.unpad = unpad;
    let mut opt = Lamb::new(
        vs.variables(),
        LambConfig {
            eps: 1e-6,
            weight_decay: 0.01,
            trust_ratio: false,
            ..LambConfig::default()
        },
    )?;
    let len = ((s as f64) * (1.0 - pad)).round() as i64;
    let mask = Tensor::arange(s, (Kind::Int64, Device::Cpu))
        .lt(len)
        .to_kind(Kind::Int64)
        .unsqueeze(0)
        .expand([b, s], false)
        .contiguous();
    let ids = Tensor::randint_low(5, cfg.vocab_size, [b, s], (Kind::Int64, Device::Cpu)) * &mask;
    let seg = ids.zeros_like();
    let pos = Tensor::stack(
        &(0..b)
            .map(|_| Tensor::randperm(len - 1, (Kind::Int64, Device::Cpu)).narrow(0, 0, p) + 1)
            .collect::<Vec<_>>(),
        0,
    )
    .sort(1, false)
    .0;
    let mids = ids.gather(1, &pos, false);
    let w = mids.ones_like().to_kind(Kind::Float);
    let nsp = Tensor::randint(2, [b], (Kind::Int64, Device::Cpu));
    // (step, forward+loss, backward, optimizer) seconds per measured step
    let mut times: Vec<[f64; 4]> = Vec::new();
    let mut last = 0.0;
    for i in 0..steps + 1 {
        let t0 = Instant::now();
        opt.zero_grad()?;
        let (mlm, nspl) = model.forward(&ids, &seg, &mask, MlmOn::Positions(&pos), true);
        let loss = pretraining_loss(&mlm, &nspl, &mids, &w, &nsp);
        let t1 = Instant::now();
        loss.backward();
        let t2 = Instant::now();
        let _ = opt.step(1e-4)?;
        last = loss.double_value(&[]);
        if i > 0 {
            let t3 = Instant::now();
            times.push([
                (t3 - t0).as_secs_f64(),
                (t1 - t0).as_secs_f64(),
                (t2 - t1).as_secs_f64(),
                (t3 - t2).as_secs_f64(),
            ]);
        }
    }
    let med = |k: usize| {
        let mut v: Vec<f64> = times.iter().map(|t| t[k]).collect();
        v.sort_by(|x, y| x.total_cmp(y));
        v[v.len() / 2]
    };
    println!(
        "{{\"impl\": \"mlperf-run\", \"unpad\": {unpad}, \"median_step_s\": {:.5}, \"seq_per_s\": {:.2}, \"forward_s\": {:.4}, \"backward_s\": {:.4}, \"optimizer_s\": {:.4}, \"loss\": {last:.4}}}",
        med(0),
        b as f64 / med(0),
        med(1),
        med(2),
        med(3)
    );
    Ok(())
}
