//! `mlperf-run check`: verdicts for log files, optionally beside the official checker's.

use super::{check_log, check_set, resolve_ruleset, CheckOptions, Finding, Verdict};
use crate::mllog::parse_file;
use crate::mllog::LogFile;
use crate::official;
use crate::util::tree::{self, Links};
use crate::util::ExitStatus;
use anyhow::{bail, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Text,
    Json,
}

/// Check MLPerf Training logs against the compliance rules.
#[derive(clap::Args, Debug)]
#[command(after_help = check_after_help())]
pub struct CheckArgs {
    /// Log files, or directories searched recursively for result_*.txt (every regular file
    /// when a directory holds no result_*.txt).
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// Training ruleset to check against (e.g. 4.0.0); default: the benchmark's own.
    #[arg(long, value_name = "R")]
    pub ruleset: Option<String>,
    /// Also run the official checker (python3 -m mlperf_logging.compliance_checker) on each
    /// file and print both verdicts side by side.
    #[arg(long)]
    pub official: bool,
    /// Also check each folder of result_*.txt files as one result set: the run count, one
    /// global_batch_size, unique seeds in the closed division. (JSON output then becomes
    /// {"files": [...], "sets": [...]}.)
    #[arg(long)]
    pub sets: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

/// The help's closing text; the rounds and defaults come from benchmarks/<name>/benchmark.toml
/// (as embedded at build time).
fn check_after_help() -> String {
    use crate::benchmarks::generated::{DEFAULT_RULESETS, ROUNDS_SUMMARY};
    format!(
        "\
Exit status: 0 when every file is compliant, 1 when any is not, 2 on usage or I/O errors.

Findings print as `path:line: [rule] key: message`. The ruleset defaults to the
benchmark's default_ruleset ({DEFAULT_RULESETS}; {} when the log names no known
benchmark). Rulesets, the benchmarks' rounds in benchmarks/<name>/benchmark.toml:
{ROUNDS_SUMMARY}.

Examples:
  mlperf-run check results/dgxa100/resnet/result_0.txt
  mlperf-run check --ruleset 2.0.0 --official results/
  mlperf-run check --format json results/ > verdicts.json",
        super::FALLBACK_RULESET
    )
}

/// Files to check under `paths`, in a stable order. Folders are walked as
/// [`crate::util::tree::Walk`] with [`Links::FollowInside`]: a link is read only when it
/// points to a file inside the folder given, links to folders are not followed, and a FIFO,
/// a link loop or a link out of the folder is an error naming it.
pub fn collect_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| tree::io_error(path, &e))?;
        if meta.is_dir() {
            let mut all = Vec::new();
            walk(&tree::Walk::new(path, Links::FollowInside)?, path, &mut all)?;
            all.sort();
            let results: Vec<PathBuf> = all.iter().filter(|p| is_result_file(p)).cloned().collect();
            let chosen = if results.is_empty() { all } else { results };
            if chosen.is_empty() {
                bail!("{}: the directory holds no files to check", path.display());
            }
            out.extend(chosen);
        } else {
            out.push(path.clone());
        }
    }
    Ok(out)
}

fn is_result_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("result_") && n.ends_with(".txt"))
}

fn walk(tree: &tree::Walk, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let listing = tree.list(dir, &|_| true)?;
    out.extend(listing.files);
    for sub in listing.dirs {
        walk(tree, &sub, out)?;
    }
    Ok(())
}

/// Set-level findings of one folder of runs; the benchmark is the folder's name when that
/// names one (as in a submitter tree, `results/<system>/<benchmark>`), else the first log's;
/// the division comes from the logs.
fn check_result_set(dir: &Path, runs: &[(LogFile, Verdict)]) -> Vec<(PathBuf, Finding)> {
    let folder = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    let benchmark = folder
        .clone()
        .filter(|n| crate::benchmarks::get(n).is_ok())
        .or_else(|| runs.iter().find_map(|(_, v)| v.benchmark.clone()))
        .or(folder)
        .unwrap_or_default();
    let division = runs
        .iter()
        .find_map(|(_, v)| v.division.clone())
        .unwrap_or_default();
    let logs: Vec<LogFile> = runs.iter().map(|(l, _)| l.clone()).collect();
    check_set(&logs, &benchmark, &division)
}

/// The official checker's verdict on one file.
#[derive(Debug, Clone)]
pub struct OfficialVerdict {
    pub compliant: bool,
    /// The last line of its output (e.g. the error of a crash), for the side-by-side view.
    pub summary: String,
}

