//! The per-GPU rate, eval time and start-up of a run, read from its MLPerf log(s): a short
//! run of this machine, or a published result. The steady rate is the median `tracked_stats`
//! throughput without the first one (the first epoch or block warms the caches); without
//! `tracked_stats`, the samples trained over the time from the first to the last block.

use super::model::Measured;
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

fn run_numbers(log: &LogFile, bench: &Benchmark, gpus: u64) -> Result<RunNumbers, String> {
    let what = log.path.display();
    let gbs = number(log, keys::GLOBAL_BATCH_SIZE)
        .ok_or_else(|| format!("{what}: no global_batch_size"))?;
    let accum = number(log, "gradient_accumulation_steps")
        .unwrap_or(1.0)
        .max(1.0) as u64;
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
    let per_unit = match bench.convergence_unit {
        ConvergenceUnit::Epochs => bench.train_samples.unwrap_or(0) as f64,
        ConvergenceUnit::Samples => 1.0,
    };
    let last = log.last(keys::EVAL_ACCURACY);
    let warmup_s = match (last, last.and_then(|e| e.meta("epoch_num")?.as_f64())) {
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
