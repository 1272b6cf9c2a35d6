//! A new MLPerf round is data only: a copy of benchmarks/ with one more BERT round (5.1.0,
//! reusing 5.0.0's rule tables and RCP file) given to the `mlperf-run` binary through
//! MLPERF_RUN_BENCHMARKS_DIR is enough for `check --ruleset 5.1.0` and for `score` to infer
//! 5.1.0 from the logs' dates and find its RCP table; without the round, 5.1.0 is refused.
//! Builds and runs without libtorch.

use crate::common;

use common::emitter_logs::{os_seed, write_bert_run, BertRun};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// 2025-10-01 (UTC), inside the new round's window [2025-08-01, 2026-02-01).
const IN_NEW_WINDOW_MS: i64 = 1_759_276_800_000;

const NEW_ROUND: &str = r#"
[[rounds]]
name = "5.1.0"
from = "2025-08-01"
until = "2026-02-01"
rcp = "rcp/training_5.1.0.json"
rules = "5.0.0"
"#;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of the repository's benchmarks/ under `dir`, with the 5.1.0 BERT round if `new_round`.
fn benchmarks_copy(dir: &Path, new_round: bool) -> PathBuf {
    let root = dir.join("benchmarks");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("benchmarks"),
        &root,
    );
    if new_round {
        let bert = root.join("bert");
        let toml = bert.join("benchmark.toml");
        let mut text = std::fs::read_to_string(&toml).unwrap();
        text.push_str(NEW_ROUND);
        std::fs::write(&toml, text).unwrap();
        std::fs::copy(
            bert.join("rcp/training_5.0.0.json"),
            bert.join("rcp/training_5.1.0.json"),
        )
        .unwrap();
    }
    root
}

fn run(benchmarks: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mlperf-run"));
    cmd.args(args);
    match benchmarks {
        Some(dir) => cmd.env("MLPERF_RUN_BENCHMARKS_DIR", dir),
        None => cmd.env_remove("MLPERF_RUN_BENCHMARKS_DIR"),
    };
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A closed BERT set of 10 runs (GBS 448) dated inside the new window, each converging after
/// 16 evals of 150,000 samples (2.4 M samples: within 5.0.0's RCP at GBS 448).
fn write_closed_bert_set(dir: &Path) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let mut seeds: Vec<i64> = Vec::new();
    while seeds.len() < 10 {
        let s = (os_seed() >> 1) as i64;
        if !seeds.contains(&s) {
            seeds.push(s);
        }
    }
    seeds
        .iter()
        .enumerate()
        .map(|(i, seed)| {
            let p = dir.join(format!("result_{i}.txt"));
            let mut run = BertRun::converging_after("closed", *seed, 16);
            run.block_ms = 60_000 + 1000 * i as i64;
            run.start_ms = IN_NEW_WINDOW_MS + 3_600_000 * i as i64;
            write_bert_run(&p, &run);
            p
        })
        .collect()
}