/// Run `python -m mlperf_logging.compliance_checker --usage training --ruleset R FILE`.
pub fn official_check(path: &Path, ruleset: &str) -> Result<OfficialVerdict> {
    let log_output = std::env::temp_dir().join(format!("mlperf-run-cc-{}.log", std::process::id()));
    let file = path.to_string_lossy();
    let log_arg = log_output.to_string_lossy();
    let out = official::run_module(
        "mlperf_logging.compliance_checker",
        &[
            "--usage",
            "training",
            "--ruleset",
            ruleset,
            "--log_output",
            &log_arg,
            &file,
        ],
    );
    let _ = std::fs::remove_file(&log_output);
    let out = out?;
    let text = out.text();
    let compliant = out.code == Some(0) && text.contains("SUCCESS");
    let summary = official_summary(&text);
    Ok(OfficialVerdict { compliant, summary })
}

/// The official checker's reason in one line: the exception of a crash, else its first
/// warning (the failed check), else its last line.
fn official_summary(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let useful = |l: &&&str| !l.starts_with("** Logging output");
    if text.contains("Traceback (most recent call last)") {
        return lines
            .iter()
            .rev()
            .find(useful)
            .map(|l| format!("crashed: {l}"))
            .unwrap_or_default();
    }
    let warning = lines
        .iter()
        .find(|l| l.starts_with("WARNING -") && !l.contains("Found parsing errors"));
    warning
        .or_else(|| lines.iter().rev().find(useful))
        .map(|l| l.to_string())
        .unwrap_or_default()
}

/// One file's verdicts.
struct Checked {
    path: PathBuf,
    verdict: Verdict,
    official: Option<Result<OfficialVerdict, String>>,
}

/// Each result set's folder with its findings (each with the file it is about).
type SetResults = Vec<(PathBuf, Vec<(PathBuf, Finding)>)>;

/// What checking the files found: their verdicts, the files that could not be read, and the
/// parsed result files by folder (with `--sets`).
struct FileResults {
    checked: Vec<Checked>,
    io_errors: usize,
    sets: BTreeMap<PathBuf, Vec<(LogFile, Verdict)>>,
}

/// `mlperf-run check`: check each file (and with `--sets` each result set), print the verdicts
/// as text or JSON; the status says whether all are compliant.
pub fn run_check(args: CheckArgs) -> Result<ExitStatus> {
    check_usable(&args)?;
    let files = collect_files(&args.paths)?;
    let opts = CheckOptions {
        ruleset: args.ruleset.clone(),
    };
    let FileResults {
        checked,
        io_errors,
        sets,
    } = check_files(&args, files, &opts)?;
    let set_results: SetResults = sets
        .into_iter()
        .map(|(dir, runs)| {
            let found = check_result_set(&dir, &runs);
            (dir, found)
        })
        .collect();
    if args.format == OutputFormat::Text {
        print_sets_text(&set_results)?;
    }
    if args.format == OutputFormat::Json {
        print_json(&args, &checked, &set_results)?;
    }
    let failing_sets = set_results.iter().any(|(_, f)| !f.is_empty());
    let failing = failing_sets
        || checked
            .iter()
            .any(|c| !c.verdict.compliant() || matches!(&c.official, Some(Ok(o)) if !o.compliant));
    let official_errors = checked.iter().any(|c| matches!(c.official, Some(Err(_))));
    use crate::util::ExitStatus;
    Ok(if io_errors > 0 || official_errors {
        ExitStatus::Error
    } else {
        ExitStatus::verdict(!failing)
    })
}

/// Refuse an unknown `--ruleset`, and `--official` without the official tools.
fn check_usable(args: &CheckArgs) -> Result<()> {
    super::check_ruleset_flag(args.ruleset.as_deref())?;
    if args.official && official::python().is_none() {
        bail!(
            "--official: the official tools (python -m mlperf_logging) are not importable; run \
             scripts/setup.sh, `pip install mlperf-logging=={}`, or set MLPERF_RUN_PYTHON",
            official::MLPERF_LOGGING_VERSION
        );
    }
    Ok(())
}

