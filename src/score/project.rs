//! Projected time to train: what a full run to the quality target would take, from a short
//! run's log.
//!
//! A log is cut at its evals into segments: the training from run_start (or the previous
//! eval_stop) to an eval_start, then that eval. From the segments come the training rate
//! (samples per second) and the time of one eval; the first segment is kept apart, because it
//! carries the warm-up (compilation, autotuning, cold caches): its excess over the steady rate
//! is a fixed cost paid once. The full run is then
//!
//! ```text
//! train = warm-up excess + samples to converge / steady rate
//! evals = (converge_at - first eval) / eval interval + 1     (expected count, at least 1)
//! eval  = warm-up excess of the first eval + evals x steady eval time x full / logged eval set
//! projected minutes = (train + eval) / 60                     (run_start to run_stop)
//! ```
//!
//! where "samples to converge" is the reference convergence point (the RCP mean at the run's
//! global batch size, interpolated as the RCP checker does) in epochs of the full training set
//! (ResNet) or in samples (BERT), and the eval cadence is the closed division's
//! (`benchmarks/<name>/benchmark.toml`): ResNet every 4 epochs (from the log's first eval when
//! the log already evaluates every 4 epochs, else at multiples of 4), BERT every
//! FLOOR(0.05 * (230.23 * GBS + 3,000,000), 25,000) samples. Init (init_start to init_stop)
//! is not part of the time to train; it is reported beside it.

use super::rcp::{RcpMatch, RcpTable};
use crate::benchmarks::{Benchmark, ConvergenceUnit};
use crate::mllog::{keys, Event, LogFile};
use serde::Serialize;

/// One eval interval of a log.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Segment {
    /// epoch_num of the eval: epochs (ResNet) or samples (BERT) trained so far.
    pub progress: f64,
    /// Training samples since the previous eval (or run_start).
    pub samples: f64,
    /// Seconds from the previous eval_stop (or run_start) to this eval_start.
    pub train_s: f64,
    /// Seconds from eval_start to eval_stop.
    pub eval_s: f64,
}

/// What a projection needs from one run's log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunShape {
    /// The completed evals after run_start, in order.
    pub segments: Vec<Segment>,
    /// init_stop minus the first init_start, in seconds.
    pub init_s: Option<f64>,
    /// The eval set the run logged (`eval_samples`).
    pub eval_samples: Option<f64>,
}

/// Read the segments of `log` (a `bench` run). Errors name the file and line.
pub fn run_shape(log: &LogFile, bench: &Benchmark) -> Result<RunShape, String> {
    let at = |e: &Event| log.at(e.line);
    let number = |key: &str| log.first(key).and_then(|e| e.value.as_f64());
    // samples per unit of epoch_num in this log: its own epoch (train_samples) for ResNet
    let per_unit = match bench.convergence_unit {
        ConvergenceUnit::Samples => 1.0,
        ConvergenceUnit::Epochs => number(keys::TRAIN_SAMPLES)
            .or(bench.train_samples.map(|n| n as f64))
            .filter(|n| *n > 0.0)
            .ok_or_else(|| {
                format!(
                    "{}: no train_samples: cannot turn epochs into samples",
                    log.path.display()
                )
            })?,
    };
    let init_s = match (log.first(keys::INIT_START), log.first(keys::INIT_STOP)) {
        (Some(a), Some(b)) if b.time_ms >= a.time_ms => Some((b.time_ms - a.time_ms) / 1000.0),
        _ => None,
    };
    let mut segments = Vec::new();
    let mut last_end: Option<(f64, f64)> = None; // (time_ms, progress)
    let mut open: Option<&Event> = None;
    for e in &log.events {
        match e.key.as_str() {
            keys::RUN_START if last_end.is_none() => last_end = Some((e.time_ms, 0.0)),
            keys::RUN_STOP if last_end.is_some() => break,
            keys::EVAL_START if last_end.is_some() => {
                if let Some(prev) = open {
                    return Err(format!(
                        "{}: eval_start while the eval_start at line {} has no eval_stop",
                        at(e),
                        prev.line
                    ));
                }
                open = Some(e);
            }
            keys::EVAL_STOP if last_end.is_some() => {
                let Some(start) = open.take() else {
                    return Err(format!("{}: eval_stop without an eval_start", at(e)));
                };
                let progress = start
                    .epoch_num()
                    .or(e.epoch_num())
                    .ok_or_else(|| format!("{}: eval_start has no numeric epoch_num", at(start)))?;
                let (prev_ms, prev_progress) = last_end.unwrap_or_default();
                let seg = Segment {
                    progress,
                    samples: (progress - prev_progress) * per_unit,
                    train_s: (start.time_ms - prev_ms) / 1000.0,
                    eval_s: (e.time_ms - start.time_ms) / 1000.0,
                };
                if !(seg.samples > 0.0 && seg.train_s > 0.0 && seg.eval_s >= 0.0) {
                    return Err(format!(
                        "{}: eval at epoch_num {progress} does not follow the previous one \
                         (epoch_num must grow and time must pass: {} samples in {} s of \
                         training, eval {} s)",
                        at(start),
                        seg.samples,
                        seg.train_s,
                        seg.eval_s
                    ));
                }
                segments.push(seg);
                last_end = Some((e.time_ms, progress));
            }
            _ => {}
        }
    }
    if last_end.is_none() {
        return Err(format!("{}: no run_start", log.path.display()));
    }
    if segments.is_empty() {
        return Err(format!(
            "{}: no eval completed after run_start: nothing to project from",
            log.path.display()
        ));
    }
    Ok(RunShape {
        segments,
        init_s,
        eval_samples: number(keys::EVAL_SAMPLES).filter(|n| *n > 0.0),
    })
}

