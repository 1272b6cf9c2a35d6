//! Data-parallel training of the tiny ResNet through the real trainer, 2 processes on CPU
//! (Gloo over localhost):
//! - `mlperf-run launch --nproc-per-node 2 -- resnet ...` ends with the same trainable
//!   parameters as one process accumulating the same two per-rank micro-batches per step
//!   (`--emulate-world 2`, so batch norm sees the same batches), and rank 0's log passes our
//!   checker and the official compliance checker;
//! - killing one rank mid-run ends the other as aborted, quickly;
//! - through the CUDA graph twin, the ranks train as the eager step does, also when one rank
//!   meets an unreadable image (a short batch, run eagerly beside the graph), and a capture that
//!   fails on one rank ends the run on every rank, naming that rank.
#![cfg(feature = "torch")]

use crate::common;

use crate::common::dist::{
    launch_command, load, max_rel_diff, open_run_args, rank_command, text, tiny_config, BIN,
};
use mlperf_run::mllog::parse_file;
use mlperf_run::rules::{check_log, CheckOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

#[test]
fn two_process_resnet_equals_one_process_accumulating_and_its_log_passes() {
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    // 2 epochs x 5 steps = 10 optimizer steps
    let cfg = tiny_config(dir.path(), 32, 2);
    let common_args = |log: &Path, dump: &Path| open_run_args("resnet", &cfg, 4242, log, dump);
    let (dp_log, dp_dump) = (dir.path().join("dp.txt"), dir.path().join("dp.safetensors"));
    let dp = launch_command(2)
        .args(common_args(&dp_log, &dp_dump))
        .env("MLPERF_RUN_DIST_TIMEOUT_S", "60")
        .output()
        .unwrap();
    let t_dp = t0.elapsed().as_secs_f64();
    // both ranks ran to the epoch limit (the tiny set cannot reach the target in 2 epochs)
    let dp_text = text(&dp);
    for r in 0..2 {
        assert!(
            dp_text.contains(&format!("[rank {r}] run aborted: epoch limit reached")),
            "{dp_text}"
        );
    }
    let (em_log, em_dump) = (dir.path().join("em.txt"), dir.path().join("em.safetensors"));
    let em = Command::new(BIN)
        .args(common_args(&em_log, &em_dump))
        .args(["--emulate-world", "2"])
        .output()
        .unwrap();
    assert!(
        text(&em).contains("run aborted: epoch limit reached"),
        "{}",
        text(&em)
    );

    let rank0 = load(&dp_dump);
    assert!(!rank0.is_empty(), "no parameters dumped");
    let rank1 = load(&dir.path().join("dp.safetensors.rank1"));
    let single = load(&em_dump);
    let ranks_diff = max_rel_diff(&rank0, &rank1);
    let diff = max_rel_diff(&rank0, &single);
    eprintln!(
        "{} tensors: rank 0 vs rank 1 {ranks_diff:e}, 2-process vs 1-process accumulating \
         {diff:e}; 2-process run {t_dp:.1} s, total {:.1} s",
        rank0.len(),
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(ranks_diff, 0.0, "the ranks' parameters differ");
    assert!(diff < 1e-5, "relative difference {diff:e}");
    // the check can fail: one process on the whole global batch (batch norm over 64 samples
    // instead of two 32-sample micro-batches) ends elsewhere
    let (one_log, one_dump) = (
        dir.path().join("one.txt"),
        dir.path().join("one.safetensors"),
    );
    Command::new(BIN)
        .args(common_args(&one_log, &one_dump))
        .output()
        .unwrap();
    let full_batch = max_rel_diff(&rank0, &load(&one_dump));
    eprintln!("2-process vs 1-process on the full batch: {full_batch:e}");
    assert!(full_batch > 1e-3, "{full_batch:e}");

    // rank 0 alone wrote the log, and it is a valid MLPerf log
    let log = parse_file(&dp_log).unwrap();
    assert_eq!(log.last("run_stop").unwrap().status(), Some("aborted"));
    assert_eq!(log.first("seed").unwrap().value, serde_json::json!(4242));
    let starts = std::fs::read_to_string(&dp_log)
        .unwrap()
        .matches("\"run_start\"")
        .count();
    assert_eq!(starts, 1, "more than one rank wrote the log");
    let verdict = check_log(
        &log,
        &CheckOptions {
            ruleset: Some("4.0.0".into()),
        },
    );
    assert!(verdict.compliant(), "our checker: {:?}", verdict.findings);
    common::official::assert_compliant("dist_resnet", &dp_log, "4.0.0");
}

fn worker(rank: usize, port: u16, cfg: &Path, log: &Path) -> Child {
    rank_command(rank, 2, port)
        .args(["resnet", "--division", "open", "--config"])
        .arg(cfg)
        .args(["--seed", "7", "--log"])
        .arg(log)
        .env("MLPERF_RUN_DIST_TIMEOUT_S", "30")
        .spawn()
        .expect("start an mlperf-run resnet worker")
}

#[test]
fn killing_one_rank_aborts_the_run_on_the_other() {
    let dir = tempfile::tempdir().unwrap();
    // long enough, and with a target it cannot reach, that the run is still going when rank 1
    // dies (a converged run would end with success first)
    let cfg = tiny_config(dir.path(), 128, 24);
    let toml = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        toml.contains("target = 0.80"),
        "tiny_cpu.toml changed: update this test's edit"
    );
    std::fs::write(&cfg, toml.replace("target = 0.80", "target = 0.999")).unwrap();
    let port = mlperf_run::launch::free_local_port().unwrap();
    let log = dir.path().join("result_0.txt");
    let mut rank0 = worker(0, port, &cfg, &log);
    let mut rank1 = worker(1, port, &cfg, &dir.path().join("unused.txt"));
    // wait until training is under way (rank 0 logged the first block)
    let start = Instant::now();
    loop {
        let s = std::fs::read_to_string(&log).unwrap_or_default();
        if s.contains("\"block_start\"") {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) || rank0.try_wait().unwrap().is_some() {
            let _ = rank1.kill();
            let _ = rank0.kill();
            panic!(
                "training never started:\nrank 0 {}\nrank 1 {}",
                text(&rank0.wait_with_output().unwrap()),
                text(&rank1.wait_with_output().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1500));
    rank1.kill().unwrap();
    let killed = Instant::now();
    let _ = rank1.wait();
    while rank0.try_wait().unwrap().is_none() {
        if killed.elapsed() > Duration::from_secs(60) {
            let _ = rank0.kill();
            panic!(
                "rank 0 still running 60 s after rank 1 died: {}",
                text(&rank0.wait_with_output().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let secs = killed.elapsed().as_secs_f64();
    let out = rank0.wait_with_output().unwrap();
    eprintln!("rank 0 ended {secs:.2} s after rank 1 was killed");
    assert!(!out.status.success(), "{}", text(&out));
    let parsed = parse_file(&log).unwrap();
    let last = parsed.events.last().expect("a log");
    assert_eq!(last.key, "run_stop", "{}", text(&out));
    assert_eq!(last.status(), Some("aborted"));
}

/// `methods.cuda_graph` in a data-parallel run: the graph's CPU twin (static input buffers,
/// warm-up, capture, replays) with the gradient exchange inside the step body trains 2 Gloo
/// processes exactly as the eager step does, bit for bit, on both ranks.
#[test]
fn two_process_resnet_through_the_cuda_graph_twin_equals_eager() {
    let dir = tempfile::tempdir().unwrap();
    // 2 epochs x 5 steps = 10 optimizer steps: 2 eager, 1 captured, 7 replayed
    let cfg = tiny_config(dir.path(), 32, 2);
    let summaries = eager_and_twin_agree(dir.path(), &["--config".as_ref(), cfg.as_os_str()], 777);
    for l in &summaries {
        assert!(l.contains("2 eager steps, 1 captures, 7 replays"), "{l}");
    }
}

/// Runs `resnet --division open ARGS --seed SEED` on 2 ranks to the epoch limit, eagerly and
/// through the CUDA graph twin (2 warm-up steps), and checks that both ranks of both runs end
/// with the same parameters, bit for bit. Returns the twin's graph summary of each rank.
fn eager_and_twin_agree(dir: &Path, args: &[&std::ffi::OsStr], seed: u64) -> Vec<String> {
    let run = |name: &str, extra: &[&str]| {
        let dump = dir.join(format!("{name}.safetensors"));
        let out = launch_command(2)
            .args(["resnet", "--division", "open"])
            .args(args)
            .args(["--seed", &seed.to_string(), "--log"])
            .arg(dir.join(format!("{name}.txt")))
            .arg("--dump-params")
            .arg(&dump)
            .args(extra)
            .env("MLPERF_RUN_DIST_TIMEOUT_S", "60")
            .env("RUST_LOG", "info")
            .output()
            .unwrap();
        let t = text(&out);
        for r in 0..2 {
            assert!(
                t.contains(&format!("[rank {r}] run aborted: epoch limit reached")),
                "{name}: {t}"
            );
        }
        let rank1 = dir.join(format!("{name}.safetensors.rank1"));
        (load(&dump), load(&rank1), t)
    };
    let (eager0, eager1, _) = run("eager", &[]);
    let (twin0, twin1, t) = run("twin", &["--emulate-cuda-graph", "2"]);
    assert!(!eager0.is_empty());
    assert_eq!(max_rel_diff(&eager0, &eager1), 0.0, "eager replicas differ");
    assert_eq!(max_rel_diff(&twin0, &twin1), 0.0, "twin replicas differ");
    assert_eq!(
        max_rel_diff(&eager0, &twin0),
        0.0,
        "the CUDA graph twin trains differently from the eager step"
    );
    let summaries: Vec<String> = t
        .lines()
        .filter(|l| l.contains("CUDA graphs (CPU twin)"))
        .map(str::to_string)
        .collect();
    assert_eq!(summaries.len(), 2, "one graph summary per rank: {t}");
    summaries
}

/// configs/resnet/tiny_cpu_jpeg.toml for `epochs` epochs, one eval per epoch.
pub(crate) fn tiny_jpeg_config(dir: &Path, epochs: usize) -> PathBuf {
    let base = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu_jpeg.toml"),
    )
    .unwrap();
    let edits = [
        ("max_epochs = 24", format!("max_epochs = {epochs}")),
        ("eval_period = 4", "eval_period = 1".to_string()),
        (
            "schedule_epochs = 24.0",
            format!("schedule_epochs = {epochs}.0"),
        ),
    ];
    let mut text = base.clone();
    for (from, to) in &edits {
        assert!(
            base.contains(from),
            "tiny_cpu_jpeg.toml has no `{from}`: update this test's edits"
        );
        text = text.replace(from, to);
    }
    let path = dir.join("tiny_jpeg_dp.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `methods.cuda_graph` in a data-parallel run on images one of which cannot be read: each
/// epoch one rank's batch holding it comes out short. That rank runs it eagerly beside its graph
/// (its all-reduces meet the other rank's replayed ones) and replays the graph again after it,
/// so neither rank leaves the common sequence of warm-up, capture and replays. (Before, the
/// short batch dropped that rank's graph, and its capture at the end of a new warm-up waited
/// for ranks that were replaying.) Both ranks end with exactly the eager run's parameters.
#[test]
fn an_unreadable_image_on_one_rank_keeps_the_cuda_graph_twin_in_step_with_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("imagenet");
    // 320 images: 160 per rank, 5 steps of 32 per epoch, none left over
    let out = Command::new(BIN)
        .args(["data", "synth-imagenet", "--out"])
        .arg(&data)
        .args([
            "--classes",
            "10",
            "--per-class",
            "32",
            "--val-per-class",
            "10",
        ])
        .args(["--min-size", "40", "--max-size", "56"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    common::train::spoil_first_image(&data.join("train/n00000003"));
    // 3 epochs x 5 steps: the capture is step 3, so epochs 2 and 3 meet the image after it
    let cfg = tiny_jpeg_config(dir.path(), 3);
    let args = [
        "--config".as_ref(),
        cfg.as_os_str(),
        "--data".as_ref(),
        data.as_os_str(),
    ];
    let summaries = eager_and_twin_agree(dir.path(), &args, 3);
    // each rank: 15 steps, 2 eager warm-up steps and one capture, the rest replays except
    // its short batches
    let mut short = 0;
    for l in &summaries {
        let n = |what: &str| -> u64 {
            let (before, _) = l.split_once(what).unwrap_or_else(|| panic!("{what}: {l}"));
            before.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let (eager, captures, replays) = (n(" eager steps"), n(" captures"), n(" replays"));
        assert_eq!(eager + captures + replays, 15, "{l}");
        assert_eq!(captures, 1, "{l}");
        let s = l
            .split_once(" short batch(es)")
            .map(|(b, _)| b.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .unwrap_or(0);
        // a short batch after the capture adds an eager step; one in the warm-up or at the
        // capture step does not
        assert!((2..=2 + s).contains(&eager), "{l}");
        short += s;
    }
    eprintln!("{}", summaries.join("\n"));
    assert!(
        short >= 2,
        "a short batch in each epoch after the capture: {summaries:?}"
    );
}

/// `methods.cuda_graph` in a data-parallel run where one rank's capture fails (injected on
/// rank 1, through the CPU twin): before any rank replays, the ranks share their captures'
/// outcomes, so rank 0, whose capture worked, ends the run at once with rank 1's reason instead
/// of replaying all-reduces that rank 1 never joins.
#[test]
fn a_failed_capture_on_one_rank_ends_the_run_on_every_rank_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path(), 32, 2);
    let log = dir.path().join("result_0.txt");
    let t0 = Instant::now();
    let out = launch_command(2)
        .args(["resnet", "--division", "open", "--config"])
        .arg(&cfg)
        .args(["--seed", "5", "--emulate-cuda-graph", "2", "--log"])
        .arg(&log)
        .env("MLPERF_RUN_INJECT_FAULT", "capture:1")
        .env("MLPERF_RUN_DIST_TIMEOUT_S", "120")
        .output()
        .unwrap();
    eprintln!(
        "both ranks ended {:.1} s after the start",
        t0.elapsed().as_secs_f64()
    );
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    let said = |rank: usize| -> String {
        let prefix = format!("[rank {rank}] run aborted: ");
        t.lines()
            .find_map(|l| l.split_once(&prefix).map(|(_, why)| why.to_string()))
            .unwrap_or_else(|| panic!("rank {rank} did not say why its run ended: {t}"))
    };
    assert!(said(1).contains("failed on purpose"), "{t}");
    let zero = said(0);
    assert!(zero.contains("rank(s) 1 could not capture"), "{t}");
    assert!(
        zero.contains("rank 1: the capture failed on purpose"),
        "{t}"
    );
    // rank 0's log: the capture came after the 2 eager steps, the run ended aborted with why
    let parsed = parse_file(&log).unwrap();
    let last = parsed.events.last().expect("a log");
    assert_eq!(last.key, "run_stop", "{t}");
    assert_eq!(last.status(), Some("aborted"));
    let reason = last.metadata.get("reason").and_then(|r| r.as_str());
    assert!(
        reason.is_some_and(|r| r.contains("rank(s) 1 could not capture")),
        "{reason:?}"
    );
}

/// `[system] cpu_bind = "slices"` in a 2-process run: each rank binds itself to its own run of
/// whole cores of the CPUs it was started with (or, where the launcher already bound it, says
/// it left them), and says which.
#[test]
fn cpu_bind_slices_gives_each_rank_cores_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path(), 32, 2);
    let base = std::fs::read_to_string(&cfg).unwrap();
    let bound = base.replace("threads = 1\n", "threads = 1\ncpu_bind = \"slices\"\n");
    assert_ne!(
        bound, base,
        "tiny_cpu.toml changed: update this test's edit"
    );
    std::fs::write(&cfg, bound).unwrap();
    let out = launch_command(2)
        .args(["resnet", "--division", "open", "--config"])
        .arg(&cfg)
        .args(["--seed", "3", "--log"])
        .arg(dir.path().join("result_0.txt"))
        .env("RUST_LOG", "mlperf_run=info")
        .env("MLPERF_RUN_DIST_TIMEOUT_S", "60")
        .output()
        .unwrap();
    let t = text(&out);
    let allowed = mlperf_run::cpu_bind::current_affinity().unwrap();
    let cpus_of = |rank: usize| -> Option<Vec<usize>> {
        let prefix = format!("[rank {rank}]");
        let line = t
            .lines()
            .find(|l| l.starts_with(&prefix) && l.contains("cpu_bind: "))
            .unwrap_or_else(|| panic!("rank {rank} did not say how it was bound: {t}"));
        if line.contains("left as started") {
            return None;
        }
        let (_, list) = line
            .split_once(&format!("local rank {rank} of 2 on CPUs "))
            .unwrap_or_else(|| panic!("{line}"));
        Some(mlperf_run::cpu_bind::parse_cpu_list(list.split_whitespace().next().unwrap()).unwrap())
    };
    assert!(
        t.contains("[rank 0] run aborted: epoch limit reached"),
        "{t}"
    );
    match (cpus_of(0), cpus_of(1)) {
        (Some(a), Some(b)) => {
            for c in a.iter().chain(&b) {
                assert!(
                    allowed.contains(c),
                    "CPU {c} is not one of {allowed:?}: {t}"
                );
            }
            // slices are whole cores: on one core (hyper-threads) the ranks share it
            let sysfs = Path::new("/sys/devices/system/cpu");
            if mlperf_run::cpu_bind::cores(&allowed, sysfs).len() >= 2 {
                assert!(
                    a.iter().all(|c| !b.contains(c)),
                    "{a:?} and {b:?} overlap: {t}"
                );
            }
        }
        (None, None) => eprintln!("this test runs bound to some CPUs: the ranks left them"),
        other => panic!("the ranks disagree on whether they were bound: {other:?}: {t}"),
    }
}
