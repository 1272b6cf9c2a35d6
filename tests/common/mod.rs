//! Shared test helpers: where the real result logs are, and whether the official tools run.
//! Every test binary (tests/<area>/main.rs) includes this module once, as `crate::common`.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod alone;
#[cfg(feature = "torch")]
pub mod dist;
pub mod emitter_logs;
pub mod fuzz_replay;
pub mod interrupt;
pub mod official;
pub mod package;
#[cfg(feature = "torch")]
pub mod rng;
#[cfg(feature = "torch")]
pub mod tensors;
#[cfg(feature = "torch")]
pub mod train;

/// True when CI demands the oracle and fixtures (scripts/test sets it under CI=true):
/// tests that need them then fail instead of skipping.
pub fn required() -> bool {
    std::env::var_os("MLPERF_RUN_REQUIRE_ORACLE").is_some()
}

/// The real published result logs: `$MLPERF_RESULTS_FIXTURES`, else ../shared/fixtures/mlperf-results.
/// None (with a message saying the test skips) when absent.
pub fn fixtures(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("MLPERF_RESULTS_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/mlperf-results")
        });
    if dir.is_dir() {
        return Some(dir);
    }
    if required() {
        panic!(
            "{test}: fixtures not found at {} (set MLPERF_RESULTS_FIXTURES)",
            dir.display()
        );
    }
    eprintln!(
        "SKIP {test}: real result logs not found at {} (set MLPERF_RESULTS_FIXTURES)",
        dir.display()
    );
    None
}

/// A python that imports mlperf_logging, or None (with a skip message).
pub fn oracle(test: &str) -> Option<PathBuf> {
    match mlperf_run::official::python() {
        Some(p) => Some(p),
        None if required() => {
            panic!("{test}: the official mlperf-logging tools are not importable")
        }
        None => {
            eprintln!("SKIP {test}: official mlperf-logging not importable (run scripts/setup.sh)");
            None
        }
    }
}

/// The text of the preset `configs/<rel>` with `line` (e.g. `fused_bn_relu = true`) added to its
/// `[methods]` table (the table is created when the preset has none).
pub fn preset_with_method(rel: &str, line: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    if text.contains("[methods]") {
        text.replace("[methods]", &format!("[methods]\n{line}"))
    } else {
        format!("{text}\n[methods]\n{line}\n")
    }
}

/// libnvrtc from the torch wheel (site-packages/nvidia/cu13/lib), or None.
pub fn venv_nvrtc() -> Option<std::path::PathBuf> {
    if let Ok(p) = std::env::var("MLPERF_RUN_NVRTC") {
        return Some(std::path::PathBuf::from(p));
    }
    let venv = std::env::var_os("MLPERF_RUN_VENV")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| std::path::PathBuf::from(h).join(".cache/mlperf-run/venv"))
        })?;
    let lib = std::fs::read_dir(venv.join("lib")).ok()?;
    for py in lib.flatten() {
        let cand = py
            .path()
            .join("site-packages/nvidia/cu13/lib/libnvrtc.so.13");
        if cand.exists() {
            return Some(cand);
        }
    }
    None
}
