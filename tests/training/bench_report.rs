//! The report of scripts/bench_gpu.sh (scripts/bench/gpu_report.py `report`) on result records
//! written here: the targets block reads the right rows and judges them, ratios are per round,
//! ours leads its part whichever side a rotated round began with, and what `--time-limit` left
//! out is listed without counting as a failure.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

const REPORT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/bench/gpu_report.py");

fn python() -> PathBuf {
    mlperf_run::official::python().unwrap_or_else(|| PathBuf::from("python3"))
}

fn rec(part: &str, side: &str, round: u32, value: f64, unit: &str, busy: Option<f64>) -> Value {
    json!({"part": part, "side": side, "round": round, "ok": true, "value": value, "unit": unit,
           "device": "cuda", "gpu_busy_pct": busy})
}

/// Runs the report over `records`: (exit status, table.txt).
fn report(dir: &Path, records: &[Value]) -> (i32, String) {
    let lines: Vec<String> = records.iter().map(|r| r.to_string()).collect();
    std::fs::write(dir.join("results.jsonl"), lines.join("\n") + "\n").unwrap();
    let out = Command::new(python())
        .arg(REPORT)
        .args(["report", "--out"])
        .arg(dir)
        .output()
        .expect("run gpu_report.py");
    let table = std::fs::read_to_string(dir.join("table.txt")).unwrap_or_else(|e| {
        panic!(
            "no table.txt ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), table)
}

fn line_with<'a>(table: &'a str, needles: &[&str]) -> &'a str {
    table
        .lines()
        .find(|l| needles.iter().all(|n| l.contains(n)))
        .unwrap_or_else(|| panic!("no line with {needles:?} in:\n{table}"))
}

/// Part a over 3 rounds, each round beginning with another side (as the rotation does): the
/// all-methods row at 5,400 / 5,000 / 5,100 img/s (median 5,100), 0.95x / 0.85x / 0.92x
/// torch.compile fp16 per round (median 0.92x; the ratio of the medians would be 0.897x).
fn part_a() -> Vec<Value> {
    let mut r = Vec::new();
    for (round, ours, ratio) in [(1, 5400.0, 0.95), (2, 5000.0, 0.85), (3, 5100.0, 0.92)] {
        let compile = ours / ratio;
        let mut one = vec![
            rec(
                "a",
                "mlperf-run fp16 all-methods",
                round,
                ours,
                "img/s",
                Some(98.0),
            ),
            rec(
                "a",
                "pytorch-compile-fp16",
                round,
                compile,
                "img/s",
                Some(100.0),
            ),
            rec(
                "a",
                "mlperf-run cuda-graph",
                round,
                4000.0,
                "img/s",
                Some(95.0),
            ),
            rec("a", "mlperf-run", round, 3900.0, "img/s", Some(96.0)),
        ];
        one.rotate_left(round as usize - 1);
        r.extend(one);
    }
    r
}

#[test]
fn targets_are_judged_from_their_rows_per_round_and_ours_leads() {
    let dir = tempfile::tempdir().unwrap();
    let mut recs = part_a();
    // c: all-methods at 350 seq/s, Hugging Face never measured
    recs.push(rec("c", "mlperf-run", 1, 270.0, "seq/s", Some(100.0)));
    recs.push(rec("c", "mlperf-run all-methods", 1, 350.0, "seq/s", None));
    let (status, table) = report(dir.path(), &recs);
    assert_eq!(status, 0, "{table}");

    let v = line_with(&table, &["a) mlperf-run fp16 all-methods ", "target >="]);
    assert!(v.contains("5,100.0") && v.ends_with("met"), "{v}");
    // the median of the per-round ratios (0.85, 0.92, 0.95), not a ratio of medians
    let v = line_with(&table, &["all-methods / pytorch-compile-fp16", "target"]);
    assert!(v.contains("0.920x") && v.contains("  met"), "{v}");
    assert!(v.contains("rounds: 0.950, 0.850, 0.920"), "{v}");
    let v = line_with(&table, &["c) mlperf-run all-methods ", "target >="]);
    assert!(v.contains("350.0") && v.ends_with("MISSED"), "{v}");
    let v = line_with(&table, &["all-methods / hf-transformers (sdpa)", "target"]);
    assert!(v.ends_with("not measured"), "{v}");
    // GPU busy: every graph row of a and c (c's all-methods row has no samples)
    assert!(line_with(&table, &["GPU busy, mlperf-run cuda-graph"]).ends_with("MISSED"));
    assert!(line_with(&table, &["GPU busy, mlperf-run fp16 all-methods"]).ends_with("met"));
    assert!(line_with(&table, &["c) GPU busy, mlperf-run all-methods"]).ends_with("not measured"));

    // part a's table: the plain row first although round 1 began with all-methods
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("a) "))
        .skip(2)
        .take(4)
        .collect();
    assert!(rows[0].trim_start().starts_with("mlperf-run  "), "{rows:?}");
}

