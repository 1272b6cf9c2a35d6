//! The projected time to train against real published runs: every converged run of
//! ../shared/fixtures/mlperf-results is projected from its first 2, 3 and 4 evals and compared
//! with its actual time to train (run_start to run_stop). Two projections:
//!
//! - the time model alone: converging where the run really converged, at the run's own eval
//!   cadence (what the projection gets wrong when it knows how far to train);
//! - the reference projection, as `score` makes it for a short run: converging at the RCP mean
//!   for the run's global batch size, at the closed eval cadence. Only closed runs converge
//!   near the RCP (the RCP check makes them); open recipes do not, so it is asserted for the
//!   closed set and printed for the others.
//!
//! The bounds are what was measured (docs/ci.md, "Projected time to train"), with headroom:
//! runs at a steady pace stay within 1.7% (worst, any of 2-4 evals), so 3% fails a model
//! that, e.g., averages the warm-up epochs into the pace (NVIDIA: +7% to +11%) or counts evals
//! at the closed cadence instead of the run's (MosaicML BERT: -9% to -10%). MosaicML's methods ResNet
//! trains its first epochs at 176 px (progressive resizing) and is underestimated by 12-18%:
//! the test pins that known limit (negative, under 20%).
//!
//! Run with `--nocapture` to see the table.

use crate::common;

use mlperf_run::benchmarks::{self, ConvergenceUnit};
use mlperf_run::mllog::parse_file;
use mlperf_run::score::{self, project, Plan, RunStatus, ScoreOptions};

/// Per set (its folder under the fixtures): the bound on |error| of the time model, whether
/// the projection may err both ways, and why.
const BOUNDS: &[(&str, f64, bool, &str)] = &[
    (
        "v2.0/NVIDIA/results/dgxa100_ngc22.04_mxnet/resnet",
        0.03,
        true,
        "steady pace after the first epoch",
    ),
    (
        "v2.0/MosaicML/results/8xA100_80GB-baseline/resnet",
        0.03,
        true,
        "steady pace",
    ),
    (
        "v2.1/MosaicML/results/8xA100_80GB-methods/bert",
        0.03,
        true,
        "steady pace, an eval every 24,640 samples",
    ),
    (
        "v2.0/MosaicML/results/8xA100_80GB-methods/resnet",
        0.20,
        false,
        "progressive resizing: the first epochs train at 176 px, faster than the rest",
    ),
];

/// The closed set, where the reference (RCP) projection must hold too.
const CLOSED_SET: &str = "v2.0/NVIDIA/results/dgxa100_ngc22.04_mxnet/resnet";
const CLOSED_BOUND: f64 = 0.03;

fn median(v: &[f64]) -> f64 {
    score::spread::median(v)
}

#[test]
fn projections_from_the_first_evals_match_real_runs() {
    let Some(root) = common::fixtures("projections_from_the_first_evals_match_real_runs") else {
        return;
    };
    let sets = score::score_path(&root, &ScoreOptions::default()).unwrap();
    assert!(sets.len() >= 4, "expected the 4 fixture sets");
    let mut checked = 0;
    println!(
        "{:<52} {:>1} {:>5} {:>9} {:>9} {:>9} {:>9}",
        "set (runs)", "k", "", "model med", "worst", "rcp med", "worst"
    );
    for set in &sets {
        let rel = set
            .dir
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let bench = benchmarks::get(&set.benchmark).unwrap();
        let gbs = set.runs.iter().find_map(|r| r.global_batch_size).unwrap();
        let reference = Plan::reference(bench, &set.ruleset, gbs).unwrap();
        let runs: Vec<_> = set
            .runs
            .iter()
            .filter(|r| r.status == RunStatus::Success)
            .collect();
        let bound = BOUNDS.iter().find(|b| b.0 == rel);
        for k in 2..=4usize {
            let (mut model, mut rcp) = (Vec::new(), Vec::new());
            for run in &runs {
                let log = parse_file(&run.file).unwrap();
                let shape = project::run_shape(&log, bench).unwrap();
                let actual = run.minutes.unwrap();
                let progress: Vec<f64> = shape.segments.iter().map(|s| s.progress).collect();
                let deltas: Vec<f64> = progress.windows(2).map(|w| w[1] - w[0]).collect();
                let own = Plan {
                    converge_at: run.converged_at.unwrap(),
                    unit: reference.unit,
                    source: "the run's own convergence".into(),
                    samples_per_unit: match bench.convergence_unit {
                        ConvergenceUnit::Epochs => bench.train_samples.unwrap() as f64,
                        ConvergenceUnit::Samples => 1.0,
                    },
                    eval_interval: median(&deltas),
                    first_eval: Some(progress[0]),
                    eval_samples: bench.eval_samples as f64,
                };
                let err = |plan: &Plan| {
                    let p = project::project(&shape, plan, Some(k)).unwrap();
                    assert_eq!(p.segments_used, k);
                    (p.minutes - actual) / actual
                };
                model.push(err(&own));
                rcp.push(err(&reference));
            }
            let abs = |v: &[f64]| v.iter().map(|e| e.abs()).collect::<Vec<_>>();
            let worst = |v: &[f64]| abs(v).into_iter().fold(0.0f64, f64::max);
            println!(
                "{:<52} {k} {:>5} {:>8.2}% {:>8.2}% {:>8.2}% {:>8.2}%",
                format!("{rel} ({})", runs.len()),
                "",
                100.0 * median(&abs(&model)),
                100.0 * worst(&model),
                100.0 * median(&abs(&rcp)),
                100.0 * worst(&rcp)
            );
            if let Some((_, limit, both_ways, why)) = bound {
                assert!(
                    worst(&model) < *limit,
                    "{rel}, first {k} evals: time model off by up to {:.2}% (bound {:.0}%: {why}): {model:?}",
                    100.0 * worst(&model),
                    100.0 * limit
                );
                if !both_ways {
                    assert!(
                        model.iter().all(|e| *e < 0.0),
                        "{rel}: expected an underestimate ({why}): {model:?}"
                    );
                }
                checked += 1;
            }
            if rel == CLOSED_SET {
                assert!(
                    worst(&rcp) < CLOSED_BOUND,
                    "{rel}, first {k} evals: the RCP projection is off by up to {:.2}%: {rcp:?}",
                    100.0 * worst(&rcp)
                );
            }
        }
    }
    assert_eq!(checked, 3 * BOUNDS.len(), "every bounded set was found");
}

/// The projection `score` prints for a set is the olympic mean of its runs' projections, each
/// from all of the run's evals; the closed set's is within the bound of its official score.
#[test]
fn the_closed_sets_projected_score_is_near_its_real_score() {
    let Some(root) = common::fixtures("the_closed_sets_projected_score_is_near_its_real_score")
    else {
        return;
    };
    let sets = score::score_path(&root.join(CLOSED_SET), &ScoreOptions::default()).unwrap();
    let set = &sets[0];
    let projected = set.projection.as_ref().unwrap().score.unwrap();
    let olympic = set.olympic.unwrap();
    assert!(
        ((projected - olympic) / olympic).abs() < CLOSED_BOUND,
        "projected {projected} vs olympic {olympic}"
    );
}
