//! The CI regression gate (`mlperf-run regress`): scores result sets and compares them with
//! recorded baselines in a CSV file (see docs/rules-and-scoring.md, "Regression gate", for the schema).
//!
//! A row is keyed by (benchmark, config, system). The score (minutes, lower is better) regresses
//! when it grows by more than the tolerance; the throughput (higher is better), where both the
//! row and the logs have one, regresses when it falls by more than the tolerance.

use crate::fsutil;
use crate::score::{self, ScoreOptions, SetScore};
use anyhow::{bail, Context, Result};
use comfy_table::{presets, Table};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Tolerance in percent for rows that do not set one.
pub const DEFAULT_TOLERANCE_PCT: f64 = 5.0;

/// Columns of the baseline CSV, in the order written.
pub const COLUMNS: [&str; 7] = [
    "benchmark",
    "config",
    "system",
    "score_min",
    "throughput",
    "tolerance_pct",
    "recorded_at",
];

/// One recorded baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineRow {
    pub benchmark: String,
    pub config: String,
    pub system: String,
    /// Olympic score in minutes (after scaling).
    pub score_min: f64,
    /// Mean throughput as the logs record it (e.g. images/s), if any.
    pub throughput: Option<f64>,
    /// Allowed slowdown in percent; None: [`DEFAULT_TOLERANCE_PCT`] (or --tolerance).
    pub tolerance_pct: Option<f64>,
    /// When the row was recorded (RFC 3339), informational.
    pub recorded_at: String,
    /// 1-based line in the CSV it was read from (0 for new rows).
    pub line: usize,
}

impl BaselineRow {
    fn key(&self) -> (&str, &str, &str) {
        (&self.benchmark, &self.config, &self.system)
    }
}

/// The baseline file.
#[derive(Debug, Clone, Default)]
pub struct Baseline {
    pub rows: Vec<BaselineRow>,
}

