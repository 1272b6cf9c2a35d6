//! The result logs to package: found on disk, grouped into one set per benchmark, and checked
//! as the official package checker does: compliance per file at the package's ruleset and the
//! set rules (run count, one batch size, closed seeds), both from [`crate::rules`].
//! Every refusal names the path concerned and what to do.

use super::repo_rules::MAX_FILE_BYTES;
use crate::benchmarks::{self, Benchmark};
use crate::mllog::{self, keys, LogFile};
use crate::rules::{self, CheckOptions, Verdict};
use crate::util::tree::{self, Links};
use anyhow::{bail, Result};
use std::collections::{BTreeMap, BTreeSet};
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

/// Find the logs under the given paths: a file is one log (followed if it is a link: the user
/// named it); a folder contributes every `*.txt` and `*.log` below it, read as
/// [`tree::Walk`] with [`Links::Refuse`]: no symbolic link inside it is read (one to a folder
/// inside it is skipped), a FIFO, socket or device with such a name is refused. A file reached
/// twice (named twice, or named and inside a named folder) is read once. A file over the
/// submission repository's 50 MB is refused before it is read. Errors name the path.
pub fn find_logs(paths: &[PathBuf]) -> Result<Vec<ResultLog>> {
    let mut files = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| {
            anyhow::anyhow!(
                "results path {} does not exist or cannot be read: {}",
                p.display(),
                tree::io_error(p, &e)
            )
        })?;
        if meta.is_dir() {
            collect_dir(&tree::Walk::new(p, Links::Refuse)?, p, &mut files)?;
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
    let mut seen = BTreeSet::new();
    files.retain(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())));
    let mut logs = Vec::new();
    for path in files {
        logs.push(read_log(path)?);
    }
    Ok(logs)
}

/// Read one result log for packaging: its size, its events, its benchmark.
fn read_log(path: PathBuf) -> Result<ResultLog> {
    let (_, len) = tree::open_regular(&path)?;
    if len > MAX_FILE_BYTES {
        bail!(
            "{} is {}: the submission repository takes no file over 50 MB, and one run's \
             result log is well under 1 MB; is it the right file? Keep the run's :::MLLOG \
             lines (grep ':::MLLOG' FILE > result.txt) and package that",
            path.display(),
            tree::human_size(len)
        );
    }
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
    Ok(ResultLog {
        path,
        log,
        benchmark,
    })
}

fn is_log_name(name: &str) -> bool {
    name.ends_with(".txt") || name.ends_with(".log")
}

/// The folder of a set where a run set moves the logs of runs that were cut or killed (and are
/// run again on `--resume`): `RESULTS/SYSTEM/BENCHMARK/interrupted/` (`runs::set`). They are
/// not results, so a folder walked for logs skips it.
pub const INTERRUPTED_DIR: &str = "interrupted";

