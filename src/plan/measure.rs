//! The per-GPU rate, eval time and start-up of a run, read from its MLPerf log(s): a short
//! run of this machine, or a published result. The steady rate is the median `tracked_stats`
//! throughput without the first one (the first epoch or block warms the caches); without
//! `tracked_stats`, the samples trained over the time from the first to the last block.

use super::model::{Convergence, Measured};
use crate::benchmarks::{Benchmark, ConvergenceUnit};
use crate::mllog::{keys, LogFile};

/// One log's numbers.
#[derive(Debug, Clone, PartialEq)]
struct RunNumbers {
    rate: f64,
    micro_batch: f64,
    accum: u64,
    eval_s: f64,
    startup_s: f64,
    warmup_s: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn number(log: &LogFile, key: &str) -> Option<f64> {
    log.first(key).and_then(|e| e.value.as_f64())
}

/// The steady global rate, samples per second.
fn steady_rate(log: &LogFile) -> Option<f64> {
    let rates: Vec<f64> = log
        .with_key(keys::TRACKED_STATS)
        .filter_map(|e| e.value.get(keys::THROUGHPUT).and_then(|v| v.as_f64()))
        .filter(|r| r.is_finite() && *r > 0.0)
        .collect();
    match rates.len() {
        0 => None,
        1 => Some(rates[0]),
        _ => Some(median(rates[1..].to_vec())),
    }
}

/// A log of `bench` at all: MLPerf lines, and no other benchmark's `submission_benchmark`.
fn check_log_of(log: &LogFile, bench: &Benchmark) -> Result<(), String> {
    let what = log.path.display();
    if log.events.is_empty() {
        return Err(format!(
            "{what}: no MLPerf log lines (`:::MLLOG {{...}}`): give the log of a training run \
             (a result_N.txt)"
        ));
    }
    let named = log
        .first(keys::SUBMISSION_BENCHMARK)
        .and_then(|e| e.value.as_str().map(str::to_string));
    match named {
        Some(b) if !b.eq_ignore_ascii_case(&bench.name) => Err(format!(
            "{what}: a log of {b} (its submission_benchmark), not of {}: give logs of the \
             benchmark you plan",
            bench.name
        )),
        _ => Ok(()),
    }
}

fn run_numbers(log: &LogFile, bench: &Benchmark, gpus: u64) -> Result<RunNumbers, String> {
    check_log_of(log, bench)?;
    let what = log.path.display();
    let gbs = number(log, keys::GLOBAL_BATCH_SIZE)
        .ok_or_else(|| format!("{what}: no global_batch_size"))?;
    let accum = number(log, "gradient_accumulation_steps")
        .unwrap_or(1.0)
        .max(1.0) as u64;
    // every GPU trains whole samples each micro-batch; BERT's packed rows may count for a
    // fractional number of sequences (train.packing_factor), so there only at least one
    let per_share = gbs / (gpus as f64 * accum as f64);
    if per_share < 1.0 || (bench.name != "bert" && per_share.fract() != 0.0) {
        return Err(format!(
            "{what}: global_batch_size {gbs} does not split over {gpus} GPU(s) x {accum} \
             accumulation step(s): give --measured-gpus the GPU count of the run that wrote it"
        ));
    }
    let rate = steady_rate(log)
        .ok_or_else(|| format!("{what}: no tracked_stats throughput to read the rate from"))?;
    let start = log
        .first(keys::RUN_START)
        .ok_or_else(|| format!("{what}: no run_start"))?
        .time_ms;
    let evals: Vec<f64> = log
        .with_key(keys::EVAL_START)
        .zip(log.with_key(keys::EVAL_STOP))
        .map(|(a, b)| (b.time_ms - a.time_ms) / 1000.0)
        .collect();
    let eval_s = if evals.is_empty() {
        0.0
    } else {
        evals.iter().sum::<f64>() / evals.len() as f64
    };
    let first_step = log
        .events
        .iter()
        .find(|e| e.key == keys::EPOCH_START || e.key == keys::BLOCK_START)
        .map_or(start, |e| e.time_ms);
    let startup_s = ((first_step - start) / 1000.0).max(0.0);
    // the warm-up: what the run took beyond its steady pace, up to its last eval
    let per_unit = samples_per_unit(log, bench);
    let last = log.last(keys::EVAL_ACCURACY);
    let warmup_s = match (last, last.and_then(|e| e.epoch_num())) {
        (Some(e), Some(progress)) if per_unit > 0.0 => {
            let took = (e.time_ms - start) / 1000.0;
            (took - startup_s - progress * per_unit / rate - evals.iter().sum::<f64>()).max(0.0)
        }
        _ => 0.0,
    };
    Ok(RunNumbers {
        rate: rate / gpus as f64,
        micro_batch: gbs / gpus as f64 / accum as f64,
        accum,
        eval_s,
        startup_s,
        warmup_s,
    })
}

/// Samples per `epoch_num` unit of `log`: an epoch of its own training set (the log's
/// `train_samples`, else the benchmark's) where the benchmark counts epochs, else 1.
fn samples_per_unit(log: &LogFile, bench: &Benchmark) -> f64 {
    match bench.convergence_unit {
        ConvergenceUnit::Epochs => number(log, keys::TRAIN_SAMPLES)
            .or(bench.train_samples.map(|n| n as f64))
            .unwrap_or(0.0),
        ConvergenceUnit::Samples => 1.0,
    }
}

/// One successful log's samples to converge (its last eval's `epoch_num`) and its eval
/// interval (the median step between its evals; the first eval's own if it has one).
fn converged(log: &LogFile, bench: &Benchmark) -> Result<Option<(f64, f64)>, String> {
    if log.last(keys::RUN_STOP).and_then(|e| e.status()) != Some("success") {
        return Ok(None);
    }
    let what = log.path.display();
    let per_unit = samples_per_unit(log, bench);
    let at: Vec<f64> = log
        .with_key(keys::EVAL_ACCURACY)
        .filter_map(|e| e.epoch_num())
        .collect();
    let (Some(&last), true) = (at.last(), per_unit > 0.0) else {
        return Err(format!(
            "{what}: a successful run without an eval_accuracy epoch_num or train_samples"
        ));
    };
    let steps: Vec<f64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    let interval = if steps.is_empty() {
        last
    } else {
        median(steps)
    };
    Ok(Some((last * per_unit, interval * per_unit)))
}

/// The convergence the runs of `logs` measured: the mean samples to converge of the successful
/// runs, mean +- one standard deviation as the band (as the RCP tables give it), and their eval
/// interval. For projecting a configuration of one's own (`plan --config`), whose convergence
/// no RCP table holds.
pub fn convergence_from_logs(logs: &[LogFile], bench: &Benchmark) -> Result<Convergence, String> {
    let mut runs = Vec::new();
    for log in logs {
        runs.extend(converged(log, bench)?);
    }
    if runs.is_empty() {
        return Err(format!(
            "none of the {} log(s) ended with run_stop status success: measure runs that reach \
             the target",
            logs.len()
        ));
    }
    let n = runs.len() as f64;
    let mean = runs.iter().map(|r| r.0).sum::<f64>() / n;
    let sd = if runs.len() > 1 {
        (runs.iter().map(|r| (r.0 - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    let least = runs.iter().map(|r| r.0).fold(f64::INFINITY, f64::min);
    Ok(Convergence {
        rcp: format!("measured: {} of {} runs", runs.len(), logs.len()),
        mean_samples: mean,
        low_samples: (mean - sd).max(least),
        high_samples: mean + sd,
        eval_interval_samples: median(runs.iter().map(|r| r.1).collect()),
    })
}

/// What `logs` (runs of one set, on `gpus` GPUs) measured: the median of each number over the
/// runs. Errors name the log and what it lacks.
pub fn from_logs(logs: &[LogFile], bench: &Benchmark, gpus: u64) -> Result<Measured, String> {
    if gpus == 0 {
        return Err("the measured run's GPU count must be at least 1".into());
    }
    let runs = logs
        .iter()
        .map(|l| run_numbers(l, bench, gpus))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(first) = runs.first() else {
        return Err("no log to measure".into());
    };
    if let Some(r) = runs.iter().find(|r| r.micro_batch != first.micro_batch) {
        return Err(format!(
            "the logs differ in their per-GPU batch ({} and {}): measure one configuration",
            first.micro_batch, r.micro_batch
        ));
    }
    let med = |f: fn(&RunNumbers) -> f64| median(runs.iter().map(f).collect());
    Ok(Measured {
        per_gpu_rate: med(|r| r.rate),
        micro_batch: first.micro_batch,
        accum: first.accum,
        gpus,
        eval_s: med(|r| r.eval_s),
        startup_s: med(|r| r.startup_s),
        warmup_s: med(|r| r.warmup_s),
    })
}

/// The per-step overhead (seconds) that two measurements at different per-GPU micro-batches
/// imply: each micro-batch takes `overhead + b / r_inf` (the model's compute term), so the two
/// steady times `b / rate` give both unknowns. A negative overhead (a rate that grows faster
/// than the batch) is taken as none.
pub fn step_overhead(a: &Measured, b: &Measured) -> Result<f64, String> {
    if a.gpus != b.gpus {
        return Err(format!(
            "measured on {} and {} GPUs: measure both batches on the same count",
            a.gpus, b.gpus
        ));
    }
    if (a.micro_batch - b.micro_batch).abs() < 1e-9 {
        return Err(format!(
            "both runs have per-GPU batch {}: the batch effect needs two different ones",
            a.micro_batch
        ));
    }
    let (ta, tb) = (
        a.micro_batch / a.per_gpu_rate,
        b.micro_batch / b.per_gpu_rate,
    );
    let per_sample = (ta - tb) / (a.micro_batch - b.micro_batch);
    if !(per_sample.is_finite() && per_sample > 0.0) {
        return Err(format!(
            "a micro-batch of {} took {:.3} ms and one of {} {:.3} ms: the larger batch must \
             take longer; check the logs",
            a.micro_batch,
            ta * 1e3,
            b.micro_batch,
            tb * 1e3
        ));
    }
    Ok((ta - a.micro_batch * per_sample).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ResNet log of a run on `train` samples with evals at `evals` (epochs) that ends with
    /// `status`.
    fn log(train: u64, evals: &[u64], status: &str) -> LogFile {
        let line = |t: u64, key: &str, value: &str, meta: &str| {
            format!(
                ":::MLLOG {{\"namespace\": \"\", \"time_ms\": {t}, \"event_type\": \"POINT_IN_TIME\", \
                 \"key\": \"{key}\", \"value\": {value}, \"metadata\": {{{meta}}}}}\n"
            )
        };
        let mut s = line(0, "global_batch_size", "64", "");
        s += &line(0, "train_samples", &train.to_string(), "");
        s += &line(0, "run_start", "null", "");
        s += &line(100, "epoch_start", "null", "\"epoch_num\": 1");
        for (i, e) in evals.iter().enumerate() {
            let t = 1000 * (i as u64 + 1);
            s += &line(t, "tracked_stats", "{\"throughput\": 640.0}", "\"step\": 1");
            s += &line(t, "eval_accuracy", "0.5", &format!("\"epoch_num\": {e}"));
        }
        s += &line(
            9000,
            "run_stop",
            "null",
            &format!("\"status\": \"{status}\""),
        );
        crate::mllog::parse_str(&s)
    }

    #[test]
    fn convergence_is_the_successful_runs_last_evals_on_their_own_train_set() {
        let bench = crate::benchmarks::get("resnet").unwrap();
        let logs = [
            log(1280, &[1, 5], "success"),
            log(1280, &[1, 5, 9], "success"),
            log(1280, &[1, 5, 9, 13], "aborted"),
        ];
        let c = convergence_from_logs(&logs, bench).unwrap();
        assert_eq!(c.mean_samples, 7.0 * 1280.0);
        let sd = (2.0f64 * (2.0 * 1280.0f64).powi(2)).sqrt();
        assert!((c.high_samples - (7.0 * 1280.0 + sd)).abs() < 1e-6, "{c:?}");
        assert_eq!(c.low_samples, 5.0 * 1280.0, "clamped to the fewest");
        assert_eq!(c.eval_interval_samples, 4.0 * 1280.0);
        assert_eq!(c.rcp, "measured: 2 of 3 runs");
    }

    #[test]
    fn two_batches_give_the_step_overhead() {
        let at = |b: f64, o: f64, r_inf: f64| Measured {
            per_gpu_rate: b / (o + b / r_inf),
            micro_batch: b,
            accum: 1,
            gpus: 1,
            eval_s: 0.0,
            startup_s: 0.0,
            warmup_s: 0.0,
        };
        let o = step_overhead(&at(64.0, 0.004, 4000.0), &at(32.0, 0.004, 4000.0)).unwrap();
        assert!((o - 0.004).abs() < 1e-12, "{o}");
        // a rate that does not grow with the batch (or the same batch twice) is an error
        assert!(step_overhead(&at(64.0, 0.0, 4000.0), &at(64.0, 0.0, 4000.0)).is_err());
        let mut slow = at(32.0, 0.004, 4000.0);
        slow.per_gpu_rate /= 10.0;
        assert!(step_overhead(&at(64.0, 0.004, 4000.0), &slow).is_err());
    }

    #[test]
    fn no_successful_run_is_an_error_that_says_so() {
        let bench = crate::benchmarks::get("resnet").unwrap();
        let e = convergence_from_logs(&[log(1280, &[1], "aborted")], bench).unwrap_err();
        assert!(e.contains("status success"), "{e}");
    }
}
