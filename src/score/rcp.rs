//! Reference convergence points (RCP): the closed-division check that a result set does not
//! converge suspiciously faster than the reference runs, and the score normalization factor.
//!
//! Follows mlperf_logging.rcp_checker (4.1.68) step by step: RCP mean is the olympic mean of
//! the reference runs, stdev their population stdev, the minimum acceptable mean comes from a
//! binary search on a one-sided pooled t-test at alpha 0.05, points are pruned to those that
//! converge fastest for their batch size, batch sizes between two points are interpolated, and
//! a passing set faster than the RCP mean is scaled by RCP_mean / set_mean.
//!
//! The tables are data: each round of `benchmarks/<name>/benchmark.toml` names its RCP file
//! (`rcp = "rcp/training_<ruleset>.json"`, the official files, unchanged), embedded at build
//! time (build.rs); `MLPERF_RUN_BENCHMARKS_DIR` reads the rounds and their files from a
//! directory.

use super::tdist;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

const ALPHA: f64 = 0.05;
const TOLERANCE: f64 = 0.0001;

/// One reference point (a batch size) with its statistics.
#[derive(Debug, Clone, Serialize)]
pub struct RcpPoint {
    /// Record name in the table ("resnet_ref_3264"), or `<benchmark>_interp_<bs>`.
    pub name: String,
    pub batch_size: f64,
    /// Olympic mean of the reference runs' epochs (or samples) to converge.
    pub mean: f64,
    /// Population standard deviation of all reference runs.
    pub stdev: f64,
    /// The smallest set mean the one-sided t-test accepts.
    pub min_mean: f64,
    /// mean / min_mean.
    pub max_speedup: f64,
}

/// The RCP table of one benchmark at one ruleset, with statistics and the pruned points.
#[derive(Debug, Clone)]
pub struct RcpTable {
    pub benchmark: String,
    pub ruleset: String,
    /// Runs per submission set (the t-test's sample size comes from it).
    pub submission_runs: usize,
    /// All points, sorted by batch size.
    pub points: Vec<RcpPoint>,
    /// The points the official checker uses by default ("pruned_rcps").
    pub pruned: Vec<RcpPoint>,
}

/// How the set's batch size was matched to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RcpMatch {
    /// A point with exactly this batch size.
    Found,
    /// Interpolated between the two neighbouring points.
    Interpolated,
    /// Smaller than every point: compared with the smallest (must converge no faster).
    BelowSmallest,
    /// Larger than every point: an RCP must be submitted first.
    Missing,
    /// No points at all.
    NoRcps,
}

/// Outcome of the RCP check of one set.
#[derive(Debug, Clone, Serialize)]
pub struct RcpCheck {
    pub ruleset: String,
    pub passed: bool,
    /// Why, in the official checker's words where it has some.
    pub message: String,
    pub matched: Option<RcpMatch>,
    /// The reference point the set was compared with.
    pub reference: Option<RcpPoint>,
    pub batch_size: Option<f64>,
    /// Olympic mean of the set's epochs/samples to converge (non-converged runs count as 1e9).
    pub set_mean: Option<f64>,
    /// RCP mean / set mean, at least 1.0.
    pub norm_factor: f64,
    /// The factor the score is multiplied by: norm_factor when the set passed and converged
    /// faster than the RCP mean, 1.0 when the set was evaluated otherwise, None when the check
    /// stopped before evaluating (then an existing scaling.json stays in force).
    pub scaling_factor: Option<f64>,
}

impl RcpTable {
    /// The table for `benchmark` at `ruleset`.
    pub fn load(benchmark: &str, ruleset: &str, submission_runs: usize) -> Result<RcpTable> {
        let (text, origin) = table_text(benchmark, ruleset)?;
        Self::from_json(&text, benchmark, ruleset, submission_runs)
            .with_context(|| format!("invalid RCP table {origin}"))
    }

