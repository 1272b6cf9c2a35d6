//! The official MLCommons checkers as test oracles (compliance and seed checkers), shared by
//! every test that compares our verdicts or our logs with theirs.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// compliance/official_batch.py: many files in one Python process.
pub const BATCH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/compliance/official_batch.py");

/// The official verdict (compliant or not) of each file, at `ruleset`.
pub fn verdicts(python: &Path, ruleset: &str, files: &[PathBuf]) -> HashMap<PathBuf, bool> {
    let out = Command::new(python)
        .arg(BATCH)
        .arg(ruleset)
        .args(files)
        .output()
        .expect("run official_batch.py");
    assert!(
        out.status.success(),
        "official_batch.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut verdicts = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).expect("official_batch.py output");
        verdicts.insert(
            PathBuf::from(v["file"].as_str().unwrap()),
            v["compliant"].as_bool().unwrap(),
        );
    }
    assert_eq!(
        verdicts.len(),
        files.len(),
        "official_batch.py skipped files"
    );
    verdicts
}

/// The official seed checker's errors for `files` taken as one result set.
pub fn seed_errors(python: &Path, ruleset: &str, files: &[PathBuf]) -> Vec<String> {
    let out = Command::new(python)
        .arg(BATCH)
        .args(["--seeds", ruleset])
        .args(files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap_or("").to_string())
        .collect()
}

/// The official compliance checker on `log` at `ruleset`, run beside the log (it writes
/// compliance_checker.log into its working directory): (succeeded, its output). None when the
/// oracle is unavailable and not required (said so, for `test`).
fn compliance(test: &str, log: &Path, ruleset: &str) -> Option<(bool, String)> {
    let py = super::oracle(test)?;
    let out = Command::new(py)
        .args([
            "-m",
            "mlperf_logging.compliance_checker",
            "--usage",
            "training",
            "--ruleset",
            ruleset,
        ])
        .arg(log)
        .current_dir(log.parent().unwrap())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success() && text.contains("SUCCESS"), text))
}

/// Assert that the official compliance checker command accepts `log` at `ruleset` (skips,
/// with a message, when the oracle is unavailable and not required).
pub fn assert_compliant(test: &str, log: &Path, ruleset: &str) {
    let Some((ok, text)) = compliance(test, log, ruleset) else {
        return;
    };
    assert!(
        ok,
        "official compliance checker rejected {} at {ruleset}:\n{text}",
        log.display()
    );
}

/// Assert that the official compliance checker ran the rules file `rules` (e.g.
/// `closed_bert.yaml`) on `log` at `ruleset` and failed exactly one check, the quality target's
/// (`eval_accuracy` >= `target`, as the rules spell it): a run that stopped short of its target
/// but whose every other logged value, hyperparameters included, the rules accept.
pub fn assert_only_the_target_fails(
    test: &str,
    log: &Path,
    ruleset: &str,
    rules: &str,
    target: &str,
) {
    let Some((_, text)) = compliance(test, log, ruleset) else {
        return;
    };
    assert!(
        text.contains(rules),
        "{test}: {rules} not run on {}:\n{text}",
        log.display()
    );
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Failed check"))
        .collect();
    assert_eq!(failed.len(), 1, "{test}: {}:\n{text}", log.display());
    assert!(
        failed[0].contains("eval_accuracy") && failed[0].contains(target),
        "{test}: {}:\n{text}",
        log.display()
    );
}
