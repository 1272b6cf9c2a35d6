//! `methods.fused_bias_gelu` on the CPU: the fused feed-forward op `gelu_tanh(x W1^T + b1) W2^T`
//! (`src/fused/bias_gelu.rs`, `shim/fused_bias_gelu.cpp`) against the unfused
//! `x.linear(W1, b1).gelu("tanh").linear(W2, None)`.
//!
//! The composite path makes the ATen calls that autograd makes for the unfused ops, so in fp32
//! and under bf16 autocast its output and all gradients are bit-identical to them; against BERT's
//! erf GELU it differs by the approximation only. A tiny BERT with the switch on really learns
//! (its loss falls as the unfused model's does), and the closed division refuses the switch.
//! The cuBLASLt path needs a GPU: `examples/fused_bias_gelu_check` checks it there.
#![cfg(feature = "torch")]

use crate::common;

use crate::common::rng::rng_turn;
use mlperf_run::fused::bias_gelu::{dense_gelu_dense, lt_built, lt_probe};
use mlperf_run::gpu::amp::{Autocast, LowPrecision};
use mlperf_run::models::bert::{BertConfig, BertForPreTraining, MlmOn};
use std::path::PathBuf;
use tch::{nn, Device, Kind, Tensor};

/// The op's inputs as leaves that require grad, and an upstream gradient.
struct Inputs {
    x: Tensor,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    dz: Tensor,
}

impl Inputs {
    /// x `lead + [k]`, W1 `[n, k]`, b1 `[n]`, W2 `[o, n]`, drawn from `seed` (the caller holds
    /// the rng turn).
    fn new(lead: &[i64], k: i64, n: i64, o: i64, seed: i64) -> Inputs {
        tch::manual_seed(seed);
        let f = (Kind::Float, Device::Cpu);
        let mut xs = lead.to_vec();
        xs.push(k);
        let mut zs = lead.to_vec();
        zs.push(o);
        Inputs {
            // pre-activations spread over [-4, 4]: both GELU tails and the bend near 0
            x: (Tensor::randn(xs.as_slice(), f) * 1.5).set_requires_grad(true),
            w1: (Tensor::randn([n, k], f) * 0.4).set_requires_grad(true),
            b1: (Tensor::randn([n], f) * 0.5).set_requires_grad(true),
            w2: (Tensor::randn([o, n], f) * 0.3).set_requires_grad(true),
            dz: Tensor::randn(zs.as_slice(), f),
        }
    }

    fn leaves(&self) -> [&Tensor; 4] {
        [&self.x, &self.w1, &self.b1, &self.w2]
    }

