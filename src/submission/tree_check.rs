//! Checks of a whole submitter tree (`ORG/systems`, `ORG/results`, `ORG/benchmarks`), as
//! `verify` runs them and `package` runs them on what it wrote: system descriptions, result
//! counts and compliance per set, implementation folders, repository rules.

use super::repo_rules;
use super::result_sets::{self, ResultLog, ResultSet};
use super::system_desc::{SystemDesc, FIELDS};
use crate::benchmarks;
use crate::mllog;
use std::path::Path;

/// Load a system JSON as a [`SystemDesc`]; problems name the file.
pub fn load_system_json(path: &Path) -> Result<SystemDesc, Vec<String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![format!("{}: cannot read: {e}", path.display())])?;
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
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Everything wrong with the tree at `org_dir` (empty: it passes our checks). Warnings (one
/// non-compliant run accepted under olympic scoring) are returned separately.
pub fn check_tree(org_dir: &Path) -> (Vec<String>, Vec<String>) {
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
            let mut logs = Vec::new();
            let mut files: Vec<_> = std::fs::read_dir(&bench_dir)
                .map(|r| r.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            files.sort();
            for f in files {
                let fname = f
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
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
                        benchmark: name.clone(),
                    }),
                    Err(e) => errors.push(format!("{e:#}")),
                }
            }
            if logs.len() != benchmark.runs {
                errors.push(format!(
                    "{}: {} result files, exactly {} required",
                    bench_dir.display(),
                    logs.len(),
                    benchmark.runs
                ));
            }
            let set = ResultSet { benchmark, logs };
            let report = result_sets::check_set(&set, &division, None);
            errors.extend(report.errors);
            warnings.extend(report.warnings);
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
