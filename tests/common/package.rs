//! Helpers for the packaging tests: sets of compliant logs written by our own emitter
//! (tests/common/emitter_logs.rs), a system TOML, package options and the official package
//! checker.
#![allow(dead_code)]

pub use super::emitter_logs::{os_seed, write_bert_run, write_resnet_log, BertRun, Run};
use mlperf_run::submission::package::PackageOptions;
use mlperf_run::submission::sysinfo::DescribeOptions;
use std::path::{Path, PathBuf};

/// Write `seeds.len()` runs into `dir/result_<i>.txt`; returns the paths.
pub fn write_set(
    dir: &Path,
    division: &'static str,
    platform: &str,
    seeds: &[u64],
) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    seeds
        .iter()
        .enumerate()
        .map(|(i, seed)| {
            let p = dir.join(format!("result_{i}.txt"));
            let run = Run {
                division,
                status: "onprem",
                platform: platform.to_string(),
                seed: *seed,
                converge_epoch: if i == 2 { 39 } else { 35 },
                minutes: 28.0 + i as f64 * 0.7,
            };
            write_resnet_log(&p, &run);
            p
        })
        .collect()
}

/// Write a closed- or open-division BERT set (GBS 448) into `dir/result_<i>.txt`, one run per
/// seed, each converging after `n_evals` evals of 150,000 samples; returns the paths.
pub fn write_bert_set(
    dir: &Path,
    division: &'static str,
    seeds: &[u64],
    n_evals: u64,
) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    seeds
        .iter()
        .enumerate()
        .map(|(i, seed)| {
            let p = dir.join(format!("result_{i}.txt"));
            let mut run = BertRun::converging_after(division, *seed as i64, n_evals);
            run.block_ms = 60_000 + 1000 * i as i64;
            write_bert_run(&p, &run);
            p
        })
        .collect()
}

/// `n` distinct OS seeds.
pub fn distinct_seeds(n: usize) -> Vec<u64> {
    let mut v: Vec<u64> = Vec::new();
    while v.len() < n {
        let s = os_seed();
        if !v.contains(&s) {
            v.push(s);
        }
    }
    v
}

/// A system TOML that fills what a machine without NVML cannot detect.
pub fn write_system_toml(dir: &Path, status: &str) -> PathBuf {
    let p = dir.join("test_system.toml");
    std::fs::write(
        &p,
        format!(
            "status = \"{status}\"\naccelerators_per_node = 8\naccelerator_model_name = \"NVIDIA A100-SXM4-80GB\"\n\
             accelerator_memory_capacity = \"80 GB\"\naccelerator_memory_configuration = \"HBM2e\"\n\
             accelerator_interconnect = \"NVLink 3.0\"\ncooling = \"air\"\n"
        ),
    )
    .unwrap();
    p
}

/// 5 runs of `division` of system `system` and its system TOML (status `status`) in a new
/// temporary folder (kept while the first value lives), and `package`'s options for submitter
/// `Org` writing to `out_name` there.
pub fn set_to_package(
    division: &'static str,
    system: &str,
    status: &str,
    out_name: &std::ffi::OsStr,
) -> (tempfile::TempDir, PathBuf, PackageOptions) {
    let dir = tempfile::tempdir().unwrap();
    let toml = write_system_toml(dir.path(), status);
    let logs = write_set(
        &dir.path().join(division),
        division,
        system,
        &distinct_seeds(5),
    );
    let out = dir.path().join(out_name);
    let opts = options("Org", system, division, logs, &out, &toml);
    (dir, out, opts)
}

/// Package options for tests (the snapshot is of this checkout).
pub fn options(
    submitter: &str,
    system: &str,
    division: &str,
    results: Vec<PathBuf>,
    out: &Path,
    toml: &Path,
) -> PackageOptions {
    PackageOptions {
        submitter: submitter.into(),
        system: system.into(),
        division: division.into(),
        results,
        out: out.to_path_buf(),
        tarball: false,
        force: false,
        add: false,
        implementation: "mlperf-run".into(),
        source: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        ruleset: None,
        describe: DescribeOptions {
            system_config: Some(toml.to_path_buf()),
            use_nvml: false,
            ..Default::default()
        },
    }
}

/// Run the official package checker on a copy of `org_dir` (its RCP pass writes scaling.json);
/// returns (success line found, the checker's log).
pub fn official_package_check(org_dir: &Path, ruleset: &str) -> Option<(bool, String)> {
    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join(org_dir.file_name().unwrap());
    copy_dir(org_dir, &copy);
    let log = scratch.path().join("package_checker.log");
    let out = mlperf_run::official::run_module(
        "mlperf_logging.package_checker",
        &[
            copy.to_str()?,
            "training",
            ruleset,
            "--log_output",
            log.to_str()?,
        ],
    )
    .ok()?;
    let text = std::fs::read_to_string(&log).unwrap_or_else(|_| out.text());
    let last = text
        .lines()
        .rev()
        .find(|l| l.contains("PACKAGE CHECKER FOUND"))
        .unwrap_or("")
        .to_string();
    Some((
        last.ends_with("PACKAGE CHECKER FOUND NO ERRORS, SUCCESS !"),
        text,
    ))
}

/// Run the official system description checker on one JSON; returns (passed, log).
pub fn official_system_check(json: &Path, ruleset: &str) -> Option<(bool, String)> {
    let scratch = tempfile::tempdir().unwrap();
    let log = scratch.path().join("system_desc_checker.log");
    let out = mlperf_run::official::run_module(
        "mlperf_logging.system_desc_checker",
        &[
            json.to_str()?,
            "training",
            ruleset,
            "--log_output",
            log.to_str()?,
        ],
    )
    .ok()?;
    let text = format!(
        "{}{}",
        std::fs::read_to_string(&log).unwrap_or_default(),
        out.text()
    );
    Some((
        text.contains("System description checker passed") && !text.contains("ERROR"),
        text,
    ))
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        let t = to.join(e.file_name());
        if p.is_dir() {
            copy_dir(&p, &t);
        } else {
            std::fs::copy(&p, &t).unwrap();
        }
    }
}

/// scaling_factor of `set_dir`/scaling.json, if the file exists. The file must be what the
/// official RCP checker writes: `{"scaling_factor": <float>}`.
pub fn scaling_factor(set_dir: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(set_dir.join("scaling.json")).ok()?;
    assert!(
        text.starts_with("{\"scaling_factor\": ") && text.ends_with('}'),
        "scaling.json is not as the official RCP checker writes it: {text}"
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    Some(v["scaling_factor"].as_f64().unwrap())
}

/// The official package checker's log says it set the same scaling factor (it logs 4 decimals).
pub fn assert_same_scaling(log: &str, factor: f64) {
    let line = format!("Results scaling set to normalization factor of {factor:.4}");
    assert!(
        log.contains(&line),
        "official checker did not log '{line}':\n{log}"
    );
}
