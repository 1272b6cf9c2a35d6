//! `resnet`/`bert` as typed, without --config (issue 44, part 5). Without a GPU: the division's
//! tiny preset on data the command makes itself, said as such, trained to its target. With
//! GPUs (stood in for by `MLPERF_RUN_TEST_GPUS`, so the branch runs on a CPU machine): without
//! --data a clear refusal; with --data the config `plan` writes for the machine, named with its
//! path, valid under the closed rules, and the run started on every GPU through `launch`
//! (whose workers then find no CUDA device here and stop with an error, not a panic).
#![cfg(feature = "torch")]

use mlperf_run::rules::Division;
use std::path::Path;
use std::process::{Command, Output};

fn mlperf_run(args: &[&str], dir: &Path, gpus: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mlperf-run"));
    c.args(args).current_dir(dir).env("MLPERF_RUN_THREADS", "1");
    for k in ["RANK", "WORLD_SIZE", "SLURM_PROCID", "MLPERF_RUN_TEST_GPUS"] {
        c.env_remove(k);
    }
    if let Some(g) = gpus {
        c.env("MLPERF_RUN_TEST_GPUS", g);
    }
    c.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The run logs under `dir/runs/results`, each with its run_stop status.
fn statuses(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for system in std::fs::read_dir(dir.join("runs/results")).unwrap() {
        for bench in std::fs::read_dir(system.unwrap().path()).unwrap() {
            for f in std::fs::read_dir(bench.unwrap().path()).unwrap() {
                let p = f.unwrap().path();
                if p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("result_")
                {
                    let log = mlperf_run::mllog::parse_file(&p).unwrap();
                    let s = log
                        .last("run_stop")
                        .and_then(|e| e.status().map(str::to_string));
                    out.push(s.unwrap_or_default());
                }
            }
        }
    }
    out
}

#[test]
fn resnet_open_with_no_other_flag_trains_the_tiny_set_on_its_own_data_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = mlperf_run(&["resnet", "--division", "open"], dir.path(), None);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("no --config and no GPU here"), "{err}");
    assert!(err.contains("runs/tiny/resnet_tiny_cpu_open.toml"), "{err}");
    assert!(dir
        .path()
        .join("runs/tiny/resnet_tiny_cpu_open.toml")
        .exists());
    let s = statuses(dir.path());
    assert_eq!(s.len(), 5, "the benchmark's 5 runs: {s:?}\n{err}");
    assert!(s.iter().all(|s| s == "success"), "{s:?}\n{err}");
}

#[test]
fn bert_closed_without_config_makes_its_tiny_corpus_and_trains() {
    let dir = tempfile::tempdir().unwrap();
    let out = mlperf_run(
        &["bert", "--division", "closed", "--runs", "2"],
        dir.path(),
        None,
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("no --config and no GPU here"), "{err}");
    assert!(
        dir.path().join("runs/tiny/data/bert/vocab.txt").exists(),
        "{err}"
    );
    let s = statuses(dir.path());
    assert_eq!(s, ["success", "success"], "{err}");
}

#[test]
fn device_cuda_without_a_gpu_or_config_is_refused_before_anything_is_written() {
    for bench in ["resnet", "bert"] {
        let dir = tempfile::tempdir().unwrap();
        let out = mlperf_run(
            &[bench, "--division", "closed", "--device", "cuda"],
            dir.path(),
            None,
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{bench}: {err}");
        assert!(
            err.contains("--device cuda: no CUDA device") && err.contains("drop --device cuda"),
            "{bench}: {err}"
        );
        // neither the tiny preset announced nor its config or corpus written
        assert!(!err.contains("no GPU here: training"), "{bench}: {err}");
        assert!(
            !dir.path().join("runs").exists(),
            "{bench}: nothing is written before the refusal"
        );
    }
}

/// `resnet --data DIR` without --config on a GPU-less machine: the tiny preset makes its images
/// in memory, so the folder would be ignored; refused before the preset is written.
#[test]
fn resnet_data_without_a_gpu_or_config_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("imagenet");
    std::fs::create_dir(&data).unwrap();
    let out = mlperf_run(
        &["resnet", "--division", "open", "--data", "imagenet"],
        dir.path(),
        None,
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--data imagenet") && err.contains("data.source is \"imagefolder\""),
        "{err}"
    );
    assert!(
        !dir.path().join("runs").exists(),
        "written before the refusal: {err}"
    );
}

