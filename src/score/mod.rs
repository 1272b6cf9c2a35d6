//! Olympic scoring and reference convergence points (`mlperf-run score`).
//!
//! API for other modules: [`score_path`] (any folder holding result sets), [`score_set`] (one
//! `results/<system>/<benchmark>` folder) and [`render`].
//!
//! Scoring follows mlperf_logging.result_summarizer (4.1.68): time to train of a run is
//! (run_stop - run_start) / 60 / 1000 minutes; runs that fail compliance, lack run_start or
//! run_stop, or (as the rules say; the summarizer only notices this through compliance) stop
//! with status aborted are non-converged. The converged times are sorted; with no
//! non-converged run the fastest and slowest are dropped, with one the fastest is dropped (the
//! non-converged run is the slowest); with more than one there is no score. The olympic mean is
//! multiplied by the set's scaling factor: for closed sets the RCP normalization factor (what
//! the summarizer writes to scaling.json and applies on its next pass), otherwise an existing
//! scaling.json's `scaling_factor`.

mod discover;
pub mod project;
pub mod rcp;
mod render;
pub mod spread;
pub mod tdist;

pub use discover::{
    choose_ruleset, find_sets, result_files, result_files_under, ruleset_from_date,
    ruleset_from_path, RulesetSource,
};
pub use project::{Plan, Projection, RunShape};
pub use rcp::{RcpCheck, RcpMatch, RcpPoint, RcpTable};
pub use render::{render, Format};
pub use spread::Spread;

use crate::benchmarks::{self, Benchmark};
use crate::mllog::{self, keys, LogFile};
use crate::rules::{self, CheckOptions};
use crate::util::ExitStatus;
use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// How to score.
#[derive(Debug, Clone, Default)]
pub struct ScoreOptions {
    /// Training ruleset for every set; None: inferred per set (see [`choose_ruleset`]).
    pub ruleset: Option<String>,
}

/// What happened to one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    Success,
    Aborted,
    NonCompliant,
    NoRunStop,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Success => "success",
            RunStatus::Aborted => "aborted",
            RunStatus::NonCompliant => "non-compliant",
            RunStatus::NoRunStop => "no run_stop",
        }
    }
}

/// One run (`result_<i>.txt`) of a set.
#[derive(Debug, Clone, Serialize)]
pub struct RunScore {
    #[serde(serialize_with = "path_as_text")]
    pub file: PathBuf,
    pub status: RunStatus,
    /// Why the run is not a success (the first compliance finding, with its line).
    pub reason: Option<String>,
    /// Time to train in minutes, when the log has run_start and run_stop.
    pub minutes: Option<f64>,
    /// epoch_num of the last eval_accuracy before a successful run_stop (epochs for ResNet,
    /// samples for BERT), rounded to 3 decimals as the RCP checker does.
    pub converged_at: Option<f64>,
    pub global_batch_size: Option<f64>,
    /// Mean of the run's `throughput` events, else of its `tracked_stats` (their `throughput`
    /// field, else their first number).
    pub throughput: Option<f64>,
    pub run_start_ms: Option<f64>,
    /// run_stop's `reason` metadata (mlperf-run writes why a run was aborted).
    pub stop_reason: Option<String>,
    /// The run projected to a full run to target (see [`project`]).
    pub projection: Option<Projection>,
}

/// A path in `score --format json` as the other formats show it: a folder name that is not
/// UTF-8 shows its bad bytes as U+FFFD (serde's own PathBuf refuses it, and the whole JSON with it).
fn path_as_text<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}

/// The run_stop reasons of a run that ended at its epoch, sample or time limit: a short run
/// that did what it was asked (the throughput and projection gates measure these).
pub const LIMIT_REASONS: &[&str] = &["epoch limit", "sample limit", "time limit"];

impl RunScore {
    /// Counts towards the olympic mean.
    pub fn converged(&self) -> bool {
        self.status == RunStatus::Success && self.minutes.is_some()
    }