/// The full run a short run is projected to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// epoch_num at convergence: epochs (ResNet) or samples (BERT).
    pub converge_at: f64,
    /// "epochs" or "samples".
    pub unit: &'static str,
    /// Where `converge_at` comes from.
    pub source: String,
    /// Training samples per unit of `converge_at` in the full run (ImageNet's 1,281,167 images
    /// per epoch for ResNet, 1 for BERT).
    pub samples_per_unit: f64,
    /// Evals every this many units.
    pub eval_interval: f64,
    /// The first eval's epoch_num; None: the log's first eval when the log already evaluates
    /// every `eval_interval`, else `eval_interval`.
    pub first_eval: Option<f64>,
    /// The full eval set (50,000 images, 10,000 sequences).
    pub eval_samples: f64,
}

impl Plan {
    /// The closed division's full run of `bench` at global batch size `gbs`: converging at the
    /// RCP mean of `ruleset`'s table for that batch size (interpolated as the RCP checker does;
    /// below the smallest batch size: the smallest point's), evaluating at the closed cadence.
    pub fn reference(bench: &Benchmark, ruleset: &str, gbs: f64) -> Result<Plan, String> {
        let table =
            RcpTable::load(&bench.name, ruleset, bench.runs).map_err(|e| format!("{e:#}"))?;
        let (point, matched) = table.reference(gbs).map_err(|(_, message)| {
            format!("no reference convergence point for global_batch_size {gbs}: {message}")
        })?;
        let how = match matched {
            RcpMatch::Found => String::new(),
            RcpMatch::Interpolated => ", interpolated".into(),
            RcpMatch::BelowSmallest => {
                format!(
                    "; global_batch_size {gbs} is below every RCP batch size: the smallest one's"
                )
            }
            RcpMatch::Missing | RcpMatch::NoRcps => String::new(),
        };
        let (unit, samples_per_unit, eval_interval) = match bench.convergence_unit {
            ConvergenceUnit::Epochs => (
                "epochs",
                bench.train_samples.ok_or_else(|| {
                    format!(
                        "benchmarks/{}/benchmark.toml has no train_samples",
                        bench.name
                    )
                })? as f64,
                bench.eval.every_epochs.ok_or_else(|| {
                    format!(
                        "benchmarks/{}/benchmark.toml has no eval.every_epochs",
                        bench.name
                    )
                })? as f64,
            ),
            ConvergenceUnit::Samples => (
                "samples",
                1.0,
                bench
                    .eval_interval_samples(gbs.round().max(1.0) as u64)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        format!(
                            "benchmarks/{}/benchmark.toml has no eval interval formula \
                             (eval.interval_a .. interval_round_to)",
                            bench.name
                        )
                    })? as f64,
            ),
        };
        Ok(Plan {
            converge_at: point.mean,
            unit,
            source: format!("RCP {} mean, ruleset {ruleset}{how}", point.name),
            samples_per_unit,
            eval_interval,
            first_eval: None,
            eval_samples: bench.eval_samples as f64,
        })
    }
}

