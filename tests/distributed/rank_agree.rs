//! Every rank of a data-parallel job runs the same job, or every rank stops at the start saying
//! which rank differs from rank 0 and in what (src/train/job.rs, src/distributed/agree.rs):
//! two ranks on CPU (Gloo over localhost), each started with its own arguments.
//! - the same job, given as two config files that differ only in comments, layout and a default
//!   written out, trains as before (and the check's cost is measured);
//! - a config value that differs, a data folder with an image fewer, a rank that refuses its
//!   job (its config missing), rank 0 refusing a set (results there without --resume), and
//!   results folders that are not one shared folder: both ranks stop at once with exit status
//!   2, naming the rank, the item and both values, and nothing is written;
//! - ranks started with other world sizes: both name them at once (the rendezvous, exit 130).
//!
//! The collective and rendezvous timeouts are short, so that on code without the check these
//! tests fail quickly (a rank waiting for the other, or training) rather than hang.
#![cfg(feature = "torch")]

use crate::common::dist::{finish, rank_command, text, tiny_config, BIN};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Both ranks' outputs and how long the slower took.
fn two_ranks(args: [Vec<OsString>; 2]) -> ([Output; 2], f64) {
    two_ranks_with_env(args, [&[], &[]])
}

/// [`two_ranks`] with each rank's own extra environment.
fn two_ranks_with_env(args: [Vec<OsString>; 2], envs: [&[(&str, &str)]; 2]) -> ([Output; 2], f64) {
    let port = mlperf_run::launch::free_local_port().unwrap();
    let t0 = Instant::now();
    let kids: Vec<_> = args
        .iter()
        .enumerate()
        .map(|(rank, a)| {
            rank_command(rank, 2, port)
                .arg("-v")
                .args(a)
                .env("MLPERF_RUN_DIST_TIMEOUT_S", "10")
                .env("MLPERF_RUN_RENDEZVOUS_TIMEOUT_S", "30")
                .envs(envs[rank].iter().copied())
                .spawn()
                .expect("start an mlperf-run worker")
        })
        .collect();
    let outs: Vec<Output> = kids
        .into_iter()
        .enumerate()
        .map(|(r, k)| finish(k, Duration::from_secs(240), &format!("rank {r}")))
        .collect();
    let secs = t0.elapsed().as_secs_f64();
    (outs.try_into().unwrap(), secs)
}

fn os(parts: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    parts.iter().map(|p| p.as_ref().to_os_string()).collect()
}

/// A seeded single ResNet run of `cfg` logging to `log` (each rank its own log path: a path is
/// not part of the job).
fn single_run(cfg: &Path, log: &Path, extra: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    let mut a = os(&[
        &"resnet",
        &"--division",
        &"open",
        &"--config",
        &cfg,
        &"--seed",
        &"7",
        &"--log",
        &log,
    ]);
    a.extend(os(extra));
    a
}

/// A seeded set of 2 runs into `results`.
fn set_run(cfg: &Path, results: &Path, extra: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    let mut a = os(&[
        &"resnet",
        &"--division",
        &"open",
        &"--config",
        &cfg,
        &"--results",
        &results,
        &"--system",
        &"agree",
        &"--runs",
        &"2",
        &"--seeds",
        &"101,102",
    ]);
    a.extend(os(extra));
    a
}

/// Both ranks refused with exit status 2 within `limit` s, each saying every one of `want`.
fn assert_both_refused(outs: &[Output; 2], secs: f64, want: &[&str]) {
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(2), "rank {r}: {}", text(o));
        let err = String::from_utf8_lossy(&o.stderr);
        for w in want {
            assert!(err.contains(w), "rank {r} does not say {w:?}:\n{err}");
        }
        assert!(
            err.contains("no run was started") && !err.contains("run_start"),
            "rank {r}: {err}"
        );
    }
    // the rendezvous timeout is 30 s, the collective timeout 10 s: a rank that waited for the
    // other, or trained, took longer
    assert!(secs < 25.0, "{secs:.1} s");
}

/// The check's cost on one rank, from its `-v` line.
fn check_ms(out: &Output) -> f64 {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("the ranks' jobs compared in"))
        .unwrap_or_else(|| panic!("no comparison line:\n{err}"));
    let (_, after) = line.split_once("compared in ").unwrap();
    after.split(' ').next().unwrap().parse().unwrap()
}