#[test]
fn with_gpus_and_no_data_the_command_says_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let gpus = Some("2,H100-SXM-80GB,80");
    let out = mlperf_run(&["resnet", "--division", "closed"], dir.path(), gpus);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("needs --data DIR"), "{err}");
    assert!(err.contains("2 GPU(s), H100-SXM-80GB"), "{err}");
    assert!(
        !dir.path().join("runs").exists(),
        "nothing is written before the refusal"
    );

    let bad = mlperf_run(
        &["resnet", "--division", "closed"],
        dir.path(),
        Some("two,H100"),
    );
    let err = stderr(&bad);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(
        err.contains("MLPERF_RUN_TEST_GPUS") && err.contains("COUNT,MODEL,GIB"),
        "{err}"
    );
}

#[test]
fn with_gpus_and_data_the_planned_config_is_named_and_launched_on_every_gpu() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("imagenet/train")).unwrap();
    let gpus = Some("2,H100-SXM-80GB,80");
    let args = ["resnet", "--division", "open", "--data", "imagenet"];
    let out = mlperf_run(&args, dir.path(), gpus);
    let err = stderr(&out);
    let planned = "runs/plan/resnet_closed_2xH100-SXM-80GB.toml";
    assert!(
        err.contains(&format!("wrote for this machine: {planned}")),
        "{err}"
    );
    let text = std::fs::read_to_string(dir.path().join(planned)).unwrap();
    mlperf_run::train::resnet::ResnetRunConfig::parse(&text, Division::Closed)
        .unwrap_or_else(|e| panic!("{planned} fails the closed rules: {e:#}"));
    let launched = "launch --nproc-per-node 2 -- resnet --division open --data imagenet \
                    --config runs/plan/resnet_closed_2xH100-SXM-80GB.toml --device cuda";
    assert!(err.contains(launched), "{err}");
    // no CUDA device here: the workers stop with an error, reported, and no panic
    assert!(!out.status.success(), "{err}");
    assert_ne!(out.status.code(), Some(101), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `--data` where the config makes its images in memory (the tiny preset the CPU default takes,
/// or any `synthetic-memory` config) would not be read: refused before the run, naming the flag,
/// the config and the fix, and no log written (before, the folder was silently ignored).
#[test]
fn resnet_data_with_a_synthetic_memory_config_is_refused_not_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("my_imagenet");
    std::fs::create_dir_all(&images).unwrap();
    let log = dir.path().join("r.log");
    let preset = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu.toml");
    let data = images.to_str().unwrap();
    let log_arg = log.to_str().unwrap();
    let with_preset = ["--config", preset.to_str().unwrap()];
    for extra in [&[][..], &with_preset[..]] {
        let mut args = vec!["resnet", "--division", "closed", "--data", data];
        args.extend_from_slice(extra);
        args.extend(["--seed", "1", "--log", log_arg]);
        let out = mlperf_run(&args, dir.path(), None);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for words in [
            "--data",
            "my_imagenet",
            "data.source = \"synthetic-memory\"",
            "\"imagefolder\"",
        ] {
            assert!(err.contains(words), "{args:?}: no {words:?} in {err}");
        }
        assert!(!log.exists(), "{args:?}: a log was written");
    }
}

/// A BERT `--data` folder that does not exist, or lacks its eval shards, is bad input: exit 2
/// before the run, naming the folder and how to make one, and no log (before: a run aborted on
/// its first read, exit 1).
#[test]
fn bert_data_without_its_shards_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no_such_corpus");
    // a real corpus whose eval shards are gone (its training shards are read before the run,
    // so they must be good for the eval refusal to be the one said)
    let half = dir.path().join("half_corpus");
    let made = mlperf_run(
        &[
            "data",
            "synth-bert",
            "--out",
            half.to_str().unwrap(),
            "--sentences",
            "16",
            "--seq-len",
            "32",
        ],
        dir.path(),
        None,
    );
    assert!(made.status.success(), "{}", stderr(&made));
    for f in std::fs::read_dir(half.join("eval")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let log = dir.path().join("b.log");
    for (data, named) in [
        (&missing, "no_such_corpus/train"),
        (&half, "half_corpus/eval"),
    ] {
        let args = [
            "bert",
            "--division",
            "closed",
            "--data",
            data.to_str().unwrap(),
            "--seed",
            "1",
            "--log",
            log.to_str().unwrap(),
        ];
        let out = mlperf_run(&args, dir.path(), None);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(named), "{err}");
        assert!(err.contains("--data"), "{err}");
        assert!(!log.exists(), "a log was written");
    }
}

/// `demo --out FILE` said "cannot create directory FILE/configs: Not a directory (os error
/// 20)"; it names the flag and what to do, and leaves the file as it was.
#[test]
fn demo_out_that_is_a_file_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "keep me").unwrap();
    let out = mlperf_run(&["demo", "--out", "notes.txt"], dir.path(), None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--out notes.txt exists and is not a folder: choose another --out"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
}

