//! docs/ci: the CI files of the short-run gate (GitHub Actions, GitLab CI, Slurm). Their YAML
//! parses (PyYAML, through the venv's python: no YAML crate here), each file is included in
//! docs/ci.md verbatim, the three run the same gate commands, and those commands work: the
//! regress commands record and then pass on a short-run set, and fail on a baseline 1.5x
//! faster; the training and data commands' flags exist (torch build). Also the GPU bench's
//! bundle (scripts/bundle.sh) carries every binary scripts/bench_gpu.sh runs.

use crate::common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const GITHUB: &str = "docs/ci/github-workflow.yml";
const GITLAB: &str = "docs/ci/gitlab-ci.yml";
const SLURM: &str = "docs/ci/slurm-nightly.sbatch";
const DOC: &str = "docs/ci.md";
/// The system name the three files record and gate under.
const SYSTEM: &str = "nightly-1xgpu";
/// Where the three files put the short runs.
const RESULTS: &str = "runs/nightly";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[cfg(feature = "torch")]
fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
}

/// A gate command: what runs mlperf-run (or makes its data); not the score table and not the
/// baseline recording, which only some of the files have.
fn is_gate_command(line: &str) -> bool {
    (line.starts_with("scripts/mlperf-run") || line.starts_with("test -f "))
        && !line.contains("--record")
        && !line.starts_with("scripts/mlperf-run score")
}

/// The sbatch script's command lines.
fn slurm_commands() -> Vec<String> {
    read(SLURM)
        .lines()
        .map(str::trim)
        .filter(|l| is_gate_command(l))
        .map(String::from)
        .collect()
}

