//! Logs written by our emitter (mlperf_run::mllog::Emitter), shared by the differential,
//! packaging and verify tests: small ResNet and BERT logs with a test clock, and the
//! packaging ResNet run (timed, converging at a chosen epoch).
#![allow(dead_code)]

use mlperf_run::meta;
use mlperf_run::mllog::{keys, Emitter, Sink};
use serde_json::Value;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// An emitter on a file with a test clock: 1 ms per event, plus [`Writer::wait_ms`].
pub struct Writer {
    pub em: Emitter,
    now: Arc<AtomicI64>,
}

/// The test clock's default start: 2023-11-14 (the 3.1.0 submission window).
pub const DEFAULT_START_MS: i64 = 1_700_000_000_000;

impl Writer {
    pub fn new(path: &Path) -> Writer {
        Writer::starting_at(path, DEFAULT_START_MS)
    }
    /// A writer whose clock starts at `start_ms` (Unix ms).
    pub fn starting_at(path: &Path, start_ms: i64) -> Writer {
        let now = Arc::new(AtomicI64::new(start_ms));
        let clock = now.clone();
        let em = Emitter::new(vec![Sink::file(path, false).unwrap()])
            .with_clock(move || clock.fetch_add(1, Ordering::SeqCst));
        Writer { em, now }
    }
    pub fn wait_ms(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

/// cache_clear, init_start, the submission_* keys and the seed.
pub fn header(w: &mut Writer, benchmark: &str, division: &str, seed: i64) {
    let em = &mut w.em;
    em.start("cache_clear", true, meta! {}).unwrap();
    em.start("init_start", Value::Null, meta! {}).unwrap();
    em.event("submission_benchmark", benchmark).unwrap();
    em.event("submission_org", "mlperf-run").unwrap();
    em.event("submission_division", division).unwrap();
    em.event("submission_status", "onprem").unwrap();
    em.event("submission_platform", "1xTEST").unwrap();
    em.event("seed", seed).unwrap();
}

/// A small ResNet log (GBS 3264, LARS, three 4-epoch blocks, converging at epoch 12).
pub fn write_resnet(path: &Path, division: &str, seed: i64) {
    let mut w = Writer::new(path);
    header(&mut w, "resnet", division, seed);
    let em = &mut w.em;
    em.event("global_batch_size", 3264).unwrap();
    em.event("gradient_accumulation_steps", 1).unwrap();
    em.event("train_samples", 1_281_167).unwrap();
    em.event("eval_samples", 50_000).unwrap();
    em.event("opt_name", "lars").unwrap();
    em.event("lars_opt_base_learning_rate", 10.5).unwrap();
    em.event("lars_opt_end_learning_rate", 0.0001).unwrap();
    em.event("lars_opt_learning_rate_decay_poly_power", 2)
        .unwrap();
    em.event("lars_opt_learning_rate_decay_steps", 13_000)
        .unwrap();
    em.event("lars_epsilon", 0.0).unwrap();
    em.event("lars_opt_learning_rate_warmup_epochs", 2).unwrap();
    em.event("lars_opt_momentum", 0.9).unwrap();
    em.event("lars_opt_weight_decay", 5e-5).unwrap();
    w.wait_ms(5 * 60_000);
    w.em.end("init_stop", Value::Null, meta! {}).unwrap();
    w.em.start("run_start", Value::Null, meta! {}).unwrap();
    for (block, acc) in [(0, 0.52), (4, 0.71), (8, 0.7612)] {
        w.em.start(
            "block_start",
            Value::Null,
            meta! {"first_epoch_num" => block, "epoch_count" => 4},
        )
        .unwrap();
        w.wait_ms(60_000);
        w.em.end(
            "block_stop",
            Value::Null,
            meta! {"first_epoch_num" => block},
        )
        .unwrap();
        w.em.start("eval_start", Value::Null, meta! {"epoch_num" => block + 4})
            .unwrap();
        w.em.end("eval_stop", Value::Null, meta! {"epoch_num" => block + 4})
            .unwrap();
        w.em.event_with("eval_accuracy", acc, meta! {"epoch_num" => block + 4})
            .unwrap();
    }
    w.em.end("run_stop", Value::Null, meta! {"status" => "success"})
        .unwrap();
}

/// A BERT run for [`write_bert_run`].
#[derive(Debug, Clone)]
pub struct BertRun {
    pub division: &'static str,
    pub seed: i64,
    /// (samples seen, accuracy) of each eval; the last should reach 0.720 (closed).
    pub evals: Vec<(u64, f64)>,
    /// Training time of each block (between two evals).
    pub block_ms: i64,
    /// When the log's clock starts (Unix ms; run_start follows about 2 minutes later).
    pub start_ms: i64,
}

impl BertRun {
    /// `n_evals` evals every 150,000 samples (the interval at GBS 448), the last reaching 0.7205.
    pub fn converging_after(division: &'static str, seed: i64, n_evals: u64) -> BertRun {
        let evals = (1..=n_evals)
            .map(|k| {
                let acc = if k == n_evals {
                    0.7205
                } else {
                    0.40 + 0.3 * k as f64 / n_evals as f64
                };
                (k * 150_000, acc)
            })
            .collect();
        BertRun {
            division,
            seed,
            evals,
            block_ms: 60_000,
            start_ms: DEFAULT_START_MS,
        }
    }
}

/// A BERT log (GBS 448, LAMB, the closed BERT keys), evals at 150k, 300k, 450k samples.
pub fn write_bert(path: &Path, division: &'static str, seed: i64) {
    write_bert_run(
        path,
        &BertRun {
            division,
            seed,
            evals: vec![(150_000, 0.41), (300_000, 0.70), (450_000, 0.7205)],
            block_ms: 60_000,
            start_ms: DEFAULT_START_MS,
        },
    );
}

/// A BERT log with the closed BERT keys of mlperf-facts.md section 3 (compliant under 4.0.0
/// and 5.0.0 when the last eval reaches 0.720); BERT's epoch_num is samples seen.
pub fn write_bert_run(path: &Path, run: &BertRun) {
    let mut w = Writer::starting_at(path, run.start_ms);
    header(&mut w, "bert", run.division, run.seed);
    let em = &mut w.em;
    em.event("global_batch_size", 448).unwrap();
    em.event("gradient_accumulation_steps", 1).unwrap();
    em.event("train_samples", 2_254_000).unwrap();
    em.event("eval_samples", 10_000).unwrap();
    em.event("opt_base_learning_rate", 4.25e-4).unwrap();
    em.event("opt_lamb_epsilon", 1e-6).unwrap();
    em.event("opt_learning_rate_training_steps", 6700).unwrap();
    em.event("opt_learning_rate_warmup_steps", 0).unwrap();
    em.event("num_warmup_steps", 0).unwrap();
    em.event("start_warmup_step", 0).unwrap();
    em.event("opt_lamb_beta_1", 0.9).unwrap();
    em.event("opt_lamb_beta_2", 0.999).unwrap();
    em.event("opt_lamb_weight_decay_rate", 0.01).unwrap();
    w.wait_ms(2 * 60_000);
    w.em.end("init_stop", Value::Null, meta! {}).unwrap();
    w.em.start("run_start", Value::Null, meta! {}).unwrap();
    let mut first = 0u64;
    for &(samples, acc) in &run.evals {
        w.em.start(
            "block_start",
            Value::Null,
            meta! {"first_epoch_num" => first, "epoch_count" => samples - first},
        )
        .unwrap();
        w.wait_ms(run.block_ms);
        w.em.end(
            "block_stop",
            Value::Null,
            meta! {"first_epoch_num" => first},
        )
        .unwrap();
        w.em.start("eval_start", Value::Null, meta! {"epoch_num" => samples})
            .unwrap();
        w.em.end("eval_stop", Value::Null, meta! {"epoch_num" => samples})
            .unwrap();
        w.em.event_with("eval_accuracy", acc, meta! {"epoch_num" => samples})
            .unwrap();
        first = samples;
    }
    w.em.end("run_stop", Value::Null, meta! {"status" => "success"})
        .unwrap();
}

/// One synthetic run.
#[derive(Debug, Clone)]
pub struct Run {
    pub division: &'static str,
    pub status: &'static str,
    pub platform: String,
    pub seed: u64,
    /// Epoch at which eval_accuracy first reaches the target.
    pub converge_epoch: u32,
    pub minutes: f64,
}

/// A fresh seed from the OS, as the closed rules want.
pub fn os_seed() -> u64 {
    let mut b = [0u8; 4];
    getrandom::getrandom(&mut b).expect("OS randomness");
    u32::from_le_bytes(b) as u64
}

/// Write a closed- or open-division ResNet log (LARS, GBS 3264, evals every 4 epochs from
/// epoch 3) that passes the 4.0.0 compliance checker.
pub fn write_resnet_log(path: &Path, run: &Run) {
    let _ = std::fs::remove_file(path);
    let t0: i64 = 1_700_000_000_000 + (run.seed as i64 % 1000) * 100_000;
    let clock = Arc::new(AtomicI64::new(t0));
    let c = clock.clone();
    let mut e = Emitter::new(vec![Sink::file(path, false).unwrap()])
        .with_clock(move || c.load(Ordering::SeqCst));
    let tick = |ms: i64| {
        clock.fetch_add(ms, Ordering::SeqCst);
    };
    e.start(keys::CACHE_CLEAR, Value::Bool(true), meta! {})
        .unwrap();
    e.start(keys::INIT_START, Value::Null, meta! {}).unwrap();
    e.event(keys::SUBMISSION_BENCHMARK, "resnet").unwrap();
    e.event(keys::SUBMISSION_ORG, "SynthOrg").unwrap();
    e.event(keys::SUBMISSION_DIVISION, run.division).unwrap();
    e.event(keys::SUBMISSION_STATUS, run.status).unwrap();
    e.event(keys::SUBMISSION_PLATFORM, run.platform.clone())
        .unwrap();
    e.event(keys::SEED, run.seed).unwrap();
    e.event(keys::GLOBAL_BATCH_SIZE, 3264).unwrap();
    e.event(keys::TRAIN_SAMPLES, 1_281_167).unwrap();
    e.event(keys::EVAL_SAMPLES, 50_000).unwrap();
    e.event(keys::GRADIENT_ACCUMULATION_STEPS, 1).unwrap();
    e.event(keys::OPT_NAME, "lars").unwrap();
    e.event("lars_opt_base_learning_rate", 10.5).unwrap();
    e.event("lars_opt_end_learning_rate", 0.0001).unwrap();
    e.event("lars_opt_learning_rate_decay_poly_power", 2)
        .unwrap();
    e.event("lars_opt_learning_rate_decay_steps", 14523)
        .unwrap();
    e.event("lars_epsilon", 0.0).unwrap();
    e.event("lars_opt_learning_rate_warmup_epochs", 2).unwrap();
    e.event("lars_opt_momentum", 0.9).unwrap();
    e.event("lars_opt_weight_decay", 0.00005).unwrap();
    tick(60_000);
    e.end(keys::INIT_STOP, Value::Null, meta! {}).unwrap();
    e.start(keys::RUN_START, Value::Null, meta! {}).unwrap();
    let total_ms = (run.minutes * 60_000.0) as i64;
    let blocks: Vec<u32> = (0..)
        .map(|k| 3 + 4 * k)
        .take_while(|ep| *ep <= run.converge_epoch)
        .collect();
    let per_block = total_ms / blocks.len() as i64;
    let mut first = 0;
    for (i, ep) in blocks.iter().enumerate() {
        let count = ep - first;
        e.start(
            keys::BLOCK_START,
            Value::Null,
            meta! {"first_epoch_num" => first, "epoch_count" => count},
        )
        .unwrap();
        tick(per_block - 1000);
        e.end(
            keys::BLOCK_STOP,
            Value::Null,
            meta! {"first_epoch_num" => first},
        )
        .unwrap();
        e.start(keys::EVAL_START, Value::Null, meta! {"epoch_num" => *ep})
            .unwrap();
        tick(1000);
        let last = i + 1 == blocks.len();
        let acc = if last { 0.7605 } else { 0.3 + 0.01 * i as f64 };
        e.event_with(keys::EVAL_ACCURACY, acc, meta! {"epoch_num" => *ep})
            .unwrap();
        e.end(keys::EVAL_STOP, Value::Null, meta! {"epoch_num" => *ep})
            .unwrap();
        first = *ep;
    }
    e.end(
        keys::RUN_STOP,
        Value::Null,
        meta! {"status" => keys::STATUS_SUCCESS},
    )
    .unwrap();
}

/// The text of a small open-division ResNet log that passes the 4.0.0 checks: run_start at a
/// fixed t0, one 30-epoch block, eval_accuracy 0.76, a `throughput` event, and (when `status`
/// is given) run_stop `minutes` after run_start. Score and regress tests vary these.
pub fn open_resnet_text(minutes: f64, status: Option<&str>, gbs: u32, throughput: f64) -> String {
    let t0: i64 = 1_700_000_000_000;
    let now = Arc::new(AtomicI64::new(t0 - 10_000));
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let clock = now.clone();
    let mut e = Emitter::new(vec![Sink::Memory(lines.clone())])
        .with_clock(move || clock.load(Ordering::SeqCst));
    e.start(keys::CACHE_CLEAR, true, meta! {}).unwrap();
    e.start(keys::INIT_START, Value::Null, meta! {}).unwrap();
    e.event(keys::SUBMISSION_BENCHMARK, "resnet").unwrap();
    e.event(keys::SUBMISSION_ORG, "SynthOrg").unwrap();
    e.event(keys::SUBMISSION_DIVISION, "open").unwrap();
    e.event(keys::SUBMISSION_STATUS, "onprem").unwrap();
    e.event(keys::SUBMISSION_PLATFORM, "1xTEST").unwrap();
    e.event(keys::SEED, 1).unwrap();
    e.event(keys::GLOBAL_BATCH_SIZE, gbs).unwrap();
    e.event(keys::TRAIN_SAMPLES, 1_281_167).unwrap();
    e.event(keys::EVAL_SAMPLES, 50_000).unwrap();
    e.end(keys::INIT_STOP, Value::Null, meta! {}).unwrap();
    now.store(t0, Ordering::SeqCst);
    e.start(keys::RUN_START, Value::Null, meta! {}).unwrap();
    e.event(keys::THROUGHPUT, throughput).unwrap();
    e.start(
        keys::BLOCK_START,
        Value::Null,
        meta! {"first_epoch_num" => 0, "epoch_count" => 30},
    )
    .unwrap();
    e.end(
        keys::BLOCK_STOP,
        Value::Null,
        meta! {"first_epoch_num" => 0},
    )
    .unwrap();
    e.start(keys::EVAL_START, Value::Null, meta! {"epoch_num" => 30})
        .unwrap();
    e.event_with(keys::EVAL_ACCURACY, 0.76, meta! {"epoch_num" => 30})
        .unwrap();
    e.end(keys::EVAL_STOP, Value::Null, meta! {"epoch_num" => 30})
        .unwrap();
    if let Some(st) = status {
        now.store(t0 + (minutes * 60_000.0) as i64, Ordering::SeqCst);
        e.end(keys::RUN_STOP, Value::Null, meta! {"status" => st})
            .unwrap();
    }
    let lines = lines.lock().unwrap();
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The text of a short open-division ResNet run as mlperf-run's engine logs one (a
/// configs/*/bench_1gpu.toml run): GBS 256, 16,000 training images per epoch, a 1,000-image
/// eval after every 1-epoch block taking `eval_s`, one block per entry of `images_per_s`
/// (its training taking 16,000 / that seconds, logged as `tracked_stats` {"throughput"}),
/// then run_stop aborted for `reason` (mlperf-run's at the limit: "epoch limit reached before
/// the target").
pub fn short_resnet_text(images_per_s: &[f64], eval_s: f64, seed: u64, reason: &str) -> String {
    let t0: i64 = 1_700_000_000_000;
    let now = Arc::new(AtomicI64::new(t0 - 20_000));
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let clock = now.clone();
    let mut e = Emitter::new(vec![Sink::Memory(lines.clone())])
        .with_clock(move || clock.load(Ordering::SeqCst));
    e.start(keys::CACHE_CLEAR, false, meta! {}).unwrap();
    e.start(keys::INIT_START, Value::Null, meta! {}).unwrap();
    e.event(keys::SUBMISSION_BENCHMARK, "resnet").unwrap();
    e.event(keys::SUBMISSION_ORG, "mlperf-run").unwrap();
    e.event(keys::SUBMISSION_DIVISION, "open").unwrap();
    e.event(keys::SUBMISSION_STATUS, "research").unwrap();
    e.event(keys::SUBMISSION_PLATFORM, "1xGPU").unwrap();
    e.event(keys::SEED, seed).unwrap();
    e.event(keys::GLOBAL_BATCH_SIZE, 256).unwrap();
    e.event(keys::GRADIENT_ACCUMULATION_STEPS, 1).unwrap();
    e.event(keys::TRAIN_SAMPLES, 16_000).unwrap();
    e.event(keys::EVAL_SAMPLES, 1_000).unwrap();
    now.store(t0, Ordering::SeqCst);
    e.end(keys::INIT_STOP, Value::Null, meta! {}).unwrap();
    e.start(keys::RUN_START, Value::Null, meta! {}).unwrap();
    let advance = |s: f64| {
        now.fetch_add((s * 1000.0).round() as i64, Ordering::SeqCst);
    };
    for (i, tp) in images_per_s.iter().enumerate() {
        let epoch = i as u64 + 1;
        e.start(
            keys::BLOCK_START,
            Value::Null,
            meta! {"first_epoch_num" => epoch, "epoch_count" => 1},
        )
        .unwrap();
        advance(16_000.0 / tp);
        e.end(
            keys::BLOCK_STOP,
            Value::Null,
            meta! {"first_epoch_num" => epoch},
        )
        .unwrap();
        e.event_with(
            keys::TRACKED_STATS,
            serde_json::json!({ "throughput": tp }),
            meta! {"step" => epoch},
        )
        .unwrap();
        e.start(keys::EVAL_START, Value::Null, meta! {"epoch_num" => epoch})
            .unwrap();
        advance(eval_s);
        e.event_with(keys::EVAL_ACCURACY, 0.05, meta! {"epoch_num" => epoch})
            .unwrap();
        e.end(keys::EVAL_STOP, Value::Null, meta! {"epoch_num" => epoch})
            .unwrap();
    }
    e.end(
        keys::RUN_STOP,
        Value::Null,
        meta! {"status" => "aborted", "reason" => reason},
    )
    .unwrap();
    let text = lines.lock().unwrap().join("\n");
    text + "\n"
}
