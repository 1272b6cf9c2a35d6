//! `mlperf-run regress`: pass, regression, missing baseline row, --record round trip,
//! malformed baseline CSV; on result sets written here and on the real logs. The short-run
//! gate (--metric throughput / projected) on short sets written with the emitter and, in the
//! torch build, on a real tiny CPU run that ends at its epoch limit.

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

/// The baseline at `csv` holds one row, resnet/default/box1, with (score_min, throughput,
/// tolerance_pct) = `want`, and the results in `results` pass against it.
fn assert_recorded(csv: &Path, results: &Path, want: (f64, f64, f64)) {
    let b = mlperf_run::regress::Baseline::load(csv).unwrap();
    assert_eq!(b.rows.len(), 1);
    let row = b.find("resnet", "default", "box1").unwrap();
    assert_eq!(
        (
            row.score_min,
            row.throughput.map(|t| t.value),
            row.tolerance_pct
        ),
        (Some(want.0), Some(want.1), Some(want.2))
    );
    assert!(regress(csv, results, &["--system", "box1"])
        .status
        .success());
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
    assert_recorded(&csv, &tmp.path().join("r"), (12.0, 1000.0, 3.0));

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
    assert_recorded(&csv, &tmp.path().join("r"), (22.0, 900.0, 3.0));
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
            // it was the csv crate's "found record with 2 fields, but the previous record..."
            format!("{HEADER}resnet,default,sysA,12,,,\nresnet,default\n"),
            ":3:",
            "the row has 2 fields but the header has 7 (benchmark,config,system,score_min,\
             throughput,tolerance_pct,recorded_at): give every row one field per header column",
        ),
        // any text was accepted as the recording date
        (
            format!("{HEADER}resnet,default,sysA,12,,,yesterday\n"),
            ":2:",
            "column 'recorded_at' is not a date: \"yesterday\"; write it as RFC 3339",
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
        // a misspelt optional column was ignored (its tolerance silently 5%)
        (
            "benchmark,config,system,score_min,tolerence_pct\nresnet,default,sysA,12,50\n"
                .to_string(),
            ":1:",
            "unknown column 'tolerence_pct' (did you mean 'tolerance_pct'?",
        ),
        // a recorded 0 made every result a regression (ratio inf)
        (
            format!("{HEADER}resnet,default,sysA,0,,,\n"),
            ":2:",
            "column 'score_min' must be above 0",
        ),
    ];
    // the dates --record writes and plain dates are read
    for at in [
        "2026-12-07T16:00:00Z",
        "2026-12-07T16:00:00+01:00",
        "2026-12-07",
        "",
    ] {
        std::fs::write(&csv, format!("{HEADER}resnet,default,sysA,12,,,{at}\n")).unwrap();
        let out = regress(&csv, &tmp.path().join("r"), &[]);
        assert_eq!(out.status.code(), Some(0), "{at}: {}", text(&out));
    }
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
fn an_empty_baseline_is_refused_naming_the_header_and_record_starts_it() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("empty.csv");
    let results = tmp.path().join("r");
    write_set(
        &results.join("sysA/resnet"),
        [10.0, 11.0, 12.0, 13.0, 14.0],
        1000.0,
    );
    std::fs::write(&csv, "\n").unwrap();
    let out = regress(&csv, &results, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("{}: the baseline is empty", csv.display()))
            && t.contains("benchmark,config,system,score_min")
            && t.contains("--record"),
        "{t}"
    );
    // --record writes it as it would a missing file
    let out = regress(&csv, &results, &["--record"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = regress(&csv, &results, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
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

/// The run_stop reason of a run that ended at its epoch limit, as the engine writes it.
const AT_LIMIT: &str = "epoch limit reached before the target";

/// A short-run set: one run per entry, each run's per-block throughputs (images/s).
fn write_short_set(dir: &Path, runs: &[&[f64]]) {
    std::fs::create_dir_all(dir).unwrap();
    for (i, tps) in runs.iter().enumerate() {
        let log = common::emitter_logs::short_resnet_text(tps, 2.0, i as u64 + 1, AT_LIMIT);
        std::fs::write(dir.join(format!("result_{i}.txt")), log).unwrap();
    }
}

/// Multiply `column` of every data row of the CSV at `path` by `factor`.
fn scale_column(path: &Path, column: &str, factor: f64) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let c = header.iter().position(|h| *h == column).unwrap();
    let mut out = format!("{}\n", header.join(","));
    for line in lines {
        let mut cells: Vec<String> = line.split(',').map(String::from).collect();
        let v: f64 = cells[c].parse().unwrap();
        cells[c] = (v * factor).to_string();
        out.push_str(&format!("{}\n", cells.join(",")));
    }
    std::fs::write(path, out).unwrap();
}

/// The value of `column` in the row of the CSV at `path` whose system is `system`.
fn cell(path: &Path, system: &str, column: &str) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let (c, s) = (
        header.iter().position(|h| *h == column).unwrap(),
        header.iter().position(|h| *h == "system").unwrap(),
    );
    lines
        .map(|l| l.split(',').map(String::from).collect::<Vec<_>>())
        .find(|cells| cells[s] == system)
        .map(|cells| cells[c].clone())
        .unwrap()
}

/// The short-run gate end to end on the results folder `results` (one set in `system`):
/// record the throughput and the projection, the same command passes, a baseline 1.5x faster
/// (or a projection 1.5x shorter) fails naming the metric, a malformed baseline is exit 2
/// naming file and line; `spread_k` for --spread-k. Returns the recorded median throughput.
fn short_run_gate_round_trip(results: &Path, system: &str, csv: &Path, spread_k: &str) -> f64 {
    let cfg = ["--config", "bench_1gpu", "--spread-k", spread_k];
    let with = |extra: &[&'static str]| -> Vec<&str> { [&cfg[..], extra].concat() };
    // a short set has no score: the default (score) gate says so and fails
    std::fs::write(csv, format!("{HEADER}resnet,bench_1gpu,{system},12,,5,\n")).unwrap();
    let out = regress(csv, results, &cfg[..2]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("NO SCORE resnet/bench_1gpu/{system}: score_min")),
        "{}",
        text(&out)
    );
    std::fs::remove_file(csv).unwrap();

    for metric in ["throughput", "projected"] {
        let out = regress(csv, results, &with(&["--metric", metric, "--record"]));
        assert_eq!(out.status.code(), Some(0), "{metric}: {}", text(&out));
    }
    let b = mlperf_run::regress::Baseline::load(csv).unwrap();
    assert_eq!(b.rows.len(), 1);
    let row = b.find("resnet", "bench_1gpu", system).unwrap();
    assert_eq!(row.score_min, None);
    let tp = row.throughput.unwrap();
    let proj = row.projected.unwrap();
    assert!(tp.value > 0.0 && tp.spread.is_some(), "{row:?}");
    assert!(proj.value > 0.0 && proj.runs == tp.runs, "{row:?}");
    // the same command again passes, for both metrics
    for metric in ["throughput", "projected"] {
        let out = regress(csv, results, &with(&["--metric", metric]));
        assert_eq!(out.status.code(), Some(0), "{metric}: {}", text(&out));
        assert!(text(&out).contains(" ok "), "{}", text(&out));
    }
    // a baseline 1.5x faster: this set is a regression, named with both numbers
    let recorded = cell(csv, system, "throughput");
    scale_column(csv, "throughput", 1.5);
    let out = regress(csv, results, &with(&["--metric", "throughput"]));
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    let faster = cell(csv, system, "throughput").parse::<f64>().unwrap();
    assert!(
        t.contains(&format!("REGRESSED resnet/bench_1gpu/{system}: throughput"))
            && t.contains(&format!("{faster:.4}"))
            && t.contains(&format!("{:.4}", tp.value)),
        "{t}"
    );
    // the projection recorded 1.5x shorter: the set now takes too long
    scale_column(csv, "projected_min", 1.0 / 1.5);
    let out = regress(csv, results, &with(&["--metric", "projected"]));
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!(
            "REGRESSED resnet/bench_1gpu/{system}: projected_min"
        )),
        "{t}"
    );
    // malformed: a run count that is not one
    let good = std::fs::read_to_string(csv).unwrap();
    std::fs::write(
        csv,
        good.replacen(
            &format!(",{},", cell(csv, system, "throughput_runs")),
            ",three,",
            1,
        ),
    )
    .unwrap();
    let out = regress(csv, results, &with(&["--metric", "throughput"]));
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("{}:2:", csv.display())) && t.contains("throughput_runs"),
        "{t}"
    );
    recorded.parse().unwrap()
}

