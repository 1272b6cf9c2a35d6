//! `mlperf-run score` as a command: layouts, formats, exit codes and bad input, on logs this
//! test writes itself (and on fixture copies where those exist).

use crate::common;

use mlperf_run::score::{score_path, RunStatus, ScoreOptions};
use std::path::Path;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
}

/// A small open ResNet log that passes the 4.0.0 checks: run_stop `minutes` after run_start
/// with `status` (none: no run_stop).
fn resnet_log(minutes: f64, status: Option<&str>, gbs: u32) -> String {
    common::emitter_logs::open_resnet_text(minutes, status, gbs, 1000.0)
}

fn write_set(dir: &Path, logs: &[String]) {
    std::fs::create_dir_all(dir).unwrap();
    for (i, log) in logs.iter().enumerate() {
        std::fs::write(dir.join(format!("result_{i}.txt")), log).unwrap();
    }
}

fn five_runs() -> Vec<String> {
    [10.0, 11.0, 12.0, 13.0, 14.0]
        .iter()
        .map(|m| resnet_log(*m, Some("success"), 256))
        .collect()
}

#[test]
fn scores_a_set_written_here_in_every_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("sub/results/sysA/resnet");
    write_set(&set, &five_runs());
    for dir in [
        tmp.path().join("sub"),
        tmp.path().join("sub/results/sysA"),
        set.clone(),
    ] {
        let sets = score_path(&dir, &ScoreOptions::default()).unwrap();
        assert_eq!(sets.len(), 1, "{}", dir.display());
        assert_eq!(sets[0].system, "sysA");
        assert_eq!(sets[0].olympic, Some(12.0));
        assert_eq!(sets[0].throughput, Some(1000.0));
        assert_eq!(sets[0].runs[0].converged_at, Some(30.0));
        assert!(sets[0].valid());
    }
}

#[test]
fn every_format_prints_the_score_and_exit_is_zero() {
    let tmp = tempfile::tempdir().unwrap();
    write_set(&tmp.path().join("results/s/resnet"), &five_runs());
    for (format, needle) in [
        ("table", "12.0000"),
        ("markdown", "| 12.0000"),
        ("csv", ",12.0000,"),
        ("json", "\"score\": 12.0"),
    ] {
        let out = bin()
            .args(["score", "--format", format])
            .arg(tmp.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{format}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(needle),
            "{format} output lacks {needle:?}:\n{stdout}"
        );
    }
    let json = bin()
        .args(["score", "--format", "json"])
        .arg(tmp.path())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v[0]["runs"].as_array().unwrap().len(), 5);
}

#[test]
fn one_failed_run_is_dropped_two_mean_no_score() {
    let tmp = tempfile::tempdir().unwrap();
    let mut logs = five_runs();
    logs[0] = resnet_log(1.0, Some("aborted"), 256); // fastest, but aborted
    write_set(&tmp.path().join("a/resnet"), &logs);
    let sets = score_path(&tmp.path().join("a"), &ScoreOptions::default()).unwrap();
    assert_eq!(sets[0].runs[0].status, RunStatus::Aborted);
    assert_eq!(sets[0].olympic, Some(13.0)); // 11 dropped as fastest; 12, 13, 14 remain
    assert!(sets[0].valid());

    logs[1] = resnet_log(11.0, None, 256);
    write_set(&tmp.path().join("b/resnet"), &logs);
    let sets = score_path(&tmp.path().join("b"), &ScoreOptions::default()).unwrap();
    assert_eq!(sets[0].runs[1].status, RunStatus::NoRunStop);
    assert_eq!(sets[0].score, None);
    assert!(!sets[0].valid());
    let out = bin()
        .arg("score")
        .arg(tmp.path().join("b"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 runs did not converge"));
}

#[test]
fn four_resnet_logs_are_not_a_valid_set() {
    let tmp = tempfile::tempdir().unwrap();
    write_set(&tmp.path().join("resnet"), &five_runs()[..4]);
    let out = bin().arg("score").arg(tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("4 result files") && stdout.contains("needs exactly 5"),
        "{stdout}"
    );
}

#[test]
fn bad_paths_are_errors_naming_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let file = tmp.path().join("file.txt");
    std::fs::write(&file, "x").unwrap();
    for (path, words) in [
        (&missing, "does not exist"),
        (&empty, "no result files"),
        (&file, "not a directory"),
    ] {
        let out = bin().arg("score").arg(path).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&path.display().to_string()) && stderr.contains(words),
            "{stderr}"
        );
    }
}