impl Baseline {
    /// Read a baseline CSV. Errors name the file and line.
    pub fn load(path: &Path) -> Result<Baseline> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read baseline {}", path.display()))?;
        Self::parse(&text, path)
    }

    /// Parse baseline CSV text; `path` is for messages.
    pub fn parse(text: &str, path: &Path) -> Result<Baseline> {
        let at = |line: u64| format!("{}:{line}", path.display());
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let header = reader
            .headers()
            .map_err(|e| anyhow::anyhow!("{}: {e}", at(1)))?
            .clone();
        let col = |name: &str| header.iter().position(|h| h == name);
        let required = |name: &str| {
            col(name).with_context(|| {
                format!(
                    "{}: missing column '{name}' (the header must name: {})",
                    at(1),
                    COLUMNS.join(",")
                )
            })
        };
        let (c_bench, c_config, c_system, c_score) = (
            required("benchmark")?,
            required("config")?,
            required("system")?,
            required("score_min")?,
        );
        let (c_tp, c_tol, c_when) = (col("throughput"), col("tolerance_pct"), col("recorded_at"));
        let mut rows: Vec<BaselineRow> = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| {
                let line = e.position().map(|p| p.line()).unwrap_or(0);
                anyhow::anyhow!("{}: malformed CSV record: {e}", at(line))
            })?;
            let line = record.position().map(|p| p.line()).unwrap_or(0);
            let get = |c: Option<usize>| c.and_then(|c| record.get(c)).unwrap_or("");
            let text_field = |c: usize, name: &str| -> Result<String> {
                let v = get(Some(c));
                if v.is_empty() {
                    bail!("{}: column '{name}' is empty", at(line));
                }
                Ok(v.to_string())
            };
            let number = |c: Option<usize>, name: &str| -> Result<Option<f64>> {
                let v = get(c);
                if v.is_empty() {
                    return Ok(None);
                }
                match v.parse::<f64>() {
                    Ok(x) if x.is_finite() && x >= 0.0 => Ok(Some(x)),
                    _ => bail!(
                        "{}: column '{name}' is not a non-negative number: {v:?}",
                        at(line)
                    ),
                }
            };
            let row = BaselineRow {
                benchmark: text_field(c_bench, "benchmark")?,
                config: text_field(c_config, "config")?,
                system: text_field(c_system, "system")?,
                score_min: number(Some(c_score), "score_min")?
                    .with_context(|| format!("{}: column 'score_min' is empty", at(line)))?,
                throughput: number(c_tp, "throughput")?,
                tolerance_pct: number(c_tol, "tolerance_pct")?,
                recorded_at: get(c_when).to_string(),
                line: line as usize,
            };
            if let Some(dup) = rows.iter().find(|r| r.key() == row.key()) {
                bail!(
                    "{}: duplicate row for benchmark={}, config={}, system={} (first at line {})",
                    at(line),
                    row.benchmark,
                    row.config,
                    row.system,
                    dup.line
                );
            }
            rows.push(row);
        }
        Ok(Baseline { rows })
    }

    /// The row for (benchmark, config, system).
    pub fn find(&self, benchmark: &str, config: &str, system: &str) -> Option<&BaselineRow> {
        self.rows
            .iter()
            .find(|r| r.key() == (benchmark, config, system))
    }

    /// Add a row or replace the one with the same key (keeping its place).
    pub fn upsert(&mut self, row: BaselineRow) {
        match self.rows.iter_mut().find(|r| r.key() == row.key()) {
            Some(existing) => *existing = row,
            None => self.rows.push(row),
        }
    }

    /// The CSV text.
    pub fn to_csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        let _ = w.write_record(COLUMNS);
        let opt = |x: Option<f64>| x.map(|v| v.to_string()).unwrap_or_default();
        for r in &self.rows {
            let _ = w.write_record([
                r.benchmark.clone(),
                r.config.clone(),
                r.system.clone(),
                r.score_min.to_string(),
                opt(r.throughput),
                opt(r.tolerance_pct),
                r.recorded_at.clone(),
            ]);
        }
        String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
    }

    /// Write atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        fsutil::write_atomic(path, self.to_csv().as_bytes())
    }
}

/// The verdict of one comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within tolerance.
    Ok,
    /// Better than the baseline by more than the tolerance.
    Improved,
    Regressed,
    /// No baseline row (record one with --record).
    NoBaseline,
    /// The set has no valid score.
    NoScore,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Improved => "improved",
            Verdict::Regressed => "REGRESSED",
            Verdict::NoBaseline => "NO BASELINE",
            Verdict::NoScore => "NO SCORE",
        }
    }
}

/// One metric of one set against its baseline.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub benchmark: String,
    pub config: String,
    pub system: String,
    /// "score_min" or "throughput".
    pub metric: &'static str,
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub tolerance_pct: f64,
    pub verdict: Verdict,
    pub note: String,
}

impl Comparison {
    /// after / before.
    pub fn ratio(&self) -> Option<f64> {
        Some(self.after? / self.before?)
    }
}

/// How to compare.
#[derive(Debug, Clone, Default)]
pub struct CompareOptions {
    pub config: String,
    /// Use this system name instead of each set's results/<system> folder name.
    pub system: Option<String>,
    /// Overrides every row's tolerance.
    pub tolerance_pct: Option<f64>,
}

fn system_of(set: &SetScore, opts: &CompareOptions) -> String {
    opts.system.clone().unwrap_or_else(|| set.system.clone())
}