/// One run projected to its full length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Projection {
    /// Projected time to train (run_start to run_stop), minutes.
    pub minutes: f64,
    pub train_minutes: f64,
    pub eval_minutes: f64,
    /// Expected number of evals up to convergence.
    pub evals: f64,
    /// Seconds of one full-size eval at the steady pace.
    pub eval_seconds: f64,
    /// Steady training rate (after the first segment), samples per second.
    pub samples_per_second: f64,
    /// What the first segment (training and eval) took beyond the steady pace, seconds.
    pub warmup_seconds: f64,
    /// Init (not part of the time to train), minutes.
    pub init_minutes: Option<f64>,
    /// Segments (evals) of the log the projection used.
    pub segments_used: usize,
}

/// Project `shape` to `plan`, using at most its first `max_segments` segments.
pub fn project(
    shape: &RunShape,
    plan: &Plan,
    max_segments: Option<usize>,
) -> Result<Projection, String> {
    let k = max_segments.unwrap_or(usize::MAX).min(shape.segments.len());
    let segs = &shape.segments[..k];
    let Some(first) = segs.first() else {
        return Err("no completed eval to project from".into());
    };
    let (rate, eval_steady, warm_train, warm_eval) = if segs.len() >= 2 {
        let rest = &segs[1..];
        let rate = rest.iter().map(|s| s.samples).sum::<f64>()
            / rest.iter().map(|s| s.train_s).sum::<f64>();
        let eval = rest.iter().map(|s| s.eval_s).sum::<f64>() / rest.len() as f64;
        (
            rate,
            eval,
            (first.train_s - first.samples / rate).max(0.0),
            (first.eval_s - eval).max(0.0),
        )
    } else {
        (first.samples / first.train_s, first.eval_s, 0.0, 0.0)
    };
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("no training rate from the log ({rate} samples/s)"));
    }
    let eval_scale = shape.eval_samples.map_or(1.0, |n| plan.eval_samples / n);
    let first_eval = plan.first_eval.unwrap_or_else(|| {
        let regular = shape.segments.len() >= 2
            && shape
                .segments
                .windows(2)
                .all(|w| (w[1].progress - w[0].progress - plan.eval_interval).abs() < 1e-9);
        if regular {
            shape.segments[0].progress
        } else {
            plan.eval_interval
        }
    });
    let evals = ((plan.converge_at - first_eval) / plan.eval_interval + 1.0).max(1.0);
    let train_s = warm_train + plan.converge_at * plan.samples_per_unit / rate;
    let eval_seconds = eval_steady * eval_scale;
    let eval_s = warm_eval + evals * eval_seconds;
    Ok(Projection {
        minutes: (train_s + eval_s) / 60.0,
        train_minutes: train_s / 60.0,
        eval_minutes: eval_s / 60.0,
        evals,
        eval_seconds,
        samples_per_second: rate,
        warmup_seconds: warm_train + warm_eval,
        init_minutes: shape.init_s.map(|s| s / 60.0),
        segments_used: segs.len(),
    })
}

