//! `plan`'s projection against published results (issue 44, part 4): from a submitter's 8-GPU
//! result of a round (its per-GPU rate, eval time and start-up, read from its logs) project the
//! same submitter's larger results of that round (their logged global batch; the RCP mean of
//! the round at it) and compare with their logged time to train (the olympic mean of
//! run_start..run_stop over the set). The logs are trimmed extracts in
//! tests/fixtures/plan/ (SOURCES.md names each one's repository, path and commit).
//!
//! Asserted: within 15% for the results up to 64 GPUs of the same software; the control (no
//! all-reduce term, no per-GPU batch effect: the 8-GPU per-GPU rate scaled linearly) is at
//! least twice as far off on the 64-GPU results. The results beyond (2,528 and 3,472 GPUs) are
//! printed as they come. `cargo test --release --test logs_rules plan_reality -- --nocapture`
//! shows the table.

use mlperf_run::benchmarks;
use mlperf_run::mllog::{keys, parse_file, LogFile};
use mlperf_run::plan::choose::Round;
use mlperf_run::plan::hardware::{link, ModelCost};
use mlperf_run::plan::measure;
use mlperf_run::plan::model::{project, Cluster, Costs};
use std::path::{Path, PathBuf};

struct Pair {
    bench: &'static str,
    round: &'static str,
    source: &'static str,
    target: &'static str,
    gpus: u64,
    /// Same container (software) as the source: inside the asserted domain.
    same_software: bool,
}

const PAIRS: &[Pair] = &[
    Pair {
        bench: "resnet",
        round: "3.1.0",
        source: "v3.1/NVIDIA/eos_ngc23.09_mxnet",
        target: "v3.1/NVIDIA/eos_n8_ngc23.09_mxnet",
        gpus: 64,
        same_software: true,
    },
    Pair {
        bench: "resnet",
        round: "4.0.0",
        source: "v4.0/NVIDIA/eos_ngc24.04_mxnet",
        target: "v4.0/NVIDIA/eos_n8_ngc24.04_mxnet",
        gpus: 64,
        same_software: true,
    },
    Pair {
        bench: "resnet",
        round: "4.0.0",
        source: "v4.0/NVIDIA/eos_ngc24.04_mxnet",
        target: "v4.0/NVIDIA/eos_n316_ngc24.04_mxnet",
        gpus: 2528,
        same_software: true,
    },
    Pair {
        bench: "resnet",
        round: "3.1.0",
        source: "v3.1/Dell/XE9680x8H100-SXM-80GB",
        target: "v3.1/Dell/2xXE9680x8H100-SXM-80GB",
        gpus: 16,
        same_software: true,
    },
    Pair {
        bench: "bert",
        round: "3.1.0",
        source: "v3.1/NVIDIA/eos_ngc23.04_pytorch",
        target: "v3.1/NVIDIA/eos_n8_ngc23.04_pytorch",
        gpus: 64,
        same_software: true,
    },
    Pair {
        bench: "bert",
        round: "3.1.0",
        source: "v3.1/NVIDIA/eos_ngc23.04_pytorch",
        target: "v3.1/NVIDIA/eos_n434_ngc23.09_pytorch",
        gpus: 3472,
        same_software: false,
    },
    Pair {
        bench: "bert",
        round: "3.1.0",
        source: "v3.1/Dell/XE9680x8H100-SXM-80GB",
        target: "v3.1/Dell/2xXE9680x8H100-SXM-80GB",
        gpus: 16,
        same_software: true,
    },
];

fn logs(set: &str, bench: &str) -> Vec<LogFile> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/plan")
        .join(set)
        .join(bench);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no logs in {}", dir.display());
    paths
        .iter()
        .map(|p| parse_file(Path::new(p)).unwrap())
        .collect()
}

fn minutes(log: &LogFile) -> f64 {
    let t = |k: &str| {
        log.first(k)
            .unwrap_or_else(|| panic!("{}: no {k}", log.path.display()))
            .time_ms
    };
    (t(keys::RUN_STOP) - t(keys::RUN_START)) / 60_000.0
}

fn olympic(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let inner = &v[1..v.len() - 1];
    inner.iter().sum::<f64>() / inner.len() as f64
}