#[test]
fn rounds_left_out_by_the_time_limit_are_listed_and_are_not_failures() {
    let dir = tempfile::tempdir().unwrap();
    let mut recs = part_a();
    let note = "part c, rounds 2-3: not started, 530 s had passed and its longest round took 140 s (--time-limit 540)";
    recs.push(json!({"part": "limit", "side": "c", "round": 2, "ok": true, "note": note}));
    let (status, table) = report(dir.path(), &recs);
    assert_eq!(status, 0, "{table}");
    let at = table
        .find("left out (--time-limit):")
        .unwrap_or_else(|| panic!("{table}"));
    assert!(table[at..].contains(note), "{table}");

    // a failed measurement still makes the report fail
    recs.push(
        json!({"part": "a", "side": "mlperf-run", "round": 4, "ok": false,
                     "error": "exit status 1", "device": "cuda"}),
    );
    let (status, table) = report(dir.path(), &recs);
    assert_eq!(status, 1, "{table}");
    assert!(
        table.contains("mlperf-run round 4 failed: exit status 1"),
        "{table}"
    );
}

/// A step row with the losses its benchmark reported: ours' ResNet rows give the first and the
/// last, the peers and ours' BERT rows the last only.
fn with_loss(mut r: Value, amp: &str, first: Option<f64>, last: f64) -> Value {
    r["raw"] = match first {
        Some(f) => json!({"amp": amp, "losses_first_last": [f, last]}),
        None => json!({"amp": amp, "loss": last}),
    };
    r
}

/// The training check under a step part's table: every row's losses, and a method row that shed
/// a different share of its first loss than our plain row of the same precision is named (a
/// replayed graph that does not train would show so), while rows that trained alike are not,
/// also where their final losses near 0 differ by a large factor.
#[test]
fn the_training_check_names_a_method_row_that_did_not_train_as_the_plain_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut records = Vec::new();
    for round in 1..=2 {
        let row = |part: &str, side: &str, amp: &str, first: Option<f64>, last: f64| {
            let r = rec(part, side, round, 4000.0, "img/s", Some(99.0));
            with_loss(r, amp, first, last)
        };
        records.extend([
            row("a", "mlperf-run", "bf16", Some(6.91), 3.00),
            row("a", "mlperf-run cuda-graph", "bf16", Some(6.91), 3.05),
            row("a", "mlperf-run fp16", "fp16", Some(6.91), 3.20),
            // the all-methods row did not train: its loss stayed where it began
            row("a", "mlperf-run fp16 all-methods", "fp16", Some(6.91), 6.91),
            row(
                "a",
                "pytorch-eager",
                "bf16",
                None,
                2.90 + 0.1 * round as f64,
            ),
            // both trained the batch to near 0: a factor of 3 apart, but both shed over 99%
            row("c", "mlperf-run", "bf16", Some(11.0), 0.010),
            row("c", "mlperf-run all-methods", "bf16", Some(11.0), 0.030),
        ]);
    }
    let (status, table) = report(dir.path(), &records);
    assert_eq!(status, 0, "{table}");
    assert_eq!(table.matches("training check").count(), 2, "{table}");
    // every row's losses, the peer's as the median over rounds
    let plain = line_with(&table, &["    mlperf-run ", "->"]);
    assert!(
        plain.contains("6.9100") && plain.contains("3.0000") && plain.contains("(57% shed)"),
        "{plain}"
    );
    let peer = line_with(&table, &["    pytorch-eager"]);
    assert!(peer.trim_end().ends_with("3.0500"), "{peer}");
    // the all-methods row is named against the plain fp16 row, not the bf16 one
    let check = line_with(&table, &["CHECK:"]);
    assert!(
        check.contains("mlperf-run fp16 all-methods shed 0% of its first loss")
            && check.contains("mlperf-run fp16 54%"),
        "{check}"
    );
    assert_eq!(table.matches("CHECK:").count(), 1, "{table}");
}