    /// Its timings stand for the system: converged, or aborted at its epoch, sample or time
    /// limit ([`LIMIT_REASONS`]; an aborted run_stop without a reason, as other tools write
    /// them, counts too). Not: diverged, interrupted, failed, non-compliant, unfinished.
    pub fn measurable(&self) -> bool {
        match self.status {
            RunStatus::Success => self.minutes.is_some(),
            RunStatus::Aborted => self
                .stop_reason
                .as_deref()
                .is_none_or(|r| LIMIT_REASONS.iter().any(|l| r.starts_with(l))),
            RunStatus::NonCompliant | RunStatus::NoRunStop => false,
        }
    }
}

/// Where the set's scaling factor came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScalingSource {
    None,
    /// scaling.json in the set folder.
    File,
    /// The RCP normalization factor (closed division).
    Rcp,
}

/// A scored result set.
#[derive(Debug, Clone, Serialize)]
pub struct SetScore {
    #[serde(serialize_with = "path_as_text")]
    pub dir: PathBuf,
    pub submitter: Option<String>,
    pub system: String,
    pub benchmark: String,
    pub division: Option<String>,
    pub ruleset: String,
    pub ruleset_source: RulesetSource,
    pub required_runs: usize,
    pub runs: Vec<RunScore>,
    /// Olympic mean in minutes, before scaling.
    pub olympic: Option<f64>,
    pub scaling_factor: f64,
    pub scaling_source: ScalingSource,
    /// olympic * scaling_factor.
    pub score: Option<f64>,
    /// The RCP check (closed division only).
    pub rcp: Option<RcpCheck>,
    /// Mean throughput over the converged runs that record one; when none does, over the runs
    /// that ended at their limit ([`RunScore::measurable`]: short runs).
    pub throughput: Option<f64>,
    /// Median and spread of the same runs' throughputs.
    pub throughput_spread: Option<Spread>,
    /// The projected full run of every measurable run (see [`project`]).
    pub projection: Option<SetProjection>,
    /// Why the set has no valid score (empty when it has one).
    pub problems: Vec<String>,
}

/// The set's runs projected to full runs to target.
#[derive(Debug, Clone, Serialize)]
pub struct SetProjection {
    /// The full run they are projected to (None when it could not be defined: see problems).
    pub plan: Option<Plan>,
    /// What the score would be: olympic mean of the runs' projected minutes (plain mean with
    /// fewer than 3 runs).
    pub score: Option<f64>,
    /// Median and spread of the runs' projected minutes.
    pub spread: Option<Spread>,
    /// Why runs (or the set) could not be projected, naming file and line.
    pub problems: Vec<String>,
}

impl SetScore {
    /// A score that stands: computed, right number of runs, RCP passed (closed).
    pub fn valid(&self) -> bool {
        self.score.is_some() && self.problems.is_empty()
    }
}

/// Score every result set at or below `path` (see [`find_sets`]).
pub fn score_path(path: &Path, opts: &ScoreOptions) -> Result<Vec<SetScore>> {
    let (walk, sets) = discover::find_sets_walk(path)?;
    sets.iter()
        .map(|dir| score_files(dir, result_files_under(&walk, dir)?, opts))
        .collect()
}

/// Score one `results/<system>/<benchmark>` folder.
pub fn score_set(dir: &Path, opts: &ScoreOptions) -> Result<SetScore> {
    score_files(dir, result_files(dir)?, opts)
}

