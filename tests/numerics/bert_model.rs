//! BERT model: parameter count against the reference module (PyTorch), checkpoint conversion and
//! forward equivalence with PyTorch on a randomly initialised reference-layout checkpoint.
#![cfg(feature = "torch")]

use crate::common;

use crate::common::rng::{rng_turn, seeded};
use mlperf_run::models::bert::{pretraining_loss, BertConfig, BertForPreTraining, MlmOn};
use std::path::{Path, PathBuf};
use std::process::Command;
use tch::{nn, Device, Kind, Tensor};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A python with torch + safetensors (the project venv), or None (skip unless CI requires it).
fn torch_python(test: &str) -> Option<PathBuf> {
    let py = common::oracle(test)?;
    let ok = Command::new(&py)
        .args(["-c", "import torch, safetensors"])
        .output()
        .map(|o| o.status.success());
    if ok.unwrap_or(false) {
        Some(py)
    } else if common::required() {
        panic!("{test}: the venv python lacks torch or safetensors (run scripts/setup.sh)");
    } else {
        eprintln!("SKIP {test}: torch/safetensors not importable (run scripts/setup.sh)");
        None
    }
}

fn py(python: &Path, args: &[&str]) -> String {
    let out = Command::new(python)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn cfg_json(c: &BertConfig) -> String {
    serde_json::to_string(c).unwrap()
}

fn count_ours(c: &BertConfig) -> i64 {
    let vs = nn::VarStore::new(Device::Cpu);
    let _m = BertForPreTraining::new(&vs.root(), c, &Default::default()).unwrap();
    vs.variables().values().map(|t| t.numel() as i64).sum()
}

fn tiny() -> BertConfig {
    BertConfig {
        vocab_size: 97,
        hidden_size: 32,
        num_layers: 2,
        num_heads: 4,
        intermediate_size: 64,
        max_position: 24,
        type_vocab_size: 2,
        hidden_dropout: 0.1,
        attention_dropout: 0.1,
        layer_norm_eps: 1e-12,
    }
}

#[test]
fn parameter_count_matches_reference() {
    let _turn = rng_turn();
    // Ours, built for real, at BERT-Large (padded vocabulary, as NVIDIA trains it) and tiny.
    let large = BertConfig {
        vocab_size: 30528,
        ..BertConfig::large()
    };
    let ours_large = count_ours(&large);
    assert_eq!(ours_large, large.param_count());
    assert_eq!(count_ours(&tiny()), tiny().param_count());
    // The reference module's own count (PyTorch, shapes only), at 30,522 and 30,528.
    let Some(python) = torch_python("parameter_count_matches_reference") else {
        return;
    };
    let script = root().join("scripts/bench/bert_ref.py");
    let configs = [BertConfig::large(), large.clone(), tiny()];
    let mut args = vec![script.to_str().unwrap().to_string(), "count".into()];
    for c in &configs {
        args.extend(["--config".to_string(), cfg_json(c)]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let counts = py(&python, &args);
    let theirs: Vec<i64> = counts.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(theirs.len(), configs.len());
    for (c, t) in configs.iter().zip(theirs) {
        assert_eq!(t, c.param_count(), "reference count for {c:?}");
    }
    assert_eq!(BertConfig::large().param_count(), 336_226_108);
}

/// Inputs with padding: sequence k has `len - 3k` real tokens. The caller holds the rng turn.
fn inputs(c: &BertConfig, b: i64, s: i64) -> (Tensor, Tensor, Tensor) {
    tch::manual_seed(3);
    let lengths: Vec<i64> = (0..b).map(|k| s - 3 * k).collect();
    let mask = Tensor::arange(s, (Kind::Int64, Device::Cpu))
        .unsqueeze(0)
        .lt_tensor(&Tensor::from_slice(&lengths).unsqueeze(1))
        .to_kind(Kind::Int64);
    let ids = Tensor::randint_low(1, c.vocab_size, [b, s], (Kind::Int64, Device::Cpu)) * &mask;
    let seg = Tensor::arange(s, (Kind::Int64, Device::Cpu))
        .unsqueeze(0)
        .ge(s / 2)
        .to_kind(Kind::Int64)
        .expand([b, s], false)
        * &mask;
    (ids, seg.contiguous(), mask)
}

#[test]
fn converted_checkpoint_forward_matches_pytorch() {
    let Some(python) = torch_python("converted_checkpoint_forward_matches_pytorch") else {
        return;
    };
    let _turn = rng_turn();
    let dir = tempfile::tempdir().unwrap();
    let c = tiny();
    let ckpt = dir.path().join("ref.pt");
    let st = dir.path().join("ref.safetensors");
    let script = root().join("scripts/bench/bert_ref.py");
    py(
        &python,
        &[
            script.to_str().unwrap(),
            "make-ckpt",
            "--config",
            &cfg_json(&c),
            "--seed",
            "5",
            "--out",
            ckpt.to_str().unwrap(),
        ],
    );
    py(
        &python,
        &[
            root()
                .join("scripts/convert_bert_checkpoint")
                .to_str()
                .unwrap(),
            ckpt.to_str().unwrap(),
            st.to_str().unwrap(),
        ],
    );

    let (b, s) = (4, 20);
    let (ids, seg, mask) = inputs(&c, b, s);
    let inp = dir.path().join("in.safetensors");
    Tensor::write_safetensors(
        &[
            ("input_ids", &ids),
            ("segment_ids", &seg),
            ("input_mask", &mask),
        ],
        &inp,
    )
    .unwrap();
    let out = dir.path().join("out.safetensors");
    py(
        &python,
        &[
            script.to_str().unwrap(),
            "forward",
            "--config",
            &cfg_json(&c),
            "--ckpt",
            ckpt.to_str().unwrap(),
            "--inputs",
            inp.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let theirs: std::collections::HashMap<String, Tensor> = Tensor::read_safetensors(&out)
        .unwrap()
        .into_iter()
        .collect();

    let vs = nn::VarStore::new(Device::Cpu);
    let mut model = BertForPreTraining::new(&vs.root(), &c, &Default::default()).unwrap();
    let report = model.load_reference(&vs, &st).unwrap();
    assert_eq!(report.loaded, vs.variables().len());
    let valid = mask.unsqueeze(-1).to_kind(Kind::Float);
    for (unpad, fused) in [(false, true), (true, true), (false, false), (true, false)] {
        model.configure(|m, _| m.unpad = unpad);
        model.configure(|m, _| m.fused_attention = fused);
        let (mlm, nsp) = tch::no_grad(|| {
            model
                .forward(&ids, &seg, Some(&mask), MlmOn::All, false)
                .unwrap()
        });
        let d_nsp = (&nsp - &theirs["nsp"]).abs().max().double_value(&[]);
        // Padding positions are outputs nobody uses; compare the real tokens.
        let d_mlm = ((&mlm - &theirs["mlm"]) * &valid)
            .abs()
            .max()
            .double_value(&[]);
        eprintln!("unpad={unpad} fused={fused}: max abs diff mlm {d_mlm:e}, nsp {d_nsp:e}");
        assert!(
            d_nsp < 1e-4 && d_mlm < 1e-4,
            "unpad={unpad}: max abs diff mlm {d_mlm}, nsp {d_nsp}"
        );
        assert!(
            theirs["mlm"].abs().max().double_value(&[]) > 0.1,
            "outputs are not trivially zero"
        );
        if !unpad {
            let full = (&mlm - &theirs["mlm"]).abs().max().double_value(&[]);
            assert!(
                full < 1e-4,
                "padded mode differs at padding positions: {full}"
            );
        }
    }
    // Positions mode equals gathering the full logits.
    let pos = Tensor::from_slice(&[1i64, 5, 2, 7, 3, 3, 4, 9]).view([4, 2]);
    let (mlm_pos, _) = tch::no_grad(|| {
        model
            .forward(&ids, &seg, Some(&mask), MlmOn::Positions(&pos), false)
            .unwrap()
    });
    let gathered = theirs["mlm"].gather(
        1,
        &pos.unsqueeze(-1).expand([4, 2, c.vocab_size], false),
        false,
    );
    assert!((mlm_pos - gathered).abs().max().double_value(&[]) < 1e-4);

    // A perturbed checkpoint must not match (the comparison can fail).
    let mut bad: Vec<(String, Tensor)> = Tensor::read_safetensors(&st).unwrap();
    for (n, t) in bad.iter_mut() {
        if n == "bert.encoder.layer.1.attention.self.value.bias" {
            *t = &*t + 0.5;
        }
    }
    let bad_path = dir.path().join("bad.safetensors");
    Tensor::write_safetensors(&bad, &bad_path).unwrap();
    model.load_reference(&vs, &bad_path).unwrap();
    model.configure(|m, _| m.unpad = false);
    let (mlm_bad, _) = tch::no_grad(|| {
        model
            .forward(&ids, &seg, Some(&mask), MlmOn::All, false)
            .unwrap()
    });
    assert!((mlm_bad - &theirs["mlm"]).abs().max().double_value(&[]) > 1e-3);
}

#[test]
fn loading_reports_missing_and_misshaped_tensors() {
    let _turn = rng_turn();
    let dir = tempfile::tempdir().unwrap();
    let c = tiny();
    let vs = nn::VarStore::new(Device::Cpu);
    let model = BertForPreTraining::new(&vs.root(), &c, &Default::default()).unwrap();
    let vars = vs.variables();
    let mut named: Vec<(String, Tensor)> =
        vars.iter().map(|(k, v)| (k.clone(), v.detach())).collect();
    named.retain(|(k, _)| k != "cls.seq_relationship.bias");
    let p = dir.path().join("missing.safetensors");
    Tensor::write_safetensors(&named, &p).unwrap();
    let err = format!("{:#}", model.load_reference(&vs, &p).unwrap_err());
    assert!(
        err.contains("cls.seq_relationship.bias") && err.contains("missing.safetensors"),
        "{err}"
    );
    named.push((
        "cls.seq_relationship.bias".into(),
        Tensor::zeros([3], (Kind::Float, Device::Cpu)),
    ));
    Tensor::write_safetensors(&named, &p).unwrap();
    let err = format!("{:#}", model.load_reference(&vs, &p).unwrap_err());
    assert!(err.contains("shape [3]"), "{err}");
    let err = format!(
        "{:#}",
        model
            .load_reference(&vs, &dir.path().join("nope.safetensors"))
            .unwrap_err()
    );
    assert!(err.contains("convert_bert_checkpoint"), "{err}");
    // An invalid shape is an error, not a panic.
    assert!(BertForPreTraining::new(
        &vs.root(),
        &BertConfig { num_heads: 5, ..c },
        &Default::default()
    )
    .is_err());
}

/// The CPU twin of `methods.bf16`: the forward pass in a bf16 autocast region (C++ shim) gives
/// fp32 logits within bf16 rounding of the fp32 pass, padded and unpadded alike, and training
/// under autocast still fits a batch.
#[test]
fn bf16_autocast_forward_tracks_fp32_and_trains() {
    use mlperf_run::gpu::amp::{Autocast, LowPrecision};
    let c = BertConfig {
        hidden_dropout: 0.0,
        attention_dropout: 0.0,
        ..tiny()
    };
    let _turn = seeded(11);
    let vs = nn::VarStore::new(Device::Cpu);
    let mut model = BertForPreTraining::new(&vs.root(), &c, &Default::default()).unwrap();
    let (ids, seg, mask) = inputs(&c, 3, 16);
    let real = mask.to_kind(Kind::Float).unsqueeze(-1);
    let fwd = |m: &BertForPreTraining| {
        tch::no_grad(|| {
            m.forward(&ids, &seg, Some(&mask), MlmOn::All, false)
                .unwrap()
        })
    };
    let (mlm32, nsp32) = fwd(&model);
    for unpad in [false, true] {
        model.configure(|m, _| m.unpad = unpad);
        let (mlm16, nsp16) = {
            let _amp = Autocast::enter(Device::Cpu, LowPrecision::BFloat16).unwrap();
            fwd(&model)
        };
        assert_eq!(mlm16.kind(), Kind::Float, "logits come back in fp32");
        let scale = mlm32.abs().max().double_value(&[]);
        let diff = ((&mlm16 - &mlm32) * &real).abs().max().double_value(&[]);
        eprintln!(
            "unpad={unpad}: bf16 vs fp32 MLM logits max abs diff {diff:.3e} (scale {scale:.3})"
        );
        assert!(
            diff < 0.05 * scale,
            "bf16 logits drift {diff} (scale {scale})"
        );
        assert!(diff > 0.0, "no difference at all: autocast was not applied");
        let nd = (&nsp16 - &nsp32).abs().max().double_value(&[]);
        assert!(nd < 0.05 * nsp32.abs().max().double_value(&[]).max(1e-3));
    }
    model.configure(|m, _| m.unpad = false);
    // fit one batch under autocast: the loss must fall a lot
    let losses = fit_under_bf16(&model, &vs, &ids, &seg, &mask);
    eprintln!("bf16 training loss {:.3} -> {:.3}", losses[0], losses[79]);
    assert!(losses[79] < 0.3 * losses[0], "losses {losses:?}");
}

/// Three masked positions per sequence of a 3-sequence batch, and their labels.
struct Targets {
    pos: Tensor,
    mids: Tensor,
    w: Tensor,
    nsp: Tensor,
}

fn targets(ids: &Tensor) -> Targets {
    let pos = Tensor::from_slice(&[1i64, 4, 7, 2, 5, 8, 3, 6, 9]).view([3, 3]);
    let mids = ids.gather(1, &pos, false);
    let w = mids.ones_like().to_kind(Kind::Float);
    Targets {
        pos,
        mids,
        w,
        nsp: Tensor::from_slice(&[0i64, 1, 0]),
    }
}

/// 80 LAMB steps on one batch under bf16 autocast: the losses.
fn fit_under_bf16(
    model: &BertForPreTraining,
    vs: &nn::VarStore,
    ids: &Tensor,
    seg: &Tensor,
    mask: &Tensor,
) -> Vec<f64> {
    use mlperf_run::gpu::amp::{Autocast, LowPrecision};
    use mlperf_run::optim::lamb::{Lamb, LambConfig};
    use mlperf_run::optim::{Optimizer, ParamGroups};
    let t = targets(ids);
    let mut params = ParamGroups::from_var_store(vs);
    let mut opt = Lamb::new(LambConfig::default()).unwrap();
    (0..80)
        .map(|_| {
            params.zero_grad().unwrap();
            let loss = {
                let _amp = Autocast::enter(Device::Cpu, LowPrecision::BFloat16).unwrap();
                let (mlm, n) = model
                    .forward(ids, seg, Some(mask), MlmOn::Positions(&t.pos), true)
                    .unwrap();
                pretraining_loss(&mlm, &n, &t.mids, &t.w, &t.nsp)
            };
            assert_eq!(loss.kind(), Kind::Float);
            loss.backward();
            let grads = params.grads();
            opt.step(&mut params, &grads, 2e-2).unwrap();
            loss.double_value(&[])
        })
        .collect()
}

/// The loss and every gradient (in `names` order) of one training step (dropout on, the
/// generator seeded the same way every call).
fn loss_and_grads(
    model: &BertForPreTraining,
    vs: &nn::VarStore,
    names: &[String],
    (ids, seg, mask): (&Tensor, &Tensor, Option<&Tensor>),
    t: &Targets,
) -> (f64, Vec<Tensor>) {
    for v in vs.trainable_variables() {
        let mut g = v.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
    tch::manual_seed(5);
    let (mlm, n) = model
        .forward(ids, seg, mask, MlmOn::Positions(&t.pos), true)
        .unwrap();
    let loss = pretraining_loss(&mlm, &n, &t.mids, &t.w, &t.nsp);
    loss.backward();
    let vars = vs.variables();
    let grads = names.iter().map(|k| vars[k].grad().copy()).collect();
    (loss.double_value(&[]), grads)
}

/// The same loss and gradients within fp32 rounding (relative to each gradient's largest
/// entry; key biases have no gradient in exact math, as softmax ignores a per-query constant).
fn assert_same_step(what: &str, names: &[String], a: &(f64, Vec<Tensor>), b: &(f64, Vec<Tensor>)) {
    assert!(
        (a.0 - b.0).abs() < 1e-5 * a.0.abs(),
        "{what}: losses {} vs {}",
        a.0,
        b.0
    );
    for (k, (x, y)) in names.iter().zip(a.1.iter().zip(&b.1)) {
        let scale = x.abs().max().double_value(&[]).max(1e-6);
        let d = (x - y).abs().max().double_value(&[]);
        assert!(
            d <= 1e-4 * scale,
            "{what}: {k} gradient differs by {d} (scale {scale})"
        );
    }
}

fn sorted_names(vs: &nn::VarStore) -> Vec<String> {
    let mut names: Vec<String> = vs.variables().keys().cloned().collect();
    names.sort();
    names
}

/// A batch without padding attends without a mask (`input_mask: None`, what the batch hand-off
/// passes for it so a GPU can run FlashAttention): the same outputs and gradients as with its
/// all-ones mask, for both attention paths, padded and unpadded, dropout included, and through
/// the full-length packing of `flash_varlen_unpadded`.
#[test]
fn a_batch_without_padding_needs_no_attention_mask() {
    let _turn = rng_turn();
    let c = tiny();
    let (b, s) = (3, 16);
    tch::manual_seed(11);
    let vs = nn::VarStore::new(Device::Cpu);
    let mut model = BertForPreTraining::new(&vs.root(), &c, &Default::default()).unwrap();
    let ids = Tensor::randint_low(1, c.vocab_size, [b, s], (Kind::Int64, Device::Cpu));
    let seg = Tensor::arange(s, (Kind::Int64, Device::Cpu))
        .ge(s / 2)
        .to_kind(Kind::Int64)
        .unsqueeze(0)
        .expand([b, s], false)
        .contiguous();
    let ones = ids.ones_like();
    let t = targets(&ids);
    let names = sorted_names(&vs);
    // flash: the experimental flash_varlen_unpadded, which sends a batch without padding through
    // the packed attention path (on a CPU its scatter twin)
    for (unpad, fused, flash) in [
        (false, true, false),
        (true, true, false),
        (false, false, false),
        (true, false, false),
        (false, true, true),
    ] {
        model.configure(|m, _| m.unpad = unpad);
        model.configure(|m, _| m.fused_attention = fused);
        model.configure(|_, k| k.flash_varlen_unpadded = flash);
        let what = format!("unpad={unpad} fused={fused} flash_varlen_unpadded={flash}");
        let eval = |mask: Option<&Tensor>| {
            tch::no_grad(|| model.forward(&ids, &seg, mask, MlmOn::All, false).unwrap()).0
        };
        let (with, without) = (eval(Some(&ones)), eval(None));
        let d = (&with - &without).abs().max().double_value(&[]);
        assert!(
            d < 1e-5 && with.abs().max().double_value(&[]) > 0.1,
            "{what}: eval logits differ by {d}"
        );
        let step = |mask| loss_and_grads(&model, &vs, &names, (&ids, &seg, mask), &t);
        assert_same_step(&what, &names, &step(Some(&ones)), &step(None));
        // the comparison can fail: a mask that hides tokens changes the result
        let hidden = ones.copy();
        let _ = hidden.narrow(1, s - 4, 4).fill_(0);
        let d = (eval(Some(&hidden)) - &without)
            .abs()
            .max()
            .double_value(&[]);
        assert!(d > 1e-3, "{what}: a real mask changed nothing ({d})");
    }
}

/// `fused_qkv` (one matmul over the stacked query/key/value weights) is the same math as three
/// projections: outputs, loss and every parameter's gradient agree in fp32, padded and
/// unpadded, with dropout; the parameters keep their three reference names.
#[test]
fn fused_qkv_matches_three_projections() {
    let _turn = rng_turn();
    let c = tiny();
    tch::manual_seed(13);
    let vs = nn::VarStore::new(Device::Cpu);
    let mut model = BertForPreTraining::new(&vs.root(), &c, &Default::default()).unwrap();
    let (ids, seg, mask) = inputs(&c, 3, 16);
    let t = targets(&ids);
    let names = sorted_names(&vs);
    assert!(names
        .iter()
        .any(|n| n.ends_with("layer.1.attention.self.key.weight")));
    let real = mask.unsqueeze(-1).to_kind(Kind::Float);
    for unpad in [false, true] {
        model.configure(|m, _| m.unpad = unpad);
        let what = format!("unpad={unpad}");
        let mut outs = Vec::new();
        for fused in [false, true] {
            model.configure(|m, _| m.fused_qkv = fused);
            let eval = tch::no_grad(|| {
                model
                    .forward(&ids, &seg, Some(&mask), MlmOn::All, false)
                    .unwrap()
            })
            .0;
            let step = loss_and_grads(&model, &vs, &names, (&ids, &seg, Some(&mask)), &t);
            outs.push((eval, step));
        }
        let ((e0, s0), (e1, s1)) = (&outs[0], &outs[1]);
        let d = ((e0 - e1) * &real).abs().max().double_value(&[]);
        assert!(d < 1e-5, "{what}: eval logits differ by {d}");
        assert_same_step(&what, &names, s0, s1);
        // the query/key/value gradients were reached (not all zero)
        let i = names
            .iter()
            .position(|n| n.ends_with("layer.0.attention.self.value.weight"))
            .unwrap();
        assert!(s1.1[i].abs().max().double_value(&[]) > 0.0);
    }
}

/// `bf16_residual` under bf16 autocast: every LayerNorm output, and so the encoder's output, is
/// bf16 (fp32 without it); the logits stay within bf16 rounding of fp32 for the unfused
/// epilogues and the fused ones (composite ATen path and the CUDA kernels on the CPU
/// emulator), padded and unpadded; and the model fits a batch through it.
#[test]
fn bf16_residual_stream_tracks_fp32_and_trains() {
    use mlperf_run::gpu::amp::{Autocast, LowPrecision};
    let _turn = rng_turn();
    let c = tiny();
    tch::manual_seed(17);
    let vs = nn::VarStore::new(Device::Cpu);
    let mut model = BertForPreTraining::new(&vs.root(), &c, &Default::default()).unwrap();
    let (ids, seg, mask) = inputs(&c, 3, 16);
    let real = mask.to_kind(Kind::Float).unsqueeze(-1);
    let (mlm32, _) = tch::no_grad(|| {
        model
            .forward(&ids, &seg, Some(&mask), MlmOn::All, false)
            .unwrap()
    });
    let scale = mlm32.abs().max().double_value(&[]);
    let bf16 = || Autocast::enter(Device::Cpu, LowPrecision::BFloat16).unwrap();
    for (fused, path) in [
        (false, mlperf_run::fused::Path::Auto),
        (true, mlperf_run::fused::Path::Reference),
        (true, mlperf_run::fused::Path::Emulated),
    ] {
        model.configure(|m, _| m.fused_epilogues = fused);
        model.configure(|_, k| k.fused_epilogue_path = path);
        for unpad in [false, true] {
            model.configure(|m, _| m.unpad = unpad);
            let what = format!("fused={fused} {path:?} unpad={unpad}");
            let mut kinds = Vec::new();
            for on in [false, true] {
                model.configure(|m, _| m.bf16_residual = on);
                let _amp = bf16();
                let enc = tch::no_grad(|| model.encode(&ids, &seg, Some(&mask), false).unwrap());
                kinds.push(enc.kind());
            }
            assert_eq!(kinds, [Kind::Float, Kind::BFloat16], "{what}");
            let (mlm, _) = {
                let _amp = bf16();
                tch::no_grad(|| {
                    model
                        .forward(&ids, &seg, Some(&mask), MlmOn::All, false)
                        .unwrap()
                })
            };
            assert_eq!(mlm.kind(), Kind::Float, "{what}: logits come back in fp32");
            let diff = ((&mlm - &mlm32) * &real).abs().max().double_value(&[]);
            eprintln!("{what}: bf16 residual vs fp32 logits {diff:.3e} (scale {scale:.3})");
            assert!(diff < 0.05 * scale, "{what}: drift {diff} (scale {scale})");
        }
    }
    // fit one batch with the bf16 stream (and the fused query/key/value projection)
    model.configure(|m, _| m.unpad = false);
    model.configure(|m, _| m.fused_epilogues = true);
    model.configure(|_, k| k.fused_epilogue_path = mlperf_run::fused::Path::Reference);
    model.configure(|m, _| m.fused_qkv = true);
    model.configure(|m, _| m.bf16_residual = true);
    let losses = fit_under_bf16(&model, &vs, &ids, &seg, &mask);
    eprintln!(
        "bf16 residual training loss {:.3} -> {:.3}",
        losses[0], losses[79]
    );
    assert!(losses[79] < 0.3 * losses[0], "losses {losses:?}");
    // every parameter learned: the gradients reached all of them through the bf16 stream
    for (name, t) in vs.variables() {
        let g = t.grad();
        let reached = g.defined() && g.abs().max().double_value(&[]) > 0.0;
        assert!(reached || name.contains("key.bias"), "{name}: no gradient");
    }
}