/// Part k (short batches beside a CUDA graph) gets its own table after a), and every CUDA-graph
/// row's step counts (its result line's "graph") are printed per round, cold captures included.
#[test]
fn graph_rows_show_their_step_counts_and_part_k_has_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let graph = |eager: u64, replays: u64, short: u64, cold: u64| {
        json!({"eager_steps": eager, "captures": 1, "replays": replays,
               "short_batches": short, "cold_captures": cold})
    };
    let mut a = rec("a", "mlperf-run cuda-graph", 1, 5200.0, "img/s", Some(99.0));
    a["raw"] = json!({"graph": graph(3, 56, 0, 0)});
    let mut k = rec(
        "k",
        "mlperf-run cuda-graph short-warmup",
        1,
        5100.0,
        "img/s",
        Some(98.0),
    );
    k["raw"] = json!({"graph": graph(4, 55, 5, 1)});
    let plain = rec("a", "mlperf-run", 1, 3900.0, "img/s", Some(96.0));
    let (status, table) = report(dir.path(), &[plain, a, k]);
    assert_eq!(status, 0, "{table}");
    let a_at = table.find("a) ResNet-50 training step").expect("part a");
    let k_at = table
        .find("k) short batches beside a CUDA graph")
        .expect("part k");
    assert!(a_at < k_at, "{table}");
    let a_line = line_with(&table, &["CUDA graph steps, mlperf-run cuda-graph r1"]);
    assert!(
        a_line.contains("3 eager, 1 capture(s) (0 cold), 56 replays, 0 short"),
        "{a_line}"
    );
    let k_line = line_with(
        &table,
        &["CUDA graph steps, mlperf-run cuda-graph short-warmup r1"],
    );
    assert!(
        k_line.contains("4 eager, 1 capture(s) (1 cold), 55 replays, 5 short"),
        "{k_line}"
    );
    // the plain row has no graph: no line
    assert_eq!(table.matches("CUDA graph steps").count(), 2, "{table}");
}

