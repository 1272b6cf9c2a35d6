//! The tiny CPU presets really train: a closed and an open run on the synthetic set reach
//! their stated target and stop there, and their logs pass our checker and the official
//! compliance checker (ruleset 4.0.0). Also: same seed and config give the same loss curve.
#![cfg(feature = "torch")]

mod common;

use mlperf_run::train::config::{Amp, Division, ResnetRunConfig};
use mlperf_run::train::engine::RunOutcome;
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
