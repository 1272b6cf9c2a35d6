//! The CI regression gate (`mlperf-run regress`): scores result sets and compares them with
//! recorded baselines in a CSV file (see docs/ci.md for the schema and the rule).
//!
//! A row is keyed by (benchmark, config, system) and records up to three metrics: the score
//! (minutes, lower is better) of a converged set; the throughput (samples/s, higher is better)
//! and the projected time to train (minutes, lower is better) of any set, short runs included,
//! each as the median over the set's runs with its spread (median absolute deviation) and run
//! count. `--metric` picks what is compared and recorded; a comparison regresses when the new
//! value is worse than the recorded one by more than the tolerance plus `--spread-k` times the
//! combined spread ([`limits`]).
//!
//! The parts: baseline.rs reads and writes the CSV ([`Baseline`]), compare.rs applies the rule
//! ([`compare`]), render.rs draws the table ([`render`]); this file holds the command line.

mod baseline;
mod compare;
mod render;

pub use baseline::{Baseline, BaselineRow, Recorded, COLUMNS};
pub use compare::{
    compare, limits, CompareOptions, Comparison, Metric, MetricRule, Verdict, DEFAULT_SPREAD_K,
    DEFAULT_TOLERANCE_PCT, RULES,
};
pub use render::render;

use crate::score::{self, ScoreOptions, SetScore};
use crate::util::ExitStatus;
use anyhow::{bail, Result};
use compare::{current, system_of};
use std::path::PathBuf;

/// `mlperf-run regress`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Scores each RESULTS folder (as `mlperf-run score` does) and compares every set with the \
baseline row for the same benchmark, config and system.