fn collect_dir(walk: &tree::Walk, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let listing = walk.list(dir, &is_log_name)?;
    out.extend(listing.files);
    for path in listing.dirs {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name == INTERRUPTED_DIR {
            // it was walked: a resumed set's cut run counted as a sixth ResNet log, and the
            // set was refused ("needs exactly 5 result_*.txt runs, found 6")
            tracing::info!(
                "skipping {}: the logs of runs that were cut or killed and run again, not results",
                path.display()
            );
            continue;
        }
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
        collect_dir(walk, &path, out)?;
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
/// the order they started; the run count is checked by [`check_set`].
pub fn group(logs: Vec<ResultLog>, division: &str) -> Result<Vec<ResultSet>> {
    for l in &logs {
        match l.division() {
            Some(d) if d == division => {}
            Some(d) => bail!(
                "{} is a log of the {d} division but --division is {division}: give --division \
                 {d} for these runs (a set cannot mix divisions; closed and open sets are \
                 packaged in two calls, the second with --add)",
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
        sets.push(ResultSet { benchmark, logs });
    }
    Ok(sets)
}

/// The ruleset a package is checked under: `requested` (--ruleset), else the one ruleset that
/// covers every benchmark in the tree: the benchmark's own default (resnet 4.0.0, bert 5.0.0)
/// when the tree holds one benchmark, else [`rules::FALLBACK_RULESET`] (4.0.0, the last round
/// that lists both). The official package checker runs every file's compliance check at the
/// package's ruleset, so ours does too.
pub fn package_ruleset<'a>(
    requested: Option<&str>,
    benchmark_names: impl IntoIterator<Item = &'a str>,
) -> String {
    if let Some(r) = requested {
        return r.to_string();
    }
    let names: BTreeSet<&str> = benchmark_names.into_iter().collect();
    match names.iter().next() {
        Some(only) if names.len() == 1 => benchmarks::get(only)
            .map(|b| b.default_ruleset.clone())
            .unwrap_or_else(|_| rules::FALLBACK_RULESET.to_string()),
        _ => rules::FALLBACK_RULESET.to_string(),
    }
}

/// The first few of `items` joined with `sep`, then how many more (a folder of 10,000 logs
/// gets a message of a few lines, not of 10,000 paths).
fn first_few(items: &[String], sep: &str) -> String {
    const SHOWN: usize = 8;
    let mut text = items[..items.len().min(SHOWN)].join(sep);
    if items.len() > SHOWN {
        text.push_str(&format!("{sep}and {} more", items.len() - SHOWN));
    }
    text
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

/// Check one set as the official package checker does: compliance per file at `ruleset`
/// ([`rules::check_log`]; one failing file is accepted under olympic scoring, more are not),
/// then the set rules ([`rules::check_set`]: run count, one global batch size, closed seeds).
/// The official checker looks at the batch size only through the closed RCP check, so in the
/// open division a batch-size finding is a warning.
pub fn check_set(set: &ResultSet, division: &str, ruleset: &str) -> SetReport {
    let mut report = SetReport::default();
    let opts = CheckOptions {
        ruleset: Some(ruleset.to_string()),
    };
    let name = &set.benchmark.name;
    let mut failing = Vec::new();
    for l in &set.logs {
        let v = rules::check_log(&l.log, &opts);
        if !v.compliant() {
            let first = v
                .findings
                .iter()
                .take(3)
                .map(|f| match f.line {
                    Some(line) => format!("line {line}: {f}"),
                    None => f.to_string(),
                })
                .collect::<Vec<_>>()
                .join("; ");
            failing.push(format!(
                "{} ({} findings at ruleset {ruleset}: {first})",
                l.path.display(),
                v.findings.len()
            ));
        }
        report.verdicts.push(v);
    }
    match failing.len() {
        0 => {}
        1 => report.warnings.push(format!(
            "{name}: 1 file does not comply, accepted under olympic scoring: {}",
            failing[0]
        )),
        n => report.errors.push(format!(
            "{name}: {n} files do not comply, the set cannot be accepted: {}",
            first_few(&failing, " | ")
        )),
    }
    let logs: Vec<LogFile> = set.logs.iter().map(|l| l.log.clone()).collect();
    for (path, f) in rules::check_set(&logs, name, division) {
        match f.rule.as_str() {
            "run-count" => {
                let given = set.logs.len();
                let need = set.benchmark.runs;
                let how = if given < need {
                    format!("{} missing", need - given)
                } else {
                    format!("{} too many: pass {need} consecutive runs", given - need)
                };
                let list = first_few(
                    &set.logs
                        .iter()
                        .map(|l| l.path.display().to_string())
                        .collect::<Vec<_>>(),
                    ", ",
                );
                report.errors.push(format!(
                    "{name}: {given} result logs given: {} ({how}; given: {list})",
                    f.message
                ));
            }
            "batch-size" if division != "closed" => report.warnings.push(f.located(&path)),
            _ => report.errors.push(f.located(&path)),
        }
    }
    report
}
