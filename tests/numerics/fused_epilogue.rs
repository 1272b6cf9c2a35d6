//! `methods.fused_epilogues` on the CPU: the fused "dense + dropout + residual + LayerNorm" op
//! (`src/fused/epilogue.rs`, `shim/fused_epilogue.cpp`) against the unfused ops.
//!
//! The composite path draws its dropout mask exactly as `at::dropout` does on the CPU
//! (`empty_like(x).bernoulli_(1-p)`, scaled, multiplied) and differentiates with the same ATen
//! backward ops, so in fp32 (and under bf16 autocast) its outputs, all gradients and the RNG
//! state afterwards are bit-identical to the unfused ops; a whole BERT trained with the switch
//! on and off ends with identical losses and parameters. The CUDA kernels' source is compiled
//! with NVRTC (no GPU needed) so that syntax errors show up on the CPU.
#![cfg(feature = "torch")]

use crate::common;

use crate::common::rng::{rng_turn, seeded};
use crate::common::tensors::max_rel;
use mlperf_run::fused::epilogue::{
    bias_dropout_add_ln, dense_dropout_add_ln, kernel_built, nvrtc_compile,
    set_thread_mask_draw_in_kernel, Epilogue,
};
use mlperf_run::gpu::amp::{Autocast, LowPrecision};
use mlperf_run::models::bert::{BertConfig, BertForPreTraining, MlmOn};
use std::path::PathBuf;
use tch::{nn, Device, Kind, Tensor};

/// The op's inputs as leaves that require grad.
struct Inputs {
    x: Tensor,
    w: Tensor,
    b: Tensor,
    residual: Tensor,
    gamma: Tensor,
    beta: Tensor,
    /// upstream gradient for y
    dy: Tensor,
}

impl Inputs {
    fn new(rows: i64, inner: i64, h: i64, seed: i64) -> Inputs {
        tch::manual_seed(seed);
        let leaf = |s: &[i64], scale: f64, shift: f64| {
            (Tensor::randn(s, (Kind::Float, Device::Cpu)) * scale + shift).set_requires_grad(true)
        };
        Inputs {
            x: leaf(&[rows, inner], 1.0, 0.0),
            w: leaf(&[h, inner], 0.2, 0.0),
            b: leaf(&[h], 0.5, 0.0),
            residual: leaf(&[rows, h], 1.0, 0.3),
            gamma: leaf(&[h], 0.3, 1.0),
            beta: leaf(&[h], 0.3, 0.0),
            dy: Tensor::randn([rows, h], (Kind::Float, Device::Cpu)),
        }
    }

    fn leaves(&self) -> [&Tensor; 6] {
        [
            &self.x,
            &self.w,
            &self.b,
            &self.residual,
            &self.gamma,
            &self.beta,
        ]
    }