/// Check each file (and with `--official` run the official checker on it), printing its
/// verdict as text as it comes; a file that cannot be read is reported and counted.
fn check_files(args: &CheckArgs, files: Vec<PathBuf>, opts: &CheckOptions) -> Result<FileResults> {
    let mut checked = Vec::new();
    let mut io_errors = 0;
    let mut sets: BTreeMap<PathBuf, Vec<(LogFile, Verdict)>> = BTreeMap::new();
    for path in files {
        let log = match parse_file(&path) {
            Ok(log) => log,
            Err(e) => {
                eprintln!("error: {e:#}");
                io_errors += 1;
                continue;
            }
        };
        let verdict = check_log(&log, opts);
        let official = args.official.then(|| {
            let ruleset = resolve_ruleset(verdict.benchmark.as_deref(), opts);
            official_check(&path, &ruleset).map_err(|e| format!("{e:#}"))
        });
        if args.format == OutputFormat::Text {
            crate::util::output::print(&render_text(&path, &verdict, official.as_ref()))?;
        }
        if args.sets && is_result_file(&path) {
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            sets.entry(dir).or_default().push((log, verdict.clone()));
        }
        checked.push(Checked {
            path,
            verdict,
            official,
        });
    }
    Ok(FileResults {
        checked,
        io_errors,
        sets,
    })
}

/// Each set's verdict and findings, as text.
fn print_sets_text(set_results: &SetResults) -> Result<()> {
    for (dir, found) in set_results {
        let mut text = format!(
            "set {}: {}\n",
            dir.display(),
            if found.is_empty() { "OK" } else { "NOT OK" }
        );
        for (path, f) in found {
            text += &format!("  {}\n", f.located(path));
        }
        crate::util::output::print(&text)?;
    }
    Ok(())
}

/// The files' verdicts (and with `--sets` the sets') as one JSON document.
fn print_json(args: &CheckArgs, checked: &[Checked], set_results: &SetResults) -> Result<()> {
    let items: Vec<Value> = checked.iter().map(json_item).collect();
    let doc = if args.sets {
        let sets: Vec<Value> = set_results
            .iter()
            .map(|(dir, found)| {
                json!({
                    "path": dir.display().to_string(),
                    "ok": found.is_empty(),
                    "findings": found.iter().map(|(p, f)| {
                        let mut v = finding_json(f);
                        v["path"] = Value::from(p.display().to_string());
                        v
                    }).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({"files": items, "sets": sets})
    } else {
        Value::Array(items)
    };
    crate::util::output::print(&(serde_json::to_string_pretty(&doc)? + "\n"))?;
    Ok(())
}

fn label(compliant: bool) -> &'static str {
    if compliant {
        "COMPLIANT"
    } else {
        "NOT COMPLIANT"
    }
}

fn render_text(
    path: &Path,
    v: &Verdict,
    official: Option<&Result<OfficialVerdict, String>>,
) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let about = format!(
        "{}, {}, ruleset {}",
        v.benchmark.as_deref().unwrap_or("no benchmark"),
        v.division.as_deref().unwrap_or("no division"),
        v.ruleset
    );
    let _ = match official {
        None => writeln!(s, "{}: {} ({about})", path.display(), label(v.compliant())),
        Some(Ok(o)) => {
            let agree = if o.compliant == v.compliant() {
                "agree"
            } else {
                "DISAGREE"
            };
            let _ = writeln!(
                s,
                "{}: mlperf-run {} | official {} ({agree}; {about})",
                path.display(),
                label(v.compliant()),
                label(o.compliant)
            );
            if !o.compliant && !o.summary.is_empty() {
                let _ = writeln!(s, "  official: {}", o.summary);
            }
            Ok(())
        }
        Some(Err(e)) => writeln!(
            s,
            "{}: mlperf-run {} | official ERROR: {e} ({about})",
            path.display(),
            label(v.compliant())
        ),
    };
    for f in &v.findings {
        let _ = writeln!(s, "  {}", f.located(path));
    }
    for w in &v.warnings {
        let _ = writeln!(s, "  warning: {}", w.located(path));
    }
    s
}

fn finding_json(f: &Finding) -> Value {
    json!({"line": f.line, "key": f.key, "rule": f.rule, "message": f.message})
}

fn json_item(c: &Checked) -> Value {
    let v = &c.verdict;
    let mut item = json!({
        "path": c.path.display().to_string(),
        "compliant": v.compliant(),
        "benchmark": v.benchmark,
        "division": v.division,
        "ruleset": v.ruleset,
        "findings": v.findings.iter().map(finding_json).collect::<Vec<_>>(),
        "warnings": v.warnings.iter().map(finding_json).collect::<Vec<_>>(),
    });
    if let Some(o) = &c.official {
        item["official"] = match o {
            Ok(o) => json!({"compliant": o.compliant, "summary": o.summary}),
            Err(e) => json!({"error": e}),
        };
    }
    item
}