/// What the score of projected runs would be: the olympic mean (drop the fastest and the
/// slowest, average the rest) with 3 runs or more, the plain mean below that.
pub fn projected_score(minutes: &[f64]) -> Option<f64> {
    if minutes.is_empty() {
        return None;
    }
    let mut m = minutes.to_vec();
    m.sort_by(f64::total_cmp);
    let kept = if m.len() >= 3 {
        &m[1..m.len() - 1]
    } else {
        &m[..]
    };
    Some(kept.iter().sum::<f64>() / kept.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mllog::parse_str;

    fn line(t: i64, kind: &str, key: &str, meta: &str) -> String {
        format!(
            ":::MLLOG {{\"namespace\": \"\", \"time_ms\": {t}, \"event_type\": \"{kind}\", \
             \"key\": \"{key}\", \"value\": null, \"metadata\": {{\"file\": \"x\", \"lineno\": 1{meta}}}}}"
        )
    }

    /// ResNet log: 1000 images per epoch, init 10 s, evals (100 eval images) after epochs 1, 2,
    /// 3; the first epoch takes 20 s (10 s of warm-up), the others 10 s; evals 4 s then 2 s.
    fn short_resnet() -> LogFile {
        let t0 = 1_700_000_000_000i64;
        let mut l = vec![
            line(t0, "INTERVAL_START", "init_start", ""),
            ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1700000000000, \"event_type\": \"POINT_IN_TIME\", \"key\": \"train_samples\", \"value\": 1000, \"metadata\": {\"file\": \"x\", \"lineno\": 1}}".into(),
            ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1700000000000, \"event_type\": \"POINT_IN_TIME\", \"key\": \"eval_samples\", \"value\": 100, \"metadata\": {\"file\": \"x\", \"lineno\": 1}}".into(),
            line(t0 + 10_000, "INTERVAL_END", "init_stop", ""),
            line(t0 + 10_000, "INTERVAL_START", "run_start", ""),
        ];
        let mut t = t0 + 10_000;
        for (ep, train, eval) in [(1, 20_000, 4_000), (2, 10_000, 2_000), (3, 10_000, 2_000)] {
            t += train;
            l.push(line(
                t,
                "INTERVAL_START",
                "eval_start",
                &format!(", \"epoch_num\": {ep}"),
            ));
            t += eval;
            l.push(line(
                t,
                "INTERVAL_END",
                "eval_stop",
                &format!(", \"epoch_num\": {ep}"),
            ));
        }
        l.push(line(
            t,
            "INTERVAL_END",
            "run_stop",
            ", \"status\": \"aborted\"",
        ));
        parse_str(&l.join("\n"))
    }

    #[test]
    fn warm_up_is_paid_once_and_evals_scale_to_the_full_set() {
        let bench = crate::benchmarks::get("resnet").unwrap();
        let shape = run_shape(&short_resnet(), bench).unwrap();
        assert_eq!(shape.segments.len(), 3);
        assert_eq!(shape.init_s, Some(10.0));
        let plan = Plan {
            converge_at: 40.0,
            unit: "epochs",
            source: "test".into(),
            samples_per_unit: 2000.0,
            eval_interval: 4.0,
            first_eval: None,
            eval_samples: 1000.0,
        };
        let p = project(&shape, &plan, None).unwrap();
        // steady 100 samples/s; 40 epochs x 2000 = 80,000 samples = 800 s, plus 10 s warm-up
        assert!((p.samples_per_second - 100.0).abs() < 1e-9);
        assert!((p.train_minutes - 810.0 / 60.0).abs() < 1e-9, "{p:?}");
        // the log evaluates every epoch, not every 4: evals at 4, 8, .., 40 -> 10 evals of
        // 2 s x 10 (1000 / 100 images), plus 2 s of first-eval warm-up
        assert!((p.evals - 10.0).abs() < 1e-9);
        assert!((p.eval_minutes - 202.0 / 60.0).abs() < 1e-9, "{p:?}");
        assert_eq!(p.init_minutes, Some(10.0 / 60.0));
        // one segment only: its own rate, no warm-up split
        let p1 = project(&shape, &plan, Some(1)).unwrap();
        assert!((p1.samples_per_second - 50.0).abs() < 1e-9);
        assert_eq!(p1.segments_used, 1);
    }

    #[test]
    fn bad_logs_are_errors_naming_file_and_line() {
        let bench = crate::benchmarks::get("resnet").unwrap();
        let mut log = short_resnet();
        log.path = "r.txt".into();
        // the second eval goes back in epochs
        let i = log
            .events
            .iter()
            .position(|e| e.key == "eval_start" && e.epoch_num() == Some(2.0))
            .unwrap();
        log.events[i].metadata.insert("epoch_num".into(), 0.into());
        let line = log.events[i].line;
        let e = run_shape(&log, bench).unwrap_err();
        assert!(
            e.contains(&format!("r.txt:{line}")) && e.contains("epoch_num"),
            "{e}"
        );
        let empty = parse_str(&line_with_run_start_only());
        assert!(run_shape(&empty, bench)
            .unwrap_err()
            .contains("no eval completed"));
    }

    fn line_with_run_start_only() -> String {
        line(1, "INTERVAL_START", "run_start", "")
    }

    #[test]
    fn reference_plans_follow_the_rcp_tables_and_cadence() {
        let resnet = crate::benchmarks::get("resnet").unwrap();
        let p = Plan::reference(resnet, "4.0.0", 3264.0).unwrap();
        assert!((p.converge_at - 35.1538).abs() < 1e-3, "{p:?}");
        assert_eq!((p.eval_interval, p.samples_per_unit), (4.0, 1_281_167.0));
        let small = Plan::reference(resnet, "4.0.0", 256.0).unwrap();
        assert!(small.source.contains("below every RCP"), "{}", small.source);
        let bert = crate::benchmarks::get("bert").unwrap();
        let p = Plan::reference(bert, "5.0.0", 448.0).unwrap();
        assert_eq!(p.eval_interval, 150_000.0);
        assert!((p.converge_at - 2_414_421.33).abs() < 1.0);
        assert!(Plan::reference(resnet, "4.0.0", 1e7).is_err());
    }

    #[test]
    fn projected_score_is_olympic_from_three_runs() {
        assert_eq!(projected_score(&[1.0, 5.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(projected_score(&[4.0, 2.0]), Some(3.0));
        assert_eq!(projected_score(&[]), None);
    }
}
