//! Packed sequences (`methods.packing`) across ranks, 2 processes on CPU (Gloo over localhost):
//! every rank packs the same rows and takes its own, so `mlperf-run launch --nproc-per-node 2 --
//! bert ...` with one micro-batch of R rows per rank trains what one process does with two
//! micro-batches of R rows (the same rows, in the same order), counts the same sequences, and
//! rank 0's log passes our checker.
#![cfg(feature = "torch")]

use crate::common::dist::{launch_command, load, max_rel_diff, open_run_args, text, BIN};
use mlperf_run::mllog::parse_file;
use mlperf_run::rules::{check_log, CheckOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

/// configs/bert/tiny_cpu_packed.toml, open division, 16 packed rows per step (global batch 32 at
/// packing factor 2), 20 steps (evals after 10 and 20), with `accum` micro-batches per step.
/// configs/bert/tiny_cpu_packed.toml for 640 samples (2 evals of 128), `accum` micro-batches
/// per step, packing factor 2, global batch 32.
pub fn config(dir: &Path, accum: u64) -> PathBuf {
    let base = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu_packed.toml"),
    )
    .unwrap();
    let text = base
        .replace("target = 0.720", "target = 0.999")
        .replace("eval_samples = 512", "eval_samples = 128")
        .replace(
            "max_samples = 300032",
            "max_samples = 640\neval_interval_samples = 320",
        )
        .replace(
            "gradient_accumulation_steps = 1",
            &format!("gradient_accumulation_steps = {accum}"),
        )
        .replace("packing_factor = 1", "packing_factor = 2")
        .replace("global_batch_size = 64", "global_batch_size = 32");
    assert!(text.contains("eval_interval_samples = 320") && text.contains("eval_samples = 128"));
    let path = dir.join(format!("packed_accum{accum}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn args(cfg: &Path, data: &Path, log: &Path, dump: &Path) -> Vec<String> {
    let mut a = open_run_args("bert", cfg, 31, log, dump);
    a.extend(["--data".to_string(), data.to_string_lossy().into_owned()]);
    a
}

/// The eval epoch_nums of a log (the sequences trained before each eval).
fn eval_points(log: &Path) -> Vec<f64> {
    parse_file(log)
        .unwrap()
        .with_key("eval_accuracy")
        .map(|e| e.epoch_num().unwrap())
        .collect()
}

/// `data synth-bert` into `dir/data`: the data of [`config`] (realistic lengths at 64
/// tokens, 2 shards).
pub fn synth_data(dir: &Path) -> PathBuf {
    let data = dir.join("data");
    // realistic lengths at 64 tokens
    let out = Command::new(BIN)
        .args(["data", "synth-bert", "--out"])
        .arg(&data)
        .args([
            "--lengths",
            "realistic",
            "--seq-len",
            "64",
            "--sentences",
            "16",
            "--train-samples",
            "2048",
            "--eval-samples",
            "128",
            "--shards",
            "2",
            "--max-predictions",
            "20",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    data
}

#[test]
fn two_process_packed_training_equals_one_process_accumulating_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth_data(dir.path());

    let (dp_log, dp_dump) = (dir.path().join("dp.txt"), dir.path().join("dp.safetensors"));
    let dp = launch_command(2)
        .args(args(&config(dir.path(), 1), &data, &dp_log, &dp_dump))
        .env("MLPERF_RUN_DIST_TIMEOUT_S", "60")
        .output()
        .unwrap();
    let dp_text = text(&dp);
    for r in 0..2 {
        assert!(
            dp_text.contains(&format!("[rank {r}] run aborted: epoch limit reached")),
            "{dp_text}"
        );
    }
    // one process accumulating `accum` micro-batches per step: its log and parameter dump
    let one_process = |name: &str, accum: u64| {
        let (log, dump) = (
            dir.path().join(format!("{name}.txt")),
            dir.path().join(format!("{name}.safetensors")),
        );
        let out = Command::new(BIN)
            .args(args(&config(dir.path(), accum), &data, &log, &dump))
            .output()
            .unwrap();
        assert!(
            text(&out).contains("run aborted: epoch limit reached"),
            "{name}: {}",
            text(&out)
        );
        (log, dump)
    };
    let (one_log, one_dump) = one_process("one", 2);

    let (rank0, rank1, single) = (
        load(&dp_dump),
        load(&dir.path().join("dp.safetensors.rank1")),
        load(&one_dump),
    );
    assert!(!rank0.is_empty());
    let ranks = max_rel_diff(&rank0, &rank1);
    let diff = max_rel_diff(&rank0, &single);
    eprintln!("packed: rank 0 vs rank 1 {ranks:e}; 2 processes vs 1 accumulating {diff:e}");
    assert_eq!(ranks, 0.0, "the ranks' parameters differ");
    assert!(diff < 1e-5, "relative difference {diff:e}");
    // the comparison can fail: one process with the step's 16 rows as one micro-batch (one mean
    // over all their masked tokens, not the mean of two halves' means) ends elsewhere
    let (_, full_dump) = one_process("full", 1);
    let control = max_rel_diff(&rank0, &load(&full_dump));
    eprintln!("packed: 2 processes vs 1 on the whole step's rows {control:e}");
    assert!(control > 1e-6, "{control:e}");
    // the same sequences counted: each step's rows hold the same sequences either way
    let (dp_points, one_points) = (eval_points(&dp_log), eval_points(&one_log));
    assert_eq!(dp_points.len(), 2);
    assert_eq!(dp_points, one_points);
    // 20 steps of 16 rows: at least one sequence per row
    assert!(dp_points[1] >= 320.0, "{dp_points:?}");
    let verdict = check_log(
        &parse_file(&dp_log).unwrap(),
        &CheckOptions {
            ruleset: Some("5.0.0".into()),
        },
    );
    assert!(verdict.compliant(), "our checker: {:?}", verdict.findings);
}

/// `methods.fp8` (emulated) on 2 ranks: with `fp8_reduce_amax` (the default) each step's amaxes
/// are reduced across the ranks, so both end with the same scales and amax histories (the
/// trained steps' rows), bit for bit;
/// the control, `fp8_reduce_amax = false`, keeps each rank's own (their activations and
/// gradients differ), and the scales differ. The parameters agree across ranks either way.
#[test]
fn fp8_scales_agree_across_ranks_when_the_amaxes_are_reduced() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth_data(dir.path());
    let base = std::fs::read_to_string(config(dir.path(), 1)).unwrap();
    assert_eq!(base.matches("[methods]").count(), 1);
    let run = |name: &str, methods: &str| {
        let cfg = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &cfg,
            base.replace("[methods]", &format!("[methods]\n{methods}")),
        )
        .unwrap();
        let (log, dump) = (
            dir.path().join(format!("{name}.txt")),
            dir.path().join(format!("{name}.safetensors")),
        );
        let out = launch_command(2)
            .args(args(&cfg, &data, &log, &dump))
            .env("MLPERF_RUN_DIST_TIMEOUT_S", "60")
            .env(mlperf_run::fused::fp8::EMULATE_FP8, "1")
            .output()
            .unwrap();
        let t = text(&out);
        for r in 0..2 {
            assert!(
                t.contains(&format!("[rank {r}] run aborted: epoch limit reached")),
                "{name}: {t}"
            );
        }
        let mut dump1 = dump.as_os_str().to_owned();
        dump1.push(".rank1");
        let split = |v: Vec<(String, tch::Tensor)>| -> (Vec<_>, Vec<_>) {
            v.into_iter()
                .partition(|(n, _)| n.starts_with("fp8_state."))
        };
        let (fp8_0, params0) = split(load(&dump));
        let (fp8_1, params1) = split(load(std::path::Path::new(&dump1)));
        assert_eq!(
            fp8_0.len(),
            2,
            "{name}: the dump holds the fp8 scales and histories"
        );
        assert_eq!(
            max_rel_diff(&params0, &params1),
            0.0,
            "{name}: the ranks' parameters differ"
        );
        // the scales and the trained steps' history rows (row 0 holds the final eval's own
        // amaxes, written after the last update and never reduced)
        let state = |v: &[(String, tch::Tensor)]| {
            let get = |k: &str| v.iter().find(|(n, _)| n == k).unwrap().1.shallow_clone();
            let h = get("fp8_state.history");
            let rows = h.size()[0];
            vec![
                ("scale".to_string(), get("fp8_state.scale")),
                ("history".to_string(), h.narrow(0, 1, rows - 1)),
            ]
        };
        let (f0, f1) = (state(&fp8_0), state(&fp8_1));
        assert!(
            f0[0].1.ne(1.0).any().int64_value(&[]) == 1,
            "{name}: the scales never moved"
        );
        (max_rel_diff(&f0, &f1), f0[0].1.equal(&f1[0].1))
    };
    let (reduced, same) = run("reduced", "fp8 = true");
    assert_eq!(
        reduced, 0.0,
        "with reduce_amax the ranks' fp8 state differs"
    );
    assert!(same);
    let (own, same) = run("own", "fp8 = true\nfp8_reduce_amax = false");
    eprintln!("fp8 state, rank 0 vs rank 1: reduced {reduced:e}, each rank its own {own:e}");
    assert!(
        !same && own > 0.0,
        "without reduce_amax the ranks' scales still agree: the check cannot fail"
    );
}