    fn zero_grads(&self) {
        for t in self.leaves() {
            let mut g = t.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
    }

    /// y's value and every leaf's gradient after y.backward(dy).
    fn run(&self, y: Tensor) -> Vec<Tensor> {
        self.zero_grads();
        // d y = dy exactly: the gradient of sum(y * dy)
        (&y * &self.dy).sum(y.kind()).backward();
        let mut out = vec![y.detach()];
        out.extend(self.leaves().iter().map(|t| t.grad().copy()));
        out
    }
}

const NAMES: [&str; 7] = ["y", "d x", "d W", "d b", "d residual", "d gamma", "d beta"];

fn unfused(i: &Inputs, p: f64, train: bool) -> Tensor {
    let h = i.x.linear(&i.w, Some(&i.b)).dropout(p, train);
    (h + &i.residual).layer_norm([i.w.size()[0]], Some(&i.gamma), Some(&i.beta), 1e-12, true)
}

fn epilogue<'a>(i: &'a Inputs, p: f64, train: bool, mask: Option<&'a Tensor>) -> Epilogue<'a> {
    Epilogue {
        residual: &i.residual,
        gamma: &i.gamma,
        beta: &i.beta,
        eps: 1e-12,
        p,
        train,
        mask,
        path: mlperf_run::fused::Path::Auto,
        out: None,
    }
}

fn fused(i: &Inputs, p: f64, train: bool) -> Tensor {
    let (y, kernel) = dense_dropout_add_ln(&i.x, &i.w, &i.b, &epilogue(i, p, train, None)).unwrap();
    assert!(!kernel, "the CUDA kernel path ran on CPU tensors");
    y
}

fn assert_bit_identical(what: &str, a: &[Tensor], b: &[Tensor]) {
    common::tensors::assert_bit_identical(what, &NAMES, a, b);
}

/// Fused (composite) vs unfused on one shape, with a fixed seed before each: outputs, the six
/// gradients and the RNG state after them all bit-identical.
fn compare(rows: i64, p: f64, train: bool) {
    let _turn = rng_turn();
    let what = format!("rows {rows} p {p} train {train}");
    let i = Inputs::new(rows, 24, 32, 7);
    tch::manual_seed(11);
    let a = i.run(unfused(&i, p, train));
    let after_a = Tensor::rand([4], (Kind::Float, Device::Cpu));
    tch::manual_seed(11);
    let b = i.run(fused(&i, p, train));
    let after_b = Tensor::rand([4], (Kind::Float, Device::Cpu));
    assert_bit_identical(&what, &a, &b);
    assert!(
        after_a.equal(&after_b),
        "{what}: the RNG was consumed differently"
    );
    if train && p > 0.0 {
        // the mask really dropped something: about p of d x's... of y's pre-norm inputs; seen
        // through d b, which differs from the no-dropout gradient
        tch::manual_seed(11);
        let c = i.run(fused(&i, 0.0, train));
        assert!(!c[3].equal(&b[3]), "{what}: dropout changed nothing");
    }
}

#[test]
fn padded_rows_match_unfused_bit_for_bit() {
    // [B*S, H] with B*S = 4 x 12
    for (p, train) in [(0.0, true), (0.1, true), (0.1, false), (0.0, false)] {
        compare(48, p, train);
    }
}

#[test]
fn unpadded_tokens_match_unfused_bit_for_bit() {
    // [T, H]: an odd token count, as after unpadding
    for (p, train) in [(0.0, true), (0.1, true), (0.1, false)] {
        compare(37, p, train);
    }
}

#[test]
fn bf16_autocast_matches_unfused_bit_for_bit() {
    let _turn = rng_turn();
    for (p, train) in [(0.1, true), (0.0, false)] {
        let what = format!("bf16 autocast p {p} train {train}");
        let i = Inputs::new(40, 24, 32, 3);
        let run = |fuse: bool| {
            tch::manual_seed(5);
            let y = {
                let _ac = Autocast::enter(Device::Cpu, LowPrecision::BFloat16).unwrap();
                if fuse {
                    fused(&i, p, train)
                } else {
                    unfused(&i, p, train)
                }
            };
            // as the unfused LayerNorm under autocast: fp32 out
            assert_eq!(y.kind(), Kind::Float, "{what}: y dtype (fused {fuse})");
            i.run(y)
        };
        let a = run(false);
        let b = run(true);
        assert_bit_identical(&what, &a, &b);
    }
}

#[test]
fn a_given_mask_is_exactly_the_unfused_dropout_with_that_mask() {
    let _turn = rng_turn();
    let p = 0.25;
    let i = Inputs::new(30, 24, 32, 9);
    let mask = Tensor::rand([30, 32], (Kind::Float, Device::Cpu))
        .ge(p)
        .to_kind(Kind::Float);
    let keep = mask.sum(Kind::Float).double_value(&[]) / (30.0 * 32.0);
    assert!((keep - 0.75).abs() < 0.1, "mask keeps {keep}");
    let h = i.x.linear(&i.w, Some(&i.b));
    let y_ref = (h * (&mask / (1.0 - p)) + &i.residual).layer_norm(
        [32],
        Some(&i.gamma),
        Some(&i.beta),
        1e-12,
        true,
    );
    let a = i.run(y_ref);
    let (y, _) =
        dense_dropout_add_ln(&i.x, &i.w, &i.b, &epilogue(&i, p, true, Some(&mask))).unwrap();
    let b = i.run(y);
    assert_bit_identical("given mask", &a, &b);
    // the mask is an input, not changed by the op
    assert_eq!(mask.sum(Kind::Float).double_value(&[]) / 960.0, keep);
}

#[test]
fn separate_bias_matches_within_rounding() {
    // The kernel path's form: h = x W^T without bias, the bias added inside the op. On the CPU
    // the composite adds it after the matmul instead of inside addmm: equal up to fp32 rounding
    // (a relative 1e-5 on outputs and gradients).
    let _turn = rng_turn();
    let i = Inputs::new(33, 24, 32, 13);
    for (p, train) in [(0.1, true), (0.0, false)] {
        tch::manual_seed(17);
        let a = i.run(unfused(&i, p, train));
        tch::manual_seed(17);
        let h = i.x.linear::<Tensor>(&i.w, None);
        let (y, _) = bias_dropout_add_ln(&h, Some(&i.b), &epilogue(&i, p, train, None)).unwrap();
        let b = i.run(y);
        for ((x, y), name) in a.iter().zip(&b).zip(NAMES) {
            let r = max_rel(y, x);
            assert!(r < 1e-5, "p {p} train {train}: {name} max rel diff {r:e}");
        }
    }
}

#[test]
fn a_single_row_without_batch_dimension_gets_a_bias_gradient_of_its_shape() {
    // h [H] (1-d): the bias gradient is d h itself, not a sum over every dimension
    let f = (Kind::Float, Device::Cpu);
    let _turn = seeded(3);
    let h = Tensor::randn([32], f).set_requires_grad(true);
    let b = Tensor::randn([32], f).set_requires_grad(true);
    let r = Tensor::randn([32], f).set_requires_grad(true);
    let (gamma, beta) = (Tensor::ones([32], f), Tensor::zeros([32], f));
    let e = Epilogue {
        residual: &r,
        gamma: &gamma,
        beta: &beta,
        eps: 1e-12,
        p: 0.0,
        train: false,
        mask: None,
        path: mlperf_run::fused::Path::Reference,
        out: None,
    };
    let (y, _) = bias_dropout_add_ln(&h, Some(&b), &e).unwrap();
    let dy = Tensor::randn([32], f);
    (&y * &dy).sum(Kind::Float).backward();
    let (gh, gb) = (h.grad(), b.grad());
    assert_eq!(gb.size(), vec![32], "d bias shape");
    assert!(gb.equal(&gh), "d bias = d h for a 1-d h");
    // and it is the unfused ops' gradient
    let (h2, b2) = (
        h.detach().set_requires_grad(true),
        b.detach().set_requires_grad(true),
    );
    let y2 = (&h2 + &b2 + r.detach()).layer_norm([32], Some(&gamma), Some(&beta), 1e-12, true);
    (&y2 * &dy).sum(Kind::Float).backward();
    assert!(b2.grad().equal(&gb), "matches the unfused bias gradient");
}

#[test]
fn bad_inputs_are_clean_errors() {
    let _turn = rng_turn();
    let i = Inputs::new(8, 24, 32, 1);
    let wrong = Tensor::zeros([8, 31], (Kind::Float, Device::Cpu));
    let mut e = epilogue(&i, 0.1, true, None);
    e.residual = &wrong;
    let msg = format!(
        "{:#}",
        dense_dropout_add_ln(&i.x, &i.w, &i.b, &e).unwrap_err()
    );
    assert!(msg.starts_with("fused epilogue:"), "{msg}");
    assert!(msg.contains("same shape"), "{msg}");
    assert!(
        !msg.contains("Exception raised from"),
        "C++ backtrace in: {msg}"
    );
    let mut e = epilogue(&i, 1.0, true, None);
    e.path = mlperf_run::fused::Path::Reference;
    let msg = format!(
        "{:#}",
        dense_dropout_add_ln(&i.x, &i.w, &i.b, &e).unwrap_err()
    );
    assert!(msg.contains("[0, 1)"), "{msg}");
    // the kernel path on CPU tensors is refused with the reason, not run
    let mut e = epilogue(&i, 0.1, true, None);
    e.path = mlperf_run::fused::Path::Fast;
    let msg = format!(
        "{:#}",
        dense_dropout_add_ln(&i.x, &i.w, &i.b, &e).unwrap_err()
    );
    assert!(msg.contains("kernel path is not usable"), "{msg}");
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
        hidden_dropout: 0.1,
        attention_dropout: 0.1,
        layer_norm_eps: 1e-12,
    }
}