    /// Build a table from the official JSON layout.
    pub fn from_json(
        text: &str,
        benchmark: &str,
        ruleset: &str,
        submission_runs: usize,
    ) -> Result<RcpTable> {
        if submission_runs < 3 {
            bail!("submission_runs must be at least 3, got {submission_runs}");
        }
        let raw: Value = serde_json::from_str(text).context("not JSON")?;
        let Value::Object(records) = raw else {
            bail!("the top level is not a JSON object")
        };
        let mut table = RcpTable {
            benchmark: benchmark.to_string(),
            ruleset: ruleset.to_string(),
            submission_runs,
            points: Vec::new(),
            pruned: Vec::new(),
        };
        for (name, rec) in &records {
            let bs = rec
                .get("BS")
                .and_then(Value::as_f64)
                .with_context(|| format!("record {name}: no numeric BS"))?;
            let runs = rec
                .get("Epochs to converge")
                .and_then(Value::as_array)
                .with_context(|| format!("record {name}: no 'Epochs to converge' list"))?;
            let mut epochs = runs
                .iter()
                .map(|v| {
                    v.as_f64().with_context(|| {
                        format!("record {name}: non-numeric convergence value {v}")
                    })
                })
                .collect::<Result<Vec<f64>>>()?;
            if epochs.len() < 3 {
                bail!(
                    "record {name}: needs at least 3 reference runs, has {}",
                    epochs.len()
                );
            }
            epochs.sort_by(f64::total_cmp);
            let mean = mean(&epochs[1..epochs.len() - 1]);
            let stdev = population_stdev(&epochs);
            let min_mean = table.min_acceptable_mean(mean, stdev, (epochs.len() - 2) as f64);
            table.points.push(RcpPoint {
                name: name.clone(),
                batch_size: bs,
                mean,
                stdev,
                min_mean,
                max_speedup: mean / min_mean,
            });
        }
        // Stable sort by batch size, like Python's sorted().
        table
            .points
            .sort_by(|a, b| a.batch_size.total_cmp(&b.batch_size));
        table.pruned = table.prune();
        Ok(table)
    }

    /// Binary search for the smallest mean that the one-sided t-test (alpha 0.05) accepts.
    fn min_acceptable_mean(&self, mean: f64, stdev: f64, ref_runs: f64) -> f64 {
        if stdev == 0.0 {
            return mean;
        }
        let subm_runs = (self.submission_runs - 2) as f64;
        let (mut lo, mut hi) = (0.0f64, mean);
        let mut mid = (lo + hi) / 2.0;
        while hi - lo > TOLERANCE {
            // As the official checker: the candidate mean takes the reference's sample count.
            let p = tdist::one_sided_p_value(mid, stdev, ref_runs, mean, stdev, subm_runs);
            if p > ALPHA {
                hi = mid;
            } else {
                lo = mid;
            }
            mid = (lo + hi) / 2.0;
        }
        mid
    }

    /// A point for `bs` interpolated linearly between `low` and `high`.
    fn interpolate(&self, bs: f64, low: &RcpPoint, high: &RcpPoint) -> RcpPoint {
        let mean = interp(bs, low.batch_size, high.batch_size, low.mean, high.mean);
        let stdev = interp(bs, low.batch_size, high.batch_size, low.stdev, high.stdev);
        let min_mean = self.min_acceptable_mean(mean, stdev, (self.submission_runs * 2) as f64);
        RcpPoint {
            name: format!("{}_interp_{}", self.benchmark, fmt_bs(bs)),
            batch_size: bs,
            mean,
            stdev,
            min_mean,
            max_speedup: mean / min_mean,
        }
    }

    /// Keep the points with the fastest convergence: drop every batch size below the fastest
    /// point, then every point slower than the interpolation of its neighbours.
    fn prune(&self) -> Vec<RcpPoint> {
        let Some(fastest) = self
            .points
            .iter()
            .reduce(|best, p| if p.mean < best.mean { p } else { best })
        else {
            return Vec::new();
        };
        let mut kept: Vec<RcpPoint> = self
            .points
            .iter()
            .filter(|p| p.batch_size >= fastest.batch_size)
            .cloned()
            .collect();
        let mut i = 1usize;
        while i + 1 < kept.len() {
            let interp = self.interpolate(kept[i].batch_size, &kept[i - 1], &kept[i + 1]);
            if kept[i].mean > interp.mean {
                kept.remove(i);
                i -= 1;
            }
            i += 1;
        }
        kept
    }

