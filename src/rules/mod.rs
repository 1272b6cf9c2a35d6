//! Compliance checks against the MLPerf Training rules (`mlperf-run check`).
//!
//! API used by other modules (score, submission, train): [`check_log`] gives a [`Verdict`]
//! for one parsed log.

use crate::mllog::LogFile;

/// How to check a log.
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// Training ruleset, e.g. "4.0.0"; None: the benchmark's default from benchmarks/<name>.
    pub ruleset: Option<String>,
}

/// One broken rule (or a parse problem), naming the key and line.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// 1-based line in the log, when the finding is about one line.
    pub line: Option<usize>,
    /// The key concerned (e.g. "run_stop"), if any.
    pub key: Option<String>,
    /// Short rule id, e.g. "exactly-one", "closed-target".
    pub rule: String,
    pub message: String,
}

/// The result of checking one log.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Benchmark from submission_benchmark (if present).
    pub benchmark: Option<String>,
    /// Division from submission_division (if present).
    pub division: Option<String>,
    /// The ruleset used.
    pub ruleset: String,
    pub findings: Vec<Finding>,
}

impl Verdict {
    pub fn compliant(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Check one parsed log against the rules.
pub fn check_log(log: &LogFile, opts: &CheckOptions) -> Verdict {
    // Placeholder until the rule engine lands: parse problems only.
    let findings = log
        .issues
        .iter()
        .map(|i| Finding {
            line: Some(i.line),
            key: None,
            rule: "parse".into(),
            message: i.message.clone(),
        })
        .collect();
    Verdict {
        benchmark: log
            .first("submission_benchmark")
            .and_then(|e| e.value.as_str())
            .map(String::from),
        division: log
            .first("submission_division")
            .and_then(|e| e.value.as_str())
            .map(String::from),
        ruleset: opts.ruleset.clone().unwrap_or_default(),
        findings,
    }
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {}

pub fn run_check(_args: CheckArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}