#[test]
fn short_runs_are_gated_on_throughput_and_projection() {
    let tmp = tempfile::tempdir().unwrap();
    let results = tmp.path().join("r");
    // three runs; the first block of each is the warm-up
    write_short_set(
        &results.join("gpu1/resnet"),
        &[&[800.0, 1000.0], &[820.0, 1040.0], &[790.0, 980.0]],
    );
    let csv = tmp.path().join("recorded.csv");
    let median = short_run_gate_round_trip(&results, "gpu1", &csv, "3");
    // per-run throughput is the mean of its blocks: 900, 930, 885 -> median 900
    assert!((median - 900.0).abs() < 1e-9, "{median}");
}

#[test]
fn the_spread_of_the_runs_widens_the_throughput_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("recorded.csv");
    // recorded: median 1000, MAD 30 over 5 runs; now 900 with a MAD of 40:
    // limit = 1000 x 0.95 - 3 x sqrt(30^2 + 40^2) = 800 -> passes; with k = 0 it is 950
    std::fs::write(
        &csv,
        format!(
            "{}\nresnet,n,gpu1,,1000,5,,30,5,,,\n",
            mlperf_run::regress::COLUMNS.join(",")
        ),
    )
    .unwrap();
    let results = tmp.path().join("r");
    write_short_set(
        &results.join("gpu1/resnet"),
        &[&[860.0], &[900.0], &[940.0], &[1000.0], &[800.0]],
    );
    let args = ["--config", "n", "--metric", "throughput"];
    let out = regress(&csv, &results, &args);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains("800.0000") && t.contains("±40.0000 (5 runs)"),
        "{t}"
    );
    let out = regress(&csv, &results, &[&args[..], &["--spread-k", "0"]].concat());
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("REGRESSED resnet/n/gpu1: throughput")
            && t.contains("900.0000 fell below the limit 950.0000"),
        "{t}"
    );
    // a faster set is an improvement, not a failure
    write_short_set(
        &results.join("gpu1/resnet"),
        &[&[1500.0], &[1500.0], &[1500.0]],
    );
    let out = regress(&csv, &results, &args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("improved"), "{}", text(&out));
    // a run that diverged is not noise to drop: the set has no throughput verdict, exit 1
    let diverged =
        common::emitter_logs::short_resnet_text(&[1500.0], 2.0, 9, "diverged: loss NaN at step 7");
    std::fs::write(results.join("gpu1/resnet/result_1.txt"), diverged).unwrap();
    let out = regress(&csv, &results, &args);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("NO SCORE resnet/n/gpu1: throughput")
            && t.contains("result_1.txt: aborted (diverged: loss NaN at step 7)"),
        "{t}"
    );
}