/// Compare scored sets with the baseline.
pub fn compare(sets: &[SetScore], baseline: &Baseline, opts: &CompareOptions) -> Vec<Comparison> {
    let mut out = Vec::new();
    for set in sets {
        let system = system_of(set, opts);
        let row = baseline.find(&set.benchmark, &opts.config, &system);
        let tolerance_pct = opts
            .tolerance_pct
            .or(row.and_then(|r| r.tolerance_pct))
            .unwrap_or(DEFAULT_TOLERANCE_PCT);
        let base = |metric, before, after, verdict, note: String| Comparison {
            benchmark: set.benchmark.clone(),
            config: opts.config.clone(),
            system: system.clone(),
            metric,
            before,
            after,
            tolerance_pct,
            verdict,
            note,
        };
        let before = row.map(|r| r.score_min);
        if !set.valid() {
            let why = if set.problems.is_empty() {
                "no score".to_string()
            } else {
                set.problems.join("; ")
            };
            out.push(base(
                "score_min",
                before,
                set.score,
                Verdict::NoScore,
                format!("{}: {why}", set.dir.display()),
            ));
            continue;
        }
        let Some(row) = row else {
            out.push(base(
                "score_min",
                None,
                set.score,
                Verdict::NoBaseline,
                "no baseline row; add it with --record".into(),
            ));
            continue;
        };
        let after = set.score.unwrap_or(f64::NAN);
        let tol = tolerance_pct / 100.0;
        // Lower is better for minutes.
        let verdict = judge(after / row.score_min, 1.0 + tol, 1.0 - tol, false);
        out.push(base(
            "score_min",
            Some(row.score_min),
            Some(after),
            verdict,
            String::new(),
        ));
        if let (Some(b), Some(a)) = (row.throughput, set.throughput) {
            // Higher is better for throughput.
            let verdict = judge(a / b, 1.0 + tol, 1.0 - tol, true);
            out.push(base("throughput", Some(b), Some(a), verdict, String::new()));
        }
    }
    out
}

fn judge(ratio: f64, upper: f64, lower: f64, higher_is_better: bool) -> Verdict {
    let (worse, better) = if higher_is_better {
        (ratio < lower, ratio > upper)
    } else {
        (ratio > upper, ratio < lower)
    };
    if worse || ratio.is_nan() {
        Verdict::Regressed
    } else if better {
        Verdict::Improved
    } else {
        Verdict::Ok
    }
}

/// A table of comparisons.
pub fn render(comparisons: &[Comparison]) -> String {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED);
    t.set_header([
        "benchmark",
        "config",
        "system",
        "metric",
        "before",
        "after",
        "ratio",
        "tolerance",
        "verdict",
    ]);
    let num = |x: Option<f64>| x.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    for c in comparisons {
        t.add_row([
            c.benchmark.clone(),
            c.config.clone(),
            c.system.clone(),
            c.metric.to_string(),
            num(c.before),
            num(c.after),
            c.ratio()
                .map(|r| format!("{r:.4}"))
                .unwrap_or_else(|| "-".into()),
            format!("{}%", c.tolerance_pct),
            c.verdict.as_str().to_string(),
        ]);
    }
    let mut s = format!("{t}\n");
    for c in comparisons.iter().filter(|c| !c.note.is_empty()) {
        s.push_str(&format!(
            "{} {}/{}/{}: {}\n",
            c.verdict.as_str(),
            c.benchmark,
            c.config,
            c.system,
            c.note
        ));
    }
    s
}

/// `mlperf-run regress`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Scores each RESULTS folder (as `mlperf-run score` does) and compares every set with the \
baseline row for the same benchmark, config and system: the score in minutes may not grow, \
and the throughput (where the logs record `throughput` or `tracked_stats`) may not fall, by \
more than the tolerance.

