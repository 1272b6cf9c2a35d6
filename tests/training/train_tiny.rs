//! The tiny CPU presets really train: a closed and an open run on the synthetic set reach
//! their stated target and stop there, and their logs pass our checker and the official
//! compliance checker (ruleset 4.0.0). Also: same seed and config give the same loss curve.
#![cfg(feature = "torch")]

use crate::common;

use mlperf_run::rules::Division;
use mlperf_run::train::engine::RunOutcome;
use mlperf_run::train::resnet::config::{Amp, ResnetRunConfig};
use std::path::{Path, PathBuf};

fn config(name: &str, division: Division) -> ResnetRunConfig {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("configs/resnet")
        .join(name);
    ResnetRunConfig::load(&path, division).unwrap()
}

fn train(cfg: &ResnetRunConfig, division: Division, seed: u64, log: &Path) -> RunOutcome {
    common::train::resnet(cfg, division, None, seed, log)
}

fn reaches_target_and_passes(name: &str, division: Division, seed: u64) -> RunOutcome {
    run_to_target_and_check(name, &config(name, division), division, seed)
}

fn run_to_target_and_check(
    name: &str,
    cfg: &ResnetRunConfig,
    division: Division,
    seed: u64,
) -> RunOutcome {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("result_0.txt");
    let t0 = std::time::Instant::now();
    let out = train(cfg, division, seed, &log_path);
    eprintln!(
        "{name} {division:?}: {:?} after {} steps, evals {:?}, {:.1} s",
        out.status,
        out.steps,
        out.evals,
        t0.elapsed().as_secs_f64()
    );
    let log = common::train::assert_reached_target_and_compliant(name, cfg, &out, seed, &log_path);
    let first_loss = out.losses[..5].iter().sum::<f64>() / 5.0;
    let last_loss = out.losses[out.losses.len() - 5..].iter().sum::<f64>() / 5.0;
    assert!(
        last_loss < 0.7 * first_loss,
        "loss {first_loss} -> {last_loss}"
    );
    assert_eq!(
        log.first("submission_division").unwrap().value,
        serde_json::json!(division.as_str())
    );
    out
}

#[test]
fn tiny_cpu_closed_reaches_target_and_passes_the_checkers() {
    reaches_target_and_passes("tiny_cpu.toml", Division::Closed, 1234);
}

#[test]
fn tiny_cpu_open_methods_reach_target_and_pass_the_checkers() {
    reaches_target_and_passes("tiny_cpu_open.toml", Division::Open, 99);
}

/// Fused BN+ReLU is the same math in one kernel (what NVIDIA's closed ResNet runs), so the
/// closed division takes it: the closed tiny preset with it on passes the closed validation,
/// reaches its target and its log passes our checker and the official one (4.0.0).
#[test]
fn tiny_cpu_closed_with_fused_bn_relu_reaches_target_and_passes() {
    let text = common::preset_with_method("resnet/tiny_cpu.toml", "fused_bn_relu = true");
    let cfg = ResnetRunConfig::parse(&text, Division::Closed).unwrap();
    assert!(cfg.methods.fused_bn_relu);
    run_to_target_and_check(
        "tiny_cpu.toml (fused_bn_relu)",
        &cfg,
        Division::Closed,
        1234,
    );
}

/// The CPU twin of the GPU mixed-precision path: `methods.amp = "bf16"` runs the forward pass
/// in a bf16 autocast region (C++ shim). The closed tiny preset still reaches its target, and
/// the loss curve starts where fp32's does (same seed, same weights) but is not the same curve.
#[test]
fn bf16_autocast_trains_to_target_on_cpu() {
    let fp32 = config("tiny_cpu.toml", Division::Closed);
    let mut bf16 = fp32.clone();
    bf16.methods.amp = Amp::Bf16;
    let seed = 1234;
    let a = run_to_target_and_check("tiny_cpu.toml (bf16)", &bf16, Division::Closed, seed);
    let dir = tempfile::tempdir().unwrap();
    let mut short = fp32.clone();
    short.train.max_epochs = 1;
    let b = train(&short, Division::Closed, seed, &dir.path().join("fp32.txt"));
    let (la, lb) = (a.losses[0], b.losses[0]);
    assert!(
        (la - lb).abs() < 0.02 * lb.abs(),
        "first-step loss bf16 {la} vs fp32 {lb}: not within bf16 rounding"
    );
    assert_ne!(
        a.losses[..b.losses.len()],
        b.losses[..],
        "bf16 and fp32 gave the same loss curve: autocast was not applied"
    );
}

