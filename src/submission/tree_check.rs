//! Checks of a whole submitter tree (`ORG/systems`, `ORG/results`, `ORG/benchmarks`), as
//! `verify` runs them and `package` runs them on what it wrote: system descriptions, result
//! counts and compliance per set, implementation folders, repository rules.

use super::repo_rules;
use super::result_sets::{self, ResultLog, ResultSet};
use super::system_desc::{SystemDesc, FIELDS};
use crate::benchmarks;
use crate::mllog;
use crate::score;
use std::path::Path;

/// Load a system JSON as a [`SystemDesc`]; problems name the file.
pub fn load_system_json(path: &Path) -> Result<SystemDesc, Vec<String>> {
    let text = crate::util::tree::read_text_limited(path, 1 << 20, "system description")
        .map_err(|e| vec![format!("{e:#}")])?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| vec![format!("{}: invalid JSON: {e}", path.display())])?;
    let Some(obj) = value.as_object() else {
        return Err(vec![format!("{}: not a JSON object", path.display())]);
    };
    let mut problems = Vec::new();
    let mut desc = SystemDesc::default();
    for f in FIELDS {
        match obj.get(f) {
            Some(v) => desc.set_value(f, v.clone()),
            None => problems.push(format!("{}: missing field {f}", path.display())),
        }
    }
    for k in obj.keys() {
        if !FIELDS.contains(&k.as_str()) {
            problems.push(format!("{}: unknown field {k}", path.display()));
        }
    }
    problems.extend(
        desc.problems()
            .into_iter()
            .map(|p| format!("{}: {p}", path.display())),
    );
    if problems.is_empty() {
        Ok(desc)
    } else {
        Err(problems)
    }
}

fn sub_dirs(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Everything wrong with the tree at `org_dir` (empty: it passes our checks), at the ruleset
/// `ruleset`, else the one covering the tree's benchmarks ([`result_sets::package_ruleset`]).
/// Warnings (one non-compliant run accepted under olympic scoring) are returned separately.
pub fn check_tree(org_dir: &Path, ruleset: Option<&str>) -> (Vec<String>, Vec<String>) {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let results_dir = org_dir.join("results");
    if !org_dir.join("systems").is_dir() || !results_dir.is_dir() {
        errors.push(format!(
            "{}: not a submitter tree (needs systems/ and results/)",
            org_dir.display()
        ));
        return (errors, warnings);
    }
    // The ruleset covering every benchmark in the tree, as `package` chose it.
    let names: Vec<String> = sub_dirs(&results_dir)
        .iter()
        .flat_map(|s| sub_dirs(s))
        .filter_map(|b| b.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| benchmarks::get(n).is_ok())
        .collect();
    let ruleset = result_sets::package_ruleset(ruleset, names.iter().map(String::as_str));
    for system_dir in sub_dirs(&results_dir) {
        let system = system_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let json = org_dir.join("systems").join(format!("{system}.json"));
        let desc = match load_system_json(&json) {
            Ok(d) => d,
            Err(p) => {
                errors.extend(p);
                continue;
            }
        };
        let division = desc.get("division").to_string();
        for bench_dir in sub_dirs(&system_dir) {
            let name = bench_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let Ok(benchmark) = benchmarks::get(&name) else {
                errors.push(format!("{}: unknown benchmark folder", bench_dir.display()));
                continue;
            };
            let logs = read_set_logs(&bench_dir, &name, &mut errors, &mut warnings);
            let set = ResultSet { benchmark, logs };
            let report = result_sets::check_set(&set, &division, &ruleset);
            // The RCP check needs a set that passed the others (one batch size, all runs).
            let rcp = division == "closed" && report.errors.is_empty();
            errors.extend(report.errors);
            warnings.extend(report.warnings);
            if rcp {
                check_rcp(&bench_dir, &ruleset, &mut errors, &mut warnings);
            }
            let impls = org_dir
                .join("benchmarks")
                .join(&name)
                .join("implementations");
            if sub_dirs(&impls).is_empty() {
                errors.push(format!(
                    "{}: no implementation folder for {name}",
                    impls.display()
                ));
            }
        }
    }
    errors.extend(
        repo_rules::check_tree(org_dir)
            .into_iter()
            .map(|p| p.to_string()),
    );
    (errors, warnings)
}

/// The `result_*.txt` logs of one benchmark folder of a tree; links, unreadable logs and other
/// files are reported.
fn read_set_logs(
    bench_dir: &Path,
    name: &str,
    errors: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Vec<ResultLog> {
    let mut logs = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(bench_dir)
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        let fname = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if f.symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            errors.push(format!(
                "{}: a symbolic link; a submission holds regular files only (replace \
                 it with the file)",
                f.display()
            ));
            continue;
        }
        if !(fname.starts_with("result_") && fname.ends_with(".txt")) {
            if fname != "scaling.json" {
                warnings.push(format!("{}: not a result_<i>.txt file", f.display()));
            }
            continue;
        }
        match mllog::parse_file(&f) {
            Ok(log) => logs.push(ResultLog {
                path: f,
                log,
                benchmark: name.to_string(),
            }),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    logs
}

/// Closed sets: the RCP check ([`score::score_set`]) must pass, and scaling.json must hold
/// the RCP normalization factor when the set converged faster than the RCP mean (what the
/// official package checker writes and the result summarizer reads).
fn check_rcp(
    bench_dir: &Path,
    ruleset: &str,
    errors: &mut Vec<String>,
    warnings: &mut Vec<String>,
) {
    let opts = score::ScoreOptions {
        ruleset: Some(ruleset.to_string()),
    };
    let scored = match score::score_set(bench_dir, &opts) {
        Ok(s) => s,
        Err(e) => {
            errors.push(format!("{}: cannot score: {e:#}", bench_dir.display()));
            return;
        }
    };
    let Some(rcp) = &scored.rcp else { return };
    if !rcp.passed {
        errors.push(format!(
            "{}: RCP check failed at ruleset {ruleset}: {}",
            bench_dir.display(),
            rcp.message
        ));
        return;
    }
    let expected = scaling_json_factor(rcp);
    let path = bench_dir.join(SCALING_JSON);
    let found = std::fs::read_to_string(&path).ok().and_then(|t| {
        serde_json::from_str::<serde_json::Value>(&t)
            .ok()?
            .get("scaling_factor")?
            .as_f64()
    });
    match (expected, found) {
        (None, None) => {}
        (Some(e), Some(f)) if (e - f).abs() <= 1e-9 * e => {}
        (Some(e), _) => warnings.push(format!(
            "{}: should hold scaling_factor {e} (the RCP normalization factor; the result summarizer reads it)",
            path.display()
        )),
        (None, Some(f)) => warnings.push(format!(
            "{}: scaling_factor {f}, but the set converges no faster than the RCP mean",
            path.display()
        )),
    }
}

/// The name of the file holding a set's score scaling factor.
pub const SCALING_JSON: &str = "scaling.json";

/// The factor the official RCP checker writes to scaling.json: the normalization factor when
/// the set passed and converged faster than the RCP mean; None: no scaling.json.
pub fn scaling_json_factor(rcp: &score::RcpCheck) -> Option<f64> {
    rcp.scaling_factor.filter(|f| rcp.passed && *f > 1.0)
}

/// scaling.json as the official RCP checker writes it (`json.dumps({'scaling_factor': f})`).
pub fn scaling_json_text(factor: f64) -> String {
    format!(
        "{{\"scaling_factor\": {}}}",
        serde_json::Value::from(factor)
    )
}
