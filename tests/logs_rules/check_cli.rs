//! `mlperf-run check` end to end: output format, exit codes, bad input.

use std::path::Path;
use std::process::Command;

fn check(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .arg("check")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn line(key: &str, value: &str, meta: &str) -> String {
    format!(
        ":::MLLOG {{\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"key\": \"{key}\", \
         \"value\": {value}, \"metadata\": {{\"file\": \"a.py\", \"lineno\": 1{meta}}}}}\n"
    )
}

/// A compliant open BERT log under 5.0.0.
fn open_bert() -> String {
    [
        line("cache_clear", "true", ""),
        line("init_start", "null", ""),
        line("submission_benchmark", "\"bert\"", ""),
        line("submission_division", "\"open\"", ""),
        line("train_samples", "1", ""),
        line("eval_samples", "1", ""),
        line("init_stop", "null", ""),
        line("run_start", "null", ""),
        line("epoch_start", "null", ", \"epoch_num\": 1"),
        line("epoch_stop", "null", ", \"epoch_num\": 1"),
        line("eval_start", "null", ", \"epoch_num\": 1"),
        line("eval_stop", "null", ", \"epoch_num\": 1"),
        line("eval_accuracy", "0.5", ", \"epoch_num\": 1"),
        line("run_stop", "null", ", \"status\": \"success\""),
    ]
    .concat()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn compliant_file_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "result_0.txt", &open_bert());
    let (code, out, _) = check(&[&p]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("COMPLIANT (bert, open, ruleset 5.0.0)"),
        "{out}"
    );
}

#[test]
fn findings_name_path_line_rule_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let text = open_bert().replace("\"status\": \"success\"", "\"state\": \"success\"");
    let p = write(dir.path(), "result_0.txt", &text);
    let (code, out, _) = check(&[&p]);
    assert_eq!(code, 1);
    assert!(
        out.contains(&format!(
            "{p}:14: [metadata] run_stop: metadata must have 'status'"
        )),
        "{out}"
    );
}

#[test]
fn directory_scan_prefers_result_files_and_json_output() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "sys/bert/result_0.txt", &open_bert());
    write(
        dir.path(),
        "sys/bert/result_1.txt",
        &open_bert().replace("run_stop", "run_end"),
    );
    write(dir.path(), "sys/bert/notes.md", "not a log");
    let (code, out, _) = check(&["--format", "json", &dir.path().to_string_lossy()]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let items = v.as_array().unwrap();
    assert_eq!(
        items.len(),
        2,
        "notes.md is skipped when result files exist"
    );
    assert_eq!(items[0]["compliant"], true);
    assert_eq!(items[1]["compliant"], false);
    assert_eq!(items[1]["findings"][0]["key"], "run_stop");
}

#[test]
fn bad_input_is_a_verdict_or_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("blob.bin");
    std::fs::write(&bin, [0u8, 159, 146, 150, 255, 10, 0]).unwrap();
    let (code, out, _) = check(&[&bin.to_string_lossy()]);
    assert_eq!(code, 1);
    assert!(out.contains("looks binary"), "{out}");
    // one line of other text is no MLPerf log, but not an empty file (it was called one)
    for (name, text, words) in [
        (
            "one_line.txt",
            "\u{fe}\u{ff} garbage",
            "no readable :::MLLOG lines in 1 lines",
        ),
        ("blank.txt", " \n\n", "no :::MLLOG lines: the file is empty"),
    ] {
        let p = write(dir.path(), name, text);
        let (code, out, _) = check(&[&p]);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains(words), "{name}: {out}");
    }
    let empty = tempfile::tempdir().unwrap();
    let (code, _, err) = check(&[&empty.path().to_string_lossy()]);
    assert_eq!(code, 2);
    assert!(err.contains("holds no files"), "{err}");
    let (code, _, err) = check(&["/no/such/file"]);
    assert_eq!(code, 2);
    assert!(err.contains("/no/such/file"), "{err}");
    let p = write(dir.path(), "result_0.txt", &open_bert());
    let (code, _, err) = check(&["--ruleset", "1.0.0", &p]);
    assert_eq!(code, 2);
    assert!(err.contains("unsupported ruleset"), "{err}");
}

#[test]
fn official_side_by_side() {
    if mlperf_run::official::python().is_none() {
        eprintln!("SKIP official_side_by_side: mlperf_logging not importable");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "result_0.txt", &open_bert());
    let (code, out, _) = check(&["--official", &p]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("mlperf-run COMPLIANT | official COMPLIANT (agree"),
        "{out}"
    );
}

#[test]
fn sets_flag_checks_the_run_count() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..4 {
        write(
            dir.path(),
            &format!("sys/bert/result_{i}.txt"),
            &open_bert(),
        );
    }
    let (code, out, _) = check(&[&dir.path().to_string_lossy()]);
    assert_eq!(code, 0, "without --sets only files are checked: {out}");
    let (code, out, _) = check(&["--sets", &dir.path().to_string_lossy()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("NOT OK") && out.contains("[run-count]") && out.contains("exactly 10"),
        "{out}"
    );
    let (_, out, _) = check(&["--sets", "--format", "json", &dir.path().to_string_lossy()]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["files"].as_array().unwrap().len(), 4);
    assert_eq!(v["sets"][0]["ok"], false);
    assert_eq!(v["sets"][0]["findings"][0]["rule"], "run-count");
}
