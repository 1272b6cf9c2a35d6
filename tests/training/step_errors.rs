//! An error inside a training step (a libtorch error through tch's panicking API, as CUDA out of
//! memory is on a GPU) ends the run as aborted with the cause, never a panic: the log closes with
//! run_stop aborted and the official checker reads it; from the CLI a set goes on to its next run.
#![cfg(feature = "torch")]

use crate::common;

use mlperf_run::mllog::parse_file;
use mlperf_run::rules::Division;
use mlperf_run::train::engine::Status;
use mlperf_run::train::resnet::config::ResnetRunConfig;
use mlperf_run::train::resnet::{run_once, ResnetRun};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ends_aborted(log: &Path) -> String {
    let parsed = parse_file(log).unwrap();
    let last = parsed.events.last().expect("a log with events");
    assert_eq!(
        last.key,
        "run_stop",
        "{}: last event {}",
        log.display(),
        last.key
    );
    assert_eq!(last.status(), Some("aborted"), "{}", log.display());
    std::fs::read_to_string(log).unwrap()
}

#[test]
fn a_libtorch_error_in_a_step_aborts_the_run_with_its_cause() {
    let cfg = ResnetRunConfig::load(
        &root().join("configs/resnet/tiny_cpu.toml"),
        Division::Closed,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("result_0.txt");
    let mut opts = common::train::cpu_run_options(&cfg.system, Division::Closed, 5, &log);
    opts.test_hooks.inject_fault_at_step = Some(3);
    opts.distributed_from_env = false;
    let out = run_once(
        &ResnetRun {
            config: &cfg,
            division: Division::Closed,
            data_dir: None,
            listed: None,
        },
        opts,
    )
    .expect("an error in a step is an outcome, not a failure to run");
    let Status::Aborted(reason) = &out.status else {
        panic!("expected aborted, got {:?}", out.status)
    };
    assert!(reason.contains("libtorch error"), "{reason}");
    assert!(reason.contains("shape '[3]' is invalid"), "{reason}");
    assert!(!reason.contains("frame #"), "{reason}");
    let text = ends_aborted(&log);
    assert!(
        text.contains("libtorch error"),
        "the reason is in run_stop's metadata"
    );
    // the official checker reads the log (and calls an aborted run what it is)
    if let Some(py) = common::oracle("step_errors") {
        let v = common::official::verdicts(&py, "4.0.0", std::slice::from_ref(&log));
        assert_eq!(
            v.get(&log),
            Some(&false),
            "an aborted run is not a compliant result"
        );
    }
}

#[test]
fn the_cli_ends_each_failing_run_aborted_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .current_dir(root())
        .env("MLPERF_RUN_INJECT_FAULT", "step:2")
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .args([
            "resnet",
            "--division",
            "closed",
            "--config",
            "configs/resnet/tiny_cpu.toml",
        ])
        .args([
            "--runs",
            "2",
            "--seeds",
            "1,2",
            "--system",
            "sys",
            "--results",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(101), "a panic: {stderr}");
    assert_eq!(out.status.code(), Some(1), "aborted runs exit 1: {stderr}");
    assert!(!stderr.contains("panicked at"), "{stderr}");
    assert!(!stderr.contains("frame #"), "{stderr}");
    assert!(stderr.contains("libtorch error"), "{stderr}");
    for i in 0..2 {
        let log = dir.path().join(format!("sys/resnet/result_{i}.txt"));
        assert!(log.exists(), "{} missing: {stderr}", log.display());
        ends_aborted(&log);
    }
}

/// A malformed MLPERF_RUN_INJECT_FAULT is an error naming the variable and its forms (exit 2),
/// before a set's first run; it used to be ignored, so the run meant to fail succeeded.
#[test]
fn a_malformed_injected_fault_is_refused_before_the_runs() {
    for value in ["step:two", "steps:2", "garbage"] {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
            .current_dir(root())
            .env("MLPERF_RUN_INJECT_FAULT", value)
            .env_remove("RANK")
            .env_remove("WORLD_SIZE")
            .args(["resnet", "--division", "closed"])
            .args(["--config", "configs/resnet/tiny_cpu.toml"])
            .args(["--runs", "1", "--system", "sys", "--results"])
            .arg(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(
            stderr.contains(&format!("MLPERF_RUN_INJECT_FAULT={value:?}"))
                && stderr.contains("step:N")
                && stderr.contains("capture:R"),
            "{value}: {stderr}"
        );
        assert!(
            !dir.path().join("sys/resnet/result_0.txt").exists(),
            "{value}: no run started"
        );
    }
}
