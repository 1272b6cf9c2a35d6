//! Multi-process c10d tests on CPU (Gloo over localhost): collectives, the launcher, the
//! data-parallel equivalence of the bucketed gradient averaging, and failure handling.
//! Each test starts `mlperf-run dist-selftest` workers on its own free port.
#![cfg(feature = "torch")]

use crate::common::dist::{finish, launch_command, load, max_rel_diff, rank_command, text, BIN};
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    mlperf_run::launch::free_local_port().expect("a free localhost port")
}

/// Starts rank `rank` of `world` running `dist-selftest <args>`.
fn worker(rank: usize, world: usize, port: u16, args: &[&str]) -> Child {
    rank_command(rank, world, port)
        .arg("dist-selftest")
        .args(args)
        .spawn()
        .expect("start mlperf-run dist-selftest")
}

#[test]
fn two_process_gloo_collectives() {
    let port = free_port();
    let kids: Vec<Child> = (0..2).map(|r| worker(r, 2, port, &[])).collect();
    for (r, k) in kids.into_iter().enumerate() {
        let out = finish(k, Duration::from_secs(120), &format!("rank {r}"));
        assert!(out.status.success(), "rank {r}: {}", text(&out));
        let s = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            s.contains(&format!("dist-selftest ok: rank {r} of 2 (gloo)")),
            "{s}"
        );
    }
}