#[test]
fn broken_and_binary_logs_are_verdicts_not_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let mut logs = five_runs();
    logs[2] = logs[2][..logs[2].len() / 2].to_string(); // truncated: no run_stop
    logs[3] = "\u{0}\u{1}\u{2}binary\u{0}".into();
    write_set(&tmp.path().join("resnet"), &logs);
    let sets = score_path(tmp.path(), &ScoreOptions::default()).unwrap();
    assert_eq!(sets[0].runs[2].status, RunStatus::NoRunStop);
    assert_eq!(sets[0].runs[3].status, RunStatus::NoRunStop);
    assert!(!sets[0].valid());
}

#[test]
fn closed_sets_with_mixed_batch_sizes_fail_the_rcp_check() {
    let tmp = tempfile::tempdir().unwrap();
    let mut logs: Vec<String> = five_runs()
        .iter()
        .map(|l| l.replace("\"open\"", "\"closed\""))
        .collect();
    logs[4] = resnet_log(14.0, Some("success"), 512).replace("\"open\"", "\"closed\"");
    write_set(&tmp.path().join("resnet"), &logs);
    let sets = score_path(
        tmp.path(),
        &ScoreOptions {
            ruleset: Some("4.0.0".into()),
        },
    )
    .unwrap();
    let rcp = sets[0].rcp.as_ref().expect("closed sets get an RCP check");
    assert!(!rcp.passed);
    assert!(
        rcp.message.contains("global batch sizes differ") && rcp.message.contains("result_4.txt"),
        "{}",
        rcp.message
    );
    assert!(!sets[0].valid());
}

#[test]
fn unknown_ruleset_for_the_rcp_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let logs: Vec<String> = five_runs()
        .iter()
        .map(|l| l.replace("\"open\"", "\"closed\""))
        .collect();
    write_set(&tmp.path().join("resnet"), &logs);
    // a round of the rules (BERT's 4.1.0) that has no ResNet RCP table: a verdict
    let out = bin()
        .args(["score", "--ruleset", "4.1.0"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no RCP table for resnet at ruleset 4.1.0")
    );
}

/// A ruleset no benchmark has is a bad flag (exit 2, naming the known rounds), before any log
/// is read, for every subcommand that takes --ruleset; it used to score every run as
/// non-compliant (exit 1, "5 runs did not converge").
#[test]
fn an_unknown_ruleset_flag_is_an_error_naming_the_known_rounds() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("sysA/resnet");
    write_set(&set, &five_runs());
    let csv = tmp.path().join("recorded.csv");
    let out_dir = tmp.path().join("pkg");
    let commands: [Vec<&std::ffi::OsStr>; 4] = [
        vec!["check".as_ref(), set.as_os_str()],
        vec!["score".as_ref(), set.as_os_str()],
        vec![
            "regress".as_ref(),
            "--record".as_ref(),
            "--baseline".as_ref(),
            csv.as_os_str(),
            set.as_os_str(),
        ],
        vec![
            "package".as_ref(),
            "--submitter".as_ref(),
            "ORG".as_ref(),
            "--system".as_ref(),
            "sysA".as_ref(),
            "--division".as_ref(),
            "open".as_ref(),
            "--out".as_ref(),
            out_dir.as_os_str(),
            set.as_os_str(),
        ],
    ];
    for args in commands {
        let out = bin()
            .args(&args)
            .args(["--ruleset", "9.9.9"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("--ruleset: unsupported ruleset '9.9.9'")
                && stderr.contains("resnet 2.0.0, 2.1.0, 3.0.0, 3.1.0, 4.0.0"),
            "{args:?}: {stderr}"
        );
    }
    assert!(!csv.exists() && !out_dir.exists(), "nothing is written");
}

