//! A live view of a run set: run i of N, epoch (or samples), last accuracy, throughput and
//! ETA, read from the MLPerf log the run is writing (so the trainer needs no hooks).

use crate::mllog::{self, keys, LogFile};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the log of the current run says so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunView {
    /// epoch_num of the latest block_stop/eval (epochs for ResNet, samples for BERT).
    pub epoch: Option<f64>,
    pub accuracy: Option<f64>,
    /// Training samples per second over the latest block.
    pub throughput: Option<f64>,
    pub finished: Option<String>,
}

/// Read the current state of a run from its (partial) log. `train_samples` is the size of an
/// epoch for ResNet (None for sample-counting benchmarks, whose epoch_num already counts samples).
pub fn view(log: &LogFile, train_samples: Option<f64>) -> RunView {
    let mut v = RunView::default();
    let mut block_start: Option<(f64, f64)> = None;
    for e in &log.events {
        match e.key.as_str() {
            keys::BLOCK_START => {
                let first = e.meta("first_epoch_num").and_then(|x| x.as_f64());
                let count = e.meta("epoch_count").and_then(|x| x.as_f64());
                if let (Some(_), Some(count)) = (first, count) {
                    block_start = Some((e.time_ms, count));
                }
            }
            keys::BLOCK_STOP => {
                if let (Some((t0, count)), Some(n)) = (block_start.take(), train_samples) {
                    let secs = (e.time_ms - t0) / 1000.0;
                    if secs > 0.0 {
                        v.throughput = Some(count * n / secs);
                    }
                }
            }
            keys::EVAL_ACCURACY => {
                v.accuracy = e.value.as_f64();
                v.epoch = e.epoch_num().or(v.epoch);
            }
            keys::RUN_STOP => v.finished = Some(e.status().unwrap_or("unknown").to_string()),
            _ => {}
        }
        if let Some(ep) = e.epoch_num() {
            v.epoch = Some(v.epoch.map_or(ep, |cur| cur.max(ep)));
        }
    }
    v
}

/// A spinner line that follows one run's log until dropped.
pub struct RunProgress {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl RunProgress {
    /// Follow `log_path`, labelled "run i/N"; `eta` is the estimated time left for the set
    /// after this run. Hidden when stderr is not a terminal.
    pub fn follow(
        bar: ProgressBar,
        label: String,
        log_path: PathBuf,
        train_samples: Option<f64>,
        eta_after: Option<Duration>,
    ) -> RunProgress {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {prefix} {msg} [{elapsed}]").expect("template"),
        );
        bar.set_prefix(label);
        let handle = std::thread::spawn(move || {
            let started = Instant::now();
            while !flag.load(Ordering::SeqCst) {
                if let Ok(bytes) = std::fs::read(&log_path) {
                    let v = view(&mllog::parse_bytes(&bytes), train_samples);
                    bar.set_message(describe(&v, eta_after, started.elapsed()));
                }
                bar.tick();
                std::thread::sleep(Duration::from_millis(500));
            }
            bar.finish_and_clear();
        });
        RunProgress {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for RunProgress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One status line.
pub fn describe(v: &RunView, eta_after: Option<Duration>, _elapsed: Duration) -> String {
    let mut parts = Vec::new();
    if let Some(e) = v.epoch {
        parts.push(format!("epoch {e}"));
    }
    if let Some(a) = v.accuracy {
        parts.push(format!("acc {a:.4}"));
    }
    if let Some(t) = v.throughput {
        parts.push(format!("{t:.0} samples/s"));
    }
    if let Some(eta) = eta_after {
        parts.push(format!("set ETA after this run {}", fmt_duration(eta)));
    }
    if parts.is_empty() {
        parts.push("initialising".into());
    }
    parts.join(" | ")
}

pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_reads_epoch_accuracy_and_throughput() {
        let line = |t: i64, et: &str, key: &str, meta: &str| {
            format!(":::MLLOG {{\"namespace\": \"\", \"time_ms\": {t}, \"event_type\": \"{et}\", \"key\": \"{key}\", \"value\": 0.5, \"metadata\": {{{meta}}}}}\n")
        };
        let mut text = String::new();
        text += &line(
            0,
            "INTERVAL_START",
            "block_start",
            "\"first_epoch_num\": 0, \"epoch_count\": 2",
        );
        text += &line(4000, "INTERVAL_END", "block_stop", "\"first_epoch_num\": 0");
        text += &line(4100, "POINT_IN_TIME", "eval_accuracy", "\"epoch_num\": 2");
        let v = view(&mllog::parse_str(&text), Some(1000.0));
        assert_eq!(v.epoch, Some(2.0));
        assert_eq!(v.accuracy, Some(0.5));
        assert_eq!(v.throughput, Some(500.0));
        assert_eq!(v.finished, None);
        assert!(describe(&v, Some(Duration::from_secs(75)), Duration::ZERO).contains("1m15s"));
    }
}