/// Score the result files `files` of the set folder `dir`.
fn score_files(dir: &Path, files: Vec<PathBuf>, opts: &ScoreOptions) -> Result<SetScore> {
    if files.is_empty() {
        anyhow::bail!("no result files (result_*.txt) in {}", dir.display());
    }
    let logs = files
        .iter()
        .map(|f| mllog::parse_file(f))
        .collect::<Result<Vec<LogFile>>>()?;
    let bench = set_benchmark(dir, &logs)?;
    let first_start = logs
        .iter()
        .find_map(|l| l.first(keys::RUN_START))
        .map(|e| e.time_ms);
    let (ruleset, ruleset_source) =
        choose_ruleset(opts.ruleset.as_deref(), dir, first_start, bench);
    let check_opts = check_options(&ruleset);
    let runs: Vec<RunScore> = logs.iter().map(|log| score_run(log, &check_opts)).collect();

    let mut problems = foreign_logs(bench, &logs);
    if runs.len() != bench.runs {
        problems.push(format!(
            "{} result files in {}, {} needs exactly {}",
            runs.len(),
            dir.display(),
            bench.name,
            bench.runs
        ));
    }
    let olympic = olympic_mean(&runs);
    let dropped = runs.iter().filter(|r| !r.converged()).count();
    if dropped > 1 {
        problems.push(format!("{dropped} runs did not converge (at most 1 may)"));
    } else if olympic.is_none() {
        problems.push("too few converged runs for an olympic mean".into());
    }

    let division = set_division(dir, &logs);
    let file_factor = read_scaling_json(dir)?;
    let mut rcp = None;
    if division.as_deref() == Some("closed") {
        let check = rcp_check(bench, &ruleset, &runs);
        match &check {
            Ok(c) if !c.passed => problems.push(format!("RCP check failed: {}", c.message)),
            Ok(_) => {}
            Err(e) => problems.push(format!("RCP check failed: {e:#}")),
        }
        rcp = Some(check.unwrap_or_else(|e| RcpCheck {
            ruleset: ruleset.clone(),
            passed: false,
            message: format!("{e:#}"),
            matched: None,
            reference: None,
            batch_size: None,
            set_mean: None,
            norm_factor: 1.0,
            scaling_factor: None,
        }));
    }
    let (scaling_factor, scaling_source) =
        match (rcp.as_ref().and_then(|c| c.scaling_factor), file_factor) {
            (Some(f), _) => (f, ScalingSource::Rcp),
            (None, Some(f)) => (f, ScalingSource::File),
            (None, None) => (1.0, ScalingSource::None),
        };
    let score = olympic.filter(|_| dropped <= 1).map(|o| o * scaling_factor);
    let throughputs = set_throughputs(&runs);
    let throughput = (!throughputs.is_empty())
        .then(|| throughputs.iter().sum::<f64>() / throughputs.len() as f64);
    let throughput_spread = Spread::of(&throughputs);
    let mut runs = runs;
    let projection = Some(project_runs(bench, &ruleset, &logs, &mut runs));

    Ok(SetScore {
        dir: dir.to_path_buf(),
        submitter: logs.iter().find_map(|l| str_value(l, keys::SUBMISSION_ORG)),
        system: dir_name(dir.parent()).unwrap_or_else(|| "unknown".into()),
        benchmark: bench.name.clone(),
        division,
        ruleset,
        ruleset_source,
        required_runs: bench.runs,
        runs,
        olympic,
        scaling_factor,
        scaling_source,
        score,
        rcp,
        throughput,
        throughput_spread,
        projection,
        problems,
    })
}

/// The throughputs a set is measured by: its converged runs' where any records one, else
/// those of the runs that ended at their limit (short runs).
fn set_throughputs(runs: &[RunScore]) -> Vec<f64> {
    let of = |keep: &dyn Fn(&RunScore) -> bool| -> Vec<f64> {
        runs.iter()
            .filter(|r| keep(r))
            .filter_map(|r| r.throughput)
            .collect()
    };
    let converged = of(&|r| r.converged());
    if converged.is_empty() {
        of(&|r| r.measurable())
    } else {
        converged
    }
}