    /// The reference point the checker compares a set of `batch_size` with: the pruned point of
    /// that batch size, else the interpolation between its neighbours, else (below every point)
    /// the smallest. Err with the official message when there is none (larger than every point,
    /// or no points).
    pub fn reference(
        &self,
        batch_size: f64,
    ) -> std::result::Result<(RcpPoint, RcpMatch), (RcpMatch, String)> {
        let pts = &self.pruned;
        let exact = pts.iter().find(|p| p.batch_size == batch_size);
        let below = pts
            .iter()
            .filter(|p| p.batch_size < batch_size)
            .reduce(|a, p| if p.batch_size > a.batch_size { p } else { a });
        let above = pts
            .iter()
            .filter(|p| p.batch_size > batch_size)
            .reduce(|a, p| if p.batch_size < a.batch_size { p } else { a });
        match (exact, below, above) {
            (Some(p), _, _) => Ok((p.clone(), RcpMatch::Found)),
            (None, Some(lo), Some(hi)) => {
                Ok((self.interpolate(batch_size, lo, hi), RcpMatch::Interpolated))
            }
            (None, Some(_), None) => Err((
                RcpMatch::Missing,
                format!(
                    "Missing RCP, please submit RCP with BS = {}",
                    fmt_bs(batch_size)
                ),
            )),
            (None, None, Some(_)) => {
                let smallest = pts
                    .iter()
                    .reduce(|a, p| if p.batch_size < a.batch_size { p } else { a })
                    .expect("above is Some so pts is not empty");
                Ok((smallest.clone(), RcpMatch::BelowSmallest))
            }
            (None, None, None) => Err((RcpMatch::NoRcps, "Cannot find any RCPs".into())),
        }
    }

    /// Check a set: its global batch size and each run's epochs (or samples) to converge,
    /// `None` for a run that did not converge.
    pub fn check(&self, batch_size: f64, converged_at: &[Option<f64>]) -> RcpCheck {
        let mut out = RcpCheck {
            ruleset: self.ruleset.clone(),
            passed: false,
            message: String::new(),
            matched: None,
            reference: None,
            batch_size: Some(batch_size),
            set_mean: None,
            norm_factor: 1.0,
            scaling_factor: None,
        };
        let not_converged = converged_at.iter().filter(|c| c.is_none()).count();
        if not_converged > 1 {
            out.message =
                format!("Insufficient convergence ({not_converged} runs did not converge)");
            return out;
        }
        let mut epochs: Vec<f64> = converged_at.iter().map(|c| c.unwrap_or(1e9)).collect();
        epochs.sort_by(f64::total_cmp);
        if epochs.len() < 3 {
            out.message = format!("too few runs for the olympic mean ({})", epochs.len());
            return out;
        }
        let set_mean = mean(&epochs[1..epochs.len() - 1]);
        out.set_mean = Some(set_mean);

        let (reference, matched) = match self.reference(batch_size) {
            Ok(found) => found,
            Err((matched, message)) => {
                out.matched = Some(matched);
                out.message = message;
                return out;
            }
        };
        let norm = reference.mean / set_mean;
        out.norm_factor = if norm < 1.0 { 1.0 } else { norm };
        out.passed = set_mean >= reference.mean / reference.max_speedup;
        out.scaling_factor = Some(if out.passed && set_mean < reference.mean {
            out.norm_factor
        } else {
            1.0
        });
        out.message = match (matched, out.passed) {
            (RcpMatch::Found, _) => "RCP found".into(),
            (RcpMatch::Interpolated, _) => "RCP Interpolation".into(),
            (_, true) => "RCP not found but slower convergence on smaller batch size".into(),
            (_, false) => format!(
                "Missing RCP, please submit RCP with BS = {}",
                fmt_bs(batch_size)
            ),
        };
        out.matched = Some(matched);
        out.reference = Some(reference);
        out
    }
}

/// Rulesets with an RCP table for `benchmark`: its rounds (`benchmarks/<name>/benchmark.toml`).
pub fn rulesets(benchmark: &str) -> Vec<&'static str> {
    crate::benchmarks::get(benchmark)
        .map(|b| b.round_names())
        .unwrap_or_default()
}

