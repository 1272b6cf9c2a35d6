//! `methods.fused_bias_gelu` on the CPU: the fused "dense + bias + tanh GELU" op
//! (`src/models/fused_bias_gelu.rs`, `shim/fused_bias_gelu.cpp`) against the unfused
//! `x.linear(W, b).gelu("tanh")`.
//!
//! The composite path makes the ATen calls that autograd makes for the unfused ops, so in fp32
//! and under bf16 autocast its output and all gradients are bit-identical to them; against BERT's
//! erf GELU it differs by the approximation only. A tiny BERT with the switch on really learns
//! (its loss falls as the unfused model's does), and the closed division refuses the switch.
//! The cuBLASLt path needs a GPU: `examples/fused_bias_gelu_check` checks it there.
#![cfg(feature = "torch")]

use mlperf_run::amp::{Autocast, LowPrecision};
use mlperf_run::models::bert::{BertConfig, BertForPreTraining, MlmOn};
use mlperf_run::models::fused_bias_gelu::{dense_bias_gelu, lt_built, GeluPath};
use std::path::PathBuf;
use tch::{nn, Device, Kind, Tensor};

/// The op's inputs as leaves that require grad, and an upstream gradient.
struct Inputs {
    x: Tensor,
    w: Tensor,
    b: Tensor,
    dy: Tensor,
}

impl Inputs {
    /// x `lead + [k]`, W `[n, k]`, b `[n]`.
    fn new(lead: &[i64], k: i64, n: i64, seed: i64) -> Inputs {
        tch::manual_seed(seed);
        let f = (Kind::Float, Device::Cpu);
        let mut xs = lead.to_vec();
        xs.push(k);
        let mut ys = lead.to_vec();
        ys.push(n);
        Inputs {
            // pre-activations spread over [-4, 4]: both GELU tails and the bend near 0
            x: (Tensor::randn(xs.as_slice(), f) * 1.5).set_requires_grad(true),
            w: (Tensor::randn([n, k], f) * 0.4).set_requires_grad(true),
            b: (Tensor::randn([n], f) * 0.5).set_requires_grad(true),
            dy: Tensor::randn(ys.as_slice(), f),
        }
    }

    fn leaves(&self) -> [&Tensor; 3] {
        [&self.x, &self.w, &self.b]
    }

