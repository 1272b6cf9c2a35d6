//! The generic trainer's protocol with a scripted workload: event order, success at target,
//! aborted on NaN, on the epoch limit and on an error (the log still ends with run_stop).
#![cfg(feature = "torch")]

use anyhow::Result;
use mlperf_run::distributed::{GradSync, Peers};
use mlperf_run::mllog::{parse_str, Sink};
use mlperf_run::train::engine::{
    self, Block, BuildContext, RunOptions, Status, Submission, Workload,
};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

struct Scripted {
    accuracies: Vec<f64>,
    losses: Vec<f64>,
    fail_at_step: Option<usize>,
    step: usize,
    eval: usize,
}

impl Workload for Scripted {
    fn benchmark(&self) -> &'static str {
        "resnet"
    }
    fn hyperparameters(&self) -> Vec<(&'static str, Value)> {
        vec![
            ("global_batch_size", json!(8)),
            ("train_samples", json!(16)),
            ("eval_samples", json!(4)),
        ]
    }
    fn build(&mut self, _ctx: &BuildContext) -> Result<()> {
        Ok(())
    }
    fn blocks(&self) -> anyhow::Result<Vec<Block>> {
        // no accuracies scripted: a config that gives no blocks (an error, named)
        if self.accuracies.is_empty() {
            anyhow::bail!("train.max_samples = 0 gives no training blocks: set it above 0");
        }
        Ok((0..self.accuracies.len() as u64)
            .map(|i| Block {
                first_epoch_num: 2 * i + 1,
                epoch_count: 2,
                eval_epoch_num: 2 * i + 2,
            })
            .collect())
    }
    fn start_block(&mut self, _block: &Block) -> Result<u64> {
        Ok(2)
    }
    fn samples_per_step(&self) -> u64 {
        8
    }
    fn train_step(&mut self, _sync: &mut dyn GradSync) -> Result<tch::Tensor> {
        self.step += 1;
        if self.fail_at_step == Some(self.step) {
            anyhow::bail!("disk on fire");
        }
        Ok(tch::Tensor::from(
            self.losses.get(self.step - 1).copied().unwrap_or(1.0),
        ))
    }
    fn evaluate(&mut self, _peers: &mut dyn Peers) -> Result<f64> {
        self.eval += 1;
        Ok(self.accuracies[self.eval - 1])
    }
    fn target(&self) -> f64 {
        0.75
    }
}

fn run(mut w: Scripted) -> (engine::RunOutcome, Vec<String>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let mut opts = RunOptions::new(
        tch::Device::Cpu,
        Submission {
            org: "o".into(),
            platform: "p".into(),
            division: "open".into(),
            status: "research".into(),
        },
    );
    opts.seed = Some(42);
    opts.extra_sinks.push(Sink::Memory(lines.clone()));
    let out = engine::run_once(&mut w, opts).unwrap();
    let lines = lines.lock().unwrap().clone();
    (out, lines)
}

fn keys(lines: &[String]) -> Vec<String> {
    parse_str(&lines.join("\n"))
        .events
        .iter()
        .map(|e| e.key.clone())
        .collect()
}

#[test]
fn success_stops_at_the_first_eval_over_target() {
    let (out, lines) = run(Scripted {
        accuracies: vec![0.3, 0.8, 0.9],
        losses: vec![],
        fail_at_step: None,
        step: 0,
        eval: 0,
    });
    assert_eq!(out.status, Status::Success);
    assert_eq!(out.evals, vec![(2, 0.3), (4, 0.8)]);
    assert_eq!(out.seed, 42);
    let k = keys(&lines);
    let expect_prefix = [
        "cache_clear",
        "init_start",
        "submission_benchmark",
        "submission_org",
        "submission_division",
        "submission_status",
        "submission_platform",
        "seed",
        "global_batch_size",
        "train_samples",
        "eval_samples",
        "init_stop",
        "run_start",
        "block_start",
        "block_stop",
        "tracked_stats",
        "eval_start",
        "eval_accuracy",
        "eval_stop",
        "block_start",
    ];
    assert_eq!(&k[..expect_prefix.len()], &expect_prefix);
    assert_eq!(k.last().unwrap(), "run_stop");
    let log = parse_str(&lines.join("\n"));
    assert_eq!(log.last("run_stop").unwrap().status(), Some("success"));
    assert_eq!(log.first("cache_clear").unwrap().value, json!(false));
    let b = log.with_key("block_start").nth(1).unwrap();
    assert_eq!(b.meta("first_epoch_num"), Some(&json!(3)));
    assert_eq!(b.meta("epoch_count"), Some(&json!(2)));
    // every block's training throughput, after its block_stop, as NVIDIA's logs carry it
    let stats: Vec<_> = log.with_key("tracked_stats").collect();
    assert_eq!(stats.len(), 2, "one per block");
    for (s, step) in stats.iter().zip([1, 3]) {
        assert_eq!(s.meta("step"), Some(&json!(step)));
        let tp = s.value["throughput"].as_f64().unwrap();
        assert!(tp.is_finite() && tp > 0.0, "{s:?}");
        assert_eq!(s.value.as_object().unwrap().len(), 1);
    }
    // one call site: the same file and line in every block (and run)
    assert_eq!(stats[0].meta("lineno"), stats[1].meta("lineno"));
}