/// A few SGD steps of a tiny BERT with dropout on, on generated batches; the losses and the
/// final parameters.
fn train_tiny(fused: bool, unpad: bool, bf16: bool) -> (Vec<f64>, Vec<(String, Tensor)>) {
    train_tiny_on(
        fused.then_some(mlperf_run::fused::Path::Auto),
        unpad,
        bf16,
        false,
    )
}

/// [`train_tiny`] with the fused epilogues on the given path (None: unfused), and with
/// `methods.fused_qkv` (whose backward kernel takes the same path) when `qkv`.
fn train_tiny_on(
    fused: Option<mlperf_run::fused::Path>,
    unpad: bool,
    bf16: bool,
    qkv: bool,
) -> (Vec<f64>, Vec<(String, Tensor)>) {
    tch::manual_seed(21);
    let vs = nn::VarStore::new(Device::Cpu);
    let mut m = BertForPreTraining::new(&vs.root(), &tiny(), &Default::default()).unwrap();
    m.configure(|m, _| m.unpad = unpad);
    m.configure(|m, _| m.fused_epilogues = fused.is_some());
    m.configure(|_, k| k.fused_epilogue_path = fused.unwrap_or(mlperf_run::fused::Path::Auto));
    m.configure(|m, _| m.fused_qkv = qkv);
    let mut opt = nn::Sgd::default().build(&vs, 0.05).unwrap();
    use nn::OptimizerConfig;
    let (b, s, preds) = (4, 16, 3);
    let mut losses = Vec::new();
    for step in 0..6 {
        let ids = Tensor::randint(61, [b, s], (Kind::Int64, Device::Cpu));
        let seg = Tensor::randint(2, [b, s], (Kind::Int64, Device::Cpu));
        // each sequence has 9 + k real tokens (padding varies per row)
        let lens = Tensor::from_slice(&[16i64, 9, 12, 14]).roll([step], [0]);
        let mask = Tensor::arange(s, (Kind::Int64, Device::Cpu))
            .unsqueeze(0)
            .lt_tensor(&lens.unsqueeze(1))
            .to_kind(Kind::Int64);
        let pos = Tensor::randint(9, [b, preds], (Kind::Int64, Device::Cpu));
        let labels = Tensor::randint(61, [b, preds], (Kind::Int64, Device::Cpu));
        let weights = Tensor::ones([b, preds], (Kind::Float, Device::Cpu));
        let nsp = Tensor::randint(2, [b], (Kind::Int64, Device::Cpu));
        let (mlm, nsp_logits) = {
            let _ac = bf16.then(|| Autocast::enter(Device::Cpu, LowPrecision::BFloat16).unwrap());
            m.forward(&ids, &seg, Some(&mask), MlmOn::Positions(&pos), true)
                .unwrap()
        };
        let loss =
            mlperf_run::models::bert::pretraining_loss(&mlm, &nsp_logits, &labels, &weights, &nsp);
        opt.backward_step(&loss);
        losses.push(loss.double_value(&[]));
    }
    let mut params: Vec<(String, Tensor)> = vs
        .variables()
        .into_iter()
        .map(|(k, v)| (k, v.detach().copy()))
        .collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    (losses, params)
}