/// A log of another benchmark in a set (a BERT log among ResNet runs, or a folder named resnet
/// holding BERT runs) is named with its file and line by `score` and `check --sets`; `score`
/// used to count it as one of the set's runs and `check --sets` passed a whole set of BERT
/// logs in a folder named resnet.
#[test]
fn a_log_of_another_benchmark_in_a_set_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let mixed = tmp.path().join("mixed/resnet");
    write_set(&mixed, &five_runs()[..4]);
    let bert = mixed.join("result_4.txt");
    common::emitter_logs::write_bert(&bert, "open", 7);
    let line = std::fs::read_to_string(&bert)
        .unwrap()
        .lines()
        .position(|l| l.contains("\"submission_benchmark\""))
        .unwrap()
        + 1;
    let out = bin().arg("score").arg(&mixed).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "{}:{line}: a bert log in a resnet result set: move it to a bert folder",
            bert.display()
        )),
        "{stdout}"
    );

    let out = bin()
        .args(["check", "--sets"])
        .arg(&mixed)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("{}:{line}: [benchmark]", bert.display()))
            && stdout.contains("a bert log in a resnet result set"),
        "{stdout}"
    );

    // a whole set of BERT logs in a folder named resnet
    let misfiled = tmp.path().join("misfiled/resnet");
    std::fs::create_dir_all(&misfiled).unwrap();
    for i in 0..10 {
        let path = misfiled.join(format!("result_{i}.txt"));
        common::emitter_logs::write_bert(&path, "open", i);
    }
    let out = bin()
        .args(["check", "--sets"])
        .arg(&misfiled)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("NOT OK") && stdout.contains("a bert log in a resnet result set"),
        "{stdout}"
    );
}

/// A log cut off mid-event (a killed run, a truncated copy) is named with its last line, not
/// only "run_stop not recorded"; a log that simply lacks run_stop still says only that.
#[test]
fn a_log_cut_off_mid_event_says_so_with_its_line() {
    let tmp = tempfile::tempdir().unwrap();
    let mut logs = five_runs();
    logs[1] = resnet_log(11.0, None, 256);
    let whole = logs[2].clone();
    let cut = &whole[..whole.trim_end().len() - 10];
    logs[2] = cut.to_string();
    write_set(&tmp.path().join("resnet"), &logs);
    let sets = score_path(tmp.path(), &ScoreOptions::default()).unwrap();
    let runs = &sets[0].runs;
    assert_eq!(runs[2].status, RunStatus::NoRunStop);
    let lines = cut.lines().count();
    let reason = runs[2].reason.clone().unwrap_or_default();
    assert!(
        reason.contains(&format!("last line ({lines}) is cut off")),
        "{reason}"
    );
    assert_eq!(runs[1].reason.as_deref(), Some("run_stop not recorded"));
}

/// A results folder whose name is not UTF-8 (bytes a Linux file system takes) is scored in every
/// format; JSON shows the bad byte as U+FFFD, as the others do, instead of an "error" object
/// with exit status 0.
#[test]
fn a_folder_name_that_is_not_utf8_is_scored_in_json_too() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp
        .path()
        .join(std::ffi::OsStr::from_bytes(b"r\xe9sults dir"));
    write_set(&top.join("results/s/resnet"), &five_runs());
    let out = bin()
        .args(["score", "--format", "json"])
        .arg(&top)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["score"], 12.0, "{stdout}");
    let dir = v[0]["dir"].as_str().unwrap();
    assert!(dir.contains("r\u{fffd}sults dir/results/s/resnet"), "{dir}");
    assert!(v[0]["runs"][0]["file"]
        .as_str()
        .unwrap()
        .ends_with("result_0.txt"));
}