/// The same job given as two files that differ only in what is not the job (comments, layout,
/// key order, a default written out, the file's path) trains as before; the check's cost is
/// printed.
#[test]
fn ranks_with_the_same_job_in_different_words_train() {
    let dir = tempfile::tempdir().unwrap();
    let cfg0 = tiny_config(dir.path(), 32, 2);
    let text0 = std::fs::read_to_string(&cfg0).unwrap();
    let other = dir.path().join("node1");
    std::fs::create_dir_all(&other).unwrap();
    let cfg1 = other.join("another_name.toml");
    let text1 = format!(
        "# node 1's copy, edited by hand\n{}",
        text0
            .replace("momentum = 0.9", "momentum = 0.90 # the same number")
            .replace("[methods]", "[methods]\nblurpool = false")
    );
    assert_ne!(text1, text0);
    std::fs::write(&cfg1, text1).unwrap();
    let (log0, log1) = (dir.path().join("r0.txt"), other.join("r1.txt"));
    let (outs, secs) = two_ranks([single_run(&cfg0, &log0, &[]), single_run(&cfg1, &log1, &[])]);
    for (r, o) in outs.iter().enumerate() {
        assert!(
            text(o).contains("run aborted: epoch limit reached"),
            "rank {r} did not train: {}",
            text(o)
        );
    }
    let ms: Vec<f64> = outs.iter().map(check_ms).collect();
    eprintln!("2 ranks trained in {secs:.1} s; the job check took {ms:?} ms (rank 0, rank 1)");
    assert!(
        log0.exists() && !log1.exists(),
        "rank 0 alone writes its log"
    );
}

/// Rank 1's config asks for another global batch: before, its steps per epoch differed from
/// rank 0's and the collectives paired up wrongly (a timeout, or a result).
#[test]
fn a_config_value_that_differs_stops_both_ranks_naming_the_key_both_values_and_the_rank() {
    let dir = tempfile::tempdir().unwrap();
    let cfg0 = tiny_config(dir.path(), 32, 2);
    let cfg1 = dir.path().join("rank1.toml");
    let t = std::fs::read_to_string(&cfg0).unwrap();
    assert!(
        t.contains("global_batch_size = 64"),
        "tiny_cpu.toml changed"
    );
    std::fs::write(
        &cfg1,
        t.replace("global_batch_size = 64", "global_batch_size = 32"),
    )
    .unwrap();
    let (log0, log1) = (dir.path().join("r0.txt"), dir.path().join("r1.txt"));
    let (outs, secs) = two_ranks([single_run(&cfg0, &log0, &[]), single_run(&cfg1, &log1, &[])]);
    assert_both_refused(
        &outs,
        secs,
        &["rank 1's config differs from rank 0's at train.global_batch_size: 32 vs 64"],
    );
    assert!(!log0.exists(), "rank 0 wrote a log");
}

/// Rank 1 finds another libtorch than rank 0 (the binary links it dynamically: one binary on a
/// shared file system meets each node's own torch): refused, naming both versions.
#[test]
fn ranks_that_find_other_libtorch_versions_stop_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path(), 32, 2);
    let (log0, log1) = (dir.path().join("r0.txt"), dir.path().join("r1.txt"));
    let (outs, secs) = two_ranks_with_env(
        [single_run(&cfg, &log0, &[]), single_run(&cfg, &log1, &[])],
        [
            &[("MLPERF_RUN_LIBTORCH_VERSION", "2.11.0+cu130")],
            &[("MLPERF_RUN_LIBTORCH_VERSION", "2.10.0+cu128")],
        ],
    );
    assert_both_refused(
        &outs,
        secs,
        &["rank 1 finds libtorch 2.10.0+cu128, rank 0 2.11.0+cu130: install the same torch"],
    );
    assert!(!log0.exists(), "rank 0 wrote a log");
}

/// Rank 1's copy of the ImageFolder has one training image fewer: before, its steps per epoch
/// could differ, and its shard of the data was another one.
#[test]
fn data_folders_of_other_sizes_stop_both_ranks_naming_the_counts() {
    let dir = tempfile::tempdir().unwrap();
    let data0 = dir.path().join("imagenet0");
    let out = Command::new(BIN)
        .args(["data", "synth-imagenet", "--out"])
        .arg(&data0)
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
    let data1 = dir.path().join("imagenet1");
    copy_tree(&data0, &data1);
    let class = data1.join("train/n00000003");
    let victim = std::fs::read_dir(&class).unwrap().next().unwrap().unwrap();
    std::fs::remove_file(victim.path()).unwrap();
    let cfg = crate::dist_resnet::tiny_jpeg_config(dir.path(), 2);
    let results = dir.path().join("results");
    let (outs, secs) = two_ranks([
        set_run(&cfg, &results, &[&"--data", &data0]),
        set_run(&cfg, &results, &[&"--data", &data1]),
    ]);
    assert_both_refused(
        &outs,
        secs,
        &[
            "rank 1 sees 319 training images, rank 0 320: the data folders differ",
            "give every rank the same copy of the data",
        ],
    );
    // nothing half-written: no set folder, no lock, no log moved aside
    assert!(
        !results.exists(),
        "{:?}",
        walk(&results).collect::<Vec<_>>()
    );
}

/// Rank 1 cannot read its config (missing on its node): before, it stopped alone and rank 0
/// waited for it for the whole rendezvous timeout, then blamed MASTER_ADDR.
#[test]
fn a_rank_that_refuses_its_job_stops_the_others_at_once_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let cfg0 = tiny_config(dir.path(), 32, 2);
    let missing = dir.path().join("not_on_this_node.toml");
    let (log0, log1) = (dir.path().join("r0.txt"), dir.path().join("r1.txt"));
    let (outs, secs) = two_ranks([
        single_run(&cfg0, &log0, &[]),
        single_run(&missing, &log1, &[]),
    ]);
    assert_both_refused(
        &outs,
        secs,
        &["rank 1 refused the job", "not_on_this_node.toml"],
    );
    assert!(!log0.exists());
}