/// `demo --out` below a file (or anywhere it cannot create a folder) said "cannot create
/// directory OUT/configs: ..." without naming the flag.
#[test]
fn demo_out_that_cannot_be_created_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "keep me").unwrap();
    let out = mlperf_run(&["demo", "--out", "notes.txt/demo"], dir.path(), None);
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("--out notes.txt/demo: cannot create the folder; choose a writable --out"),
        "{err}"
    );
    assert!(!err.contains("/configs"), "{err}");
}

/// A failed step said only "its output is above", under the step's own advice to rerun the
/// step's command with --resume; it says to rerun the demo, which resumes its sets itself.
#[test]
fn a_failed_demo_step_says_to_rerun_the_demo() {
    let dir = tempfile::tempdir().unwrap();
    // the BERT corpus's folder is a file: the synth-bert step fails
    std::fs::create_dir_all(dir.path().join("d/data")).unwrap();
    std::fs::write(dir.path().join("d/data/bert"), "in the way").unwrap();
    let out = mlperf_run(&["demo", "--out", "d"], dir.path(), None);
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("demo step 'synthesize the tiny BERT corpus")
            && err.contains("Run the same `mlperf-run demo` (the same --out) again to continue"),
        "{err}"
    );
}

/// `demo --resnet-runs 0` was found by the training step, after the BERT corpus was made, as
/// "--runs must be at least 1" (a flag the user did not type). It is refused first, naming the
/// demo's own flag.
#[test]
fn demo_with_zero_runs_is_refused_naming_its_flag_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, words) in [
        (
            "--resnet-runs",
            "--resnet-runs must be at least 1 (MLPerf needs 5)",
        ),
        (
            "--bert-runs",
            "--bert-runs must be at least 1 (MLPerf needs 10)",
        ),
    ] {
        let out = mlperf_run(&["demo", "--out", "d", flag, "0"], dir.path(), None);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(words), "{err}");
        assert!(!dir.path().join("d").exists(), "{err}");
    }
}

/// A demo --out whose name is not UTF-8 reached the steps as text, its bad byte as U+FFFD: the
/// BERT corpus went into a second folder and the ResNet step found no config. `data synth-bert`
/// wrote train/, eval/ and vocab.txt, then HDF5 refused the first shard with no word on what to
/// do. HDF5 takes only UTF-8 file names, so both refuse it first, naming the flag, and nothing
/// is written.
#[test]
fn an_out_that_is_not_utf8_is_refused_before_anything_is_written() {
    use std::os::unix::ffi::OsStrExt;
    for command in [&["demo"][..], &["data", "synth-bert"]] {
        let dir = tempfile::tempdir().unwrap();
        let name = std::ffi::OsStr::from_bytes(b"out \xff");
        let out = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
            .args(command)
            .arg("--out")
            .arg(name)
            .current_dir(dir.path())
            .env("MLPERF_RUN_THREADS", "1")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {err}");
        assert!(
            err.contains("is not a UTF-8 path") && err.contains("choose another --out"),
            "{command:?}: {err}"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{command:?}: {err}"
        );
    }
}

/// Whether process `pid` has ended (gone, or a zombie nobody has reaped yet).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => true,
    }
}

/// A demo killed (SIGKILL, or a SIGTERM or Ctrl-C sent to it alone) while it trained left its
/// training step running on its own: the set went on writing its runs with nobody to report
/// them, and a rerun of the demo was refused while that step held the set's lock. The step now
/// gets SIGTERM when the demo dies, so it ends its current run as aborted and stops at once.
#[test]
fn a_killed_demo_stops_its_training_step() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let mut demo = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args([
            "demo",
            "--out",
            "d",
            "--resnet-runs",
            "2",
            "--bert-runs",
            "1",
        ])
        .current_dir(dir.path())
        .env("MLPERF_RUN_THREADS", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let set = dir.path().join("d/results/tiny-cpu-resnet/resnet");
    let deadline = Instant::now() + Duration::from_secs(300);
    // the lock names the set's process once the set has started
    let step = loop {
        let pid = std::fs::read_to_string(set.join("run_set.lock"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("pid: ")?.trim().parse().ok())
            });
        if let Some(pid) = pid {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "the demo's ResNet set never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    demo.kill().unwrap();
    demo.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ended(step) {
        assert!(Instant::now() < deadline, "the training step runs on");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !set.join("result_1.txt").exists(),
        "the training step went on with the set after the demo was killed"
    );
    assert!(!set.join("run_set.lock").exists(), "the step left its lock");
}