#[test]
fn old_baselines_still_load_and_a_row_needs_a_metric() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("old.csv");
    write_set(
        &tmp.path().join("r/sysA/resnet"),
        [10.0, 11.0, 12.0, 13.0, 14.0],
        1000.0,
    );
    // the seven columns of the first gate: a throughput without spread or runs
    std::fs::write(&csv, format!("{HEADER}resnet,default,sysA,12,1000,5,\n")).unwrap();
    let out = regress(&csv, &tmp.path().join("r"), &["--metric", "throughput"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // --record on an old file writes the new columns and keeps the score
    let out = regress(
        &csv,
        &tmp.path().join("r"),
        &["--metric", "throughput", "--record"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let written = std::fs::read_to_string(&csv).unwrap();
    assert!(
        written.starts_with(&mlperf_run::regress::COLUMNS.join(","))
            && written.contains("resnet,default,sysA,12,1000,5,"),
        "{written}"
    );
    std::fs::write(&csv, format!("{HEADER}resnet,default,sysA,,,5,\n")).unwrap();
    let out = regress(&csv, &tmp.path().join("r"), &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("{}:2:", csv.display())) && t.contains("no metric"),
        "{t}"
    );
}

/// The real thing: the tiny CPU preset with a 2-epoch limit and an unreachable target, 3 runs
/// through the CLI, each ending aborted at its epoch limit as configs/*/bench_1gpu.toml runs
/// do; their logs carry tracked_stats and pass the official compliance checker; `score` shows
/// the throughput and the projection; then the gate round trip.
#[cfg(feature = "torch")]
#[test]
fn a_real_short_cpu_run_is_gated() {
    let tmp = tempfile::tempdir().unwrap();
    let preset = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu.toml"),
    )
    .unwrap();
    let mut cfg = String::new();
    for line in preset.lines() {
        let line = match line.split('=').next().unwrap().trim() {
            "target" => "target = 0.999",
            "max_epochs" => "max_epochs = 2",
            "eval_period" => "eval_period = 1",
            "schedule_epochs" => "schedule_epochs = 2.0",
            _ => line,
        };
        cfg.push_str(line);
        cfg.push('\n');
    }
    let cfg_path = tmp.path().join("short_cpu.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let results = tmp.path().join("runs");
    let t0 = std::time::Instant::now();
    let out = bin()
        .args(["resnet", "--division", "open", "--config"])
        .arg(&cfg_path)
        .args(["--runs", "3", "--seeds", "11,12,13", "--results"])
        .arg(&results)
        .output()
        .unwrap();
    let t = text(&out);
    eprintln!("3 short tiny runs: {:.1} s", t0.elapsed().as_secs_f64());
    // every run ends aborted at its epoch limit, as asked: the set reports exit 1
    assert_eq!(out.status.code(), Some(1), "{t}");
    let set = results.join("cpu-2core/resnet");
    let log = mlperf_run::mllog::parse_file(&set.join("result_0.txt")).unwrap();
    let stop = log.last("run_stop").unwrap();
    assert_eq!(stop.status(), Some("aborted"));
    assert!(
        stop.meta("reason")
            .unwrap()
            .as_str()
            .unwrap()
            .contains("epoch limit"),
        "{stop:?}"
    );
    let stats: Vec<_> = log.with_key("tracked_stats").collect();
    assert_eq!(stats.len(), 2, "one per block");
    assert_eq!(
        stats
            .iter()
            .map(|e| e.meta("step").cloned())
            .collect::<Vec<_>>(),
        vec![Some(serde_json::json!(1)), Some(serde_json::json!(2))]
    );
    common::official::assert_compliant(
        "a_real_short_cpu_run_is_gated",
        &set.join("result_0.txt"),
        "4.0.0",
    );
    // score shows the throughput and the projection of the short set
    let out = bin().arg("score").arg(&results).output().unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "no valid score: {t}");
    let sets = mlperf_run::score::score_path(&results, &Default::default()).unwrap();
    let tp = sets[0].throughput.unwrap();
    assert!(tp > 0.0 && t.contains(&format!("{tp:.1}")), "{t}");
    let proj = sets[0].projection.as_ref().unwrap();
    assert!(
        proj.score.unwrap() > 0.0
            && t.contains("Projected time to train")
            && t.contains(&format!("{:.4}", proj.score.unwrap())),
        "{t}"
    );
    // k = 1: three runs on a shared CPU are noisier than GPU runs (their MAD would have to
    // exceed 30% of the median for 1.5x to pass); the rule itself is tested with k = 3 above
    let csv = tmp.path().join("recorded.csv");
    short_run_gate_round_trip(&results, "cpu-2core", &csv, "1");
}

/// A baseline that is a binary file or a folder said std's bare "stream did not contain valid
/// UTF-8" or "Is a directory (os error 21)"; each is named now with what to give, and
/// `--record` leaves such a file as it was.
#[test]
fn a_binary_or_folder_baseline_is_named_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    write_set(
        &tmp.path().join("r/sysA/resnet"),
        [10.0, 11.0, 12.0, 13.0, 14.0],
        1000.0,
    );
    let csv = tmp.path().join("baseline.csv");
    let garbage: Vec<u8> = b"benchmark,config\n\xff\xfe\x00\x01".to_vec();
    std::fs::write(&csv, &garbage).unwrap();
    for extra in [&[][..], &["--record"][..]] {
        let out = regress(&csv, &tmp.path().join("r"), extra);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {t}");
        assert!(
            t.contains(&format!(
                "error: --baseline: {} is not UTF-8 text (byte 17 is not",
                csv.display()
            )) && t.matches(&csv.display().to_string()).count() == 1
                && t.contains("give a baseline CSV"),
            "{extra:?}: {t}"
        );
        assert_eq!(std::fs::read(&csv).unwrap(), garbage, "{extra:?}: kept");
    }
    let folder = tmp.path().join("folder.csv");
    std::fs::create_dir(&folder).unwrap();
    let out = regress(&folder, &tmp.path().join("r"), &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!(
            "error: --baseline: {} is a folder: give a baseline CSV",
            folder.display()
        )),
        "{t}"
    );
}