#[test]
fn tiny_bert_trains_identically_with_the_switch_on_and_off() {
    let _turn = rng_turn();
    for (unpad, bf16) in [(false, false), (true, false), (false, true), (true, true)] {
        let what = format!("unpad {unpad} bf16 {bf16}");
        let (la, pa) = train_tiny(false, unpad, bf16);
        let (lb, pb) = train_tiny(true, unpad, bf16);
        assert!(la.iter().all(|l| l.is_finite()), "{what}: {la:?}");
        assert_eq!(la, lb, "{what}: losses");
        assert_eq!(pa.len(), pb.len());
        for ((na, a), (nb, b)) in pa.iter().zip(&pb) {
            assert_eq!(na, nb);
            assert!(a.equal(b), "{what}: parameter {na} differs");
        }
    }
}

#[test]
fn tiny_bert_trains_through_the_emulated_cuda_kernels_as_through_the_composite_path() {
    // The CUDA kernels (on the CPU emulator) in the model: the dense layers' bias goes into the
    // kernel (dense_dropout_add_ln's kernel form), the dropout mask is drawn as bytes, and the
    // LayerNorm runs in fp32 inside. Same math as the composite path; only the rounding (and
    // under autocast the fp32 residual sum) differs.
    let _turn = rng_turn();
    // the same masks on both paths: ATen's bernoulli_ draws the kernels' too (by default the
    // vectorised forward draws its own; tests/numerics/fused_epilogue_kernels.rs checks those)
    set_thread_mask_draw_in_kernel(false);
    // (unpadded rows take the same kernels; the kernel tests cover row counts). With fused QKV
    // too, whose backward kernel (the gradients side by side, the bias's column sums) runs
    // emulated as well.
    for (unpad, bf16, qkv, tol) in [
        (false, false, false, 1e-5),
        (false, true, false, 2e-3),
        (false, true, true, 2e-3),
    ] {
        let what = format!("unpad {unpad} bf16 {bf16} fused QKV {qkv}");
        let (la, pa) = train_tiny_on(Some(mlperf_run::fused::Path::Reference), unpad, bf16, qkv);
        let (lb, pb) = train_tiny_on(Some(mlperf_run::fused::Path::Emulated), unpad, bf16, qkv);
        assert!(lb.iter().all(|l| l.is_finite()), "{what}: {lb:?}");
        let worst_loss = la
            .iter()
            .zip(&lb)
            .map(|(a, b)| (a - b).abs() / a.abs())
            .fold(0.0, f64::max);
        let worst_param = pa
            .iter()
            .zip(&pb)
            .map(|((na, a), (nb, b))| {
                assert_eq!(na, nb);
                // absolute: the parameters are O(1) or smaller, and some (the attention key
                // bias, whose gradient is 0 up to rounding) stay at rounding noise
                (b - a).abs().max().double_value(&[])
            })
            .fold(0.0, f64::max);
        eprintln!(
            "{what}: losses {la:?} vs {lb:?}; max rel loss diff {worst_loss:.2e}, max abs \
             parameter diff {worst_param:.2e}"
        );
        assert!(
            worst_loss <= tol,
            "{what}: losses differ by {worst_loss:e} (bound {tol:e})"
        );
        assert!(
            worst_param <= tol,
            "{what}: parameters differ by {worst_param:e} (bound {tol:e})"
        );
    }
}

