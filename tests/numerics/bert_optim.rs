//! LAMB and AdamW: step equivalence with a plain PyTorch implementation of the same equations
//! (scripts/bench/bert_ref.py `lamb`, in float64), including clipping, warmup from
//! start_warmup_step, polynomial decay, the LayerNorm/bias exclusions and a zero-norm weight.
#![cfg(feature = "torch")]

use crate::common;

use crate::common::rng::seeded;
use mlperf_run::optim::lamb::{Lamb, LambConfig, PolyWarmup};
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
    let mut opt = Lamb::new(
        params.iter().map(|(n, p)| (n.clone(), p.shallow_clone())),
        cfg.clone(),
    )
    .unwrap();
    assert_eq!(
        opt.excluded_names(),
        vec!["enc.LayerNorm.weight", "enc.dense.bias"]
    );
    for (i, gs) in grads.iter().enumerate() {
        opt.zero_grad().unwrap();
        let loss = params
            .iter()
            .zip(gs)
            .map(|((_, p), g)| (p * g).sum(Kind::Float))
            .fold(Tensor::from(0.0f32), |a, b| a + b);
        loss.backward();
        let gn = opt.step(sched.lr_at(i as i64)).unwrap().double_value(&[]);
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