/// Rank 0 refuses the set (results there, no --resume): before, rank 1 waited for the first
/// run's group for the whole rendezvous timeout, then ended as if cut (130, "--resume").
#[test]
fn rank_0_refusing_the_set_stops_the_others_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path(), 32, 2);
    let results = dir.path().join("results");
    let set = results.join("agree/resnet");
    std::fs::create_dir_all(&set).unwrap();
    finished_log(&set.join("result_0.txt"), 101);
    let before = std::fs::read(set.join("result_0.txt")).unwrap();
    let (outs, secs) = two_ranks([set_run(&cfg, &results, &[]), set_run(&cfg, &results, &[])]);
    assert_both_refused(
        &outs,
        secs,
        &[
            "rank 0 refused the job",
            "pass --resume to continue this set",
        ],
    );
    assert_eq!(std::fs::read(set.join("result_0.txt")).unwrap(), before);
    let names: Vec<_> = walk(&results).collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

/// `--resume` with a results folder that is not shared (each rank its own): rank 1 would run
/// the set from its first run while rank 0 continues at its second.
#[test]
fn results_folders_that_are_not_shared_stop_a_resumed_set() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path(), 32, 2);
    let (results0, results1) = (dir.path().join("shared0"), dir.path().join("local1"));
    let set = results0.join("agree/resnet");
    std::fs::create_dir_all(&set).unwrap();
    finished_log(&set.join("result_0.txt"), 101);
    let (outs, secs) = two_ranks([
        set_run(&cfg, &results0, &[&"--resume"]),
        set_run(&cfg, &results1, &[&"--resume"]),
    ]);
    assert_both_refused(
        &outs,
        secs,
        &[
            "rank 1 finds other finished runs in the results folder than rank 0 (none vs \
             result_0.txt (seed 101))",
            "--results must be one folder that every rank shares",
        ],
    );
    assert!(!results1.exists());
}

/// A node started with another world size (rank 1 thinks the job has 3 ranks, rank 0 2): before,
/// both passed the rendezvous and waited on each other until a timeout, saying only that a
/// peer probably died. Each now names the world sizes at once.
#[test]
fn ranks_started_with_other_world_sizes_are_named_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path(), 32, 2);
    let port = mlperf_run::launch::free_local_port().unwrap();
    let t0 = Instant::now();
    let kids: Vec<_> = [(0, 2), (1, 3)]
        .iter()
        .map(|&(rank, world)| {
            rank_command(rank, world, port)
                .args(single_run(
                    &cfg,
                    &dir.path().join(format!("r{rank}.txt")),
                    &[],
                ))
                .env("MLPERF_RUN_DIST_TIMEOUT_S", "10")
                .env("MLPERF_RUN_RENDEZVOUS_TIMEOUT_S", "30")
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = kids
        .into_iter()
        .enumerate()
        .map(|(r, k)| finish(k, Duration::from_secs(120), &format!("rank {r}")))
        .collect();
    let secs = t0.elapsed().as_secs_f64();
    let wants = [
        "ranks joined with another world size than rank 0's 2: rank 1 (host ",
        "rank 0 (host ",
    ];
    for (r, o) in outs.iter().enumerate() {
        // the ranks could not meet: as a group that does not form, for the same command again
        assert_eq!(o.status.code(), Some(130), "rank {r}: {}", text(o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(wants[r]) && err.contains("start every rank with the same world size"),
            "rank {r}: {err}"
        );
    }
    let err1 = String::from_utf8_lossy(&outs[1].stderr);
    assert!(
        err1.contains("was started with a world of 2 ranks, this rank with 3"),
        "{err1}"
    );
    assert!(secs < 25.0, "{secs:.1} s");
    assert!(!dir.path().join("r0.txt").exists());
}

/// A finished ResNet run's log (submission_benchmark, seed, run_start, run_stop success).
fn finished_log(path: &Path, seed: u64) {
    use mlperf_run::mllog::{keys, Emitter, Sink};
    let mut e = Emitter::new(vec![Sink::file(path, false).unwrap()]);
    e.event(keys::SUBMISSION_BENCHMARK, "resnet").unwrap();
    e.event(keys::SEED, seed).unwrap();
    e.start(
        keys::RUN_START,
        serde_json::Value::Null,
        mlperf_run::meta!(),
    )
    .unwrap();
    e.end(
        keys::RUN_STOP,
        serde_json::Value::Null,
        mlperf_run::meta! {"status" => "success"},
    )
    .unwrap();
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Every file under `root` (none when it does not exist).
fn walk(root: &Path) -> impl Iterator<Item = PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out.into_iter()
}
