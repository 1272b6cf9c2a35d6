//! Compliance checks against the MLPerf Training rules (`mlperf-run check`).
//!
//! API used by other modules (score, submission, train): [`check_log`] gives a [`Verdict`]
//! for one parsed log; [`check_set`] checks what spans the runs of one result set (run
//! count, one global batch size, unique seeds in the closed division).
//!
//! The rules are data ([`tables`]), one table per ruleset (2.0.0 .. 5.0.0), applied by
//! the rule engine (`engine.rs`) with the semantics of the official `mlperf_logging.compliance_checker`, so our
//! verdict equals the official one (tests/logs_rules/check_differential.rs holds us to that). The
//! rulesets a user may name are the benchmarks' rounds (`benchmarks/<name>/benchmark.toml`); a
//! round is checked with the table its `rules` names ([`tables::resolve`]), so a new round
//! that reuses the last round's rules needs no code.
//!
//! Finding rule ids: `parse` (a line that cannot be read), `empty` (no MLLOG lines),
//! `ruleset`, `unsupported` (benchmark or rule file outside what we check), `value`,
//! `metadata`, `order` (phase order), `init-time`, `exactly-one`, `at-least-one`, `target`
//! (quality target never reached), `weights-init` (2.x closed), and for sets `run-count`,
//! `batch-size`, `seed`.

mod cli;
mod division;
mod engine;
mod python;
mod set;
pub mod tables;

pub use cli::{run_check, CheckArgs, OutputFormat};
pub use division::Division;
pub use engine::SUPPORTED_BENCHMARKS;
pub use set::check_set;

use crate::benchmarks;
use crate::mllog::LogFile;
use std::fmt;

/// The ruleset used when neither the user nor the log's benchmark names one: the only
/// ruleset that covers both ResNet and BERT.
pub const FALLBACK_RULESET: &str = "4.0.0";

/// How to check a log.
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// Training ruleset, e.g. "4.0.0"; None: the benchmark's default from `benchmarks/<name>`.
    pub ruleset: Option<String>,
}

/// One broken rule (or a parse problem), naming the key and line.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// 1-based line in the log, when the finding is about one line.
    pub line: Option<usize>,
    /// The key concerned (e.g. "run_stop"), if any.
    pub key: Option<String>,
    /// Short rule id, e.g. "exactly-one", "target" (see the module docs).
    pub rule: String,
    pub message: String,
}

/// A finding about `line` (1-based) and `key` where it is about one, under rule id `rule`.
pub(crate) fn finding(
    line: Option<usize>,
    key: Option<&str>,
    rule: &str,
    message: String,
) -> Finding {
    Finding {
        line,
        key: key.map(String::from),
        rule: rule.into(),
        message,
    }
}

impl fmt::Display for Finding {
    /// `[rule] key: message` (the caller prefixes `path:line: `).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] ", self.rule)?;
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        write!(f, "{}", self.message)
    }
}

impl Finding {
    /// `path:line: [rule] key: message` (or `path: ...` without a line).
    pub fn located(&self, path: &std::path::Path) -> String {
        match self.line {
            Some(line) => format!("{}:{line}: {self}", path.display()),
            None => format!("{}: {self}", path.display()),
        }
    }
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
    /// Broken rules: the log is compliant when there are none.
    pub findings: Vec<Finding>,
    /// Reported but not deciding (e.g. an EXACTLY_ONE key repeated with the same value,
    /// which the official checker only warns about).
    pub warnings: Vec<Finding>,
}

impl Verdict {
    pub fn compliant(&self) -> bool {
        self.findings.is_empty()
    }
}

/// A `--ruleset` flag's value (None: not given): a ruleset or round this build knows, else an
/// error naming the known rounds, before any log is read (`check`, `score`, `regress`,
/// `package`: an unknown one used to fail every log or run as non-compliant instead).
pub fn check_ruleset_flag(ruleset: Option<&str>) -> anyhow::Result<()> {
    match ruleset.map(|r| tables::resolve(r, None)) {
        Some(Err(message)) => anyhow::bail!("--ruleset: {message}"),
        _ => Ok(()),
    }
}

/// The ruleset `check_log` uses for a log of `benchmark` under `opts`.
pub fn resolve_ruleset(benchmark: Option<&str>, opts: &CheckOptions) -> String {
    opts.ruleset
        .clone()
        .or_else(|| {
            benchmark
                .and_then(|b| benchmarks::get(b).ok())
                .map(|b| b.default_ruleset.clone())
        })
        .unwrap_or_else(|| FALLBACK_RULESET.to_string())
}

/// A parse problem, saying so where the official checker would crash on the line.
fn parse_message(message: &str) -> String {
    let crashes = ["'time_ms'", "'key'", "'value'", "'metadata'"]
        .iter()
        .any(|f| message.contains(&format!("missing field {f}")))
        || message.contains("not a JSON object");
    if crashes {
        format!("{message} (the official checker crashes on this line)")
    } else {
        message.to_string()
    }
}

/// Check one parsed log against the rules.
pub fn check_log(log: &LogFile, opts: &CheckOptions) -> Verdict {
    let first_str = |key: &str| {
        log.first(key)
            .and_then(|e| e.value.as_str())
            .map(String::from)
    };
    let benchmark = first_str("submission_benchmark");
    let division = first_str("submission_division");
    let ruleset = resolve_ruleset(benchmark.as_deref(), opts);

    let mut findings: Vec<Finding> = log
        .issues
        .iter()
        .map(|i| Finding {
            line: Some(i.line),
            key: None,
            rule: "parse".into(),
            message: parse_message(&i.message),
        })
        .collect();
    if log.events.is_empty() {
        let message = if log.looks_binary {
            "no :::MLLOG lines: the file looks binary, not an MLPerf log".to_string()
        } else if !log.has_text {
            "no :::MLLOG lines: the file is empty".to_string()
        } else {
            format!("no readable :::MLLOG lines in {} lines", log.total_lines)
        };
        findings.push(Finding {
            line: None,
            key: None,
            rule: "empty".into(),
            message,
        });
    }
    let mut warnings = Vec::new();
    match tables::resolve(&ruleset, benchmark.as_deref()) {
        Ok(rules) => {
            let outcome = engine::evaluate(log, &rules);
            findings.extend(outcome.findings);
            warnings = outcome.warnings;
        }
        Err(message) => findings.push(Finding {
            line: None,
            key: None,
            rule: "ruleset".into(),
            message,
        }),
    }
    Verdict {
        benchmark,
        division,
        ruleset,
        findings,
        warnings,
    }
}

#[cfg(test)]
mod tests;
