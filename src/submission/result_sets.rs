//! The result logs to package: found on disk, grouped into one set per benchmark, and checked
//! as the official package checker does (run count, compliance per file, closed seeds).
//! Every refusal names the path concerned and what to do.

use crate::benchmarks::{self, Benchmark};
use crate::mllog::{self, keys, LogFile};
use crate::rules::{self, CheckOptions, Verdict};
use anyhow::{bail, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Benchmark folder names of the MLPerf Training rounds (any ruleset): a folder with one of
/// these names that mlperf-run cannot package is refused rather than skipped.
const MLPERF_BENCHMARK_NAMES: &[&str] = &[
    "bert",
    "dlrm",
    "dlrm_dcnv2",
    "gnn",
    "gpt3",
    "llama2_70b_lora",
    "llama31_405b",
    "llama31_8b",
    "maskrcnn",
    "minigo",
    "resnet",
    "retinanet",
    "rnnt",
    "ssd",
    "stable_diffusion",
    "transformer",
    "unet3d",
    "gpt",
    "ncf",
];

/// One result log read from disk.
#[derive(Debug, Clone)]
pub struct ResultLog {
    pub path: PathBuf,
    pub log: LogFile,
    pub benchmark: String,
}

impl ResultLog {
    fn text_of(&self, key: &str) -> Option<String> {
        self.log
            .first(key)
            .and_then(|e| e.value.as_str())
            .map(String::from)
    }
    pub fn division(&self) -> Option<String> {
        self.text_of(keys::SUBMISSION_DIVISION)
    }
    pub fn platform(&self) -> Option<String> {
        self.text_of(keys::SUBMISSION_PLATFORM)
    }
    pub fn org(&self) -> Option<String> {
        self.text_of(keys::SUBMISSION_ORG)
    }
    pub fn status(&self) -> Option<String> {
        self.text_of(keys::SUBMISSION_STATUS)
    }
    fn run_start_ms(&self) -> Option<f64> {
        self.log.first(keys::RUN_START).map(|e| e.time_ms)
    }
}

/// Find the logs under the given paths: a file is one log; a folder contributes every
/// `*.txt` and `*.log` below it. Errors name the path.
pub fn find_logs(paths: &[PathBuf]) -> Result<Vec<ResultLog>> {
    let mut files = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| {
            anyhow::anyhow!(
                "results path {} does not exist or cannot be read: {e}",
                p.display()
            )
        })?;
        if meta.is_dir() {
            collect_dir(p, &mut files)?;
        } else {
            files.push(p.clone());
        }
    }
    if files.is_empty() {
        bail!(
            "no result logs (*.txt, *.log) found under {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    files.sort();
    files.dedup();
    let mut logs = Vec::new();
    for path in files {
        let log = mllog::parse_file(&path)?;
        if log.events.is_empty() {
            bail!(
                "{} holds no :::MLLOG lines: not an MLPerf result log",
                path.display()
            );
        }
        let Some(benchmark) = log
            .first(keys::SUBMISSION_BENCHMARK)
            .and_then(|e| e.value.as_str())
            .map(String::from)
        else {
            bail!(
                "{} logs no submission_benchmark: cannot tell which benchmark it belongs to",
                path.display()
            );
        };
        if benchmarks::get(&benchmark).is_err() {
            let known: Vec<&str> = benchmarks::all().iter().map(|b| b.name.as_str()).collect();
            bail!(
                "{}: unknown benchmark '{benchmark}' (mlperf-run packages {})",
                path.display(),
                known.join(", ")
            );
        }
        if let Some(folder) = path
            .parent()
            .and_then(Path::file_name)
            .map(|f| f.to_string_lossy().into_owned())
        {
            if MLPERF_BENCHMARK_NAMES.contains(&folder.as_str()) && folder != benchmark {
                bail!(
                    "{} is in a folder named '{folder}' but logs benchmark '{benchmark}'",
                    path.display()
                );
            }
        }
        logs.push(ResultLog {
            path,
            log,
            benchmark,
        });
    }
    Ok(logs)
}

fn collect_dir(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("cannot read results folder {}: {e}", dir.display()))?;
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !benchmarks::all().iter().any(|b| b.name == name)
                && MLPERF_BENCHMARK_NAMES.contains(&name.as_str())
            {
                let known: Vec<&str> = benchmarks::all().iter().map(|b| b.name.as_str()).collect();
                bail!(
                    "unknown benchmark folder {}: mlperf-run packages only {}",
                    path.display(),
                    known.join(", ")
                );
            }
            collect_dir(&path, out)?;
        } else if name.ends_with(".txt") || name.ends_with(".log") {
            out.push(path);
        }
    }
    Ok(())
}

/// One benchmark's runs, in the order they will be numbered (result_0 first).
#[derive(Debug, Clone)]
pub struct ResultSet {
    pub benchmark: &'static Benchmark,
    pub logs: Vec<ResultLog>,
}