/// (logged minutes, projected, control) of one pair.
fn check(p: &Pair) -> (f64, f64, f64, String) {
    let bench = benchmarks::get(p.bench).unwrap();
    let source = logs(p.source, p.bench);
    let target = logs(p.target, p.bench);
    let measured = measure::from_logs(&source, bench, 8).unwrap();
    let gbs = target[0]
        .first(keys::GLOBAL_BATCH_SIZE)
        .unwrap()
        .value
        .as_f64()
        .unwrap() as u64;
    let round = Round::load(bench, p.round).unwrap();
    let conv = round.convergence(bench, gbs).unwrap();
    let cluster = Cluster {
        gpus_per_node: 8,
        intra: link("nvlink4", "--intra").unwrap(),
        inter: link("ndr", "--inter").unwrap(),
    };
    let model = ModelCost::of(p.bench).unwrap();
    let full = project(
        &measured,
        &Costs::full(model),
        &cluster,
        p.gpus,
        gbs,
        1,
        &conv,
    )
    .unwrap();
    let ctrl = project(
        &measured,
        &Costs::control(model),
        &cluster,
        p.gpus,
        gbs,
        1,
        &conv,
    )
    .unwrap();
    let logged = olympic(target.iter().map(minutes).collect());
    let note = format!(
        "GBS {gbs}, {:.1}/GPU, RCP {} {:.4}",
        full.micro_batch,
        conv.rcp,
        conv.mean_samples
            / bench
                .train_samples
                .filter(|_| p.bench == "resnet")
                .unwrap_or(1) as f64
    );
    (logged, full.minutes, ctrl.minutes, note)
}

#[test]
fn projections_from_8_gpus_match_the_published_larger_results() {
    let mut report =
        String::from("plan vs published results (projected from the submitter's 8-GPU result)\n");
    let mut failures = Vec::new();
    let (mut err64, mut ctrl64) = (Vec::new(), Vec::new());
    for p in PAIRS {
        let (logged, proj, ctrl, note) = check(p);
        let err = (proj - logged) / logged;
        let cerr = (ctrl - logged) / logged;
        report.push_str(&format!(
            "{:<6} {:<40} {:>5} GPUs  logged {:>7.3} min  projected {:>7.3} ({:>+6.1}%)  control {:>7.3} ({:>+6.1}%)  {note}{}\n",
            p.bench, p.target, p.gpus, logged, proj, err * 100.0, ctrl, cerr * 100.0,
            if p.same_software { "" } else { "  [other software: reported only]" }
        ));
        if p.same_software && p.gpus <= 64 && err.abs() > 0.15 {
            failures.push(format!("{} {}: {:+.1}%", p.bench, p.target, err * 100.0));
        }
        if p.gpus == 64 {
            err64.push(err.abs());
            ctrl64.push(cerr.abs());
        }
    }
    println!("{report}");
    assert!(failures.is_empty(), "beyond 15%: {failures:?}\n{report}");
    assert!(err64.len() >= 2, "{report}");
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert!(
        mean(&ctrl64) >= 2.0 * mean(&err64),
        "the control is not visibly worse at 64 GPUs: {:.3} vs {:.3}\n{report}",
        mean(&ctrl64),
        mean(&err64)
    );
}

