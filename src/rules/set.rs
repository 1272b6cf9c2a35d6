//! Checks across the runs of one result set (`results/<system>/<benchmark>/result_*.txt`), as
//! the official package checker makes them: the number of runs, one global batch size
//! (the RCP checker needs it), and in the closed division unique seeds
//! (package_checker/seed_checker.py: every run logs an integer seed; no two runs log the
//! same seed from the same metadata file and lineno).

use super::python;
use super::{finding, Finding};
use crate::benchmarks;
use crate::mllog::LogFile;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The folder holding the set: the common parent of the logs (empty when there are none).
fn set_dir(logs: &[LogFile]) -> PathBuf {
    logs.first()
        .and_then(|l| l.path.parent())
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Set-level findings, each with the file it concerns (the set's folder for the run count).
/// `division` is "closed" or "open"; the seed rule applies to closed sets only.
pub fn check_set(logs: &[LogFile], benchmark: &str, division: &str) -> Vec<(PathBuf, Finding)> {
    let mut out = Vec::new();
    match benchmarks::get(benchmark) {
        Ok(b) if logs.len() != b.runs => out.push((
            set_dir(logs),
            finding(
                None,
                None,
                "run-count",
                format!(
                    "a {benchmark} result set needs exactly {} result_*.txt runs, found {}",
                    b.runs,
                    logs.len()
                ),
            ),
        )),
        Ok(_) => {}
        Err(e) => out.push((
            set_dir(logs),
            finding(None, None, "run-count", format!("{e:#}")),
        )),
    }
    out.extend(benchmark_findings(logs, benchmark));
    out.extend(batch_size_findings(logs));
    if division == "closed" {
        out.extend(seed_findings(logs));
    }
    out
}

/// A log of another benchmark than the set's (one of bert among resnet runs): the set's run
/// count and score would count it as one of its own.
fn benchmark_findings(logs: &[LogFile], benchmark: &str) -> Vec<(PathBuf, Finding)> {
    let mut out = Vec::new();
    for log in logs {
        let Some(ev) = log.first("submission_benchmark") else {
            continue;
        };
        let Some(other) = ev.value.as_str().filter(|b| *b != benchmark) else {
            continue;
        };
        out.push((
            log.path.clone(),
            finding(
                Some(ev.line),
                Some("submission_benchmark"),
                "benchmark",
                format!(
                    "a {other} log in a {benchmark} result set: a set holds the runs of one \
                     benchmark; move it to a {other} folder"
                ),
            ),
        ));
    }
    out
}

fn batch_size_findings(logs: &[LogFile]) -> Vec<(PathBuf, Finding)> {
    let mut out = Vec::new();
    let mut reference: Option<(&LogFile, &Value)> = None;
    for log in logs {
        let Some(ev) = log.first("global_batch_size") else {
            out.push((
                log.path.clone(),
                finding(
                    None,
                    Some("global_batch_size"),
                    "batch-size",
                    "no global_batch_size logged".into(),
                ),
            ));
            continue;
        };
        match reference {
            None => reference = Some((log, &ev.value)),
            Some((first, value)) if !python::equal(value, &ev.value) => out.push((
                log.path.clone(),
                finding(
                    Some(ev.line),
                    Some("global_batch_size"),
                    "batch-size",
                    format!(
                        "all runs of a set must log the same global_batch_size: {} here, {} in {}",
                        python::show(&ev.value),
                        python::show(value),
                        first.path.display()
                    ),
                ),
            )),
            Some(_) => {}
        }
    }
    out
}

/// One seed record: (metadata.file, metadata.lineno, seed) as the official checker keys it.
struct SeedRecord {
    file: Value,
    lineno: Value,
    seed: i128,
    line: usize,
}

fn seed_records(log: &LogFile) -> Result<Vec<SeedRecord>, Finding> {
    if let Some(issue) = log.issues.first() {
        return Err(finding(
            Some(issue.line),
            None,
            "seed",
            format!(
                "cannot read the seeds: the log has unreadable lines ({})",
                issue.message
            ),
        ));
    }
    let mut records = Vec::new();
    for ev in log.with_key("seed") {
        let (Some(file), Some(lineno)) = (ev.meta("file"), ev.meta("lineno")) else {
            return Err(finding(
                Some(ev.line),
                Some("seed"),
                "seed",
                "seed line lacks metadata file or lineno".into(),
            ));
        };
        let Some(seed) = python::int(&ev.value) else {
            return Err(finding(
                Some(ev.line),
                Some("seed"),
                "seed",
                format!("seed {} is not an integer", python::show(&ev.value)),
            ));
        };
        records.push(SeedRecord {
            file: file.clone(),
            lineno: lineno.clone(),
            seed,
            line: ev.line,
        });
    }
    Ok(records)
}

fn seed_findings(logs: &[LogFile]) -> Vec<(PathBuf, Finding)> {
    let mut out = Vec::new();
    let mut taken: Vec<(SeedRecord, &Path)> = Vec::new();
    for log in logs {
        let records = match seed_records(log) {
            Ok(r) => r,
            Err(f) => {
                out.push((log.path.clone(), f));
                continue;
            }
        };
        if records.is_empty() {
            out.push((
                log.path.clone(),
                finding(
                    None,
                    Some("seed"),
                    "seed",
                    "closed runs must log their seed (no seed line found)".into(),
                ),
            ));
        }
        for rec in records {
            let clash = taken.iter().find(|(t, _)| {
                t.seed == rec.seed
                    && python::equal(&t.file, &rec.file)
                    && python::equal(&t.lineno, &rec.lineno)
            });
            match clash {
                Some((_, other)) => out.push((
                    log.path.clone(),
                    finding(
                        Some(rec.line),
                        Some("seed"),
                        "seed",
                        format!(
                            "seed {} from {}:{} is also logged by {}: the same seed on the same line (closed runs need distinct seeds)",
                            rec.seed,
                            rec.file.as_str().map(String::from).unwrap_or_else(|| rec.file.to_string()),
                            rec.lineno,
                            other.display()
                        ),
                    ),
                )),
                None => taken.push((rec, &log.path)),
            }
        }
    }
    out
}
