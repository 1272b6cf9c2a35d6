//! Set-level checks: run count, one global batch size, unique closed seeds.

use mlperf_run::mllog::{parse_str, LogFile};
use mlperf_run::rules::check_set;
use std::path::PathBuf;

fn log(i: usize, gbs: u64, seed: i64, seed_line: u32) -> LogFile {
    log_of("resnet", i, gbs, seed, seed_line)
}

fn log_of(benchmark: &str, i: usize, gbs: u64, seed: i64, seed_line: u32) -> LogFile {
    let line = |key: &str, value: String, lineno: u32| {
        format!(
            ":::MLLOG {{\"namespace\": \"\", \"time_ms\": 1, \"event_type\": \"POINT_IN_TIME\", \"key\": \"{key}\", \
             \"value\": {value}, \"metadata\": {{\"file\": \"train.py\", \"lineno\": {lineno}}}}}\n"
        )
    };
    let text = line("submission_benchmark", format!("\"{benchmark}\""), 1)
        + &line("seed", seed.to_string(), seed_line)
        + &line("global_batch_size", gbs.to_string(), 3);
    let mut log = parse_str(&text);
    log.path = PathBuf::from(format!("set/result_{i}.txt"));
    log
}

fn rules(findings: &[(PathBuf, mlperf_run::rules::Finding)]) -> Vec<&str> {
    findings.iter().map(|(_, f)| f.rule.as_str()).collect()
}

#[test]
fn a_good_closed_set_has_no_findings() {
    let logs: Vec<_> = (0..5).map(|i| log(i, 3264, 100 + i as i64, 2)).collect();
    assert!(check_set(&logs, "resnet", "closed").is_empty());
}

#[test]
fn four_resnet_runs_where_five_are_required() {
    let logs: Vec<_> = (0..4).map(|i| log(i, 3264, 100 + i as i64, 2)).collect();
    let found = check_set(&logs, "resnet", "closed");
    assert_eq!(rules(&found), ["run-count"]);
    assert_eq!(found[0].0, PathBuf::from("set"));
    assert!(found[0].1.message.contains("exactly 5") && found[0].1.message.contains("found 4"));
    // BERT needs 10.
    let logs: Vec<_> = (0..5)
        .map(|i| log_of("bert", i, 448, 100 + i as i64, 2))
        .collect();
    assert_eq!(rules(&check_set(&logs, "bert", "open")), ["run-count"]);
}

#[test]
fn a_log_of_another_benchmark_is_named_with_its_line() {
    let mut logs: Vec<_> = (0..5).map(|i| log(i, 3264, 100 + i as i64, 2)).collect();
    logs[2] = log_of("bert", 2, 3264, 102, 2);
    let found = check_set(&logs, "resnet", "open");
    assert_eq!(rules(&found), ["benchmark"]);
    assert_eq!(found[0].0, PathBuf::from("set/result_2.txt"));
    assert_eq!(found[0].1.line, Some(1));
    assert!(
        found[0]
            .1
            .message
            .contains("a bert log in a resnet result set"),
        "{}",
        found[0].1.message
    );
}

#[test]
fn mixed_global_batch_sizes() {
    let logs: Vec<_> = (0..5)
        .map(|i| log(i, if i == 3 { 1632 } else { 3264 }, 100 + i as i64, 2))
        .collect();
    let found = check_set(&logs, "resnet", "open");
    assert_eq!(rules(&found), ["batch-size"]);
    assert_eq!(found[0].0, PathBuf::from("set/result_3.txt"));
    assert_eq!(found[0].1.line, Some(3));
    assert!(found[0].1.message.contains("1632") && found[0].1.message.contains("3264"));
}

#[test]
fn duplicated_closed_seed() {
    let logs: Vec<_> = (0..5)
        .map(|i| log(i, 3264, if i == 4 { 100 } else { 100 + i as i64 }, 2))
        .collect();
    let found = check_set(&logs, "resnet", "closed");
    assert_eq!(rules(&found), ["seed"]);
    assert_eq!(found[0].0, PathBuf::from("set/result_4.txt"));
    assert_eq!(found[0].1.line, Some(2));
    // The same seed from a different source line is allowed (the official rule).
    let logs: Vec<_> = (0..5).map(|i| log(i, 3264, 100, 10 + i as u32)).collect();
    assert!(check_set(&logs, "resnet", "closed").is_empty());
    // Open sets may repeat seeds.
    let logs: Vec<_> = (0..5).map(|i| log(i, 3264, 100, 2)).collect();
    assert!(check_set(&logs, "resnet", "open").is_empty());
}

#[test]
fn closed_runs_without_seed_or_with_a_bad_seed() {
    let mut logs: Vec<_> = (0..5).map(|i| log(i, 3264, 100 + i as i64, 2)).collect();
    logs[1].events.retain(|e| e.key != "seed");
    logs[2]
        .events
        .iter_mut()
        .filter(|e| e.key == "seed")
        .for_each(|e| e.value = serde_json::json!("x1"));
    let found = check_set(&logs, "resnet", "closed");
    assert_eq!(rules(&found), ["seed", "seed"]);
    assert_eq!(found[0].0, PathBuf::from("set/result_1.txt"));
    assert!(found[1].1.message.contains("not an integer"));
}

#[test]
fn empty_set_and_unknown_benchmark() {
    let found = check_set(&[], "resnet", "closed");
    assert_eq!(rules(&found), ["run-count"]);
    let found = check_set(&[], "gpt3", "closed");
    assert!(found[0].1.message.contains("unknown benchmark"));
}