/// fp16 mixed precision (`methods.amp = "fp16"`) with the open methods and fused BN+ReLU (the
/// combination cuDNN's fused batch norm is for) and SGD, 2 micro-batches per step, through the
/// CPU twin of the CUDA graph. See [`fp16_run`].
#[test]
fn fp16_loss_scaled_training_skips_overflows_and_reaches_target() {
    let mut cfg = config("tiny_cpu_open.toml", Division::Open);
    cfg.methods.fused_bn_relu = true;
    cfg.train.gradient_accumulation_steps = 2;
    fp16_run("tiny_cpu_open.toml (fp16)", cfg, Division::Open, 99);
}

/// fp16 in the closed division with LARS (NVIDIA's closed recipe runs fp16): LARS skips an
/// overflowing step on the device too, inside the CUDA-graph twin. See [`fp16_run`].
#[test]
fn fp16_lars_closed_skips_overflows_and_reaches_target() {
    let cfg = config("tiny_cpu.toml", Division::Closed);
    assert_eq!(cfg.optimizer.name.as_str(), "lars");
    fp16_run("tiny_cpu.toml (fp16)", cfg, Division::Closed, 1234);
}

/// Trains `cfg` in fp16 through the CPU twin of the CUDA graph (the step with its loss-scale
/// check and skip is what a GPU run captures), with the loss scale starting at 2^24, far too high: the first steps
/// overflow in the fp16 backward and are skipped on the device until the scale has halved its
/// way down; clean runs of 50 steps double it again. The run still reaches its target and
/// passes the checkers, the scale ends below where it started, and above where the skips alone
/// would have left it (so it grew).
fn fp16_run(name: &str, mut cfg: ResnetRunConfig, division: Division, seed: u64) {
    use mlperf_run::methods::LossScaleSettings;
    use mlperf_run::train::resnet::{open_data, ResnetWorkload};
    const INIT: f64 = 16777216.0;
    cfg.methods.amp = Amp::Fp16;
    cfg.methods.loss_scale = Some(LossScaleSettings {
        init_scale: INIT,
        growth_interval: 50,
    });
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("result_0.txt");
    let mut w = ResnetWorkload::new(cfg.clone(), division, open_data(&cfg, None).unwrap());
    let mut opts = common::train::cpu_run_options(&cfg.system, division, seed, &log_path);
    opts.test_hooks.emulate_cuda_graph = Some(2);
    let t0 = std::time::Instant::now();
    let out = mlperf_run::train::engine::run_once(&mut w, opts).unwrap();
    let r = w
        .loss_scale_report()
        .unwrap()
        .expect("fp16 has a loss scale");
    eprintln!(
        "{name}: {:?} after {} steps, evals {:?}, {:.1} s; loss scale {} ({} steps skipped); \
         graphs {:?}",
        out.status,
        out.steps,
        out.evals,
        t0.elapsed().as_secs_f64(),
        r.scale,
        r.skipped_steps,
        w.graph_stats()
    );
    let graphs = w.graph_stats().expect("the graph twin ran");
    assert!(graphs.replays > 0, "{graphs:?}");
    // the trainer drops the graph when the run ends (before the process group is shut down)
    assert_eq!(graphs.releases, 1, "{graphs:?}");
    let log = common::train::assert_reached_target_and_compliant(name, &cfg, &out, seed, &log_path);
    assert_eq!(
        log.first("method_amp").unwrap().value,
        serde_json::json!("fp16")
    );
    assert!(
        r.skipped_steps >= 1 && r.skipped_steps < out.steps / 4,
        "{} of {} steps skipped",
        r.skipped_steps,
        out.steps
    );
    assert!(r.scale < INIT, "the scale never came down: {}", r.scale);
    assert!(
        r.scale > INIT / 2f64.powi(r.skipped_steps as i32),
        "scale {} after {} halvings from 2^24: it never grew",
        r.scale,
        r.skipped_steps
    );
    assert!(
        out.losses.iter().all(|l| l.is_finite()),
        "a skipped step's loss is still finite (the forward ran), and no NaN reached the weights"
    );
}

