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

use crate::score::{self, ScoreOptions, SetScore, Spread};
use crate::util::fs as fsutil;
use crate::util::ExitStatus;
use anyhow::{bail, Context, Result};
use comfy_table::{presets, Table};
use std::path::{Path, PathBuf};

/// Tolerance in percent for rows that do not set one.
pub const DEFAULT_TOLERANCE_PCT: f64 = 5.0;

/// How many combined spreads a metric may move beyond the tolerance (`--spread-k`): 3 MADs is
/// about 2 standard deviations of one run under normal noise.
pub const DEFAULT_SPREAD_K: f64 = 3.0;

/// Columns of the baseline CSV, in the order written. Files from before the throughput and
/// projection gates have the first seven; the others are optional when reading.
pub const COLUMNS: [&str; 12] = [
    "benchmark",
    "config",
    "system",
    "score_min",
    "throughput",
    "tolerance_pct",
    "recorded_at",
    "throughput_spread",
    "throughput_runs",
    "projected_min",
    "projected_spread",
    "projected_runs",
];

/// What `regress` compares and records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Metric {
    /// The olympic score of converged sets (minutes), and the throughput where both the row and
    /// the logs have one.
    #[default]
    Score,
    /// The median throughput of the runs (converged, or ended at their epoch/sample/time limit).
    Throughput,
    /// The median projected time to train of the runs (minutes; see `mlperf-run score`).
    Projected,
}

/// One metric's comparison rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricRule {
    /// The CSV column and the name in messages.
    pub column: &'static str,
    pub higher_is_better: bool,
    /// What it is, for messages.
    pub what: &'static str,
}

/// The metrics' rules, as data.
pub const RULES: [MetricRule; 3] = [
    MetricRule {
        column: "score_min",
        higher_is_better: false,
        what: "olympic score (minutes)",
    },
    MetricRule {
        column: "throughput",
        higher_is_better: true,
        what: "median throughput (samples/s)",
    },
    MetricRule {
        column: "projected_min",
        higher_is_better: false,
        what: "median projected time to train (minutes)",
    },
];

fn rule(column: &str) -> MetricRule {
    RULES
        .iter()
        .copied()
        .find(|r| r.column == column)
        .unwrap_or(RULES[0])
}

/// A recorded median with its spread and run count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recorded {
    pub value: f64,
    /// Median absolute deviation of the runs (None in rows written before spreads were kept:
    /// read as 0).
    pub spread: Option<f64>,
    pub runs: Option<usize>,
}

impl Recorded {
    fn from_spread(s: &Spread) -> Recorded {
        Recorded {
            value: s.median,
            spread: Some(s.mad),
            runs: Some(s.runs),
        }
    }
}