    /// z's value and every leaf's gradient after z.backward(dz).
    fn run(&self, y: Tensor) -> Vec<Tensor> {
        for t in self.leaves() {
            let mut g = t.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
        (&y * self.dz.to_kind(y.kind())).sum(y.kind()).backward();
        let mut out = vec![y.detach()];
        out.extend(self.leaves().iter().map(|t| t.grad().copy()));
        out
    }

    fn unfused(&self, approximate: &str) -> Tensor {
        self.x
            .linear(&self.w1, Some(&self.b1))
            .gelu(approximate)
            .linear::<&Tensor>(&self.w2, None)
    }

    fn fused(&self, path: mlperf_run::fused::Path) -> Tensor {
        let (y, lt) = dense_gelu_dense(&self.x, &self.w1, &self.b1, &self.w2, path).unwrap();
        assert!(!lt, "the cuBLASLt path ran on CPU tensors");
        y
    }
}

const NAMES: [&str; 5] = ["z", "d x", "d W1", "d b1", "d W2"];

fn assert_bit_identical(what: &str, a: &[Tensor], b: &[Tensor]) {
    common::tensors::assert_bit_identical(what, &NAMES, a, b);
}

fn max_abs(a: &Tensor, b: &Tensor) -> f64 {
    (a.to_kind(Kind::Double) - b.to_kind(Kind::Double))
        .abs()
        .max()
        .double_value(&[])
}

#[test]
fn composite_matches_linear_and_tanh_gelu_bit_for_bit() {
    let _turn = rng_turn();
    // [tokens, K] as unpadded BERT, [B, S, K] as a batch, a single row, and sizes that are not
    // multiples of 8
    for (lead, k, n, o) in [
        (vec![40], 24, 64, 24),
        (vec![3, 7], 16, 40, 8),
        (vec![1], 8, 8, 8),
        (vec![13], 10, 33, 7),
    ] {
        let what = format!("x {lead:?} x {k}, W1 [{n}, {k}], W2 [{o}, {n}]");
        let i = Inputs::new(&lead, k, n, o, 3);
        let a = i.run(i.unfused("tanh"));
        for path in [
            mlperf_run::fused::Path::Auto,
            mlperf_run::fused::Path::Reference,
        ] {
            let b = i.run(i.fused(path));
            assert_bit_identical(&format!("{what} {path:?}"), &a, &b);
        }
        // the gradients are real: not zero and not the erf GELU's
        assert!(
            a[1].abs().sum(Kind::Double).double_value(&[]) > 0.0,
            "{what}"
        );
    }
}

#[test]
fn bf16_autocast_matches_unfused_bit_for_bit() {
    let _turn = rng_turn();
    let i = Inputs::new(&[4, 12], 32, 48, 32, 5);
    let under = |f: &dyn Fn() -> Tensor| {
        let _ac = Autocast::enter(Device::Cpu, LowPrecision::BFloat16).unwrap();
        f()
    };
    let a = i.run(under(&|| i.unfused("tanh")));
    let b = i.run(under(&|| i.fused(mlperf_run::fused::Path::Auto)));
    assert_eq!(
        a[0].kind(),
        Kind::BFloat16,
        "autocast ran the matmul in bf16"
    );
    assert_eq!(b[1].kind(), Kind::Float, "fp32 leaves get fp32 gradients");
    assert_bit_identical("bf16 autocast", &a, &b);
}

#[test]
fn it_differs_from_berts_erf_gelu_by_the_approximation_only() {
    let _turn = rng_turn();
    let i = Inputs::new(&[64], 32, 64, 32, 9);
    let erf = i.run(i.unfused("none"));
    let fused = i.run(i.fused(mlperf_run::fused::Path::Auto));
    // tanh vs erf GELU: at most 4.7e-4 apart in value, 8.7e-4 in slope
    let dz = max_abs(&fused[0], &erf[0]) / erf[0].abs().max().double_value(&[]);
    assert!(dz > 0.0, "the tanh GELU equals the erf GELU?");
    assert!(dz < 1e-3, "z differs by {dz:e} (relative)");
    for (k, name) in NAMES.iter().enumerate().skip(1) {
        let scale = erf[k].abs().max().double_value(&[]);
        let rel = max_abs(&fused[k], &erf[k]) / scale;
        assert!(rel < 1e-2, "{name}: relative difference {rel:e}");
    }
}

#[test]
fn bad_inputs_are_clean_errors() {
    let _turn = rng_turn();
    let i = Inputs::new(&[8], 16, 24, 16, 1);
    let f = (Kind::Float, Device::Cpu);
    let err = |w1: &Tensor, b1: &Tensor, w2: &Tensor, path: mlperf_run::fused::Path| {
        let msg = format!(
            "{:#}",
            dense_gelu_dense(&i.x, w1, b1, w2, path).unwrap_err()
        );
        assert!(msg.starts_with("fused bias+GELU:"), "{msg}");
        assert!(
            !msg.contains("Exception raised from"),
            "C++ backtrace in: {msg}"
        );
        msg
    };
    let msg = err(
        &Tensor::zeros([24, 15], f),
        &i.b1,
        &i.w2,
        mlperf_run::fused::Path::Auto,
    );
    assert!(msg.contains("do not fit"), "{msg}");
    let msg = err(
        &i.w1,
        &Tensor::zeros([23], f),
        &i.w2,
        mlperf_run::fused::Path::Auto,
    );
    assert!(msg.contains("do not fit"), "{msg}");
    let msg = err(
        &i.w1,
        &i.b1,
        &Tensor::zeros([16, 23], f),
        mlperf_run::fused::Path::Auto,
    );
    assert!(msg.contains("do not fit"), "{msg}");
    let msg = err(
        &i.w1.to_kind(Kind::Double),
        &i.b1,
        &i.w2,
        mlperf_run::fused::Path::Reference,
    );
    assert!(msg.contains("one dtype"), "{msg}");
    // the cuBLASLt path on CPU tensors is refused with the reason, not run
    let msg = err(&i.w1, &i.b1, &i.w2, mlperf_run::fused::Path::Fast);
    assert!(msg.contains("cuBLASLt path cannot run"), "{msg}");
    eprintln!("cuBLASLt path built into this binary: {}", lt_built());
}

#[test]
fn cublaslt_entry_points_resolve_in_a_cuda_build() {
    if !lt_built() {
        let msg = format!("{:#}", lt_probe().unwrap_err());
        assert!(msg.contains("without the `cuda` feature"), "{msg}");
        eprintln!("SKIP cublaslt_entry_points_resolve_in_a_cuda_build: a build without `cuda`");
        return;
    }
    // libtorch_cuda links libcublasLt, so it is loaded even on a machine without a GPU
    lt_probe().unwrap_or_else(|e| panic!("cuBLASLt entry points: {e:#}"));
}

fn tiny() -> BertConfig {
    BertConfig {
        vocab_size: 61,
        hidden_size: 32,
        num_layers: 2,
        num_heads: 4,
        intermediate_size: 64,
        max_position: 16,
        type_vocab_size: 2,
        hidden_dropout: 0.0,
        attention_dropout: 0.0,
        layer_norm_eps: 1e-12,
    }
}

/// Adam steps of a tiny BERT on one fixed generated batch (memorisation); the losses.
fn train_tiny(fused: bool, epilogues: bool, unpad: bool, bf16: bool, steps: usize) -> Vec<f64> {
    tch::manual_seed(21);
    let vs = nn::VarStore::new(Device::Cpu);
    let mut m = BertForPreTraining::new(&vs.root(), &tiny(), &Default::default()).unwrap();
    m.configure(|m, _| m.unpad = unpad);
    m.configure(|m, _| m.fused_bias_gelu = fused);
    m.configure(|m, _| m.fused_epilogues = epilogues);
    use nn::OptimizerConfig;
    let mut opt = nn::Adam::default().build(&vs, 3e-3).unwrap();
    let (b, s, preds) = (4, 16, 3);
    let c = (Kind::Int64, Device::Cpu);
    let ids = Tensor::randint(61, [b, s], c);
    let seg = Tensor::randint(2, [b, s], c);
    let lens = Tensor::from_slice(&[16i64, 9, 12, 14]);
    let mask = Tensor::arange(s, c)
        .unsqueeze(0)
        .lt_tensor(&lens.unsqueeze(1))
        .to_kind(Kind::Int64);
    let pos = Tensor::randint(9, [b, preds], c);
    let labels = Tensor::randint(61, [b, preds], c);
    let weights = Tensor::ones([b, preds], (Kind::Float, Device::Cpu));
    let nsp = Tensor::randint(2, [b], c);
    (0..steps)
        .map(|_| {
            let (mlm, nsp_logits) = {
                let _ac =
                    bf16.then(|| Autocast::enter(Device::Cpu, LowPrecision::BFloat16).unwrap());
                m.forward(&ids, &seg, Some(&mask), MlmOn::Positions(&pos), true)
                    .unwrap()
            };
            let loss = mlperf_run::models::bert::pretraining_loss(
                &mlm,
                &nsp_logits,
                &labels,
                &weights,
                &nsp,
            );
            opt.backward_step(&loss);
            loss.double_value(&[])
        })
        .collect()
}

#[test]
fn tiny_bert_learns_with_the_switch_on_as_with_it_off() {
    let _turn = rng_turn();
    // alone (plain output bias + dropout + LayerNorm after the op) and with the fused epilogues
    // (the output bias goes into the epilogue op)
    for (epilogues, unpad, bf16) in [
        (false, false, false),
        (true, true, true),
        (true, false, false),
    ] {
        let what = format!("fused_epilogues {epilogues} unpad {unpad} bf16 {bf16}");
        let off = train_tiny(false, epilogues, unpad, bf16, 60);
        let on = train_tiny(true, epilogues, unpad, bf16, 60);
        assert!(on.iter().all(|l| l.is_finite()), "{what}: {on:?}");
        // the same model up to the GELU's form: the first losses agree closely ...
        let d0 = (on[0] - off[0]).abs();
        assert!(
            d0 < 1e-2 * off[0],
            "{what}: first loss {} vs {}",
            on[0],
            off[0]
        );
        // ... and both memorise the batch: the loss falls to a fifth or less
        for (name, l) in [("off", &off), ("on", &on)] {
            let (first, last) = (l[0], *l.last().unwrap());
            assert!(last < first / 5.0, "{what} {name}: loss {first} -> {last}");
        }
    }
}

#[test]
fn the_switch_is_open_division_only_and_logged() {
    use mlperf_run::rules::Division;
    use mlperf_run::train::bert::BertRunConfig;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert");
    let closed = std::fs::read_to_string(dir.join("tiny_cpu.toml")).unwrap();
    let on = closed.replace("[methods]", "[methods]\nfused_bias_gelu = true");
    assert!(
        !BertRunConfig::parse(&closed, Division::Closed)
            .unwrap()
            .methods
            .fused_bias_gelu
    );
    let msg = format!(
        "{:#}",
        BertRunConfig::parse(&on, Division::Closed).unwrap_err()
    );
    assert!(
        msg.contains("methods.fused_bias_gelu is an open-division method"),
        "{msg}"
    );
    let open = std::fs::read_to_string(dir.join("tiny_cpu_open.toml")).unwrap();
    let on = open.replace("[methods]", "[methods]\nfused_bias_gelu = true");
    let cfg = BertRunConfig::parse(&on, Division::Open).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(cfg.methods.fused_bias_gelu);
    let kv = cfg.hyperparameters(Division::Open, 1000, 128);
    let logged = kv.iter().find(|(k, _)| *k == "method_fused_bias_gelu");
    assert_eq!(
        logged.map(|(_, v)| v.clone()),
        Some(serde_json::json!(true))
    );
}