--metric score (the default): the olympic score in minutes of a converged set, and the \
throughput where both the row and the logs have one. --metric throughput: the median of the \
runs' throughputs (the logs' `tracked_stats`/`throughput`), for converged sets and for short \
runs that end at their epoch, sample or time limit (e.g. configs/*/bench_1gpu.toml). \
--metric projected: the median of the runs' projected time to train in minutes (see \
`mlperf-run score`).

The rule, with tolerance t, k = --spread-k and the combined spread \
s = sqrt(MAD_recorded^2 + MAD_now^2) (MAD: median absolute deviation of the runs): a \
throughput regresses when median_now < median_recorded x (1 - t) - k x s; minutes (score, \
projected) regress when now > recorded x (1 + t) + k x s. A score has no spread (s = 0). \
Improvements beyond the mirror limit are reported, not failed.

--record adds or updates the rows with these results: the chosen metric's columns (median, \
spread, runs; for score also the throughput), keeping the row's other columns and its \
tolerance unless --tolerance is given.

Exit status: 0 no regression, 1 a regression (naming the metric, benchmark/config/system and \
both numbers), a set without the metric or without a baseline row (unless --record), 2 error \
(unreadable or malformed baseline: file and line, bad path).")]
pub struct RegressArgs {
    /// Baseline CSV (columns: benchmark,config,system,score_min,throughput,tolerance_pct,
    /// recorded_at, and optionally throughput_spread,throughput_runs,projected_min,
    /// projected_spread,projected_runs).
    #[arg(long, value_name = "CSV", default_value = "results/recorded.csv")]
    pub baseline: PathBuf,
    /// Folders holding result sets (submitter trees, `results/<system>` or set folders).
    #[arg(value_name = "RESULTS", required = true)]
    pub results: Vec<PathBuf>,
    /// What to compare and record.
    #[arg(long, value_enum, default_value_t = Metric::Score)]
    pub metric: Metric,
    /// Allowed change in percent, for every row (default: each row's tolerance_pct, else 5).
    #[arg(long, value_name = "PCT", value_parser = parse_tolerance)]
    pub tolerance: Option<f64>,
    /// Combined spreads (median absolute deviations) a median may move beyond the tolerance.
    #[arg(long, value_name = "K", default_value_t = DEFAULT_SPREAD_K, value_parser = parse_spread_k)]
    pub spread_k: f64,
    /// Add or update the baseline rows with these results (the file is written atomically).
    #[arg(long)]
    pub record: bool,
    /// The configuration name of the rows (e.g. the training recipe).
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub config: String,
    /// System name of the rows (default: each set's `results/<system>` folder name).
    #[arg(long, value_name = "NAME")]
    pub system: Option<String>,
    /// Training ruleset to score under (default: inferred per set, as `score` does).
    #[arg(long, value_name = "R")]
    pub ruleset: Option<String>,
}

/// `--spread-k`: a non-negative number.
fn parse_spread_k(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("'{s}' is not a non-negative number")),
    }
}

/// `--tolerance`: a non-negative percentage (a trailing % allowed).
fn parse_tolerance(s: &str) -> std::result::Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("'{s}' is not a non-negative percentage")),
    }
}

/// `mlperf-run regress`: score the results, compare and print the table, and with `--record`
/// update the baseline file.
pub fn run_regress(args: RegressArgs) -> Result<ExitStatus> {
    crate::rules::check_ruleset_flag(args.ruleset.as_deref())?;
    // --record starts an empty (or blank) file afresh, as a missing one
    let blank = || {
        crate::util::tree::read_text_file(&args.baseline, "baseline CSV")
            .is_ok_and(|t| t.trim().is_empty())
    };
    let mut baseline = if args.baseline.exists() && !(args.record && blank()) {
        Baseline::load(&args.baseline)?
    } else if args.record {
        Baseline::default()
    } else {
        bail!(
            "baseline {} does not exist; create it with --record",
            args.baseline.display()
        )
    };
    let score_opts = ScoreOptions {
        ruleset: args.ruleset.clone(),
    };
    let mut sets = Vec::new();
    for path in &args.results {
        sets.extend(score::score_path(path, &score_opts)?);
    }
    let opts = CompareOptions {
        config: args.config.clone(),
        system: args.system.clone(),
        tolerance_pct: args.tolerance,
        metric: args.metric,
        spread_k: args.spread_k,
    };
    let comparisons = compare(&sets, &baseline, &opts);
    let table = render(&comparisons);
    if args.record {
        // the baseline is recorded whether or not anyone still reads stdout
        crate::util::output::print_beside_work(&table)?;
    } else {
        crate::util::output::print(&table)?;
    }

    let no_value = comparisons.iter().any(|c| c.verdict == Verdict::NoScore);
    if args.record {
        let recorded = record_rows(&mut baseline, &sets, &opts);
        baseline.save(&args.baseline)?;
        crate::util::output::print(&format!(
            "recorded {recorded} row(s) in {}\n",
            args.baseline.display()
        ))?;
        return Ok(ExitStatus::verdict(!no_value));
    }
    let failed = comparisons.iter().any(|c| {
        matches!(
            c.verdict,
            Verdict::Regressed | Verdict::NoBaseline | Verdict::NoScore
        )
    });
    Ok(ExitStatus::verdict(!failed))
}

/// Add or update the baseline rows of the sets that have `opts.metric` (for score also the
/// throughput); returns how many rows were recorded.
fn record_rows(baseline: &mut Baseline, sets: &[SetScore], opts: &CompareOptions) -> usize {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut recorded = 0;
    for set in sets {
        let system = system_of(set, opts);
        let mut row = baseline
            .find(&set.benchmark, &opts.config, &system)
            .cloned()
            .unwrap_or_else(|| BaselineRow {
                benchmark: set.benchmark.clone(),
                config: opts.config.clone(),
                system: system.clone(),
                score_min: None,
                throughput: None,
                projected: None,
                tolerance_pct: None,
                recorded_at: String::new(),
                line: 0,
            });
        match opts.metric {
            Metric::Score => {
                let Ok(score) = current(set, "score_min") else {
                    continue;
                };
                row.score_min = Some(score.value);
                row.throughput = current(set, "throughput").ok();
            }
            Metric::Throughput => match current(set, "throughput") {
                Ok(t) => row.throughput = Some(t),
                Err(_) => continue,
            },
            Metric::Projected => match current(set, "projected_min") {
                Ok(p) => row.projected = Some(p),
                Err(_) => continue,
            },
        }
        row.tolerance_pct = opts.tolerance_pct.or(row.tolerance_pct);
        row.recorded_at = now.clone();
        row.line = 0;
        baseline.upsert(row);
        recorded += 1;
    }
    recorded
}