/// One recorded baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineRow {
    pub benchmark: String,
    pub config: String,
    pub system: String,
    /// Olympic score in minutes (after scaling); None for rows of sets without a score (short
    /// runs).
    pub score_min: Option<f64>,
    /// Median throughput of the runs as the logs record it (e.g. images/s). Rows written before
    /// medians were kept hold the mean of the converged runs.
    pub throughput: Option<Recorded>,
    /// Median projected time to train of the runs, minutes.
    pub projected: Option<Recorded>,
    /// Allowed change in percent; None: [`DEFAULT_TOLERANCE_PCT`] (or --tolerance).
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

    /// The recorded value of `column` ("score_min", "throughput" or "projected_min").
    pub fn metric(&self, column: &str) -> Option<Recorded> {
        match column {
            "score_min" => self.score_min.map(|value| Recorded {
                value,
                spread: None,
                runs: None,
            }),
            "throughput" => self.throughput,
            "projected_min" => self.projected,
            _ => None,
        }
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
                    "{}: missing column '{name}' (the header must name at least: {})",
                    at(1),
                    COLUMNS[..7].join(",")
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
        let (c_tp_spread, c_tp_runs) = (col("throughput_spread"), col("throughput_runs"));
        let (c_proj, c_proj_spread, c_proj_runs) = (
            col("projected_min"),
            col("projected_spread"),
            col("projected_runs"),
        );
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
            let count = |c: Option<usize>, name: &str| -> Result<Option<usize>> {
                let v = get(c);
                if v.is_empty() {
                    return Ok(None);
                }
                match v.parse::<usize>() {
                    Ok(n) if n > 0 => Ok(Some(n)),
                    _ => bail!(
                        "{}: column '{name}' is not a positive whole number of runs: {v:?}",
                        at(line)
                    ),
                }
            };
            let recorded = |value: Option<f64>,
                            spread: (Option<usize>, &str),
                            runs: (Option<usize>, &str)|
             -> Result<Option<Recorded>> {
                let spread = number(spread.0, spread.1)?;
                let runs = count(runs.0, runs.1)?;
                Ok(value.map(|value| Recorded {
                    value,
                    spread,
                    runs,
                }))
            };
            let row = BaselineRow {
                benchmark: text_field(c_bench, "benchmark")?,
                config: text_field(c_config, "config")?,
                system: text_field(c_system, "system")?,
                score_min: number(Some(c_score), "score_min")?,
                throughput: recorded(
                    number(c_tp, "throughput")?,
                    (c_tp_spread, "throughput_spread"),
                    (c_tp_runs, "throughput_runs"),
                )?,
                projected: recorded(
                    number(c_proj, "projected_min")?,
                    (c_proj_spread, "projected_spread"),
                    (c_proj_runs, "projected_runs"),
                )?,
                tolerance_pct: number(c_tol, "tolerance_pct")?,
                recorded_at: get(c_when).to_string(),
                line: line as usize,
            };
            if row.score_min.is_none() && row.throughput.is_none() && row.projected.is_none() {
                bail!(
                    "{}: the row records no metric: fill score_min, throughput or projected_min \
                     (or record it with `mlperf-run regress --record --metric ...`)",
                    at(line)
                );
            }
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
        let runs = |x: Option<usize>| x.map(|v| v.to_string()).unwrap_or_default();
        for r in &self.rows {
            let (tp, pj) = (r.throughput, r.projected);
            let _ = w.write_record([
                r.benchmark.clone(),
                r.config.clone(),
                r.system.clone(),
                opt(r.score_min),
                opt(tp.map(|t| t.value)),
                opt(r.tolerance_pct),
                r.recorded_at.clone(),
                opt(tp.and_then(|t| t.spread)),
                runs(tp.and_then(|t| t.runs)),
                opt(pj.map(|p| p.value)),
                opt(pj.and_then(|p| p.spread)),
                runs(pj.and_then(|p| p.runs)),
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
    /// "score_min", "throughput" or "projected_min" (the CSV column).
    pub metric: &'static str,
    pub before: Option<f64>,
    pub after: Option<f64>,
    /// Median absolute deviations of the recorded and of the new runs (None: not known).
    pub before_spread: Option<f64>,
    pub after_spread: Option<f64>,
    /// Runs behind the recorded and the new value.
    pub before_runs: Option<usize>,
    pub after_runs: Option<usize>,
    pub tolerance_pct: f64,
    /// The value beyond which `after` is a regression ([`limits`]).
    pub limit: Option<f64>,
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
#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub config: String,
    /// Use this system name instead of each set's `results/<system>` folder name.
    pub system: Option<String>,
    /// Overrides every row's tolerance.
    pub tolerance_pct: Option<f64>,
    pub metric: Metric,
    /// Combined spreads allowed beyond the tolerance ([`DEFAULT_SPREAD_K`]).
    pub spread_k: f64,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            config: "default".into(),
            system: None,
            tolerance_pct: None,
            metric: Metric::Score,
            spread_k: DEFAULT_SPREAD_K,
        }
    }
}

fn system_of(set: &SetScore, opts: &CompareOptions) -> String {
    opts.system.clone().unwrap_or_else(|| set.system.clone())
}

/// The regression and improvement limits of a metric recorded as `before` (median, spread):
/// with tolerance t (a fraction), k = `spread_k` and the combined spread
/// s = sqrt(spread_before^2 + spread_after^2),
///
/// - higher is better (throughput): regression below before x (1 - t) - k x s, improvement
///   above before x (1 + t) + k x s;
/// - lower is better (minutes): regression above before x (1 + t) + k x s, improvement below
///   before x (1 - t) - k x s.
///
/// Unknown spreads count as 0 (then this is the plain tolerance rule of score rows).
pub fn limits(
    before: f64,
    before_spread: Option<f64>,
    after_spread: Option<f64>,
    tolerance: f64,
    spread_k: f64,
    higher_is_better: bool,
) -> (f64, f64) {
    let s = before_spread
        .unwrap_or(0.0)
        .hypot(after_spread.unwrap_or(0.0));
    let slack = spread_k * s;
    let low = before * (1.0 - tolerance) - slack;
    let high = before * (1.0 + tolerance) + slack;
    if higher_is_better {
        (low, high)
    } else {
        (high, low)
    }
}

/// The verdict of `after` against (regression limit, improvement limit).
fn judge(after: f64, (worse_than, better_than): (f64, f64), higher_is_better: bool) -> Verdict {
    let (worse, better) = if higher_is_better {
        (after < worse_than, after > better_than)
    } else {
        (after > worse_than, after < better_than)
    };
    if worse || after.is_nan() {
        Verdict::Regressed
    } else if better {
        Verdict::Improved
    } else {
        Verdict::Ok
    }
}

/// The set's current value of a metric: median (or score), spread, runs; Err: why it has none.
fn current(set: &SetScore, column: &str) -> std::result::Result<Recorded, String> {
    let problems = |extra: &[String]| {
        let mut all: Vec<String> = set.problems.clone();
        all.extend(extra.iter().cloned());
        if all.is_empty() {
            "no value".to_string()
        } else {
            all.join("; ")
        }
    };
    if column != "score_min" {
        // a run that crashed, diverged or was interrupted is a finding, not noise to drop
        let bad: Vec<String> = set
            .runs
            .iter()
            .filter(|r| !r.measurable())
            .map(|r| {
                format!(
                    "{}: {}{}",
                    r.file.display(),
                    r.status.as_str(),
                    r.stop_reason
                        .as_ref()
                        .or(r.reason.as_ref())
                        .map(|why| format!(" ({why})"))
                        .unwrap_or_default()
                )
            })
            .collect();
        if !bad.is_empty() {
            return Err(format!(
                "every run must converge or end at its epoch, sample or time limit: {}",
                bad.join("; ")
            ));
        }
    }
    match column {
        "score_min" if set.valid() => Ok(Recorded {
            value: set.score.unwrap_or(f64::NAN),
            spread: None,
            runs: None,
        }),
        "score_min" => Err(problems(&[])),
        "throughput" => set.throughput_spread.as_ref().map(Recorded::from_spread).ok_or_else(|| {
            "no run logs a throughput (tracked_stats or throughput) among the converged runs or \
             the runs that ended at their epoch, sample or time limit"
                .to_string()
        }),
        _ => match &set.projection {
            Some(p) => p
                .spread
                .as_ref()
                .map(Recorded::from_spread)
                .ok_or_else(|| match p.problems.is_empty() {
                    true => "no run could be projected (none converged or ended at its limit)"
                        .to_string(),
                    false => p.problems.join("; "),
                }),
            None => Err("not projected".into()),
        },
    }
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
        let columns: &[&str] = match opts.metric {
            Metric::Score => &["score_min", "throughput"],
            Metric::Throughput => &["throughput"],
            Metric::Projected => &["projected_min"],
        };
        for (i, column) in columns.iter().enumerate() {
            // in score mode the throughput rides along only where both sides have one
            let optional = i > 0;
            let r = rule(column);
            let recorded = row.and_then(|row| row.metric(column));
            let now = current(set, column);
            if optional && (recorded.is_none() || now.is_err()) {
                continue;
            }
            let mut c = Comparison {
                benchmark: set.benchmark.clone(),
                config: opts.config.clone(),
                system: system.clone(),
                metric: r.column,
                before: recorded.map(|b| b.value),
                after: now.as_ref().ok().map(|a| a.value),
                before_spread: recorded.and_then(|b| b.spread),
                after_spread: now.as_ref().ok().and_then(|a| a.spread),
                before_runs: recorded.and_then(|b| b.runs),
                after_runs: now.as_ref().ok().and_then(|a| a.runs),
                tolerance_pct,
                limit: None,
                verdict: Verdict::Ok,
                note: String::new(),
            };
            match (&now, recorded) {
                (Err(why), _) => {
                    c.verdict = Verdict::NoScore;
                    c.note = format!("{}: no {}: {why}", set.dir.display(), r.column);
                }
                (Ok(_), None) => {
                    c.verdict = Verdict::NoBaseline;
                    c.note = match row {
                        None => "no baseline row; add it with --record".into(),
                        Some(row) => format!(
                            "the baseline row (line {}) has no {}; add it with --record --metric {}",
                            row.line,
                            r.column,
                            metric_flag(r.column)
                        ),
                    };
                }
                (Ok(a), Some(b)) => {
                    let lim = limits(
                        b.value,
                        b.spread,
                        a.spread,
                        tolerance_pct / 100.0,
                        opts.spread_k,
                        r.higher_is_better,
                    );
                    c.limit = Some(lim.0);
                    c.verdict = judge(a.value, lim, r.higher_is_better);
                    if c.verdict == Verdict::Regressed {
                        c.note = regression_note(&c, r, opts.spread_k);
                    }
                }
            }
            out.push(c);
        }
    }
    out
}

