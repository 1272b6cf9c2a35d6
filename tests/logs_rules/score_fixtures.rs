//! `score` on the real published logs: the official scores, and (when the official tools are
//! importable) a differential comparison with mlperf_logging.result_summarizer run on copies.

use crate::common;

use mlperf_run::score::{score_path, score_set, RunStatus, ScalingSource, ScoreOptions, SetScore};
use std::path::{Path, PathBuf};

const NVIDIA: &str = "v2.0/NVIDIA/results/dgxa100_ngc22.04_mxnet/resnet";
const METHODS: &str = "v2.0/MosaicML/results/8xA100_80GB-methods/resnet";
const BASELINE: &str = "v2.0/MosaicML/results/8xA100_80GB-baseline/resnet";
const BERT: &str = "v2.1/MosaicML/results/8xA100_80GB-methods/bert";

fn f4(x: Option<f64>) -> String {
    format!("{:.4}", x.expect("a score"))
}

fn find<'a>(sets: &'a [SetScore], rel: &str) -> &'a SetScore {
    sets.iter()
        .find(|s| s.dir.ends_with(rel))
        .unwrap_or_else(|| panic!("no set {rel}"))
}

#[test]
fn fixture_scores_match_the_official_figures() {
    let Some(root) = common::fixtures("fixture_scores_match_the_official_figures") else {
        return;
    };
    let sets = score_path(&root, &ScoreOptions::default()).unwrap();
    assert_eq!(sets.len(), 4, "four result sets under {}", root.display());

    let methods = find(&sets, METHODS);
    assert_eq!(
        (methods.division.as_deref(), methods.ruleset.as_str()),
        (Some("open"), "2.0.0")
    );
    assert_eq!(f4(methods.score), "23.7885");
    assert!(methods.valid() && methods.rcp.is_none());

    assert_eq!(f4(find(&sets, BASELINE).score), "110.5131");

    let nvidia = find(&sets, NVIDIA);
    assert_eq!(nvidia.division.as_deref(), Some("closed"));
    assert_eq!(f4(nvidia.olympic), "28.6854");
    assert_eq!(f4(nvidia.score), "28.8115");
    assert_eq!(nvidia.scaling_source, ScalingSource::Rcp);
    assert_eq!(format!("{:.4}", nvidia.scaling_factor), "1.0044");
    let rcp = nvidia.rcp.as_ref().unwrap();
    assert!(rcp.passed && rcp.message == "RCP found", "{rcp:?}");
    assert_eq!(rcp.batch_size, Some(3264.0));
    let statuses: Vec<RunStatus> = nvidia.runs.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == RunStatus::Aborted)
            .count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(nvidia.runs[2].status, RunStatus::Aborted);
    assert!(
        nvidia.throughput.unwrap() > 1000.0,
        "NVIDIA logs record images/s"
    );

    let bert = find(&sets, BERT);
    assert_eq!(
        (bert.benchmark.as_str(), bert.ruleset.as_str()),
        ("bert", "2.1.0")
    );
    assert_eq!(f4(bert.score), "7.8960");
    assert_eq!(bert.runs.len(), 10);
    // BERT's epoch_num counts samples.
    assert!(bert
        .runs
        .iter()
        .all(|r| r.converged_at.unwrap() > 100_000.0));
}

#[test]
fn the_ruleset_flag_overrides_inference() {
    let Some(root) = common::fixtures("the_ruleset_flag_overrides_inference") else {
        return;
    };
    let opts = ScoreOptions {
        ruleset: Some("4.0.0".into()),
    };
    let set = score_set(&root.join(NVIDIA), &opts).unwrap();
    assert_eq!(set.ruleset, "4.0.0");
    assert_eq!(set.rcp.as_ref().unwrap().ruleset, "4.0.0");
    // Olympic scoring does not depend on the ruleset.
    assert_eq!(f4(set.olympic), "28.6854");
}

/// Copy a directory tree (the summarizer writes scaling.json into what it reads).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Run the official result summarizer on `org` and return (system, score) for `benchmark`.
fn official_scores(org: &Path, ruleset: &str, benchmark: &str, csv: &Path) -> Vec<(String, f64)> {
    let out = mlperf_run::official::run_module(
        "mlperf_logging.result_summarizer",
        &[
            org.to_str().unwrap(),
            "training",
            ruleset,
            "--csv",
            csv.to_str().unwrap(),
        ],
    )
    .unwrap();
    let text = std::fs::read_to_string(csv)
        .unwrap_or_else(|e| panic!("no summarizer CSV ({e}): {}", out.text()));
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader.headers().unwrap().clone();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let (sys_col, score_col) = (col("system"), col(benchmark));
    reader
        .records()
        .map(|r| r.unwrap())
        .filter(|r| !r[score_col].is_empty())
        .map(|r| (r[sys_col].to_string(), r[score_col].parse::<f64>().unwrap()))
        .collect()
}

#[test]
fn fixture_scores_agree_with_the_official_summarizer() {
    let test = "fixture_scores_agree_with_the_official_summarizer";
    let Some(root) = common::fixtures(test) else {
        return;
    };
    if common::oracle(test).is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, &str, bool); 3] = [
        ("v2.0/MosaicML", "2.0.0", "resnet", false),
        ("v2.0/NVIDIA", "2.0.0", "resnet", true),
        ("v2.1/MosaicML", "2.1.0", "bert", false),
    ];
    let mut compared = 0;
    for (i, (org, ruleset, benchmark, closed)) in cases.iter().enumerate() {
        let copy = tmp.path().join(format!("{i}")).join(org);
        copy_tree(&root.join(org), &copy);
        let ours = score_path(&copy, &ScoreOptions::default()).unwrap();
        let first = official_scores(
            &copy,
            ruleset,
            benchmark,
            &tmp.path().join(format!("{i}-a.csv")),
        );
        assert!(!first.is_empty(), "the summarizer scored nothing in {org}");
        for (system, official) in &first {
            let set = ours
                .iter()
                .find(|s| &s.system == system)
                .unwrap_or_else(|| panic!("we miss {system}"));
            // First pass: no scaling.json yet, so the official figure is unscaled.
            assert_eq!(
                format!("{official:.4}"),
                f4(set.olympic),
                "{org}/{system} first pass"
            );
            if !closed {
                assert_eq!(format!("{official:.4}"), f4(set.score), "{org}/{system}");
            }
            compared += 1;
        }
        if *closed {
            // The first pass wrote scaling.json (RCP factor); the second applies it.
            let second = official_scores(
                &copy,
                ruleset,
                benchmark,
                &tmp.path().join(format!("{i}-b.csv")),
            );
            for (system, official) in &second {
                let set = ours.iter().find(|s| &s.system == system).unwrap();
                assert_eq!(
                    format!("{official:.4}"),
                    f4(set.score),
                    "{org}/{system} scaled"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 5);
}

#[test]
fn scaling_json_is_honoured_for_open_sets() {
    let Some(root) = common::fixtures("scaling_json_is_honoured_for_open_sets") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().join("results/sys/resnet");
    copy_tree(&root.join(METHODS), &dir);
    std::fs::write(dir.join("scaling.json"), r#"{"scaling_factor": 1.5}"#).unwrap();
    let set = score_set(
        &dir,
        &ScoreOptions {
            ruleset: Some("2.0.0".into()),
        },
    )
    .unwrap();
    assert_eq!(set.scaling_source, ScalingSource::File);
    assert_eq!(f4(set.score), format!("{:.4}", set.olympic.unwrap() * 1.5));
    assert_eq!(f4(set.olympic), "23.7885");
}