Exit status: 0 no regression, 1 a regression, a set without a valid score or without a \
baseline row (unless --record), 2 error (unreadable or malformed baseline, bad path).")]
pub struct RegressArgs {
    /// Baseline CSV (columns: benchmark,config,system,score_min,throughput,tolerance_pct,recorded_at).
    #[arg(long, value_name = "CSV", default_value = "results/recorded.csv")]
    pub baseline: PathBuf,
    /// Folders holding result sets (submitter trees, results/<system> or set folders).
    #[arg(value_name = "RESULTS", required = true)]
    pub results: Vec<PathBuf>,
    /// Allowed change in percent, for every row (default: each row's tolerance_pct, else 5).
    #[arg(long, value_name = "PCT", value_parser = parse_tolerance)]
    pub tolerance: Option<f64>,
    /// Add or update the baseline rows with these results (the file is written atomically).
    #[arg(long)]
    pub record: bool,
    /// The configuration name of the rows (e.g. the training recipe).
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub config: String,
    /// System name of the rows (default: each set's results/<system> folder name).
    #[arg(long, value_name = "NAME")]
    pub system: Option<String>,
    /// Training ruleset to score under (default: inferred per set, as `score` does).
    #[arg(long, value_name = "R")]
    pub ruleset: Option<String>,
}

fn parse_tolerance(s: &str) -> std::result::Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("'{s}' is not a non-negative percentage")),
    }
}

pub fn run_regress(args: RegressArgs) -> Result<ExitCode> {
    let mut baseline = if args.baseline.exists() {
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
    };
    let comparisons = compare(&sets, &baseline, &opts);
    print!("{}", render(&comparisons));

    let no_score = comparisons.iter().any(|c| c.verdict == Verdict::NoScore);
    if args.record {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut recorded = 0;
        for set in sets.iter().filter(|s| s.valid()) {
            let system = system_of(set, &opts);
            let old_tolerance = baseline
                .find(&set.benchmark, &opts.config, &system)
                .and_then(|r| r.tolerance_pct);
            baseline.upsert(BaselineRow {
                benchmark: set.benchmark.clone(),
                config: opts.config.clone(),
                system,
                score_min: set.score.unwrap_or(f64::NAN),
                throughput: set.throughput,
                tolerance_pct: args.tolerance.or(old_tolerance),
                recorded_at: now.clone(),
                line: 0,
            });
            recorded += 1;
        }
        baseline.save(&args.baseline)?;
        println!("recorded {recorded} row(s) in {}", args.baseline.display());
        return Ok(if no_score {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        });
    }
    let failed = comparisons.iter().any(|c| {
        matches!(
            c.verdict,
            Verdict::Regressed | Verdict::NoBaseline | Verdict::NoScore
        )
    });
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judge_respects_direction_and_tolerance() {
        assert_eq!(judge(1.04, 1.05, 0.95, false), Verdict::Ok);
        assert_eq!(judge(1.06, 1.05, 0.95, false), Verdict::Regressed);
        assert_eq!(judge(0.90, 1.05, 0.95, false), Verdict::Improved);
        assert_eq!(judge(0.90, 1.05, 0.95, true), Verdict::Regressed);
        assert_eq!(judge(1.10, 1.05, 0.95, true), Verdict::Improved);
        assert_eq!(judge(f64::NAN, 1.05, 0.95, true), Verdict::Regressed);
    }

    #[test]
    fn csv_round_trip_keeps_rows() {
        let text = "benchmark,config,system,score_min,throughput,tolerance_pct,recorded_at\n\
                    resnet,default,a,23.5,,2.5,2026-01-01T00:00:00Z\nbert,x,b,7.9,100.5,,\n";
        let b = Baseline::parse(text, Path::new("b.csv")).unwrap();
        assert_eq!(b.rows.len(), 2);
        assert_eq!(b.rows[0].tolerance_pct, Some(2.5));
        assert_eq!(b.rows[1].throughput, Some(100.5));
        assert_eq!(b.rows[1].line, 3);
        let again = Baseline::parse(&b.to_csv(), Path::new("b.csv")).unwrap();
        assert_eq!(
            again
                .rows
                .iter()
                .map(|r| (r.key(), r.score_min))
                .collect::<Vec<_>>(),
            b.rows
                .iter()
                .map(|r| (r.key(), r.score_min))
                .collect::<Vec<_>>()
        );
    }
}