/// Project every measurable run of a set (in place) to the closed division's full run at the
/// set's global batch size; the set's projected score and spread.
fn project_runs(
    bench: &Benchmark,
    ruleset: &str,
    logs: &[LogFile],
    runs: &mut [RunScore],
) -> SetProjection {
    let mut out = SetProjection {
        plan: None,
        score: None,
        spread: None,
        problems: Vec::new(),
    };
    let Some(gbs) = runs.iter().find_map(|r| r.global_batch_size) else {
        out.problems
            .push("no run logs global_batch_size: no reference convergence point".into());
        return out;
    };
    let plan = match project::Plan::reference(bench, ruleset, gbs) {
        Ok(p) => p,
        Err(e) => {
            out.problems.push(e);
            return out;
        }
    };
    if let Some(why) = not_the_reference_run(runs, &plan) {
        out.problems.push(why);
        return out;
    }
    let mut minutes = Vec::new();
    for (run, log) in runs.iter_mut().zip(logs) {
        if !run.measurable() {
            continue;
        }
        match project::run_shape(log, bench).and_then(|s| project::project(&s, &plan, None)) {
            Ok(p) => {
                minutes.push(p.minutes);
                run.projection = Some(p);
            }
            Err(e) => out.problems.push(e),
        }
    }
    out.score = project::projected_score(&minutes);
    out.spread = Spread::of(&minutes);
    out.plan = Some(plan);
    out
}

/// Why a set cannot stand for the reference run a projection assumes, if it cannot: its
/// converged runs reached the target in less than half the reference's epochs or samples, which
/// no closed run of the benchmark's model and data does (the RCP check fails long before), so it
/// trained something else (a tiny model, a synthetic set) or other math (open-division methods)
/// and a projection to the reference's convergence would mean nothing for it.
fn not_the_reference_run(runs: &[RunScore], plan: &project::Plan) -> Option<String> {
    let at: Vec<f64> = runs
        .iter()
        .filter(|r| r.converged())
        .filter_map(|r| r.converged_at)
        .collect();
    if at.is_empty() {
        return None;
    }
    let mean = at.iter().sum::<f64>() / at.len() as f64;
    (mean < plan.converge_at / 2.0).then(|| {
        format!(
            "the converged runs reached the target at {mean:.4} {unit} on average, less than half \
             the reference's {ref_at:.4} ({source}): they do not converge as the reference does \
             (a tiny model or a synthetic set, or open-division methods), so a projection to the \
             reference run would not stand for them",
            unit = plan.unit,
            ref_at = plan.converge_at,
            source = plan.source
        )
    })
}

#[allow(clippy::needless_update)] // CheckOptions may grow fields; keep their defaults
fn check_options(ruleset: &str) -> CheckOptions {
    CheckOptions {
        ruleset: Some(ruleset.to_string()),
        ..Default::default()
    }
}

/// The olympic mean of the converged runs' minutes, dropping as the result summarizer does.
pub fn olympic_mean(runs: &[RunScore]) -> Option<f64> {
    let dropped = runs.iter().filter(|r| !r.converged()).count();
    if dropped > 1 {
        return None;
    }
    let mut minutes: Vec<f64> = runs
        .iter()
        .filter(|r| r.converged())
        .filter_map(|r| r.minutes)
        .collect();
    minutes.sort_by(f64::total_cmp);
    let end = minutes.len().checked_sub(1 - dropped)?;
    let countable = minutes.get(1..end).filter(|c| !c.is_empty())?;
    // Left-to-right sum, as Python's sum() (3.11).
    Some(countable.iter().fold(0.0, |acc, m| acc + m) / countable.len() as f64)
}

/// Why a log has no run_stop, as far as the file tells: its last line cut off mid-event (the
/// writer stopped: the run was killed or the file truncated), named with its line; else only
/// that it is missing.
fn no_run_stop_reason(log: &LogFile) -> String {
    match log.issues.last() {
        Some(issue)
            if issue.line >= log.total_lines && issue.message.starts_with("broken JSON") =>
        {
            format!(
                "run_stop not recorded: the log's last line ({}) is cut off mid-event: the run \
                 was stopped or the file truncated",
                issue.line
            )
        }
        _ => "run_stop not recorded".into(),
    }
}