#[test]
fn same_seed_same_loss_curve() {
    let mut cfg = config("tiny_cpu_open.toml", Division::Open);
    cfg.train.max_epochs = 2;
    cfg.train.eval_offset = 0;
    cfg.train.eval_period = 1;
    cfg.train.target = 0.999;
    let dir = tempfile::tempdir().unwrap();
    let a = train(&cfg, Division::Open, 5, &dir.path().join("a.txt"));
    let b = train(&cfg, Division::Open, 5, &dir.path().join("b.txt"));
    let c = train(&cfg, Division::Open, 6, &dir.path().join("c.txt"));
    assert_eq!(a.losses.len(), 40);
    assert_eq!(a.losses, b.losses, "same seed, different loss curves");
    assert_eq!(a.evals, b.evals);
    assert_ne!(a.losses, c.losses, "a different seed gave the same curve");
}

/// The trainer asks for epoch e+1's batches as epoch e ends, before e's eval, so their reading,
/// decoding and copying overlap the eval and the next epoch's first step finds them ready; it
/// asks for no epoch past `train.max_epochs`. The training is the same (same seed: same losses).
#[test]
fn the_next_epochs_batches_are_requested_before_the_eval() {
    use mlperf_run::train::engine;
    use mlperf_run::train::resnet::data::{BatchIter, ImageData, Shard, SyntheticImages};
    use mlperf_run::train::resnet::ResnetWorkload;
    use std::sync::{Arc, Mutex};

    struct Recording {
        inner: SyntheticImages,
        calls: Arc<Mutex<Vec<String>>>,
    }
    impl ImageData for Recording {
        fn num_classes(&self) -> usize {
            self.inner.num_classes()
        }
        fn train_len(&self) -> usize {
            self.inner.train_len()
        }
        fn eval_len(&self) -> usize {
            self.inner.eval_len()
        }
        fn train_epoch(
            &self,
            epoch: u64,
            size: usize,
            batch: usize,
            seed: u64,
            shard: Shard,
        ) -> anyhow::Result<BatchIter> {
            self.calls.lock().unwrap().push(format!("train {epoch}"));
            self.inner.train_epoch(epoch, size, batch, seed, shard)
        }
        fn eval(&self, size: usize, batch: usize, shard: Shard) -> anyhow::Result<BatchIter> {
            self.calls.lock().unwrap().push("eval".into());
            self.inner.eval(size, batch, shard)
        }
    }

    let mut cfg = config("tiny_cpu.toml", Division::Open);
    cfg.train.max_epochs = 3;
    cfg.train.eval_period = 1;
    cfg.train.target = 0.999;
    let s = cfg.data.synthetic.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let data = Recording {
        inner: SyntheticImages::new(
            cfg.model.classes as usize,
            s.train_per_class,
            s.eval_per_class,
            s.noise,
        ),
        calls: calls.clone(),
    };
    let mut w = ResnetWorkload::new(cfg.clone(), Division::Open, Box::new(data));
    let log = dir.path().join("result_0.txt");
    let opts = common::train::cpu_run_options(&cfg.system, Division::Open, 3, &log);
    let out = engine::run_once(&mut w, opts).unwrap();
    assert_eq!(out.evals.len(), 3, "{:?}", out.status);
    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        ["train 0", "train 1", "eval", "train 2", "eval", "eval"],
        "the order of the data requests"
    );
    // the same training as the plain data set gives
    let plain = train(&cfg, Division::Open, 3, &dir.path().join("plain.txt"));
    assert_eq!(out.losses, plain.losses);
}