/// The bf16 ResNet targets read the bf16 all-methods row against bf16 torch.compile, and the
/// BERT ones also read the CUDA graph + fused epilogues row (without fused bias+GELU); rows a
/// call did not run (here the fp16 ones) read "not measured".
#[test]
fn the_bf16_and_the_graph_plus_epilogues_targets_read_their_own_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut recs = Vec::new();
    for (round, ours, compile, bert, hf) in [
        (1, 6100.0, 6700.0, 310.0, 280.0),
        (2, 6200.0, 6600.0, 312.0, 290.0),
    ] {
        recs.push(rec(
            "a",
            "mlperf-run all-methods",
            round,
            ours,
            "img/s",
            Some(91.0),
        ));
        recs.push(rec(
            "a",
            "pytorch-compile",
            round,
            compile,
            "img/s",
            Some(98.0),
        ));
        let side = "mlperf-run cuda-graph fused-epilogues";
        recs.push(rec("c", side, round, bert, "seq/s", Some(99.0)));
        recs.push(rec(
            "c",
            "hf-transformers (sdpa)",
            round,
            hf,
            "seq/s",
            Some(99.0),
        ));
    }
    let (status, table) = report(dir.path(), &recs);
    assert_eq!(status, 0, "{table}");

    let v = line_with(&table, &["a) mlperf-run all-methods ", "target >="]);
    assert!(v.contains("6,150.0") && v.ends_with("met"), "{v}");
    // per round 0.910x and 0.939x
    let v = line_with(
        &table,
        &["a) mlperf-run all-methods / pytorch-compile ", "target"],
    );
    assert!(v.contains("0.925x") && v.contains("  met"), "{v}");
    assert!(v.contains("rounds: 0.910, 0.939"), "{v}");
    let v = line_with(&table, &["a) mlperf-run fp16 all-methods ", "target >="]);
    assert!(v.ends_with("not measured"), "{v}");

    let v = line_with(
        &table,
        &["c) mlperf-run cuda-graph fused-epilogues ", "target >="],
    );
    assert!(v.contains("311.0") && v.ends_with("MISSED"), "{v}");
    // per round 1.107x and 1.076x
    let v = line_with(
        &table,
        &["c) mlperf-run cuda-graph fused-epilogues / hf-transformers"],
    );
    assert!(v.contains("1.092x") && v.contains("MISSED"), "{v}");
    let v = line_with(&table, &["c) mlperf-run all-methods ", "target >="]);
    assert!(v.ends_with("not measured"), "{v}");
    let v = line_with(
        &table,
        &["c) GPU busy, mlperf-run cuda-graph fused-epilogues"],
    );
    assert!(v.contains("99%") && v.ends_with("met"), "{v}");
    assert!(line_with(&table, &["a) GPU busy, mlperf-run all-methods"]).ends_with("MISSED"));
}