#[test]
fn a_new_round_is_data_only() {
    let tmp = tempfile::tempdir().unwrap();
    let with_round = benchmarks_copy(&tmp.path().join("with"), true);
    let set = tmp.path().join("sub/results/sysA/bert");
    let logs = write_closed_bert_set(&set);
    let log = logs[0].to_str().unwrap();

    // (a) check --ruleset 5.1.0 accepts a good BERT log (checked with 5.0.0's tables)
    let out = run(
        Some(&with_round),
        &["check", "--format", "json", "--ruleset", "5.1.0", log],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let items: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(items[0]["compliant"], true, "{}", text(&out));
    assert_eq!(items[0]["ruleset"], "5.1.0", "{}", text(&out));
    // ... and a log that misses the target is still refused under it
    let bad = tmp.path().join("bad.txt");
    let mut run_bad = BertRun::converging_after("closed", 7, 3);
    run_bad.evals.last_mut().unwrap().1 = 0.70;
    run_bad.start_ms = IN_NEW_WINDOW_MS;
    write_bert_run(&bad, &run_bad);
    let out = run(
        Some(&with_round),
        &["check", "--ruleset", "5.1.0", bad.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("[target]"),
        "{}",
        text(&out)
    );

    // (b) score infers 5.1.0 from the logs' run_start date and finds its RCP table
    let out = run(
        Some(&with_round),
        &["score", "--format", "json", set.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let sets: Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &sets[0];
    assert_eq!(s["ruleset"], "5.1.0", "{}", text(&out));
    assert_eq!(s["ruleset_source"], "log-date", "{}", text(&out));
    assert_eq!(s["rcp"]["ruleset"], "5.1.0", "{}", text(&out));
    assert_eq!(s["rcp"]["passed"], true, "{}", text(&out));
    assert_eq!(s["rcp"]["message"], "RCP found", "{}", text(&out));
    assert!(s["score"].is_number(), "{}", text(&out));
    // the same set under the embedded definitions: no round holds the date, so BERT's default
    let out = run(None, &["score", "--format", "json", set.to_str().unwrap()]);
    let sets: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sets[0]["ruleset"], "5.0.0", "{}", text(&out));
    assert_eq!(sets[0]["ruleset_source"], "default", "{}", text(&out));

    // (c) without the round (an unchanged copy, and the embedded definitions), 5.1.0 is
    // refused, naming the known rounds
    let without = benchmarks_copy(&tmp.path().join("without"), false);
    for dir in [Some(without.as_path()), None] {
        let out = run(dir, &["check", "--ruleset", "5.1.0", log]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("unsupported ruleset '5.1.0'")
                && err.contains("bert 2.0.0, 2.1.0, 3.0.0, 3.1.0, 4.0.0, 4.1.0, 5.0.0")
                && err.contains("resnet 2.0.0, 2.1.0, 3.0.0, 3.1.0, 4.0.0"),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn a_round_naming_rules_the_code_lacks_is_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let root = benchmarks_copy(tmp.path(), true);
    let toml = root.join("bert/benchmark.toml");
    let text_before = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        text_before.replace("rules = \"5.0.0\"", "rules = \"9.9.9\""),
    )
    .unwrap();
    let log = tmp.path().join("result_0.txt");
    let mut r = BertRun::converging_after("closed", 7, 3);
    r.start_ms = IN_NEW_WINDOW_MS;
    write_bert_run(&log, &r);
    let out = run(
        Some(&root),
        &["check", "--ruleset", "5.1.0", log.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rules = \"9.9.9\"") && err.contains("5.0.0"),
        "{}",
        text(&out)
    );
}

/// MLPERF_RUN_BENCHMARKS_DIR naming a folder without the definitions (missing, or one lacking
/// a benchmark, or a benchmark.toml that does not parse) is an error naming the variable, the
/// file and the way out (exit 2); it used to panic (exit 101) in every subcommand.
#[test]
fn a_bad_benchmarks_dir_is_an_error_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("result_0.txt");
    write_bert_run(&log, &BertRun::converging_after("closed", 7, 3));
    let broken = benchmarks_copy(&tmp.path().join("broken"), false);
    std::fs::write(broken.join("resnet/benchmark.toml"), "name = [\n").unwrap();
    let cases = [
        (tmp.path().join("missing"), "missing/bert/benchmark.toml"),
        (tmp.path().to_path_buf(), "bert/benchmark.toml"),
        (broken.clone(), "resnet/benchmark.toml"),
    ];
    for (dir, file) in cases {
        for args in [vec!["check", log.to_str().unwrap()], vec!["score", "."]] {
            let out = run(Some(&dir), &args);
            let t = text(&out);
            assert_eq!(out.status.code(), Some(2), "{}: {t}", dir.display());
            assert!(
                t.contains(&format!("MLPERF_RUN_BENCHMARKS_DIR={}", dir.display()))
                    && t.contains(file)
                    && t.contains("unset it for the embedded definitions")
                    && !t.contains("panicked"),
                "{}: {t}",
                dir.display()
            );
        }
    }
}