/// `plan` on mistaken input: exit 2 naming the flag or the log, nothing planned. A log of the
/// other benchmark, a --measured-gpus its global batch does not split over or its run set's
/// sysinfo.json contradicts, a text file that is no MLPerf log, a log with a line that cannot
/// be read (named with its line), a GPU count given twice or not filling whole nodes, an --out
/// that is a file. Without --measured-gpus the set's recorded GPU count
/// is used.
#[test]
fn plan_refuses_mistaken_logs_and_flags_naming_them() {
    let fixture = |set: &str, bench: &str| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/plan")
            .join(set)
            .join(bench)
            .join("result_0.txt")
    };
    let resnet_log = fixture("v4.0/NVIDIA/eos_ngc24.04_mxnet", "resnet");
    let bert_log = fixture("v3.1/Dell/XE9680x8H100-SXM-80GB", "bert");
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "global batch 3200, 8 GPUs\n").unwrap();
    let afile = dir.path().join("afile");
    std::fs::write(&afile, "x").unwrap();
    // the log with its global_batch_size line cut short (it said only "no global_batch_size")
    let cut = dir.path().join("cut.txt");
    let good = std::fs::read_to_string(&resnet_log).unwrap();
    let line = good
        .lines()
        .position(|l| l.contains("global_batch_size"))
        .unwrap()
        + 1;
    let bad: Vec<String> = good
        .lines()
        .map(|l| match l.find("\"value\"") {
            Some(i) if l.contains("global_batch_size") => l[..i].to_string(),
            _ => l.to_string(),
        })
        .collect();
    std::fs::write(&cut, bad.join("\n") + "\n").unwrap();
    // a run set's folder: the log beside the sysinfo.json the set recorded (2 nodes x 8 GPUs)
    let set = dir.path().join("set");
    std::fs::create_dir(&set).unwrap();
    let set_log = set.join("result_0.txt");
    std::fs::copy(&resnet_log, &set_log).unwrap();
    std::fs::write(
        set.join("sysinfo.json"),
        r#"{"number_of_nodes": "2", "accelerators_per_node": "8"}"#,
    )
    .unwrap();
    let out = dir.path().join("plan");
    let plan = |args: &[&std::ffi::OsStr]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
            .arg("plan")
            .args(args)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let s = |x: &str| std::ffi::OsString::from(x);
    let cases: Vec<(Vec<std::ffi::OsString>, String)> = vec![
        (
            vec![
                s("resnet"),
                s("--from-log"),
                bert_log.clone().into(),
                s("--measured-gpus"),
                s("8"),
            ],
            "a log of bert (its submission_benchmark), not of resnet".into(),
        ),
        (
            vec![
                s("resnet"),
                s("--from-log"),
                resnet_log.clone().into(),
                s("--measured-gpus"),
                s("7"),
            ],
            "global_batch_size 3200 does not split over 7 GPU(s)".into(),
        ),
        (
            vec![s("resnet"), s("--from-log"), text.clone().into()],
            format!("{}: no MLPerf log lines", text.display()),
        ),
        (
            vec![
                s("resnet"),
                s("--from-log"),
                cut.clone().into(),
                s("--measured-gpus"),
                s("8"),
            ],
            format!(
                "--from-log {}:{line}: cannot read this :::MLLOG line: ",
                cut.display()
            ),
        ),
        (
            vec![
                s("resnet"),
                s("--from-log"),
                set_log.clone().into(),
                s("--measured-gpus"),
                s("8"),
            ],
            format!(
                "--measured-gpus 8, but {} says the run used 16 GPU(s)",
                set.join("sysinfo.json").display()
            ),
        ),
        (
            vec![s("resnet"), s("--gpus"), s("8,16,8")],
            "--gpus: 8 is given twice (as count 1 and 3)".into(),
        ),
        (
            vec![s("resnet"), s("--gpus"), s("4,12")],
            "--gpus: 12 GPUs do not fill whole nodes of --gpus-per-node 8: give multiples of 8 \
             above one node (8 or 16)"
                .into(),
        ),
        (
            vec![
                s("resnet"),
                s("--gpus"),
                s("8"),
                s("--out"),
                afile.clone().into(),
            ],
            format!("--out {} is a file, not a folder", afile.display()),
        ),
    ];
    for (mut args, want) in cases {
        if !args.iter().any(|a| a == "--out") {
            args.extend([s("--out"), out.clone().into()]);
        }
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let (code, err) = plan(&refs);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(&want), "{args:?}: want `{want}` in {err}");
        assert!(!out.exists(), "{args:?}: nothing planned");
    }
    // without --measured-gpus the set's own count is taken (not 1)
    let args = [
        s("resnet"),
        s("--from-log"),
        set_log.into(),
        s("--out"),
        out.clone().into(),
    ];
    let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .arg("plan")
        .args(&refs)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(said.contains("measured: 1 log(s), 16 GPU(s)"), "{said}");
}