/// Two processes as Open MPI's `mpirun -np 2` starts them on one node: OMPI_COMM_WORLD_* and
/// no MASTER_ADDR. They meet as ranks 0 and 1 of 2 on this host; each trained alone as rank 0
/// of 1 before, over the same results.
#[test]
fn processes_that_mpirun_started_form_one_group() {
    let port = free_port().to_string();
    let kids: Vec<Child> = (0..2)
        .map(|r: usize| {
            let mut cmd = Command::new(BIN);
            for k in [
                "RANK",
                "WORLD_SIZE",
                "LOCAL_RANK",
                "LOCAL_WORLD_SIZE",
                "MASTER_ADDR",
            ] {
                cmd.env_remove(k);
            }
            cmd.env_remove("SLURM_PROCID")
                .env("OMPI_COMM_WORLD_RANK", r.to_string())
                .env("OMPI_COMM_WORLD_SIZE", "2")
                .env("OMPI_COMM_WORLD_LOCAL_RANK", r.to_string())
                .env("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
                .env("MASTER_PORT", &port)
                .args(["dist-selftest", "--timeout-s", "60"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start mlperf-run dist-selftest")
        })
        .collect();
    for (r, k) in kids.into_iter().enumerate() {
        let out = finish(k, Duration::from_secs(120), &format!("rank {r}"));
        assert!(out.status.success(), "rank {r}: {}", text(&out));
        let s = String::from_utf8_lossy(&out.stdout);
        assert!(
            s.contains(&format!("dist-selftest ok: rank {r} of 2 (gloo)")),
            "{s}"
        );
    }
}

#[test]
fn launch_runs_workers_and_prefixes_their_output() {
    let out = launch_command(2).arg("dist-selftest").output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    for r in 0..2 {
        assert!(
            s.contains(&format!("[rank {r}] dist-selftest ok: rank {r} of 2")),
            "{s}"
        );
    }
}

#[test]
fn launch_fails_fast_naming_the_failed_rank() {
    let start = Instant::now();
    let child = launch_command(2)
        .args([
            "dist-selftest",
            "--mode",
            "loop",
            "--steps",
            "100000",
            "--die-rank",
            "1",
        ])
        .args(["--die-after", "2", "--timeout-s", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(child, Duration::from_secs(90), "launch");
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(
        out.status.code(),
        Some(mlperf_run::launch::selftest::DIED_ON_PURPOSE),
        "{}",
        text(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("worker rank 1 ended with exit status 3"),
        "{err}"
    );
    // The surviving rank noticed through its collective, not by being killed.
    assert!(
        err.contains("[rank 0] error:") && err.contains("allreduce failed on rank 0"),
        "{err}"
    );
}

#[test]
fn launch_rejects_bad_arguments() {
    let out = Command::new(BIN)
        .args(["launch", "--nproc-per-node", "0", "--", "dist-selftest"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--nproc-per-node must be at least 1"));
}

/// A `--grace-s` too large for a Duration (1e300) passed the check, the workers started, and
/// launch panicked (exit 101, a backtrace) turning it into one, leaving its workers behind.
/// It is refused with exit 2 before any worker starts.
#[test]
fn launch_refuses_a_grace_period_beyond_a_day_before_starting_workers() {
    for grace in ["1e300", "86401"] {
        let out = Command::new(BIN)
            .args(["launch", "--nproc-per-node", "1", "--grace-s", grace])
            .args(["--", "dist-selftest"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{grace}: {err}");
        assert!(
            err.contains("--grace-s must be a number of seconds within 0..=86400")
                && !err.contains("starting ranks")
                && !err.contains("panicked"),
            "{grace}: {err}"
        );
    }
}

/// A worker count beyond any node (once a capacity overflow: exit 101) and worker arguments
/// that are no mlperf-run command line (once the same parse error from each of N workers) or no
/// training command (N copies of `check` or `demo` over the same output) are
/// refused once, with exit 2, before any worker starts.
#[test]
fn launch_refuses_a_huge_count_and_bad_worker_arguments_before_starting_workers() {
    let run = |args: &[&str]| {
        let o = Command::new(BIN).args(args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(&[
        "launch",
        "--nproc-per-node",
        "18446744073709551615",
        "--",
        "dist-selftest",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--nproc-per-node 18446744073709551615 is more than 1024"),
        "{err}"
    );
    for (worker, want) in [
        ("resnett", "unrecognized subcommand 'resnett'"),
        ("data", "a subcommand is missing"),
        // the missing arguments are named (it once ended at "were not provided:")
        (
            "resnet",
            "the following required arguments were not provided: --division <DIVISION>;",
        ),
    ] {
        let (code, err) = run(&["launch", "--nproc-per-node", "2", "--", worker]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains("are not an mlperf-run command line")
                && err.contains(want)
                && err.contains("no worker was started")
                && !err.contains("[rank"),
            "{err}"
        );
    }
    // a command that is not a training run would run N times over the same output
    for worker in [
        &["check", "results"][..],
        &["-v", "demo"],
        &["launch", "--nproc-per-node", "1", "--", "bert"],
    ] {
        let mut args = vec!["launch", "--nproc-per-node", "2", "--"];
        args.extend_from_slice(worker);
        let (code, err) = run(&args);
        let command = worker.iter().find(|a| !a.starts_with('-')).unwrap();
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains(&format!("the workers would run `{command}`"))
                && err.contains(&format!("Run `mlperf-run {command} ...` directly"))
                && err.contains("no worker was started")
                && !err.contains("[rank"),
            "{err}"
        );
    }
}

/// LOCAL_WORLD_SIZE that disagrees with LOCAL_RANK or WORLD_SIZE (a hand-written launcher
/// environment) is named before the process group forms.
#[test]
fn an_inconsistent_local_world_size_is_named() {
    for (local_world, want) in [
        ("1", "LOCAL_RANK=1 is not below LOCAL_WORLD_SIZE=1"),
        (
            "four",
            "LOCAL_WORLD_SIZE=\"four\" is not a positive integer",
        ),
        ("3", "LOCAL_WORLD_SIZE=3 is larger than WORLD_SIZE=2"),
    ] {
        let o = rank_command(1, 2, free_port())
            .env("LOCAL_WORLD_SIZE", local_world)
            .args(["dist-selftest", "--timeout-s", "5"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
}

#[test]
fn killing_one_rank_ends_the_other_with_an_error() {
    let port = free_port();
    let args = ["--mode", "loop", "--steps", "100000", "--timeout-s", "30"];
    let r0 = worker(0, 2, port, &args);
    let mut r1 = worker(1, 2, port, &args);
    // Wait until rank 1 is training, then kill it without warning.
    let mut stdout = r1.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    let start = Instant::now();
    while !String::from_utf8_lossy(&seen).contains("step 2 ok") {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "rank 1 never reached step 2"
        );
        let n = stdout.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "rank 1 stopped early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    r1.kill().unwrap();
    r1.wait().unwrap();
    let killed = Instant::now();
    let out = finish(
        r0,
        Duration::from_secs(90),
        "rank 0 after its peer was killed",
    );
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(60),
        "rank 0 took {took:?} to notice"
    );
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("allreduce failed on rank 0 of 2") && err.contains("aborted"),
        "{err}"
    );
    eprintln!("rank 0 ended {took:?} after rank 1 was killed");
}

#[test]
fn rendezvous_times_out_with_a_clear_error_when_a_rank_never_comes() {
    let port = free_port();
    let start = Instant::now();
    let out = finish(
        worker(0, 2, port, &["--timeout-s", "3"]),
        Duration::from_secs(60),
        "lonely rank 0",
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("could not form the gloo process group as rank 0 of 2"),
        "{err}"
    );
    // rank 0 names who never came
    assert!(
        err.contains("1 of 2 ranks joined; missing ranks: 1"),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "took {:?}",
        start.elapsed()
    );
}

/// A rank whose master never answers ends with our one-line error, without the C++ stack traces
/// c10d logs with each connection retry; with -v they are printed.
#[test]
fn a_rank_without_its_master_fails_without_cpp_stack_traces() {
    let port = free_port();
    let run = |verbose: bool| {
        let mut cmd = rank_command(1, 2, port);
        cmd.env_remove("TORCH_CPP_LOG_LEVEL");
        if verbose {
            cmd.arg("-v");
        }
        let child = cmd
            .args(["dist-selftest", "--timeout-s", "2"])
            .spawn()
            .expect("start mlperf-run dist-selftest");
        let out = finish(child, Duration::from_secs(60), "rank 1 alone");
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(false);
    assert!(
        err.contains("could not form the gloo process group as rank 1 of 2")
            && !err.contains("frame #")
            && !err.contains(")..")
            && err.lines().count() <= 2,
        "{err}"
    );
    assert!(
        run(true).contains("frame #"),
        "-v shows libtorch's own lines"
    );
}

/// 2 processes x 1 micro-batch == 1 process accumulating the same 2 micro-batches (batch norm
/// sees the same batches), after K steps of SGD with momentum, through the bucketed averaging.
#[test]
fn two_process_training_equals_one_process_accumulating() {
    let dir = tempfile::tempdir().unwrap();
    let steps = "4";
    let port = free_port();
    let d2 = dir.path().join("2x1");
    let d2s = d2.to_str().unwrap();
    let kids: Vec<Child> = (0..2)
        .map(|r| {
            worker(
                r,
                2,
                port,
                &["--mode", "equiv", "--steps", steps, "--out", d2s],
            )
        })
        .collect();
    for (r, k) in kids.into_iter().enumerate() {
        let out = finish(k, Duration::from_secs(180), &format!("rank {r}"));
        assert!(out.status.success(), "rank {r}: {}", text(&out));
        // 1 KiB buckets: the tiny model's gradients span several buckets.
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("2 buckets"),
            "{}",
            text(&out)
        );
    }
    let single = |accum: &str, out: &Path| {
        let o = Command::new(BIN)
            .args([
                "dist-selftest",
                "--mode",
                "equiv",
                "--steps",
                steps,
                "--accum",
                accum,
            ])
            .arg("--out")
            .arg(out)
            .env_remove("RANK")
            .env_remove("WORLD_SIZE")
            .env_remove("SLURM_PROCID")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        load(&out.join("rank0.safetensors"))
    };
    let reference = single("2", &dir.path().join("1x2"));
    let (p0, p1) = (
        load(&d2.join("rank0.safetensors")),
        load(&d2.join("rank1.safetensors")),
    );
    assert_eq!(reference.len(), 6, "conv, bn, fc weights and biases");
    assert_eq!(max_rel_diff(&p0, &p1), 0.0, "replicas diverged");
    let diff = max_rel_diff(&p0, &reference);
    eprintln!("2x1 vs 1x2: max relative difference {diff:e}");
    assert!(
        diff < 1e-5,
        "2-process and accumulating 1-process runs differ by {diff:e}"
    );
    // Control: the comparison is sensitive (one micro-batch per step trains differently).
    let control = single("1", &dir.path().join("1x1"));
    let cdiff = max_rel_diff(&control, &reference);
    assert!(cdiff > 1e-3, "control differs by only {cdiff:e}");
}

/// Runs `dist-selftest --mode equiv` on 2 ranks with `extra` arguments; returns rank 0's
/// parameters (after checking rank 1's are identical) and rank 0's stdout.
fn equiv_2x(dir: &Path, name: &str, extra: &[&str]) -> (Vec<(String, tch::Tensor)>, String) {
    let port = free_port();
    let out_dir = dir.join(name);
    let out_s = out_dir.to_str().unwrap().to_string();
    let mut args = vec!["--mode", "equiv", "--steps", "4", "--out", &out_s];
    args.extend_from_slice(extra);
    let kids: Vec<Child> = (0..2).map(|r| worker(r, 2, port, &args)).collect();
    let mut stdout0 = String::new();
    for (r, k) in kids.into_iter().enumerate() {
        let out = finish(k, Duration::from_secs(180), &format!("{name} rank {r}"));
        assert!(out.status.success(), "{name} rank {r}: {}", text(&out));
        if r == 0 {
            stdout0 = String::from_utf8_lossy(&out.stdout).to_string();
        }
    }
    let (p0, p1) = (
        load(&out_dir.join("rank0.safetensors")),
        load(&out_dir.join("rank1.safetensors")),
    );
    assert_eq!(max_rel_diff(&p0, &p1), 0.0, "{name}: replicas diverged");
    (p0, stdout0)
}

/// The "N gradient all-reduces of B bytes" of an equiv run's output.
fn allreduce_counts(stdout: &str) -> (u64, u64) {
    let line = stdout
        .lines()
        .find(|l| l.contains("gradient all-reduces of"))
        .unwrap_or_else(|| panic!("no all-reduce counts in {stdout}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "gradient").unwrap();
    (
        words[at - 1].parse().unwrap(),
        words[at + 3].parse().unwrap(),
    )
}

/// The all-reduce overlapped with the backward (autograd hooks, buckets rebuilt in gradient
/// order after step 1, accumulation reduced on the last micro-batch only), through both
/// gradient paths (`.grad` buffers as BERT, autograd.grad plus an accumulator as the ResNet
/// trainer): 2 processes x 1 micro-batch are bit-identical to 1 process accumulating the same
/// 2 micro-batches, and 2 x 2 micro-batches are bit-identical to the blocking all-reduce after
/// the backward, with the same collectives.
#[test]
fn overlapped_allreduce_is_bit_identical_to_accumulating_and_to_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .args([
            "dist-selftest",
            "--mode",
            "equiv",
            "--steps",
            "4",
            "--accum",
            "2",
            "--out",
        ])
        .arg(dir.path().join("1x2"))
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .env_remove("SLURM_PROCID")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let single = load(&dir.path().join("1x2").join("rank0.safetensors"));
    let on = ["--overlap", "true"];
    let returned = ["--overlap", "true", "--returned-grads"];
    let (hooked_2x1, out) = equiv_2x(dir.path(), "hooked_2x1", &on);
    assert!(out.contains("overlap true"), "{out}");
    let (returned_2x1, _) = equiv_2x(dir.path(), "returned_2x1", &returned);
    assert_eq!(
        max_rel_diff(&hooked_2x1, &single),
        0.0,
        ".grad hooks vs 1x2"
    );
    assert_eq!(
        max_rel_diff(&returned_2x1, &single),
        0.0,
        "returned gradients vs 1x2"
    );

    let accum = ["--accum", "2"];
    let (blocking, out_b) = equiv_2x(dir.path(), "blocking", &accum);
    assert!(out_b.contains("overlap false"), "{out_b}");
    let (hooked, out_h) = equiv_2x(dir.path(), "hooked", &[&accum[..], &on].concat());
    let (returned, _) = equiv_2x(dir.path(), "returned", &[&accum[..], &returned].concat());
    assert_eq!(
        max_rel_diff(&hooked, &blocking),
        0.0,
        "2x2 .grad hooks vs blocking"
    );
    assert_eq!(
        max_rel_diff(&returned, &blocking),
        0.0,
        "2x2 returned vs blocking"
    );
    // the same collectives: one per bucket and step, the same bytes
    assert_eq!(allreduce_counts(&out_h), allreduce_counts(&out_b));
    let (count, bytes) = allreduce_counts(&out_b);
    assert!(count >= 8, "4 steps x several 1 KiB buckets, got {count}");
    assert!(bytes > 0);
    // control: the comparison sees a different training (no accumulation, 1x1)
    let control = single_control(dir.path());
    assert!(max_rel_diff(&control, &single) > 1e-3);
}

fn single_control(dir: &Path) -> Vec<(String, tch::Tensor)> {
    let o = Command::new(BIN)
        .args([
            "dist-selftest",
            "--mode",
            "equiv",
            "--steps",
            "4",
            "--overlap",
            "true",
            "--out",
        ])
        .arg(dir.join("1x1"))
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .env_remove("SLURM_PROCID")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    load(&dir.join("1x1").join("rank0.safetensors"))
}

/// Bucket-wise clipping before the all-reduce changes the training (a small clip norm bites)
/// but not the exchange: the same number of all-reduces with the same bytes.
#[test]
fn bucket_wise_clipping_keeps_the_allreduces_and_clips() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, out_p) = equiv_2x(dir.path(), "plain", &["--overlap", "true"]);
    let (clipped, out_c) = equiv_2x(
        dir.path(),
        "clipped",
        &["--overlap", "true", "--bucket-clip", "0.01"],
    );
    let (blocking_clipped, out_bc) =
        equiv_2x(dir.path(), "blocking_clipped", &["--bucket-clip", "0.01"]);
    assert_eq!(allreduce_counts(&out_c), allreduce_counts(&out_p));
    assert_eq!(allreduce_counts(&out_bc), allreduce_counts(&out_p));
    let moved = max_rel_diff(&clipped, &plain);
    assert!(
        moved > 1e-3,
        "clipping to 0.01 changed the parameters by only {moved:e}"
    );
    // both paths clip (their buckets differ after step 1, so the values do too, a little)
    let both = max_rel_diff(&blocking_clipped, &plain);
    assert!(
        both > 1e-3,
        "blocking clipping changed the parameters by only {both:e}"
    );
}