#[test]
fn every_ci_file_is_in_docs_ci_md_verbatim() {
    let doc = read(DOC);
    for rel in [GITHUB, GITLAB, SLURM] {
        let text = read(rel);
        assert!(
            doc.contains(&text),
            "{DOC} does not include {rel} verbatim: copy the file into its fenced block again"
        );
    }
    let out = Command::new("bash")
        .arg("-n")
        .arg(repo().join(SLURM))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{SLURM}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Both YAML files as JSON (mapping keys as strings; PyYAML reads GitHub's `on:` as true).
fn parsed_yaml(test: &str) -> Option<(Value, Value)> {
    let py = common::oracle(test)?;
    let script = r#"
import json, sys, yaml
def keys(x):
    if isinstance(x, dict):
        return {("on" if k is True else str(k)): keys(v) for k, v in x.items()}
    if isinstance(x, list):
        return [keys(v) for v in x]
    return x
print(json.dumps([keys(yaml.safe_load(open(p))) for p in sys.argv[1:]]))
"#;
    let out = Command::new(py)
        .args(["-c", script])
        .arg(repo().join(GITHUB))
        .arg(repo().join(GITLAB))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "PyYAML cannot read the CI files: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    Some((v[0].clone(), v[1].clone()))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_yaml_parses_and_the_three_files_run_the_same_gate() {
    let Some((gh, gl)) = parsed_yaml("the_yaml_parses_and_the_three_files_run_the_same_gate")
    else {
        return;
    };
    // GitHub: nightly on a GPU runner, the logs uploaded whatever happened
    assert!(
        gh["on"]["schedule"][0]["cron"].as_str().is_some(),
        "{GITHUB}: no schedule: {gh}"
    );
    let job = &gh["jobs"]["resnet-short-run"];
    assert!(strings(&job["runs-on"]).iter().any(|l| l == "gpu"), "{job}");
    assert_eq!(job["env"]["SYSTEM"], SYSTEM);
    assert_eq!(job["env"]["RESULTS"], RESULTS);
    let steps = job["steps"].as_array().unwrap();
    let upload = steps
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/upload-artifact@"))
        })
        .expect("an upload-artifact step");
    assert_eq!(upload["if"], "always()");
    assert!(upload["with"]["path"].as_str().unwrap().contains(RESULTS));
    let gh_lines: Vec<String> = steps
        .iter()
        .filter_map(|s| s["run"].as_str())
        .flat_map(|r| r.lines().map(|l| l.trim().to_string()).collect::<Vec<_>>())
        .filter(|l| !l.is_empty())
        .collect();
    // GitLab: a job on the gpu runner for schedules, artifacts always
    let job = &gl["nightly-gate"];
    assert!(strings(&job["tags"]).iter().any(|t| t == "gpu"), "{job}");
    assert!(
        job["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["if"].as_str().unwrap_or("").contains("schedule")),
        "{job}"
    );
    assert_eq!(job["variables"]["SYSTEM"], SYSTEM);
    assert_eq!(job["artifacts"]["when"], "always");
    assert!(strings(&job["artifacts"]["paths"])
        .iter()
        .any(|p| p.starts_with(RESULTS)));
    let gl_lines = strings(&job["script"]);

    // one gate, three files
    let gate = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| is_gate_command(l))
            .cloned()
            .collect()
    };
    let (gh_gate, gl_gate, sl_gate) = (gate(&gh_lines), gate(&gl_lines), slurm_commands());
    assert_eq!(gh_gate, gl_gate, "{GITHUB} and {GITLAB} differ");
    assert_eq!(gh_gate, sl_gate, "{GITHUB} and {SLURM} differ");
    // what the gate must do: build, short run of the bench preset, both regress metrics
    let has = |words: &[&str]| gh_gate.iter().any(|c| words.iter().all(|w| c.contains(w)));
    assert!(has(&["scripts/mlperf-run --version"]), "build: {gh_gate:?}");
    assert!(
        has(&[
            "mlperf-run resnet",
            "configs/resnet/bench_1gpu.toml",
            "--device cuda",
            "|| test $? -eq 1"
        ]),
        "short run: {gh_gate:?}"
    );
    for metric in ["throughput", "projected"] {
        assert!(
            has(&["mlperf-run regress", &format!("--metric {metric}")]),
            "{metric} gate: {gh_gate:?}"
        );
    }
    assert!(repo().join("configs/resnet/bench_1gpu.toml").is_file());
    // every command the CI files run is shown in docs/ci.md as it is
    let doc = read(DOC);
    for line in gh_lines.iter().chain(&gl_lines) {
        if line.contains("mlperf-run") {
            assert!(doc.contains(line.as_str()), "{DOC} lacks `{line}`");
        }
    }
}

/// The regress command lines of `rel`, in order (from the file's text: every line that runs
/// `scripts/mlperf-run regress`, from there on: without a YAML `- ` or `run: `).
fn regress_lines(rel: &str) -> Vec<String> {
    const CMD: &str = "scripts/mlperf-run regress";
    read(rel)
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.find(CMD).map(|i| l[i..].trim().to_string()))
        .collect()
}

