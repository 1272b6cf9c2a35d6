//! The official MLCommons tools (PyPI mlperf-logging 4.1.68), run as a second opinion and as
//! the oracle of our differential tests. Nothing here is needed for our own verdicts.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// The pinned version of the official tools.
pub const MLPERF_LOGGING_VERSION: &str = "4.1.68";

/// Output of one official tool invocation.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl ToolOutput {
    /// stdout and stderr together.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// A Python interpreter that can import `mlperf_logging`: `$MLPERF_RUN_PYTHON`, then the
/// set-up venv (`$MLPERF_RUN_VENV` or ~/.cache/mlperf-run/venv), then `python3`.
pub fn python() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("MLPERF_RUN_PYTHON") {
        candidates.push(PathBuf::from(p));
    }
    let venv = std::env::var_os("MLPERF_RUN_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/mlperf-run/venv"))
        });
    if let Some(v) = venv {
        candidates.push(v.join("bin/python"));
    }
    candidates.push(PathBuf::from("python3"));
    candidates.into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import mlperf_logging"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    })
}

/// Run `python -m MODULE ARGS...` with the official tools.
pub fn run_module(module: &str, args: &[&str]) -> Result<ToolOutput> {
    let Some(py) = python() else {
        bail!(
            "the official MLPerf tools are not importable: run scripts/setup.sh or \
             `pip install mlperf-logging=={MLPERF_LOGGING_VERSION}`, or set MLPERF_RUN_PYTHON"
        )
    };
    let out = Command::new(&py)
        .arg("-m")
        .arg(module)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {} -m {module}", py.display()))?;
    Ok(ToolOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}