fn table_text(benchmark: &str, ruleset: &str) -> Result<(String, String)> {
    let bench = crate::benchmarks::get(benchmark)
        .with_context(|| format!("no RCP table for {benchmark} at ruleset {ruleset}"))?;
    match bench.round(ruleset) {
        Some(round) => crate::benchmarks::rcp_text(bench, round),
        None => bail!(
            "no RCP table for {benchmark} at ruleset {ruleset} (known: {}); pass --ruleset with \
             one of them, or add the round to benchmarks/{benchmark}/benchmark.toml",
            bench.round_names().join(", ")
        ),
    }
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

fn population_stdev(xs: &[f64]) -> f64 {
    let m = mean(xs);
    (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64).sqrt()
}

/// numpy.interp with two points.
fn interp(x: f64, x0: f64, x1: f64, y0: f64, y1: f64) -> f64 {
    if x == x1 {
        return y1;
    }
    let slope = (y1 - y0) / (x1 - x0);
    slope * (x - x0) + y0
}

fn fmt_bs(bs: f64) -> String {
    if bs.fract() == 0.0 && bs.abs() < 1e15 {
        format!("{}", bs as i64)
    } else {
        format!("{bs}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resnet_reference_points_match_the_published_figures() {
        // mlperf-facts.md section 5: GBS 3264 mean 35.15 min 34.31; GBS 2048 mean 35.04 min 33.86.
        let t = RcpTable::load("resnet", "4.0.0", 5).unwrap();
        let p = t.points.iter().find(|p| p.batch_size == 3264.0).unwrap();
        assert!((p.mean - 35.1538).abs() < 1e-3, "{}", p.mean);
        assert!((p.min_mean - 34.31).abs() < 5e-3, "{}", p.min_mean);
        // 2048 has no point of its own: interpolated between 1632 and 3264.
        let c = t.check(2048.0, &[Some(40.0); 5]);
        assert_eq!(c.matched, Some(RcpMatch::Interpolated));
        let p = c.reference.unwrap();
        assert!(
            (p.mean - 35.04).abs() < 5e-3 && (p.min_mean - 33.86).abs() < 5e-3,
            "{p:?}"
        );
    }

    #[test]
    fn bert_reference_point_matches_the_published_figure() {
        let t = RcpTable::load("bert", "5.0.0", 10).unwrap();
        let p = t.points.iter().find(|p| p.batch_size == 448.0).unwrap();
        assert!((p.mean - 2_414_421.0).abs() < 1.0, "{}", p.mean);
        assert!((p.min_mean - 2_274_732.0).abs() < 1.0, "{}", p.min_mean);
    }

    #[test]
    fn check_passes_scales_and_fails() {
        let t = RcpTable::load("resnet", "2.0.0", 5).unwrap();
        // The NVIDIA v2.0 closed set: four runs at 35 epochs, one aborted.
        let c = t.check(
            3264.0,
            &[Some(35.0), Some(35.0), None, Some(35.0), Some(35.0)],
        );
        assert!(c.passed, "{c:?}");
        assert_eq!(c.matched, Some(RcpMatch::Found));
        assert!((c.scaling_factor.unwrap() - 1.004_395_604_395_604_4).abs() < 1e-12);
        // Far faster than the reference: fails, no scaling.
        let c = t.check(3264.0, &[Some(20.0); 5]);
        assert!(!c.passed && c.scaling_factor == Some(1.0));
        // Slower than the reference: passes with factor 1.
        let c = t.check(3264.0, &[Some(40.0); 5]);
        assert!(c.passed && c.scaling_factor == Some(1.0));
        // Two runs did not converge: nothing evaluated.
        let c = t.check(3264.0, &[None, None, Some(35.0), Some(35.0), Some(35.0)]);
        assert!(!c.passed && c.scaling_factor.is_none());
        // Beyond the largest batch size: RCP missing.
        let c = t.check(1e7, &[Some(35.0); 5]);
        assert_eq!(c.matched, Some(RcpMatch::Missing));
        assert!(!c.passed);
    }

    #[test]
    fn interpolation_lies_between_neighbours() {
        let t = RcpTable::load("bert", "5.0.0", 10).unwrap();
        let (lo, hi) = (&t.pruned[0], &t.pruned[1]);
        let bs = (lo.batch_size + hi.batch_size) / 2.0;
        let c = t.check(bs, &[Some(1e12); 10]);
        assert_eq!(c.matched, Some(RcpMatch::Interpolated));
        let r = c.reference.unwrap();
        assert!(r.mean >= lo.mean.min(hi.mean) && r.mean <= lo.mean.max(hi.mean));
        assert!(r.min_mean < r.mean);
    }

    #[test]
    fn unknown_ruleset_is_a_clear_error() {
        let e = RcpTable::load("resnet", "5.0.0", 5)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no RCP table for resnet at ruleset 5.0.0") && e.contains("4.0.0"),
            "{e}"
        );
    }
}