fn metric_flag(column: &str) -> &'static str {
    match column {
        "throughput" => "throughput",
        "projected_min" => "projected",
        _ => "score",
    }
}

/// Why a comparison regressed, with both numbers and the limit.
fn regression_note(c: &Comparison, r: MetricRule, spread_k: f64) -> String {
    let num = |x: Option<f64>| x.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    let (dir, sign_t, sign_k) = if r.higher_is_better {
        ("fell below", "-", "-")
    } else {
        ("rose above", "+", "+")
    };
    let spread = c
        .before_spread
        .unwrap_or(0.0)
        .hypot(c.after_spread.unwrap_or(0.0));
    format!(
        "{} {} {} the limit {} = recorded {} x (1 {sign_t} {}%) {sign_k} {spread_k} x combined \
         spread {spread:.4} (recorded spread {} over {} runs, now {} over {} runs)",
        r.what,
        num(c.after),
        dir,
        num(c.limit),
        num(c.before),
        c.tolerance_pct,
        num(c.before_spread),
        c.before_runs.map_or("?".into(), |n| n.to_string()),
        num(c.after_spread),
        c.after_runs.map_or("?".into(), |n| n.to_string()),
    )
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
        "limit",
        "verdict",
    ]);
    let num = |x: Option<f64>| x.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    // a median with its spread and runs: "1234.5000 ±12.0000 (5 runs)"
    let cell = |x: Option<f64>, spread: Option<f64>, runs: Option<usize>| {
        let mut s = num(x);
        if x.is_some() {
            if let Some(d) = spread {
                s.push_str(&format!(" ±{d:.4}"));
            }
            if let Some(n) = runs {
                s.push_str(&format!(" ({n} runs)"));
            }
        }
        s
    };
    for c in comparisons {
        t.add_row([
            c.benchmark.clone(),
            c.config.clone(),
            c.system.clone(),
            c.metric.to_string(),
            cell(c.before, c.before_spread, c.before_runs),
            cell(c.after, c.after_spread, c.after_runs),
            c.ratio()
                .map(|r| format!("{r:.4}"))
                .unwrap_or_else(|| "-".into()),
            format!("{}%", c.tolerance_pct),
            num(c.limit),
            c.verdict.as_str().to_string(),
        ]);
    }
    let mut s = format!("{t}\n");
    for c in comparisons.iter().filter(|c| !c.note.is_empty()) {
        s.push_str(&format!(
            "{} {}/{}/{}: {}: {}\n",
            c.verdict.as_str(),
            c.benchmark,
            c.config,
            c.system,
            c.metric,
            c.note
        ));
    }
    s
}

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

