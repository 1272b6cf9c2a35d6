//! The comparison: each scored set's metrics against its baseline row ([`compare`]), with the
//! limits of the rule ([`limits`]) and a note naming both numbers for each regression.

use super::baseline::{Baseline, Recorded};
use crate::score::SetScore;

/// Tolerance in percent for rows that do not set one.
pub const DEFAULT_TOLERANCE_PCT: f64 = 5.0;

/// How many combined spreads a metric may move beyond the tolerance (`--spread-k`): 3 MADs is
/// about 2 standard deviations of one run under normal noise.
pub const DEFAULT_SPREAD_K: f64 = 3.0;

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

/// The rule of a CSV column (the score's for an unknown one).
fn rule(column: &str) -> MetricRule {
    RULES
        .iter()
        .copied()
        .find(|r| r.column == column)
        .unwrap_or(RULES[0])
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

/// The system name of a set's rows: `--system`, else the set's folder name.
pub(super) fn system_of(set: &SetScore, opts: &CompareOptions) -> String {
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
pub(super) fn current(set: &SetScore, column: &str) -> std::result::Result<Recorded, String> {
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

/// The `--metric` value that records `column`.
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
}