/// GPU busy counts only the nvidia-smi samples whose 200 ms period lies inside the timed window:
/// a sample just after the window opens mostly reports what ran before it (here an idle GPU),
/// and one after the window is not the window's.
#[test]
fn gpu_busy_counts_the_samples_whose_period_lies_inside_the_window() {
    let dir = tempfile::tempdir().unwrap();
    // 2026-01-01 00:00:00 UTC; nvidia-smi writes local time, so the report runs with TZ=UTC
    let t0 = 1_767_225_600.0_f64;
    let log = dir.path().join("run.log");
    std::fs::write(
        &log,
        format!(
            "$ ours bench\n{}\n",
            json!({"img_per_s": 100.0, "window_unix": [t0 + 0.05, t0 + 1.05]})
        ),
    )
    .unwrap();
    // (seconds after t0, utilization): before the window, just after it opens (its period
    // mostly before it), four inside, one after it
    let samples = [
        (0.0, 0),
        (0.15, 10),
        (0.35, 100),
        (0.55, 96),
        (0.75, 100),
        (0.95, 100),
        (1.15, 0),
    ];
    let smi: String = samples
        .iter()
        .map(|(s, u)| format!("2026/01/01 00:00:{:06.3}, {u}\n", s))
        .collect();
    let smi_path = dir.path().join("smi.csv");
    std::fs::write(&smi_path, smi).unwrap();
    let out = Command::new(python())
        .env("TZ", "UTC")
        .arg(REPORT)
        .args([
            "record",
            "--part",
            "a",
            "--side",
            "mlperf-run",
            "--kind",
            "json",
            "--log",
        ])
        .arg(&log)
        .arg("--smi")
        .arg(&smi_path)
        .output()
        .expect("run gpu_report.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["gpu_samples"], json!(4), "{rec}");
    assert_eq!(rec["gpu_busy_pct"], json!(99.0), "{rec}");
}

/// `gpu_report.py kernels`: the last training step of an ncu log (after the second-to-last
/// optimizer update, up to the last), its kernels by class; a kernel whose name holds a
/// "lambda" is not taken for LAMB, and a log of one step is an error, not a table.
#[test]
fn ncu_kernels_of_the_last_step_by_class() {
    let dir = tempfile::tempdir().unwrap();
    let row = |id: usize, name: &str, ns: u64| {
        format!(
            "\"{id}\",\"1\",\"bench\",\"host\",\"{name}\",\"1\",\"7\",\"(256, 1, 1)\",\"(1, 1, 1)\",\"0\",\
             \"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"ns\",\"{ns}\"\n"
        )
    };
    let adam = "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>(T1, T2)";
    let lambda_kernel =
        "void at::native::vectorized_elementwise_kernel<4, [lambda(float) (instance 1)]>(int, T2)";
    let step = |big: bool| {
        let f = if big { 2 } else { 1 };
        vec![
            ("nvjet_sm90_tst_256x128_gemm", 1_000_000 * f),
            ("mr_fe_backward_v4", 500_000 * f),
            ("void at::native::reduce_kernel<128, 4>(T1)", 250_000 * f),
            (lambda_kernel, 125_000 * f),
            (adam, 250_000 * f),
            (adam, 250_000 * f),
        ]
    };
    let mut csv = String::from("==PROF== Connected\n\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n");
    let kernels: Vec<(&str, u64)> = [("void init_randn_kernel", 9_000_000)]
        .into_iter()
        .chain(step(false))
        .chain(step(true))
        .collect();
    for (i, (name, ns)) in kernels.iter().enumerate() {
        csv.push_str(&row(i, name, *ns));
    }
    let path = dir.path().join("ncu.csv");
    std::fs::write(&path, &csv).unwrap();
    let run = |p: &Path| {
        let out = Command::new(python())
            .arg(REPORT)
            .args(["kernels", "--side", "ours", "--csv"])
            .arg(p)
            .output()
            .expect("run gpu_report.py");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let rec = run(&path);
    assert_eq!(rec["ok"], json!(true), "{rec}");
    assert_eq!(rec["raw"]["kernels"], json!(6), "{rec}");
    assert!(
        (rec["value"].as_f64().unwrap() - 4.75).abs() < 1e-9,
        "{rec}"
    );
    let class = |name: &str| {
        rec["raw"]["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c[0] == json!(name))
            .map(|c| (c[1].as_u64().unwrap(), c[2].as_f64().unwrap()))
    };
    assert_eq!(class("gemm"), Some((1, 2.0)));
    assert_eq!(class("fused epilogue (ours)"), Some((1, 1.0)));
    assert_eq!(class("optimizer"), Some((2, 1.0)));
    assert_eq!(class("reduction"), Some((1, 0.5)));
    assert_eq!(class("elementwise"), Some((1, 0.25)));
    // one step only: no step to isolate
    let one: String = csv
        .lines()
        .take(2 + 1 + 6)
        .map(|l| format!("{l}\n"))
        .collect();
    let one_path = dir.path().join("one.csv");
    std::fs::write(&one_path, one).unwrap();
    let rec = run(&one_path);
    assert_eq!(rec["ok"], json!(false), "{rec}");
    assert!(
        rec["error"].as_str().unwrap().contains("need 2 steps"),
        "{rec}"
    );
}

/// Part p: the run against Hugging Face padded (the packed run's target) reads the padded row, and the
/// same-work comparison against Hugging Face on packed rows is its own line, from its own row.
#[test]
fn part_p_compares_the_run_with_hugging_face_padded_and_on_the_same_packed_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = rec(
        "p",
        "mlperf-run bert packed (run)",
        1,
        800.0,
        "seq/s",
        Some(98.0),
    );
    run["raw"] = json!({"row_rate": 400.0, "rate_with_evals": 760.0, "sequences_per_row": 2.0});
    let records = [
        run,
        rec(
            "p",
            "bert_bench_step --lamb 48x512 rows (step)",
            1,
            410.0,
            "seq/s",
            None,
        ),
        rec(
            "p",
            "hf-transformers padded (sdpa)",
            1,
            250.0,
            "seq/s",
            None,
        ),
        rec(
            "p",
            "hf-transformers packed rows (sdpa, block mask)",
            1,
            500.0,
            "seq/s",
            None,
        ),
    ];
    let (_, table) = report(dir.path(), &records);
    let padded = line_with(&table, &["run seq/s / Hugging Face padded seq/s"]);
    assert!(padded.contains("800.0 / 250.0 = 3.20x (met"), "{padded}");
    let packed = line_with(&table, &["Hugging Face packed rows seq/s (same work)"]);
    assert!(packed.contains("800.0 / 500.0 = 1.60x"), "{packed}");
    // without the packed peer's row the line says so
    let (_, table) = report(dir.path(), &records[..3]);
    line_with(&table, &["run / Hugging Face packed rows: not measured"]);
}

/// `gpu_report.py record --kind mllog-resnet` on a run log whose second block was closed when the
/// run diverged inside it (block_stop, then run_stop aborted, no eval): that block trained only
/// part of its epochs, so it is no rate: the record is a failure naming the reason. The same log
/// with the block's eval is timed (the control).
#[test]
fn a_block_cut_short_by_divergence_is_not_a_rate() {
    let dir = tempfile::tempdir().unwrap();
    let line = |t: u64, kind: &str, key: &str, value: Value, meta: Value| {
        format!(
            ":::MLLOG {}\n",
            json!({"namespace": "", "time_ms": t, "event_type": kind, "key": key,
                   "value": value, "metadata": meta})
        )
    };
    let head = [
        line(
            0,
            "POINT_IN_TIME",
            "global_batch_size",
            json!(400),
            json!({}),
        ),
        line(0, "POINT_IN_TIME", "train_samples", json!(16000), json!({})),
        line(
            1000,
            "INTERVAL_START",
            "block_start",
            Value::Null,
            json!({"first_epoch_num": 1, "epoch_count": 1}),
        ),
        line(
            13000,
            "INTERVAL_END",
            "block_stop",
            Value::Null,
            json!({"first_epoch_num": 1}),
        ),
        line(
            13000,
            "INTERVAL_START",
            "eval_start",
            Value::Null,
            json!({"epoch_num": 1}),
        ),
        line(
            14000,
            "INTERVAL_END",
            "eval_stop",
            Value::Null,
            json!({"epoch_num": 1}),
        ),
        line(
            14000,
            "INTERVAL_START",
            "block_start",
            Value::Null,
            json!({"first_epoch_num": 2, "epoch_count": 4}),
        ),
        // 26 steps in, the loss went NaN: the block is closed with the run
        line(
            19700,
            "INTERVAL_END",
            "block_stop",
            Value::Null,
            json!({"first_epoch_num": 2}),
        ),
    ]
    .concat();
    let cut = head.clone()
        + &line(
            19700,
            "INTERVAL_END",
            "run_stop",
            Value::Null,
            json!({"status": "aborted", "reason": "diverged: loss NaN at step 106"}),
        );
    let whole =
        head + &line(
            19700,
            "INTERVAL_START",
            "eval_start",
            Value::Null,
            json!({"epoch_num": 5}),
        ) + &line(
            20700,
            "INTERVAL_END",
            "eval_stop",
            Value::Null,
            json!({"epoch_num": 5}),
        ) + &line(
            20700,
            "INTERVAL_END",
            "run_stop",
            Value::Null,
            json!({"status": "aborted", "reason": "epoch limit"}),
        );
    let record = |text: &str| -> Value {
        let mllog = dir.path().join("run.mllog");
        std::fs::write(&mllog, text).unwrap();
        let log = dir.path().join("run.log");
        std::fs::write(&log, "$ ours resnet\n").unwrap();
        let out = Command::new(python())
            .arg(REPORT)
            .args([
                "record",
                "--part",
                "b",
                "--side",
                "mlperf-run resnet",
                "--kind",
                "mllog-resnet",
            ])
            .arg("--log")
            .arg(&log)
            .arg("--mllog")
            .arg(&mllog)
            .output()
            .expect("run gpu_report.py");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let r = record(&cut);
    assert_eq!(r["ok"], json!(false), "{r}");
    let err = r["error"].as_str().unwrap();
    assert!(
        err.contains("cut short") && err.contains("diverged"),
        "{err}"
    );
    let r = record(&whole);
    assert_eq!(r["ok"], json!(true), "{r}");
    // 4 epochs of 16,000 over the block's 5.7 s
    let rate = r["value"].as_f64().unwrap();
    assert!((rate - 64000.0 / 5.7).abs() < 1.0, "{rate}");
}
