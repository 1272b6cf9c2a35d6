//! Running the tiny presets in-process on the CPU, as the training tests do.

use mlperf_run::mllog::{parse_file, LogFile};
use mlperf_run::rules::Division;
use mlperf_run::rules::{check_log, CheckOptions};
use mlperf_run::runs::system::SystemConfig;
use mlperf_run::train::engine::{self, RunOptions, RunOutcome, Status, Submission};
use mlperf_run::train::resnet::config::ResnetRunConfig;
use mlperf_run::train::resnet::{open_data, run_once, ResnetRun, ResnetWorkload};
use std::path::{Path, PathBuf};

/// A file of the repository (a preset under configs/), by its path from the repository root.
pub fn preset(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Makes `cfg` train `epochs` epochs, evaluating after each, and never stop early (target
/// 0.999): the most steps from a tiny preset.
pub fn every_epoch(cfg: &mut ResnetRunConfig, epochs: u64) {
    cfg.train.max_epochs = epochs;
    cfg.optimizer.schedule_epochs = epochs as f64;
    cfg.train.target = 0.999;
}

/// The open tiny preset (progressive resizing, EMA, BlurPool, channels-last) for `epochs`
/// epochs ([`every_epoch`]), with 2 micro-batches per step and 64 training images per class.
pub fn open_tiny_two_micro_batches(epochs: u64) -> ResnetRunConfig {
    let mut cfg =
        ResnetRunConfig::load(&preset("configs/resnet/tiny_cpu_open.toml"), Division::Open)
            .unwrap();
    every_epoch(&mut cfg, epochs);
    cfg.train.gradient_accumulation_steps = 2;
    cfg.data.synthetic.as_mut().unwrap().train_per_class = 64;
    cfg
}

/// Options for a CPU run of a preset with system section `system` in `division`: seed `seed`,
/// the log written to `log`, the preset's time limit.
pub fn cpu_run_options(
    system: &SystemConfig,
    division: Division,
    seed: u64,
    log: &Path,
) -> RunOptions {
    let mut opts = RunOptions::new(
        tch::Device::Cpu,
        Submission {
            org: system.submission_org.clone(),
            platform: system.submission_platform.clone(),
            division: division.as_str().into(),
            status: system.submission_status.as_str().into(),
        },
    );
    opts.seed = Some(seed);
    opts.log_path = Some(log.to_path_buf());
    opts.time_limit = Some(std::time::Duration::from_secs_f64(
        system.time_limit_minutes * 60.0,
    ));
    opts
}

/// One ResNet run of `cfg` on the CPU (in-memory data when `data` is None, else that
/// ImageFolder root); panics if the run cannot start.
pub fn resnet(
    cfg: &ResnetRunConfig,
    division: Division,
    data: Option<&Path>,
    seed: u64,
    log: &Path,
) -> RunOutcome {
    run_once(
        &ResnetRun {
            config: cfg,
            division,
            data_dir: data.map(Path::to_path_buf),
            listed: None,
        },
        cpu_run_options(&cfg.system, division, seed, log),
    )
    .unwrap()
}

/// One open-division ResNet run of `cfg` on the CPU from `seed` (in-memory data when `data` is
/// None, else that ImageFolder root), through the CUDA-graph CPU twin with `graphs` warm-up
/// steps per shape, or eagerly; with the workload, for its state and graph stats.
pub fn resnet_workload(
    cfg: &ResnetRunConfig,
    data: Option<&Path>,
    seed: u64,
    graphs: Option<u32>,
    log: &Path,
) -> (RunOutcome, ResnetWorkload) {
    let opened = open_data(cfg, data).unwrap();
    let mut w = ResnetWorkload::new(cfg.clone(), Division::Open, opened);
    let mut opts = cpu_run_options(&cfg.system, Division::Open, seed, log);
    opts.test_hooks.emulate_cuda_graph = graphs;
    let out = engine::run_once(&mut w, opts).unwrap();
    (out, w)
}

/// What every tiny ResNet run to its target must show: success at the first eval over
/// `cfg.train.target`, after having to learn; a log at `log` that ends in success, whose last
/// eval is that one and whose seed is `seed`; and our checker and the official one (ruleset
/// 4.0.0) accept the log. Returns the parsed log for the caller's own checks.
pub fn assert_reached_target_and_compliant(
    name: &str,
    cfg: &ResnetRunConfig,
    out: &RunOutcome,
    seed: u64,
    log: &Path,
) -> LogFile {
    assert_eq!(out.status, Status::Success, "{name}: evals {:?}", out.evals);
    let (last_epoch, last_acc) = *out.evals.last().unwrap();
    assert!(last_acc >= cfg.train.target);
    // it stopped at the first eval over target
    assert!(out.evals[..out.evals.len() - 1]
        .iter()
        .all(|&(_, a)| a < cfg.train.target));
    // and it did have to learn: the first eval was well below target
    assert!(out.evals.len() >= 2 || out.evals[0].1 < 1.0);

    let parsed = parse_file(log).unwrap();
    assert_eq!(parsed.last("run_stop").unwrap().status(), Some("success"));
    assert_eq!(
        parsed.last("eval_accuracy").unwrap().epoch_num(),
        Some(last_epoch as f64)
    );
    assert_eq!(parsed.first("seed").unwrap().value, serde_json::json!(seed));
    let verdict = check_log(
        &parsed,
        &CheckOptions {
            ruleset: Some("4.0.0".into()),
        },
    );
    assert!(verdict.compliant(), "our checker: {:?}", verdict.findings);
    super::official::assert_compliant(name, log, "4.0.0");
    parsed
}

/// Overwrites the first image (by path) of the ImageFolder class directory `class` with text, as
/// a damaged file would be: the loader skips it, and its batch comes out one image short.
pub fn spoil_first_image(class: &Path) {
    let first = std::fs::read_dir(class)
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap_or_else(|| panic!("no images in {}", class.display()));
    std::fs::write(first, "not a JPEG\n").unwrap();
}