#[test]
fn cuda_kernels_compile_with_nvrtc_for_sm80_and_sm90() {
    let Some(nvrtc) = common::venv_nvrtc() else {
        eprintln!(
            "SKIP cuda_kernels_compile_with_nvrtc_for_sm80_and_sm90: no libnvrtc.so.13 in the \
             torch venv (a CPU-only torch?); set MLPERF_RUN_NVRTC=/path/to/libnvrtc.so"
        );
        return;
    };
    let variants = [
        (Kind::BFloat16, Kind::Float, Kind::Float), // BERT under bf16 autocast
        (Kind::Float, Kind::Float, Kind::Float),
        (Kind::Half, Kind::Half, Kind::Half),
        (Kind::BFloat16, Kind::BFloat16, Kind::BFloat16), // methods.bf16_residual
    ];
    for arch in ["compute_80", "compute_90", "sm_80", "sm_90"] {
        for (h, r, o) in variants {
            let size = nvrtc_compile(&nvrtc, arch, h, r, o)
                .unwrap_or_else(|e| panic!("{arch} {h:?}/{r:?}/{o:?}: {e:#}"));
            assert!(size > 1000, "{arch}: a {size}-byte binary");
        }
    }
    // NVRTC's errors come back as errors (not a crash): an architecture it does not know
    let msg = format!(
        "{:#}",
        nvrtc_compile(&nvrtc, "sm_1", Kind::Float, Kind::Float, Kind::Float).unwrap_err()
    );
    assert!(msg.contains("NVRTC"), "{msg}");
    // and a missing library is a clean error
    let msg = format!(
        "{:#}",
        nvrtc_compile(
            std::path::Path::new("/nonexistent/libnvrtc.so"),
            "sm_90",
            Kind::Float,
            Kind::Float,
            Kind::Float
        )
        .unwrap_err()
    );
    assert!(msg.contains("cannot load NVRTC"), "{msg}");
    eprintln!("kernel path built into this binary: {}", kernel_built());
}

#[test]
fn the_switch_is_a_config_key_allowed_in_both_divisions_and_logged() {
    use mlperf_run::rules::Division;
    use mlperf_run::train::bert::BertRunConfig;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let on = text.replace("[methods]", "[methods]\nfused_epilogues = true");
    for division in [Division::Closed, Division::Open] {
        let off = BertRunConfig::parse(&text, division).unwrap();
        assert!(!off.methods.fused_epilogues, "default off");
        let cfg =
            BertRunConfig::parse(&on, division).unwrap_or_else(|e| panic!("{division:?}: {e:#}"));
        assert!(cfg.methods.fused_epilogues);
        let kv = cfg.hyperparameters(division, 1000, 128);
        let logged = kv.iter().find(|(k, _)| *k == "method_fused_epilogues");
        assert_eq!(
            logged.map(|(_, v)| v.clone()),
            Some(serde_json::json!(true)),
            "{division:?}"
        );
    }
}
