//! `mlperf-run regress`: pass, regression, missing baseline row, --record round trip,
//! malformed baseline CSV; on result sets written here and on the real logs.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
}

/// An open ResNet set of 5 runs taking `minutes[i]` each, logging `throughput`.
fn write_set(dir: &Path, minutes: [f64; 5], throughput: f64) {
    std::fs::create_dir_all(dir).unwrap();
    for (i, m) in minutes.iter().enumerate() {
        let log = common::emitter_logs::open_resnet_text(*m, Some("success"), 256, throughput);
        std::fs::write(dir.join(format!("result_{i}.txt")), log).unwrap();
    }
}

fn regress(baseline: &Path, results: &Path, extra: &[&str]) -> Output {
    bin()
        .arg("regress")
        .arg("--baseline")
        .arg(baseline)
        .arg(results)
        .args(extra)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const HEADER: &str = "benchmark,config,system,score_min,throughput,tolerance_pct,recorded_at\n";

#[test]
fn within_tolerance_passes_and_beyond_it_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("recorded.csv");
    // olympic mean of 10..14 = 12 minutes; throughput 1000.
    write_set(
        &tmp.path().join("r/sysA/resnet"),
        [10.0, 11.0, 12.0, 13.0, 14.0],
        1000.0,
    );
    std::fs::write(&csv, format!("{HEADER}resnet,default,sysA,11.8,1000,5,\n")).unwrap();
    let out = regress(&csv, &tmp.path().join("r"), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("11.8000") && t.contains("12.0000") && t.contains("1.0169") && t.contains("ok"),
        "{t}"
    );

    // Baseline 11.0: 12/11 = +9.1% > 5% -> regression; a flag tolerance of 10% lets it pass.
    std::fs::write(&csv, format!("{HEADER}resnet,default,sysA,11.0,1000,5,\n")).unwrap();
    let out = regress(&csv, &tmp.path().join("r"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("REGRESSED"));
    let out = regress(&csv, &tmp.path().join("r"), &["--tolerance", "10"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // The row's own tolerance column is used when no flag is given.
    std::fs::write(&csv, format!("{HEADER}resnet,default,sysA,11.0,1000,10,\n")).unwrap();
    assert_eq!(
        regress(&csv, &tmp.path().join("r"), &[]).status.code(),
        Some(0)
    );

    // Throughput falling by more than the tolerance is a regression even when time is fine.
    std::fs::write(&csv, format!("{HEADER}resnet,default,sysA,12.0,1200,5,\n")).unwrap();
    let out = regress(&csv, &tmp.path().join("r"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("throughput"));
}

#[test]
fn missing_baseline_row_fails_and_names_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("recorded.csv");
    write_set(
        &tmp.path().join("r/sysA/resnet"),
        [10.0, 11.0, 12.0, 13.0, 14.0],
        1000.0,
    );
    std::fs::write(&csv, format!("{HEADER}resnet,other-config,sysA,12,,,\n")).unwrap();
    let out = regress(&csv, &tmp.path().join("r"), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("NO BASELINE resnet/default/sysA"),
        "{}",
        text(&out)
    );
    // --config picks the recorded row.
    let out = regress(&csv, &tmp.path().join("r"), &["--config", "other-config"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn record_adds_then_updates_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("sub/recorded.csv");
    write_set(
        &tmp.path().join("r/sysA/resnet"),
        [10.0, 11.0, 12.0, 13.0, 14.0],
        1000.0,
    );
    // No file yet: plain regress is an error naming it, --record creates it.
    let out = regress(&csv, &tmp.path().join("r"), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains(&csv.display().to_string()));
    let out = regress(
        &csv,
        &tmp.path().join("r"),
        &["--record", "--system", "box1", "--tolerance", "3"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let b = mlperf_run::regress::Baseline::load(&csv).unwrap();
    assert_eq!(b.rows.len(), 1);
    let row = b.find("resnet", "default", "box1").unwrap();
    assert_eq!(
        (row.score_min, row.throughput, row.tolerance_pct),
        (12.0, Some(1000.0), Some(3.0))
    );
    assert!(regress(&csv, &tmp.path().join("r"), &["--system", "box1"])
        .status
        .success());

    // Slower results: a regression until recorded again; the update keeps the row's tolerance.
    write_set(
        &tmp.path().join("r/sysA/resnet"),
        [20.0, 21.0, 22.0, 23.0, 24.0],
        900.0,
    );
    assert_eq!(
        regress(&csv, &tmp.path().join("r"), &["--system", "box1"])
            .status
            .code(),
        Some(1)
    );
    assert!(regress(
        &csv,
        &tmp.path().join("r"),
        &["--system", "box1", "--record"]
    )
    .status
    .success());
    let b = mlperf_run::regress::Baseline::load(&csv).unwrap();
    assert_eq!(b.rows.len(), 1);
    let row = b.find("resnet", "default", "box1").unwrap();
    assert_eq!(
        (row.score_min, row.throughput, row.tolerance_pct),
        (22.0, Some(900.0), Some(3.0))
    );
    assert!(regress(&csv, &tmp.path().join("r"), &["--system", "box1"])
        .status
        .success());
    // No stray temporary files next to the baseline.
    assert_eq!(std::fs::read_dir(csv.parent().unwrap()).unwrap().count(), 1);
}

#[test]
fn malformed_baselines_name_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("bad.csv");
    write_set(
        &tmp.path().join("r/sysA/resnet"),
        [10.0, 11.0, 12.0, 13.0, 14.0],
        1000.0,
    );
    let cases = [
        (
            format!("{HEADER}resnet,default,sysA,12,,,\nbert,default,sysA,fast,,,\n"),
            ":3:",
            "score_min",
        ),
        (
            format!("{HEADER}resnet,default,sysA,12,,,\nresnet,default\n"),
            ":3:",
            "malformed",
        ),
        (
            "benchmark,system,score_min\nresnet,sysA,12\n".to_string(),
            ":1:",
            "missing column 'config'",
        ),
        (
            format!("{HEADER}resnet,default,sysA,12,,,\nresnet,default,sysA,13,,,\n"),
            ":3:",
            "duplicate",
        ),
        (
            format!("{HEADER}resnet,default,sysA,12,,-4,\n"),
            ":2:",
            "tolerance_pct",
        ),
    ];
    for (content, line, words) in cases {
        std::fs::write(&csv, &content).unwrap();
        let out = regress(&csv, &tmp.path().join("r"), &[]);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{content}: {t}");
        assert!(
            t.contains(&format!("{}{line}", csv.display())) && t.contains(words),
            "{content}: {t}"
        );
    }
}

#[test]
fn the_committed_baseline_passes_on_the_real_logs() {
    let Some(root) = common::fixtures("the_committed_baseline_passes_on_the_real_logs") else {
        return;
    };
    let csv = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/recorded.csv");
    let out = regress(&csv, &root, &["--config", "published"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = text(&out);
    assert_eq!(
        t.matches(" ok ").count(),
        5,
        "4 scores and 1 throughput compared:\n{t}"
    );
}