/// `plan`'s numbers on the command line (each flag's range, docs/planning.md): a value outside
/// its flag's range, NaN and infinities included, is refused naming the flag, the value and
/// the range (exit 2, nothing planned). `--rate 1e-300`, `--startup-s 1e300`,
/// `--gpu-memory-gib 1e300` and `--inter 1e308` printed tables of 300-digit numbers.
#[test]
fn plan_refuses_numbers_outside_each_flags_range_naming_it() {
    let resnet_log = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/plan/v4.0/NVIDIA/eos_ngc24.04_mxnet/resnet/result_0.txt");
    let log = resnet_log.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan");
    let rate = "the training samples per second per GPU must be from 0.001 to 1000000";
    let batch = "the per-GPU batch (samples) must be from 1 to 1000000";
    let link = "(GB/s per GPU) must be from 0.01 to 100000";
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["--rate", "1e-300"], format!("--rate 1e-300: {rate}")),
        (vec!["--rate", "1e300"], format!("--rate 1e300: {rate}")),
        (vec!["--rate", "nan"], format!("--rate NaN: {rate}")),
        (vec!["--rate=-5"], format!("--rate -5.0: {rate}")),
        (
            vec!["--rate", "1000", "--measured-batch", "inf"],
            format!("--measured-batch inf: {batch}"),
        ),
        (
            vec!["--rate", "1000", "--measured-batch", "1e-300"],
            format!("--measured-batch 1e-300: {batch}"),
        ),
        (
            vec!["--startup-s", "1e300"],
            "--startup-s 1e300: the seconds from run_start to the first step must be from 0 to \
             604800 (a week)"
                .into(),
        ),
        (
            vec!["--startup-s=-1"],
            "--startup-s -1.0: the seconds from run_start".into(),
        ),
        (
            vec!["--gpu-memory-gib", "1e300"],
            "--gpu-memory-gib 1e300: the memory per GPU (GiB) must be from 1 to 10000".into(),
        ),
        (
            vec!["--gpu-memory-gib", "1e-300"],
            "--gpu-memory-gib 1e-300: the memory per GPU (GiB) must be from 1 to 10000".into(),
        ),
        (
            vec!["--inter", "1e308"],
            format!("--inter 1e308: the bandwidth between nodes {link}"),
        ),
        (
            vec!["--intra", "1e-300"],
            format!("--intra 1e-300: the bandwidth between a node's GPUs {link}"),
        ),
        (
            vec!["--step-overhead-ms", "1e300"],
            "--step-overhead-ms 1e300: the per-step overhead (milliseconds) must be from 0 to \
             60000 (a minute)"
                .into(),
        ),
        (
            vec!["--overlap", "2"],
            "--overlap 2.0: the share of compute that hides the all-reduce must be from 0 to 1"
                .into(),
        ),
        (
            vec!["--gpus-per-node", "100000", "--gpus", "100000"],
            "--gpus-per-node 100000: the GPUs per node must be from 1 to 4096".into(),
        ),
        (
            vec!["--gpus", "8,2000000"],
            "--gpus 2000000: a GPU count must be from 1 to 1000000".into(),
        ),
        (
            vec!["--from-log", log, "--measured-gpus", "2000000"],
            "--measured-gpus 2000000: the GPUs of the measured run must be from 1 to 1000000"
                .into(),
        ),
    ];
    for (args, want) in cases {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
            .args(["plan", "resnet"])
            .args(&args)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&want), "{args:?}: want `{want}` in {err}");
        assert!(
            err.contains("docs/planning.md"),
            "{args:?}: the ranges' page: {err}"
        );
        assert!(!out.exists(), "{args:?}: nothing planned");
    }
}

/// The ends of each range are taken, and what plan prints of them stays readable: every run
/// either plans or refuses with a message (exit 0 or 2), and no number it prints runs to more
/// than 12 digits (a rate of 1e-300 printed 300).
#[test]
fn plan_prints_the_ends_of_each_range_readably() {
    let dir = tempfile::tempdir().unwrap();
    let ends: &[&[&str]] = &[
        &["--rate", "0.001"],
        &["--rate", "1000000"],
        &["--rate", "0.001", "--measured-batch", "1000000"],
        &["--rate", "1000000", "--measured-batch", "1"],
        &["--startup-s", "604800"],
        &["--step-overhead-ms", "60000"],
        &["--intra", "0.01", "--inter", "0.01"],
        &["--intra", "100000", "--inter", "100000"],
        &["--gpu-memory-gib", "1"],
        &["--gpu-memory-gib", "10000"],
        &["--gpus", "4096", "--gpus-per-node", "4096"],
        &["--gpus", "1000000"],
        &[
            "--overlap",
            "0",
            "--step-overhead-ms",
            "0",
            "--startup-s",
            "0",
        ],
    ];
    for (i, args) in ends.iter().enumerate() {
        for bench in ["resnet", "bert"] {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
                .args(["plan", bench])
                .args(args.iter())
                .arg("--out")
                .arg(dir.path().join(format!("{bench}{i}")))
                .output()
                .unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                matches!(o.status.code(), Some(0 | 2)),
                "{bench} {args:?}: {said}"
            );
            let longest = said
                .split(|c: char| !c.is_ascii_digit())
                .map(str::len)
                .max()
                .unwrap_or(0);
            assert!(longest <= 12, "{bench} {args:?}: {said}");
        }
    }
}