fn parse_spread_k(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("'{s}' is not a non-negative number")),
    }
}

fn parse_tolerance(s: &str) -> std::result::Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("'{s}' is not a non-negative percentage")),
    }
}

pub fn run_regress(args: RegressArgs) -> Result<ExitStatus> {
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
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut recorded = 0;
        for set in &sets {
            let system = system_of(set, &opts);
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
            match args.metric {
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
            row.tolerance_pct = args.tolerance.or(row.tolerance_pct);
            row.recorded_at = now.clone();
            row.line = 0;
            baseline.upsert(row);
            recorded += 1;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judge_respects_direction_tolerance_and_spread() {
        let lower =
            |after, before, tol| judge(after, limits(before, None, None, tol, 3.0, false), false);
        assert_eq!(lower(1.04, 1.0, 0.05), Verdict::Ok);
        assert_eq!(lower(1.06, 1.0, 0.05), Verdict::Regressed);
        assert_eq!(lower(0.90, 1.0, 0.05), Verdict::Improved);
        let higher =
            |after, before, tol| judge(after, limits(before, None, None, tol, 3.0, true), true);
        assert_eq!(higher(0.90, 1.0, 0.05), Verdict::Regressed);
        assert_eq!(higher(1.10, 1.0, 0.05), Verdict::Improved);
        assert_eq!(higher(f64::NAN, 1.0, 0.05), Verdict::Regressed);
        // spreads 30 and 40 combine to 50: limit 1000 x 0.95 - 3 x 50 = 800
        let lim = limits(1000.0, Some(30.0), Some(40.0), 0.05, 3.0, true);
        assert!((lim.0 - 800.0).abs() < 1e-9 && (lim.1 - 1200.0).abs() < 1e-9);
        assert_eq!(judge(801.0, lim, true), Verdict::Ok);
        assert_eq!(judge(799.0, lim, true), Verdict::Regressed);
        // minutes: 10 x 1.05 + 2 x 0.5 = 11.5
        let lim = limits(10.0, Some(0.5), None, 0.05, 2.0, false);
        assert!((lim.0 - 11.5).abs() < 1e-9);
        assert_eq!(judge(11.6, lim, false), Verdict::Regressed);
    }

    #[test]
    fn csv_round_trip_keeps_rows() {
        let text = "benchmark,config,system,score_min,throughput,tolerance_pct,recorded_at\n\
                    resnet,default,a,23.5,,2.5,2026-01-01T00:00:00Z\nbert,x,b,7.9,100.5,,\n";
        let b = Baseline::parse(text, Path::new("b.csv")).unwrap();
        assert_eq!(b.rows.len(), 2);
        assert_eq!(b.rows[0].tolerance_pct, Some(2.5));
        assert_eq!(b.rows[1].throughput.map(|t| t.value), Some(100.5));
        assert_eq!(b.rows[1].throughput.and_then(|t| t.spread), None);
        assert_eq!(b.rows[1].line, 3);
        let again = Baseline::parse(&b.to_csv(), Path::new("b.csv")).unwrap();
        assert_eq!(
            again.rows,
            b.rows
                .iter()
                .cloned()
                .map(|mut r| {
                    r.line = again.rows.iter().find(|a| a.key() == r.key()).unwrap().line;
                    r
                })
                .collect::<Vec<_>>()
        );
        // the new columns: a short-run row without a score
        let text = format!(
            "{}\nresnet,bench,gpu,,1234.5,,,12.5,5,61.25,0.5,5\n",
            COLUMNS.join(",")
        );
        let b = Baseline::parse(&text, Path::new("n.csv")).unwrap();
        let r = &b.rows[0];
        assert_eq!(r.score_min, None);
        assert_eq!(
            r.throughput,
            Some(Recorded {
                value: 1234.5,
                spread: Some(12.5),
                runs: Some(5)
            })
        );
        assert_eq!(
            r.projected.map(|p| (p.value, p.runs)),
            Some((61.25, Some(5)))
        );
        assert_eq!(
            Baseline::parse(&b.to_csv(), Path::new("n.csv"))
                .unwrap()
                .rows[0]
                .throughput,
            r.throughput
        );
        // a row with no metric at all, and a bad run count, name the line
        let e = Baseline::parse(
            &format!("{}\nresnet,bench,gpu,,,,,,,,,\n", COLUMNS.join(",")),
            Path::new("n.csv"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("n.csv:2") && e.contains("no metric"), "{e}");
        let e = Baseline::parse(
            &format!("{}\nresnet,bench,gpu,,5,,,1,2.5,,,\n", COLUMNS.join(",")),
            Path::new("n.csv"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("n.csv:2") && e.contains("throughput_runs"),
            "{e}"
        );
    }
}
