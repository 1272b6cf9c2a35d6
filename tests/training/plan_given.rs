//! `plan --config`: a tiny preset's own run set, measured on one process, projected to one and
//! two processes. At the measured size the projection rebuilds the measured time to train from
//! the log's parts (start-up, steps, evals), so it must land near the runs' own mean; two
//! processes must be projected faster, and a count that cannot share the batch is refused.
//! (How the two-process projection compares with two measured ranks is a benchmark,
//! scripts/bench_plan_cpu.sh, not a timed test.)
#![cfg(feature = "torch")]

use std::path::{Path, PathBuf};
use std::process::Command;

fn mlperf_run(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args(args)
        .current_dir(dir)
        .env("MLPERF_RUN_THREADS", "1")
        .output()
        .unwrap()
}

/// Seconds from run_start to run_stop of `log`.
fn time_to_train(log: &Path) -> f64 {
    let l = mlperf_run::mllog::parse_file(log).unwrap();
    (l.last("run_stop").unwrap().time_ms - l.first("run_start").unwrap().time_ms) / 1000.0
}

#[test]
fn plan_projects_a_measured_tiny_set_to_one_and_two_processes() {
    let dir = tempfile::tempdir().unwrap();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu.toml");
    let config = config.to_str().unwrap();
    let set = mlperf_run(
        &[
            "resnet",
            "--division",
            "closed",
            "--config",
            config,
            "--runs",
            "3",
            "--seeds",
            "1,2,3",
            "--results",
            "r",
            "--system",
            "cpu",
        ],
        dir.path(),
    );
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let logs: Vec<PathBuf> = (0..3)
        .map(|i| dir.path().join(format!("r/cpu/resnet/result_{i}.txt")))
        .collect();
    let measured = logs.iter().map(|l| time_to_train(l)).sum::<f64>() / 3.0;
    let mut args = vec![
        "plan",
        "resnet",
        "--config",
        config,
        "--measured-gpus",
        "1",
        "--gpus",
        "1,2",
        "--gpus-per-node",
        "2",
        "--intra",
        "1",
        "--out",
        "plan",
        "--from-log",
    ];
    args.extend(logs.iter().map(|l| l.to_str().unwrap()));
    let out = mlperf_run(&args, dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("measured: 3 of 3 runs"), "{text}");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("plan/resnet_plan.json")).unwrap(),
    )
    .unwrap();
    let secs = |i: usize| json[i]["projection"]["minutes"].as_f64().unwrap() * 60.0;
    let (one, two) = (secs(0), secs(1));
    assert!(
        (one / measured - 1.0).abs() < 0.15,
        "projected {one:.3} s at the measured size, measured {measured:.3} s\n{text}"
    );
    assert!(
        two < one,
        "two processes {two:.3} s, one {one:.3} s\n{text}"
    );
    assert_eq!(json[1]["projection"]["micro_batch"].as_f64(), Some(32.0));

    // logs of another batch say nothing about this config's convergence
    let other = dir.path().join("batch32.toml");
    let text = std::fs::read_to_string(config).unwrap();
    assert!(text.contains("global_batch_size = 64"));
    std::fs::write(
        &other,
        text.replace("global_batch_size = 64", "global_batch_size = 32"),
    )
    .unwrap();
    let mut mismatched = args.clone();
    mismatched[3] = other.to_str().unwrap();
    let refused = mlperf_run(&mismatched, dir.path());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("measured at global batch 64") && err.contains("batch32.toml"),
        "{err}"
    );

    // 3 processes on one node of 4 (3 on nodes of 2 would not fill whole nodes, refused first)
    args[7] = "3";
    args[9] = "4";
    let refused = mlperf_run(&args, dir.path());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--gpus 3") && err.contains("tiny_cpu.toml"),
        "{err}"
    );
}