#[test]
fn tracked_stats_time_only_the_training_part_of_a_block() {
    // 2 steps of 8 samples per block; the steps take 50 ms each, the eval 400 ms
    struct Slow(Scripted);
    impl Workload for Slow {
        fn benchmark(&self) -> &'static str {
            self.0.benchmark()
        }
        fn hyperparameters(&self) -> Vec<(&'static str, Value)> {
            self.0.hyperparameters()
        }
        fn build(&mut self, ctx: &BuildContext) -> Result<()> {
            self.0.build(ctx)
        }
        fn blocks(&self) -> Result<Vec<Block>> {
            self.0.blocks()
        }
        fn start_block(&mut self, block: &Block) -> Result<u64> {
            self.0.start_block(block)
        }
        fn samples_per_step(&self) -> u64 {
            self.0.samples_per_step()
        }
        fn train_step(&mut self, sync: &mut dyn GradSync) -> Result<tch::Tensor> {
            std::thread::sleep(std::time::Duration::from_millis(50));
            self.0.train_step(sync)
        }
        fn evaluate(&mut self, peers: &mut dyn Peers) -> Result<f64> {
            std::thread::sleep(std::time::Duration::from_millis(400));
            self.0.evaluate(peers)
        }
        fn target(&self) -> f64 {
            self.0.target()
        }
    }
    let lines = Arc::new(Mutex::new(Vec::new()));
    let mut opts = RunOptions::new(
        tch::Device::Cpu,
        Submission {
            org: "o".into(),
            platform: "p".into(),
            division: "open".into(),
            status: "research".into(),
        },
    );
    opts.seed = Some(1);
    opts.extra_sinks.push(Sink::Memory(lines.clone()));
    let mut w = Slow(Scripted {
        accuracies: vec![0.1, 0.2],
        losses: vec![],
        fail_at_step: None,
        step: 0,
        eval: 0,
    });
    let out = engine::run_once(&mut w, opts).unwrap();
    let log = parse_str(&lines.lock().unwrap().join("\n"));
    let tps: Vec<f64> = log
        .with_key("tracked_stats")
        .map(|e| e.value["throughput"].as_f64().unwrap())
        .collect();
    assert_eq!(tps.len(), 2);
    for (tp, secs) in tps.iter().zip(&out.block_seconds) {
        // 16 samples over the block's training seconds: >= 100 ms of steps, not the 400 ms eval
        // (with it: at most 16 / 0.5 = 32 samples/s)
        assert!((tp - 16.0 / secs).abs() < 1e-6 * tp, "{tp} vs {secs}");
        assert!(*tp > 16.0 / 0.45 && *tp <= 160.0, "{tp}");
    }
}

#[test]
fn nan_loss_aborts() {
    let (out, lines) = run(Scripted {
        accuracies: vec![0.3, 0.8],
        losses: vec![2.0, f64::NAN],
        fail_at_step: None,
        step: 0,
        eval: 0,
    });
    assert!(
        matches!(out.status, Status::Aborted(ref why) if why.contains("diverged")),
        "{:?}",
        out.status
    );
    let log = parse_str(&lines.join("\n"));
    assert_eq!(log.last("run_stop").unwrap().status(), Some("aborted"));
    assert!(log.first("eval_accuracy").is_none());
    // the block that stopped still reports the throughput of the steps it did
    assert_eq!(log.with_key("tracked_stats").count(), 1);
    assert_eq!(
        log.with_key("block_start").count(),
        log.with_key("block_stop").count()
    );
}

#[test]
fn epoch_limit_aborts() {
    let (out, lines) = run(Scripted {
        accuracies: vec![0.3, 0.5],
        losses: vec![],
        fail_at_step: None,
        step: 0,
        eval: 0,
    });
    assert!(matches!(out.status, Status::Aborted(ref why) if why.contains("epoch limit")));
    assert_eq!(
        parse_str(&lines.join("\n"))
            .last("run_stop")
            .unwrap()
            .status(),
        Some("aborted")
    );
}

#[test]
fn an_error_still_ends_the_log_with_run_stop_aborted() {
    let (out, lines) = run(Scripted {
        accuracies: vec![0.3, 0.8],
        losses: vec![],
        fail_at_step: Some(3),
        step: 0,
        eval: 0,
    });
    assert!(matches!(out.status, Status::Aborted(ref why) if why.contains("disk on fire")));
    let log = parse_str(&lines.join("\n"));
    let stop = log.events.last().unwrap();
    assert_eq!(stop.key, "run_stop");
    assert_eq!(stop.status(), Some("aborted"));
    assert!(stop
        .meta("reason")
        .unwrap()
        .as_str()
        .unwrap()
        .contains("disk on fire"));
}

#[test]
fn seeds_come_from_the_os_when_not_given() {
    let none = Default::default();
    let a = mlperf_run::runs::os_seed(&none).unwrap();
    let b = mlperf_run::runs::os_seed(&none).unwrap();
    let c = mlperf_run::runs::os_seed(&none).unwrap();
    assert!(a != b || b != c, "three equal OS seeds");
    assert!(a < (1 << 31));
}

/// A workload whose blocks cannot be made (a config error) ends the run as aborted with that
/// error as the reason, not as if it had reached its epoch limit.
#[test]
fn a_config_error_in_the_blocks_aborts_the_run_naming_it() {
    let (out, lines) = run(Scripted {
        accuracies: vec![],
        losses: vec![],
        fail_at_step: None,
        step: 0,
        eval: 0,
    });
    let Status::Aborted(reason) = &out.status else {
        panic!("expected aborted, got {:?}", out.status);
    };
    assert!(reason.contains("train.max_samples"), "{reason}");
    assert!(!reason.contains("epoch limit"), "{reason}");
    let log = parse_str(&lines.join("\n"));
    let stop = log.last("run_stop").unwrap();
    assert_eq!(stop.status(), Some("aborted"));
    assert!(stop
        .meta("reason")
        .unwrap()
        .as_str()
        .unwrap()
        .contains("train.max_samples"));
    assert!(log.first("block_start").is_none());
}