fn score_run(log: &LogFile, check: &CheckOptions) -> RunScore {
    let start = log.first(keys::RUN_START).map(|e| e.time_ms);
    let stop_event = log.first(keys::RUN_STOP);
    let minutes = match (start, stop_event) {
        (Some(a), Some(b)) => Some((b.time_ms - a) / 60.0 / 1000.0),
        _ => None,
    };
    let verdict = rules::check_log(log, check);
    // Reasons name the line; the run's file is in RunScore::file.
    let first_finding = verdict.findings.first().map(|f| match f.line {
        Some(line) => format!("line {line}: {}", f.message),
        None => f.message.clone(),
    });
    let (status, reason) = match stop_event {
        None => (RunStatus::NoRunStop, Some(no_run_stop_reason(log))),
        Some(stop) if stop.status() == Some(keys::STATUS_ABORTED) => (
            RunStatus::Aborted,
            Some(format!("line {}: run_stop status aborted", stop.line)),
        ),
        Some(_) if start.is_none() => (
            RunStatus::NonCompliant,
            Some("run_start not recorded".into()),
        ),
        Some(stop) if stop.status() != Some(keys::STATUS_SUCCESS) => (
            RunStatus::NonCompliant,
            Some(format!(
                "line {}: run_stop status is neither success nor aborted",
                stop.line
            )),
        ),
        Some(_) if !verdict.compliant() => (RunStatus::NonCompliant, first_finding),
        Some(_) => (RunStatus::Success, None),
    };
    RunScore {
        file: log.path.clone(),
        status,
        reason,
        minutes,
        converged_at: converged_at(log),
        global_batch_size: log
            .last(keys::GLOBAL_BATCH_SIZE)
            .and_then(|e| e.value.as_f64()),
        throughput: throughput(log),
        run_start_ms: start,
        stop_reason: stop_event
            .and_then(|e| e.meta("reason"))
            .and_then(Value::as_str)
            .map(String::from),
        projection: None,
    }
}

/// epoch_num of the last eval_accuracy before the first run_stop, when that run_stop says
/// success (the RCP checker's definition), rounded to 3 decimals.
fn converged_at(log: &LogFile) -> Option<f64> {
    let mut last_eval = None;
    for e in &log.events {
        if e.key == keys::EVAL_ACCURACY || e.key == "eval_error" {
            last_eval = e.epoch_num();
        }
        if e.key == keys::RUN_STOP {
            return if e.status() == Some(keys::STATUS_SUCCESS) {
                last_eval.map(round3)
            } else {
                None
            };
        }
    }
    None
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn throughput(log: &LogFile) -> Option<f64> {
    let mut values: Vec<f64> = log
        .with_key(keys::THROUGHPUT)
        .filter_map(|e| e.value.as_f64())
        .collect();
    if values.is_empty() {
        values = log
            .with_key(keys::TRACKED_STATS)
            .filter_map(|e| match &e.value {
                Value::Object(m) => m
                    .get(keys::THROUGHPUT)
                    .and_then(Value::as_f64)
                    .or_else(|| m.values().find_map(Value::as_f64)),
                v => v.as_f64(),
            })
            .collect();
    }
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

fn rcp_check(bench: &Benchmark, ruleset: &str, runs: &[RunScore]) -> Result<RcpCheck> {
    let table = RcpTable::load(&bench.name, ruleset, bench.runs)?;
    let mut sizes = runs.iter().map(|r| (r.file.as_path(), r.global_batch_size));
    let (first_file, first_bs) = sizes.next().context("no runs")?;
    let Some(bs) = first_bs else {
        anyhow::bail!(
            "Could not detect global_batch_size in {}",
            first_file.display()
        )
    };
    for (file, other) in sizes {
        match other {
            Some(o) if o == bs => {}
            Some(o) => anyhow::bail!(
                "global batch sizes differ within the set: {} logs {bs}, {} logs {o}",
                first_file.display(),
                file.display()
            ),
            None => anyhow::bail!("Could not detect global_batch_size in {}", file.display()),
        }
    }
    // The RCP checker's own notion of convergence: run_stop with status success.
    let converged: Vec<Option<f64>> = runs.iter().map(|r| r.converged_at).collect();
    Ok(table.check(bs, &converged))
}

fn set_benchmark(dir: &Path, logs: &[LogFile]) -> Result<&'static Benchmark> {
    if let Some(b) = dir_name(Some(dir)).and_then(|n| benchmarks::get(&n).ok()) {
        return Ok(b);
    }
    let from_log = logs
        .iter()
        .find_map(|l| str_value(l, keys::SUBMISSION_BENCHMARK));
    match from_log {
        Some(name) => benchmarks::get(&name).with_context(|| format!("result set {}", dir.display())),
        None => anyhow::bail!(
            "result set {}: the folder is not named after a benchmark and no log has submission_benchmark",
            dir.display()
        ),
    }
}

/// The division from <tree>/systems/<system>.json when the set sits in a submitter tree,
/// else from the logs' submission_division.
fn set_division(dir: &Path, logs: &[LogFile]) -> Option<String> {
    let system_dir = dir.parent()?;
    let results = system_dir.parent()?;
    if dir_name(Some(results)).as_deref() == Some("results") {
        let system = dir_name(Some(system_dir))?;
        let json = results
            .parent()?
            .join("systems")
            .join(format!("{system}.json"));
        if let Ok(text) =
            crate::util::tree::read_text_limited(&json, SMALL_JSON_BYTES, "system description")
        {
            if let Some(d) = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("division")?.as_str().map(String::from))
            {
                return Some(d.to_lowercase());
            }
        }
    }
    logs.iter()
        .find_map(|l| str_value(l, keys::SUBMISSION_DIVISION))
        .map(|d| d.to_lowercase())
}

