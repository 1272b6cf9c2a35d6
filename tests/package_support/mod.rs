//! Helpers for the packaging tests: compliant synthetic ResNet logs written by our own
//! emitter (ruleset 4.0.0), a system TOML, package options and the official package checker.
#![allow(dead_code)]

use mlperf_run::meta;
use mlperf_run::mllog::{keys, Emitter, Sink};
use mlperf_run::submission::package::PackageOptions;
use mlperf_run::submission::sysinfo::DescribeOptions;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// One synthetic run.
#[derive(Debug, Clone)]
pub struct Run {
    pub division: &'static str,
    pub status: &'static str,
    pub platform: String,
    pub seed: u64,
    /// Epoch at which eval_accuracy first reaches the target.
    pub converge_epoch: u32,
    pub minutes: f64,
}

/// A fresh seed from the OS, as the closed rules want.
pub fn os_seed() -> u64 {
    let mut b = [0u8; 4];
    getrandom::getrandom(&mut b).expect("OS randomness");
    u32::from_le_bytes(b) as u64
}

/// Write a closed- or open-division ResNet log (LARS, GBS 3264, evals every 4 epochs from
/// epoch 3) that passes the 4.0.0 compliance checker.
pub fn write_resnet_log(path: &Path, run: &Run) {
    let _ = std::fs::remove_file(path);
    let t0: i64 = 1_700_000_000_000 + (run.seed as i64 % 1000) * 100_000;
    let clock = Arc::new(AtomicI64::new(t0));
    let c = clock.clone();
    let mut e = Emitter::new(vec![Sink::file(path, false).unwrap()])
        .with_clock(move || c.load(Ordering::SeqCst));
    let tick = |ms: i64| {
        clock.fetch_add(ms, Ordering::SeqCst);
    };
    e.start(keys::CACHE_CLEAR, Value::Bool(true), meta! {})
        .unwrap();
    e.start(keys::INIT_START, Value::Null, meta! {}).unwrap();
    e.event(keys::SUBMISSION_BENCHMARK, "resnet").unwrap();
    e.event(keys::SUBMISSION_ORG, "SynthOrg").unwrap();
    e.event(keys::SUBMISSION_DIVISION, run.division).unwrap();
    e.event(keys::SUBMISSION_STATUS, run.status).unwrap();
    e.event(keys::SUBMISSION_PLATFORM, run.platform.clone())
        .unwrap();
    e.event(keys::SEED, run.seed).unwrap();
    e.event(keys::GLOBAL_BATCH_SIZE, 3264).unwrap();
    e.event(keys::TRAIN_SAMPLES, 1_281_167).unwrap();
    e.event(keys::EVAL_SAMPLES, 50_000).unwrap();
    e.event(keys::GRADIENT_ACCUMULATION_STEPS, 1).unwrap();
    e.event(keys::OPT_NAME, "lars").unwrap();
    e.event("lars_opt_base_learning_rate", 10.5).unwrap();
    e.event("lars_opt_end_learning_rate", 0.0001).unwrap();
    e.event("lars_opt_learning_rate_decay_poly_power", 2)
        .unwrap();
    e.event("lars_opt_learning_rate_decay_steps", 14523)
        .unwrap();
    e.event("lars_epsilon", 0.0).unwrap();
    e.event("lars_opt_learning_rate_warmup_epochs", 2).unwrap();
    e.event("lars_opt_momentum", 0.9).unwrap();
    e.event("lars_opt_weight_decay", 0.00005).unwrap();
    tick(60_000);
    e.end(keys::INIT_STOP, Value::Null, meta! {}).unwrap();
    e.start(keys::RUN_START, Value::Null, meta! {}).unwrap();
    let total_ms = (run.minutes * 60_000.0) as i64;
    let blocks: Vec<u32> = (0..)
        .map(|k| 3 + 4 * k)
        .take_while(|ep| *ep <= run.converge_epoch)
        .collect();
    let per_block = total_ms / blocks.len() as i64;
    let mut first = 0;
    for (i, ep) in blocks.iter().enumerate() {
        let count = ep - first;
        e.start(
            keys::BLOCK_START,
            Value::Null,
            meta! {"first_epoch_num" => first, "epoch_count" => count},
        )
        .unwrap();
        tick(per_block - 1000);
        e.end(
            keys::BLOCK_STOP,
            Value::Null,
            meta! {"first_epoch_num" => first},
        )
        .unwrap();
        e.start(keys::EVAL_START, Value::Null, meta! {"epoch_num" => *ep})
            .unwrap();
        tick(1000);
        let last = i + 1 == blocks.len();
        let acc = if last { 0.7605 } else { 0.3 + 0.01 * i as f64 };
        e.event_with(keys::EVAL_ACCURACY, acc, meta! {"epoch_num" => *ep})
            .unwrap();
        e.end(keys::EVAL_STOP, Value::Null, meta! {"epoch_num" => *ep})
            .unwrap();
        first = *ep;
    }
    e.end(
        keys::RUN_STOP,
        Value::Null,
        meta! {"status" => keys::STATUS_SUCCESS},
    )
    .unwrap();
}