    /// y's value and every leaf's gradient after y.backward(dy).
    fn run(&self, y: Tensor) -> Vec<Tensor> {
        for t in self.leaves() {
            let mut g = t.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
        (&y * self.dy.to_kind(y.kind())).sum(y.kind()).backward();
        let mut out = vec![y.detach()];
        out.extend(self.leaves().iter().map(|t| t.grad().copy()));
        out
    }

    fn unfused(&self, approximate: &str) -> Tensor {
        self.x.linear(&self.w, Some(&self.b)).gelu(approximate)
    }

    fn fused(&self, path: GeluPath) -> Tensor {
        let (y, lt) = dense_bias_gelu(&self.x, &self.w, &self.b, path).unwrap();
        assert!(!lt, "the cuBLASLt path ran on CPU tensors");
        y
    }
}

const NAMES: [&str; 4] = ["y", "d x", "d W", "d b"];

fn assert_bit_identical(what: &str, a: &[Tensor], b: &[Tensor]) {
    for ((x, y), name) in a.iter().zip(b).zip(NAMES) {
        assert_eq!(x.kind(), y.kind(), "{what}: {name} dtype");
        assert_eq!(x.size(), y.size(), "{what}: {name} shape");
        let diff = (x.to_kind(Kind::Double) - y.to_kind(Kind::Double))
            .abs()
            .max()
            .double_value(&[]);
        assert!(x.equal(y), "{what}: {name} differs (max abs diff {diff:e})");
    }
}

fn max_abs(a: &Tensor, b: &Tensor) -> f64 {
    (a.to_kind(Kind::Double) - b.to_kind(Kind::Double))
        .abs()
        .max()
        .double_value(&[])
}

#[test]
fn composite_matches_linear_and_tanh_gelu_bit_for_bit() {
    // [tokens, K] as unpadded BERT, [B, S, K] as a batch, a single row, and sizes that are not
    // multiples of 8
    for (lead, k, n) in [
        (vec![40], 24, 64),
        (vec![3, 7], 16, 40),
        (vec![1], 8, 8),
        (vec![13], 10, 33),
    ] {
        let what = format!("x {lead:?} x {k}, W [{n}, {k}]");
        let i = Inputs::new(&lead, k, n, 3);
        let a = i.run(i.unfused("tanh"));
        for path in [GeluPath::Auto, GeluPath::Composite] {
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
    let i = Inputs::new(&[4, 12], 32, 48, 5);
    let under = |f: &dyn Fn() -> Tensor| {
        let _ac = Autocast::enter(Device::Cpu, LowPrecision::BFloat16).unwrap();
        f()
    };
    let a = i.run(under(&|| i.unfused("tanh")));
    let b = i.run(under(&|| i.fused(GeluPath::Auto)));
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
    let i = Inputs::new(&[64], 32, 64, 9);
    let erf = i.run(i.unfused("none"));
    let fused = i.run(i.fused(GeluPath::Auto));
    // tanh vs erf GELU: at most 4.7e-4 apart in value, 8.7e-4 in slope
    let dy = max_abs(&fused[0], &erf[0]);
    assert!(dy > 0.0, "the tanh GELU equals the erf GELU?");
    assert!(dy < 1e-3, "y differs by {dy:e}");
    for (k, name) in NAMES.iter().enumerate().skip(1) {
        let scale = erf[k].abs().max().double_value(&[]);
        let rel = max_abs(&fused[k], &erf[k]) / scale;
        assert!(rel < 1e-2, "{name}: relative difference {rel:e}");
    }
}

#[test]
fn bad_inputs_are_clean_errors() {
    let i = Inputs::new(&[8], 16, 24, 1);
    let f = (Kind::Float, Device::Cpu);
    let err = |x: &Tensor, w: &Tensor, b: &Tensor, path: GeluPath| {
        let msg = format!("{:#}", dense_bias_gelu(x, w, b, path).unwrap_err());
        assert!(msg.starts_with("fused bias+GELU:"), "{msg}");
        assert!(
            !msg.contains("Exception raised from"),
            "C++ backtrace in: {msg}"
        );
        msg
    };
    let msg = err(&i.x, &Tensor::zeros([24, 15], f), &i.b, GeluPath::Auto);
    assert!(msg.contains("do not fit"), "{msg}");
    let msg = err(&i.x, &i.w, &Tensor::zeros([23], f), GeluPath::Auto);
    assert!(msg.contains("do not fit"), "{msg}");
    let msg = err(&i.x, &i.w.to_kind(Kind::Double), &i.b, GeluPath::Composite);
    assert!(msg.contains("one dtype"), "{msg}");
    // the cuBLASLt path on CPU tensors is refused with the reason, not run
    let msg = err(&i.x, &i.w, &i.b, GeluPath::CublasLt);
    assert!(msg.contains("cuBLASLt path cannot run"), "{msg}");
    eprintln!("cuBLASLt path built into this binary: {}", lt_built());
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
fn train_tiny(fused: bool, unpad: bool, bf16: bool, steps: usize) -> Vec<f64> {
    tch::manual_seed(21);
    let vs = nn::VarStore::new(Device::Cpu);
    let mut m = BertForPreTraining::new(&vs.root(), &tiny()).unwrap();
    m.unpad = unpad;
    m.fused_bias_gelu = fused;
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
                m.forward(&ids, &seg, &mask, MlmOn::Positions(&pos), true)
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
    for (unpad, bf16) in [(false, false), (true, true)] {
        let what = format!("unpad {unpad} bf16 {bf16}");
        let off = train_tiny(false, unpad, bf16, 60);
        let on = train_tiny(true, unpad, bf16, 60);
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
    use mlperf_run::train::bert::BertRunConfig;
    use mlperf_run::train::config::Division;
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