/// The most a scaling.json or system description is read (they are a few hundred bytes).
const SMALL_JSON_BYTES: u64 = 1 << 20;

/// scaling.json's scaling_factor, if the file exists.
fn read_scaling_json(dir: &Path) -> Result<Option<f64>> {
    let path = dir.join("scaling.json");
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(None);
    }
    let text = crate::util::tree::read_text_limited(&path, SMALL_JSON_BYTES, "scaling.json")?;
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))?;
    let f = v
        .get("scaling_factor")
        .and_then(Value::as_f64)
        .with_context(|| format!("{} has no numeric scaling_factor", path.display()))?;
    Ok(Some(f))
}

/// The set's logs of another benchmark (a bert log among resnet runs), each a problem naming
/// the file and line: scored as the set's benchmark, they would count as its runs.
fn foreign_logs(bench: &Benchmark, logs: &[LogFile]) -> Vec<String> {
    logs.iter()
        .filter_map(|log| {
            let ev = log.first(keys::SUBMISSION_BENCHMARK)?;
            let other = ev.value.as_str().filter(|b| *b != bench.name)?;
            Some(format!(
                "{}:{}: a {other} log in a {} result set: move it to a {other} folder",
                log.path.display(),
                ev.line,
                bench.name
            ))
        })
        .collect()
}

fn str_value(log: &LogFile, key: &str) -> Option<String> {
    log.first(key)
        .and_then(|e| e.value.as_str())
        .map(String::from)
}