/// Write `seeds.len()` runs into `dir/result_<i>.txt`; returns the paths.
pub fn write_set(
    dir: &Path,
    division: &'static str,
    platform: &str,
    seeds: &[u64],
) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    seeds
        .iter()
        .enumerate()
        .map(|(i, seed)| {
            let p = dir.join(format!("result_{i}.txt"));
            let run = Run {
                division,
                status: "onprem",
                platform: platform.to_string(),
                seed: *seed,
                converge_epoch: if i == 2 { 39 } else { 35 },
                minutes: 28.0 + i as f64 * 0.7,
            };
            write_resnet_log(&p, &run);
            p
        })
        .collect()
}

/// `n` distinct OS seeds.
pub fn distinct_seeds(n: usize) -> Vec<u64> {
    let mut v: Vec<u64> = Vec::new();
    while v.len() < n {
        let s = os_seed();
        if !v.contains(&s) {
            v.push(s);
        }
    }
    v
}

/// A system TOML that fills what a machine without NVML cannot detect.
pub fn write_system_toml(dir: &Path, status: &str) -> PathBuf {
    let p = dir.join("test_system.toml");
    std::fs::write(
        &p,
        format!(
            "status = \"{status}\"\naccelerators_per_node = 8\naccelerator_model_name = \"NVIDIA A100-SXM4-80GB\"\n\
             accelerator_memory_capacity = \"80 GB\"\naccelerator_memory_configuration = \"HBM2e\"\n\
             accelerator_interconnect = \"NVLink 3.0\"\ncooling = \"air\"\n"
        ),
    )
    .unwrap();
    p
}

/// Package options for tests (the snapshot is of this checkout).
pub fn options(
    submitter: &str,
    system: &str,
    division: &str,
    results: Vec<PathBuf>,
    out: &Path,
    toml: &Path,
) -> PackageOptions {
    PackageOptions {
        submitter: submitter.into(),
        system: system.into(),
        division: division.into(),
        results,
        out: out.to_path_buf(),
        tarball: false,
        force: false,
        add: false,
        implementation: "mlperf-run".into(),
        source: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        ruleset: None,
        describe: DescribeOptions {
            system_config: Some(toml.to_path_buf()),
            use_nvml: false,
            ..Default::default()
        },
    }
}

/// Run the official package checker on a copy of `org_dir` (its RCP pass writes scaling.json);
/// returns (success line found, the checker's log).
pub fn official_package_check(org_dir: &Path, ruleset: &str) -> Option<(bool, String)> {
    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join(org_dir.file_name().unwrap());
    copy_dir(org_dir, &copy);
    let log = scratch.path().join("package_checker.log");
    let out = mlperf_run::official::run_module(
        "mlperf_logging.package_checker",
        &[
            copy.to_str()?,
            "training",
            ruleset,
            "--log_output",
            log.to_str()?,
        ],
    )
    .ok()?;
    let text = std::fs::read_to_string(&log).unwrap_or_else(|_| out.text());
    let last = text
        .lines()
        .rev()
        .find(|l| l.contains("PACKAGE CHECKER FOUND"))
        .unwrap_or("")
        .to_string();
    Some((
        last.ends_with("PACKAGE CHECKER FOUND NO ERRORS, SUCCESS !"),
        text,
    ))
}

/// Run the official system description checker on one JSON; returns (passed, log).
pub fn official_system_check(json: &Path, ruleset: &str) -> Option<(bool, String)> {
    let scratch = tempfile::tempdir().unwrap();
    let log = scratch.path().join("system_desc_checker.log");
    let out = mlperf_run::official::run_module(
        "mlperf_logging.system_desc_checker",
        &[
            json.to_str()?,
            "training",
            ruleset,
            "--log_output",
            log.to_str()?,
        ],
    )
    .ok()?;
    let text = format!(
        "{}{}",
        std::fs::read_to_string(&log).unwrap_or_default(),
        out.text()
    );
    Some((
        text.contains("System description checker passed") && !text.contains("ERROR"),
        text,
    ))
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        let t = to.join(e.file_name());
        if p.is_dir() {
            copy_dir(&p, &t);
        } else {
            std::fs::copy(&p, &t).unwrap();
        }
    }
}