/// Group logs by benchmark, checking division and system consistency. Runs are numbered in
/// the order they started.
pub fn group(logs: Vec<ResultLog>, division: &str) -> Result<Vec<ResultSet>> {
    for l in &logs {
        match l.division() {
            Some(d) if d == division => {}
            Some(d) => bail!(
                "{} is a {d}-division log but --division is {division}: a set cannot mix divisions",
                l.path.display()
            ),
            None => bail!("{} logs no submission_division", l.path.display()),
        }
    }
    if let Some(first) = logs.first() {
        for l in &logs[1..] {
            if l.platform() != first.platform() {
                bail!(
                    "result logs from two different systems: {} is from '{}', {} from '{}' (package one system at a time)",
                    first.path.display(),
                    first.platform().unwrap_or_default(),
                    l.path.display(),
                    l.platform().unwrap_or_default()
                );
            }
        }
    }
    let mut by_bench: BTreeMap<String, Vec<ResultLog>> = BTreeMap::new();
    for l in logs {
        by_bench.entry(l.benchmark.clone()).or_default().push(l);
    }
    let mut sets = Vec::new();
    for (name, mut logs) in by_bench {
        let benchmark = benchmarks::get(&name)?;
        logs.sort_by(|a, b| {
            let (x, y) = (
                a.run_start_ms().unwrap_or(f64::MAX),
                b.run_start_ms().unwrap_or(f64::MAX),
            );
            x.total_cmp(&y).then_with(|| a.path.cmp(&b.path))
        });
        if logs.len() != benchmark.runs {
            let given = logs.len();
            let need = benchmark.runs;
            let list = logs
                .iter()
                .map(|l| l.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            if given < need {
                bail!(
                    "{name}: {given} result logs given, a set needs exactly {need}: {} missing (given: {list})",
                    need - given
                );
            }
            bail!("{name}: {given} result logs given, a set needs exactly {need}: pass {need} consecutive runs (given: {list})");
        }
        sets.push(ResultSet { benchmark, logs });
    }
    Ok(sets)
}

/// What the checks of one set found.
#[derive(Debug, Clone, Default)]
pub struct SetReport {
    /// Refusals.
    pub errors: Vec<String>,
    /// Accepted, but the user should know.
    pub warnings: Vec<String>,
    /// Compliance verdict per log, in set order.
    pub verdicts: Vec<Verdict>,
}

/// Check one set as the official package checker does: compliance per file (one failing file
/// is accepted under olympic scoring, more are not), closed division: seeds and one global
/// batch size.
pub fn check_set(set: &ResultSet, division: &str, ruleset: Option<&str>) -> SetReport {
    let mut report = SetReport::default();
    let opts = CheckOptions {
        ruleset: ruleset
            .map(String::from)
            .or_else(|| Some(set.benchmark.default_ruleset.clone())),
    };
    let mut failing = Vec::new();
    for l in &set.logs {
        let v = rules::check_log(&l.log, &opts);
        if !v.compliant() {
            let first = v
                .findings
                .iter()
                .take(3)
                .map(|f| f.message.clone())
                .collect::<Vec<_>>()
                .join("; ");
            failing.push(format!(
                "{} ({} findings: {first})",
                l.path.display(),
                v.findings.len()
            ));
        }
        report.verdicts.push(v);
    }
    match failing.len() {
        0 => {}
        1 => report.warnings.push(format!(
            "{}: 1 file does not comply, accepted under olympic scoring: {}",
            set.benchmark.name, failing[0]
        )),
        n => report.errors.push(format!(
            "{}: {n} files do not comply, the set cannot be accepted: {}",
            set.benchmark.name,
            failing.join(" | ")
        )),
    }
    if division == "closed" {
        report.errors.extend(seed_problems(set));
        report.errors.extend(batch_size_problems(set));
    }
    report
}

/// The closed-division seed rule (`package_checker.seed_checker`): every run logs at least one
/// integer seed; no two runs log the same seed from the same file and line.
pub fn seed_problems(set: &ResultSet) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen: HashMap<(String, String, i128), &Path> = HashMap::new();
    for l in &set.logs {
        let mut count = 0;
        for e in l.log.with_key(keys::SEED) {
            let value = match &e.value {
                serde_json::Value::Number(n) => n
                    .as_i64()
                    .map(i128::from)
                    .or_else(|| n.as_u64().map(i128::from)),
                serde_json::Value::String(s) => s.trim().parse::<i128>().ok(),
                _ => None,
            };
            let Some(seed) = value else {
                problems.push(format!(
                    "{}:{}: seed {} is not an integer",
                    l.path.display(),
                    e.line,
                    e.value
                ));
                continue;
            };
            count += 1;
            let file = e.meta("file").map(|v| {
                v.as_str()
                    .map(String::from)
                    .unwrap_or_else(|| v.to_string())
            });
            let lineno = e.meta("lineno").map(|v| v.to_string());
            let key = (file.unwrap_or_default(), lineno.unwrap_or_default(), seed);
            if let Some(prev) = seen.get(&key) {
                problems.push(format!(
                    "{} logs seed {seed} on {}:{}; {} already logs the same seed on the same line (closed runs need distinct seeds)",
                    l.path.display(),
                    key.0,
                    key.1,
                    prev.display()
                ));
            } else {
                seen.insert(key, &l.path);
            }
        }
        if count == 0 {
            problems.push(format!(
                "{} logs no seed (closed runs must log their seed)",
                l.path.display()
            ));
        }
    }
    problems
}

/// All runs of a closed set must log one and the same global_batch_size.
pub fn batch_size_problems(set: &ResultSet) -> Vec<String> {
    let mut sizes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in &set.logs {
        let v = l
            .log
            .first(keys::GLOBAL_BATCH_SIZE)
            .map(|e| e.value.to_string())
            .unwrap_or_else(|| "none".into());
        sizes
            .entry(v)
            .or_default()
            .push(l.path.display().to_string());
    }
    if sizes.len() <= 1 {
        return Vec::new();
    }
    let detail = sizes
        .iter()
        .map(|(v, files)| format!("{v} in {}", files.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    vec![format!(
        "{}: runs log different global_batch_size values ({detail})",
        set.benchmark.name
    )]
}