fn dir_name(dir: Option<&Path>) -> Option<String> {
    let abs = std::path::absolute(dir?).ok()?;
    abs.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// The help's closing text; the defaults come from benchmarks/<name>/benchmark.toml.
fn score_after_help() -> String {
    format!(
        "\
DIR may be a submitter tree (with results/), a results/<system> folder, one \
results/<system>/<benchmark> folder, or any folder above them: every folder holding \
result_*.txt files is scored as one set.

Ruleset: --ruleset, else a vX.Y component of the path (e.g. training_results_v2.0), else the \
round whose submission window holds the logs' run_start date (the [[rounds]] of \
benchmarks/<name>/benchmark.toml), else the benchmark default ({}).

Closed sets get the RCP check (the round's RCP file); their score is multiplied by the RCP \
normalization factor when they pass faster than the RCP mean (what the official summarizer \
writes to scaling.json). Open sets honour an existing scaling.json. Nothing is written.

throughput: mean of the runs' `throughput` (else `tracked_stats`) values, over the converged \
runs, or for a set without any (a short run) over the runs that ended at their epoch, sample \
or time limit. projected_min: each such run projected to a full run to target (its steady \
training rate after the first eval, its warm-up paid once, the RCP mean epochs or samples at \
the set's global batch size, evals at the closed cadence on the full eval set), and the \
olympic mean of those; none for a set whose converged runs reached the target in under half the \
reference's epochs or samples (a tiny or synthetic set, or open-division methods); see docs/ci.md.

Exit status: 0 every set has a valid score, 1 some set has none (too many non-converged runs, \
wrong number of runs, RCP failed), 2 error (unreadable path, no result files).",
        crate::benchmarks::generated::DEFAULT_RULESETS
    )
}

/// `mlperf-run score`.
#[derive(clap::Args, Debug)]
#[command(after_help = score_after_help())]
pub struct ScoreArgs {
    /// Folder holding result sets.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Training ruleset for every set (e.g. 2.0.0); default: inferred per set.
    #[arg(long, value_name = "R")]
    pub ruleset: Option<String>,
}

pub fn run_score(args: ScoreArgs) -> Result<ExitStatus> {
    crate::rules::check_ruleset_flag(args.ruleset.as_deref())?;
    let sets = score_path(
        &args.dir,
        &ScoreOptions {
            ruleset: args.ruleset,
        },
    )?;
    crate::util::output::print(&render(&sets, args.format)?)?;
    Ok(crate::util::ExitStatus::verdict(
        sets.iter().all(SetScore::valid),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(minutes: Option<f64>, status: RunStatus) -> RunScore {
        RunScore {
            file: PathBuf::new(),
            status,
            reason: None,
            minutes,
            converged_at: None,
            global_batch_size: None,
            throughput: None,
            run_start_ms: None,
            stop_reason: None,
            projection: None,
        }
    }

    #[test]
    fn olympic_drops_fastest_and_slowest() {
        let runs: Vec<RunScore> = [5.0, 1.0, 3.0, 2.0, 4.0]
            .iter()
            .map(|m| run(Some(*m), RunStatus::Success))
            .collect();
        assert_eq!(olympic_mean(&runs), Some(3.0));
    }

    #[test]
    fn olympic_counts_one_failure_as_slowest() {
        let mut runs: Vec<RunScore> = [5.0, 1.0, 3.0, 2.0]
            .iter()
            .map(|m| run(Some(*m), RunStatus::Success))
            .collect();
        runs.push(run(Some(0.5), RunStatus::Aborted));
        // drop the fastest (1.0) and the aborted run: mean of 2, 3, 5
        assert_eq!(olympic_mean(&runs), Some(10.0 / 3.0));
        runs.push(run(None, RunStatus::NoRunStop));
        assert_eq!(olympic_mean(&runs), None);
    }

    #[test]
    fn olympic_needs_enough_runs() {
        let runs = vec![
            run(Some(1.0), RunStatus::Success),
            run(Some(2.0), RunStatus::Success),
        ];
        assert_eq!(olympic_mean(&runs), None);
        assert_eq!(olympic_mean(&[]), None);
    }

    #[test]
    fn sets_that_converge_far_sooner_than_the_reference_are_not_projected() {
        let plan = project::Plan {
            converge_at: 35.0,
            unit: "epochs",
            source: "RCP test".into(),
            samples_per_unit: 1_281_167.0,
            eval_interval: 4.0,
            first_eval: None,
            eval_samples: 50_000.0,
        };
        let at = |epochs: &[f64]| -> Vec<RunScore> {
            epochs
                .iter()
                .map(|e| RunScore {
                    converged_at: Some(*e),
                    ..run(Some(1.0), RunStatus::Success)
                })
                .collect()
        };
        // a tiny set: the target at 8 epochs, not near 35
        let why = not_the_reference_run(&at(&[8.0, 8.0, 12.0]), &plan).unwrap();
        assert!(why.contains("9.3333 epochs on average"), "{why}");
        assert!(why.contains("35.0000 (RCP test)"), "{why}");
        // real sets converge near the reference; short sets (no converged run) are projected
        assert_eq!(not_the_reference_run(&at(&[33.0, 37.0, 41.0]), &plan), None);
        assert_eq!(
            not_the_reference_run(&[run(Some(3.0), RunStatus::Aborted)], &plan),
            None
        );
    }
}
