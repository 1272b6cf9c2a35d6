//! A tiny ResNet run set killed during its third run and resumed ends with exactly 5 result
//! files, distinct OS seeds, finished files untouched, and passes our set checks and the
//! official seed checker in the closed division.
#![cfg(feature = "torch")]

use crate::common;

use mlperf_run::mllog::parse_file;
use mlperf_run::rules::check_set;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn set_command(results: &Path, resume: bool) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mlperf-run"));
    c.args(["resnet", "--division", "closed", "--config"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu.toml"))
        .arg("--results")
        .arg(results)
        .args(["--system", "tiny"]);
    if resume {
        c.arg("--resume");
    }
    c
}

fn has_run_stop(p: &Path) -> bool {
    std::fs::read_to_string(p)
        .map(|t| t.contains("\"run_stop\""))
        .unwrap_or(false)
}

#[test]
fn killed_set_resumes_to_five_runs_with_distinct_seeds() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("tiny/resnet");
    let file = |i: usize| set.join(format!("result_{i}.txt"));

    // Kill the set (SIGKILL: no chance to close the log) once its third run has started.
    let mut child = set_command(tmp.path(), false)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    while !(file(2).exists() && has_run_stop(&file(1))) {
        assert!(
            Instant::now() < deadline,
            "the set never reached its third run"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the set ended before it was killed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(has_run_stop(&file(0)) && has_run_stop(&file(1)));
    let third_was_partial = !has_run_stop(&file(2));
    let finished: Vec<Vec<u8>> = (0..2).map(|i| std::fs::read(file(i)).unwrap()).collect();

    // Without --resume the set refuses to touch the folder.
    let refused = set_command(tmp.path(), false).output().unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--resume"));

    let resumed = set_command(tmp.path(), true).output().unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "resume failed:\n{stderr}");
    assert!(stderr.contains("kept from before"), "{stderr}");

    let files: Vec<PathBuf> = mlperf_run::score::result_files(&set).unwrap();
    assert_eq!(files.len(), 5, "exactly 5 result files: {files:?}");
    for (i, before) in finished.iter().enumerate().take(2) {
        assert_eq!(
            &std::fs::read(file(i)).unwrap(),
            before,
            "finished result_{i} rewritten"
        );
    }
    if third_was_partial {
        let aside = set.join("interrupted").read_dir().unwrap().count();
        assert_eq!(
            aside, 1,
            "the killed run's partial log is kept in interrupted/"
        );
    }

    let logs: Vec<_> = files.iter().map(|p| parse_file(p).unwrap()).collect();
    let seeds: std::collections::BTreeSet<u64> = logs
        .iter()
        .map(|l| {
            l.first("seed")
                .and_then(|e| e.value.as_u64())
                .expect("seed logged")
        })
        .collect();
    assert_eq!(seeds.len(), 5, "seeds must be distinct");
    let findings = check_set(&logs, "resnet", "closed");
    assert!(findings.is_empty(), "our set checks: {findings:?}");
    if let Some(py) = common::oracle("killed_set_resumes_to_five_runs_with_distinct_seeds") {
        let errors = common::official::seed_errors(&py, "4.0.0", &files);
        assert!(errors.is_empty(), "official seed checker: {errors:?}");
    }
    assert!(
        set.join("accuracy.svg").exists(),
        "the set writes its accuracy plot"
    );
}
