//! LAMB and AdamW: step equivalence with a plain PyTorch implementation of the same equations
//! (scripts/bench/bert_ref.py `lamb`, in float64), including clipping, warmup from
//! start_warmup_step, polynomial decay, the LayerNorm/bias exclusions and a zero-norm weight;
//! and that the one decay-exemption rule (by dimension) is the reference's name rule for BERT.
#![cfg(feature = "torch")]

use crate::common;

use crate::common::rng::seeded;
use mlperf_run::optim::lamb::{Lamb, LambConfig, PolyWarmup};
use mlperf_run::optim::{Optimizer, ParamGroups};
use std::path::PathBuf;
use std::process::Command;
use tch::{Device, Kind, Tensor};

const STEPS: usize = 6;

fn run(trust_ratio: bool) -> Option<f64> {
    let py = common::oracle("lamb_matches_pytorch")?;
    let dir = tempfile::tempdir().unwrap();
    let _turn = seeded(11);
    let shapes: [(&str, &[i64]); 5] = [
        ("enc.dense.weight", &[8, 6]),
        ("enc.dense.bias", &[8]),
        ("enc.LayerNorm.weight", &[6]),
        ("emb.word_embeddings.weight", &[10, 6]),
        ("zero.weight", &[4, 4]),
    ];
    let params: Vec<(String, Tensor)> = shapes
        .iter()
        .map(|(n, s)| {
            let t = if *n == "zero.weight" {
                Tensor::zeros(*s, (Kind::Float, Device::Cpu))
            } else {
                Tensor::randn(*s, (Kind::Float, Device::Cpu)) * 0.5
            };
            (n.to_string(), t.set_requires_grad(true))
        })
        .collect();
    // Gradients: large at first (the global-norm clip bites), small later (it does not).
    let grads: Vec<Vec<Tensor>> = (0..STEPS)
        .map(|i| {
            let scale = if i < 3 { 2.0 } else { 0.01 };
            params
                .iter()
                .map(|(_, p)| Tensor::randn(p.size(), (Kind::Float, Device::Cpu)) * scale)
                .collect()
        })
        .collect();
    let mut saved: Vec<(String, Tensor)> = params
        .iter()
        .map(|(n, p)| (format!("param/{n}"), p.detach().copy()))
        .collect();
    for (i, gs) in grads.iter().enumerate() {
        for ((n, _), g) in params.iter().zip(gs) {
            saved.push((format!("grad{i}/{n}"), g.copy()));
        }
    }
    let inp = dir.path().join("in.safetensors");
    Tensor::write_safetensors(&saved, &inp).unwrap();

    let cfg = LambConfig {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-6,
        weight_decay: 0.01,
        max_grad_norm: Some(1.0),
        trust_ratio,
    };
    let sched = PolyWarmup {
        base_lr: 0.05,
        end_lr: 0.0,
        power: 1.0,
        total_steps: 8,
        warmup_steps: 3,
        start_warmup_step: -1,
    };
    let mut groups =
        ParamGroups::from_named(params.iter().map(|(n, p)| (n.clone(), p.shallow_clone())));
    let mut opt = Lamb::new(cfg.clone()).unwrap();
    assert_eq!(
        groups.exempt_names(),
        vec!["enc.LayerNorm.weight", "enc.dense.bias"]
    );
    for (i, gs) in grads.iter().enumerate() {
        groups.zero_grad().unwrap();
        let loss = params
            .iter()
            .zip(gs)
            .map(|((_, p), g)| (p * g).sum(Kind::Float))
            .fold(Tensor::from(0.0f32), |a, b| a + b);
        loss.backward();
        let g = groups.grads();
        opt.step(&mut groups, &g, sched.lr_at(i as i64)).unwrap();
        let gn = opt.grad_norm().unwrap().double_value(&[]);
        let want = gs
            .iter()
            .map(|g| g.square().sum(Kind::Float).double_value(&[]))
            .sum::<f64>()
            .sqrt();
        assert!(
            (gn - want).abs() < 1e-4 * want.max(1.0),
            "grad norm {gn} vs {want}"
        );
    }

    let hp = serde_json::json!({
        "steps": STEPS, "beta1": cfg.beta1, "beta2": cfg.beta2, "eps": cfg.eps, "weight_decay": cfg.weight_decay,
        "max_grad_norm": 1.0, "trust_ratio": trust_ratio, "base_lr": sched.base_lr, "end_lr": sched.end_lr,
        "power": sched.power, "total_steps": sched.total_steps, "warmup_steps": sched.warmup_steps,
        "start_warmup_step": sched.start_warmup_step,
    });
    let out = dir.path().join("out.safetensors");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/bench/bert_ref.py");
    let o = Command::new(&py)
        .args([
            script.to_str().unwrap(),
            "lamb",
            "--inputs",
            inp.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--hparams",
            &hp.to_string(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let theirs: std::collections::HashMap<String, Tensor> = Tensor::read_safetensors(&out)
        .unwrap()
        .into_iter()
        .collect();
    let mut worst = 0.0f64;
    for (n, p) in &params {
        let d = (p.detach() - &theirs[n]).abs().max().double_value(&[]);
        worst = worst.max(d);
        let moved = (p.detach()
            - saved
                .iter()
                .find(|(k, _)| k == &format!("param/{n}"))
                .unwrap()
                .1
                .shallow_clone())
        .abs()
        .max()
        .double_value(&[]);
        assert!(moved > 1e-3, "{n} did not move ({moved})");
    }
    Some(worst)
}

#[test]
fn lamb_matches_pytorch() {
    if let Some(d) = run(true) {
        eprintln!("LAMB vs PyTorch: max abs diff {d:e}");
        assert!(d < 1e-5, "LAMB: max abs diff {d}");
    }
}

#[test]
fn adamw_matches_pytorch() {
    if let Some(d) = run(false) {
        eprintln!("AdamW vs PyTorch: max abs diff {d:e}");
        assert!(d < 1e-5, "AdamW: max abs diff {d}");
    }
}

/// The one weight-decay exemption rule (`optim::exempt_from_decay`: 1-d tensors) selects exactly
/// the tensors of BertForPreTraining that the MLPerf reference's name rule
/// (`exclude_from_weight_decay = ["LayerNorm", "layer_norm", "bias"]`) selects, with and
/// without the methods that change the layers' code.
#[test]
fn decay_exemption_by_dimension_is_the_reference_name_rule_for_bert() {
    use mlperf_run::methods::BertMethods;
    use mlperf_run::models::bert::{BertConfig, BertForPreTraining};
    let tiny = BertConfig {
        vocab_size: 97,
        hidden_size: 32,
        num_layers: 2,
        num_heads: 4,
        intermediate_size: 64,
        max_position: 24,
        ..BertConfig::large()
    };
    let fused = BertMethods {
        fused_qkv: true,
        fused_epilogues: true,
        fused_bias_gelu: true,
        ..BertMethods::default()
    };
    for methods in [BertMethods::default(), fused] {
        let vs = tch::nn::VarStore::new(Device::Cpu);
        let _model = BertForPreTraining::new(&vs.root(), &tiny, &methods).unwrap();
        let groups = ParamGroups::from_var_store(&vs);
        let by_name: Vec<&str> = groups
            .params
            .iter()
            .map(|p| p.name.as_str())
            .filter(|n| n.contains("LayerNorm") || n.contains("layer_norm") || n.ends_with("bias"))
            .collect();
        assert_eq!(groups.params.len(), vs.variables().len());
        // per layer 6 dense biases and 2 LayerNorms (weight, bias); the embeddings' LayerNorm;
        // the pooler's bias; the MLM transform's bias and LayerNorm; the MLM bias; the NSP bias
        assert_eq!(
            by_name.len(),
            2 * (6 + 4) + 2 + 1 + 3 + 1 + 1,
            "{by_name:?}"
        );
        assert_eq!(groups.exempt_names(), by_name);
    }
}