/// Run a CI command line in `dir` with the files' environment, this build's binary standing in
/// for scripts/mlperf-run.
fn run_line(line: &str, dir: &Path) -> std::process::Output {
    let cmd = line.replace(
        "scripts/mlperf-run",
        &format!("'{}'", env!("CARGO_BIN_EXE_mlperf-run")),
    );
    Command::new("bash")
        .args(["-c", &cmd])
        .current_dir(dir)
        .env("RESULTS", RESULTS)
        .env("SYSTEM", SYSTEM)
        .output()
        .unwrap()
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_ci_regress_commands_record_then_gate_a_short_set() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join(RESULTS).join(SYSTEM).join("resnet");
    std::fs::create_dir_all(&set).unwrap();
    std::fs::create_dir_all(tmp.path().join("results")).unwrap();
    for (i, tps) in [[900.0, 1000.0], [910.0, 1010.0], [890.0, 990.0]]
        .iter()
        .enumerate()
    {
        let log = common::emitter_logs::short_resnet_text(
            tps,
            2.0,
            i as u64 + 1,
            "epoch limit reached before the target",
        );
        std::fs::write(set.join(format!("result_{i}.txt")), log).unwrap();
    }
    let github = regress_lines(GITHUB);
    let (record, gate): (Vec<String>, Vec<String>) =
        github.into_iter().partition(|l| l.contains("--record"));
    assert_eq!((record.len(), gate.len()), (2, 2), "{GITHUB}");
    assert_eq!(gate, regress_lines(GITLAB));
    assert_eq!(gate, regress_lines(SLURM));
    for line in &record {
        let out = run_line(line, tmp.path());
        assert_eq!(out.status.code(), Some(0), "`{line}`: {}", text(&out));
    }
    for line in &gate {
        let out = run_line(line, tmp.path());
        assert_eq!(out.status.code(), Some(0), "`{line}`: {}", text(&out));
    }
    // the recorded runner 1.5x faster: the nightly throughput gate fails, naming the metric
    let csv = tmp.path().join("results/recorded.csv");
    let b = mlperf_run::regress::Baseline::load(&csv).unwrap();
    let mut row = b.find("resnet", "bench_1gpu", SYSTEM).unwrap().clone();
    let mut t = row.throughput.unwrap();
    t.value *= 1.5;
    row.throughput = Some(t);
    let mut faster = b.clone();
    faster.upsert(row);
    faster.save(&csv).unwrap();
    let throughput_gate = gate.iter().find(|l| l.contains("throughput")).unwrap();
    let out = run_line(throughput_gate, tmp.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("REGRESSED resnet/bench_1gpu/{SYSTEM}: throughput")),
        "{}",
        text(&out)
    );
}

/// The build and data commands and the training command's flags exist in this binary.
#[cfg(feature = "torch")]
#[test]
fn the_ci_training_and_data_commands_use_flags_that_exist() {
    assert!(bin().arg("--version").output().unwrap().status.success());
    for line in slurm_commands() {
        let line = line.trim_start_matches("test -f \"$DATA/synth-imagenet.json\" || ");
        let Some(rest) = line.strip_prefix("scripts/mlperf-run ") else {
            continue;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        let sub: Vec<&str> = words
            .iter()
            .take_while(|w| !w.starts_with('-'))
            .copied()
            .collect();
        if sub.is_empty() || sub[0] == "regress" {
            continue; // --version; regress runs for real above
        }
        let help = bin().args(&sub).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout).into_owned();
        for flag in words.iter().filter(|w| w.starts_with("--")) {
            assert!(
                help.contains(flag),
                "`mlperf-run {}` has no {flag} (from {SLURM})",
                sub.join(" ")
            );
        }
    }
}

/// What scripts/bench_gpu.sh runs on a GPU machine comes from the bundle: every binary it looks
/// up by name (`find_bin NAME`) is mlperf-run or an example, and scripts/bundle.sh takes every
/// example (a list there once left out fp8_check, so part q could not run from a bundle).
#[test]
fn the_bundle_carries_every_binary_the_gpu_bench_runs() {
    let bench = read("scripts/bench_gpu.sh");
    let mut names: Vec<&str> = bench
        .split("find_bin ")
        .skip(1)
        .filter_map(|rest| {
            rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
        })
        .filter(|n| !n.is_empty() && *n != "mlperf" && !n.starts_with('"') && *n != "NAME")
        .collect();
    names.sort();
    names.dedup();
    assert!(
        names.contains(&"fp8_check") && names.len() >= 5,
        "{names:?}"
    );
    for n in &names {
        assert!(
            repo().join("examples").join(format!("{n}.rs")).is_file(),
            "scripts/bench_gpu.sh runs {n}, which is no example in examples/"
        );
    }
    let bundle = read("scripts/bundle.sh");
    assert!(
        bundle.contains("for ex in \"$root\"/examples/*.rs; do"),
        "scripts/bundle.sh must bundle every example"
    );
}
