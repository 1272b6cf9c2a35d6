//! Two writers, one results folder: a run set holds `RESULTS/SYSTEM/BENCHMARK/run_set.lock`
//! (with its pid) while it runs. A second set into the same folder is refused, naming the folder
//! and the holder's pid, before it touches a result file; a lock left by a killed process is
//! taken over, saying so; the lock file is gone when a set ends, whether it succeeded, failed,
//! or was stopped by Ctrl-C (once: the set's normal end; twice: the handler exits at once).
//! The set's own logic runs with a fake executor; the Ctrl-C and two-process cases run the tiny
//! CPU preset through the binary.

use mlperf_run::mllog::{keys, Emitter, Sink};
use mlperf_run::runs::lock::{SetLock, LOCK_FILE};
use mlperf_run::runs::{run_set, RunOutcome, RunRequest, SetSpec, Status};
use std::path::Path;

fn spec(root: &Path, runs: usize, resume: bool) -> SetSpec {
    SetSpec {
        results_root: root.into(),
        system: "sys".into(),
        benchmark: "resnet".into(),
        runs,
        seeds: None,
        resume,
        writer: true,
    }
}

/// A fake run: a log with seed, run_start and run_stop.
fn fake_run(req: &RunRequest) -> anyhow::Result<RunOutcome> {
    let mut e = Emitter::new(vec![Sink::file(&req.log_path, false)?]);
    e.event(keys::SEED, req.seed)?;
    e.start(
        keys::RUN_START,
        serde_json::Value::Null,
        mlperf_run::meta!(),
    )?;
    e.end(
        keys::RUN_STOP,
        serde_json::Value::Null,
        mlperf_run::meta! {"status" => "success"},
    )?;
    Ok(RunOutcome::new(req.seed, Status::Success))
}

/// A run that was cut (its outcome's `stop_set`: a peer died or could not be reached, Ctrl-C on
/// another rank, a failed CUDA graph capture) stops the set after it, as Ctrl-C does: the runs
/// before it are kept, its log goes to interrupted/ (it did not end on its own merits), and
/// `--resume` runs it and the rest, which finishes the set. The same seeds with `--seeds`.
#[test]
fn a_cut_run_ends_the_set_its_log_goes_aside_and_resume_runs_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec(dir.path(), 4, false);
    s.seeds = Some(vec![11, 12, 13, 14]);
    let mut runs = 0;
    let out = run_set(
        &s,
        &mut |r: &RunRequest| {
            runs += 1;
            let mut out = fake_run(r)?;
            if r.index == 1 {
                out.stop_set = Some("gradient all-reduce failed on rank 0 of 2".into());
            }
            Ok(out)
        },
        |_| {},
    )
    .unwrap();
    assert_eq!(runs, 2, "the set stopped after the cut run");
    assert!(out.interrupted);
    assert_eq!(
        out.cut,
        Some((1, "gradient all-reduce failed on rank 0 of 2".to_string()))
    );
    assert_eq!(
        out.runs.iter().map(|r| r.index).collect::<Vec<_>>(),
        vec![0],
        "only the run before the cut one is in the set"
    );
    assert!(!s.result_path(1).exists(), "the cut run's log left the set");
    assert_eq!(out.moved_aside.len(), 1);
    let aside = std::fs::read_to_string(&out.moved_aside[0]).unwrap();
    assert!(
        out.moved_aside[0].starts_with(s.set_dir().join("interrupted"))
            && aside.contains("run_stop")
            && aside.contains("12"),
        "{}: {aside}",
        out.moved_aside[0].display()
    );
    assert!(!s.set_dir().join(LOCK_FILE).exists());
    let mut resumed_seeds = Vec::new();
    let mut again = s.clone();
    again.resume = true;
    let resumed = run_set(
        &again,
        &mut |r: &RunRequest| {
            resumed_seeds.push(r.seed);
            fake_run(r)
        },
        |_| {},
    )
    .unwrap();
    assert!(!resumed.interrupted);
    assert_eq!(
        resumed_seeds,
        vec![12, 13, 14],
        "the resume ran the cut run again, then the rest"
    );
    assert_eq!(resumed.runs.len(), 4);
    assert!(resumed
        .runs
        .iter()
        .all(|r| r.status.as_deref() == Some("success")));
}

/// The pid of a process that has exited.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn a_held_lock_refuses_a_second_set_naming_folder_and_pid() {
    let dir = tempfile::tempdir().unwrap();
    let s = spec(dir.path(), 3, false);
    std::fs::create_dir_all(s.set_dir()).unwrap();
    let held = SetLock::acquire(&s.set_dir()).unwrap();
    assert!(held.took_over().is_none());
    let mut ran = 0;
    for resume in [false, true] {
        let err = run_set(
            &spec(dir.path(), 3, resume),
            &mut |r: &RunRequest| {
                ran += 1;
                fake_run(r)
            },
            |_| {},
        )
        .expect_err("a second set into a held folder must be refused");
        let msg = format!("{err:#}");
        assert!(msg.contains(&s.set_dir().display().to_string()), "{msg}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert!(msg.contains(LOCK_FILE), "{msg}");
    }
    assert_eq!(ran, 0, "a refused set runs nothing");
    assert!(mlperf_run::score::result_files(&s.set_dir())
        .unwrap()
        .is_empty());
    // the refused sets left the holder's lock file alone
    let text = std::fs::read_to_string(s.set_dir().join(LOCK_FILE)).unwrap();
    assert!(
        text.contains(&format!("pid: {}", std::process::id())),
        "{text}"
    );
    drop(held);
    assert!(!s.set_dir().join(LOCK_FILE).exists());
    let out = run_set(&s, &mut |r: &RunRequest| fake_run(r), |_| {}).unwrap();
    assert_eq!(out.runs.len(), 3, "once the holder ends, the set runs");
}

#[test]
fn a_stale_lock_of_an_exited_process_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let s = spec(dir.path(), 2, false);
    std::fs::create_dir_all(s.set_dir()).unwrap();
    let pid = dead_pid();
    let lock = s.set_dir().join(LOCK_FILE);
    std::fs::write(
        &lock,
        format!("pid: {pid}\nhost: elsewhere\nstarted: 2026-01-01T00:00:00Z\n"),
    )
    .unwrap();
    let mut holder_during_run = None;
    let out = run_set(
        &s,
        &mut |r: &RunRequest| {
            holder_during_run = std::fs::read_to_string(&lock).ok();
            fake_run(r)
        },
        |_| {},
    )
    .unwrap();
    assert_eq!(out.runs.len(), 2);
    let note = out.took_over_lock.expect("the take-over is reported");
    assert!(note.contains(&format!("pid {pid}")), "{note}");
    assert!(note.contains(&lock.display().to_string()), "{note}");
    let during = holder_during_run.expect("the lock file exists while the set runs");
    assert!(
        during.contains(&format!("pid: {}", std::process::id())),
        "{during}"
    );
    assert!(!lock.exists(), "the lock file is gone after the set");
}

#[test]
fn the_lock_file_is_gone_after_a_set_that_succeeded_or_failed() {
    let dir = tempfile::tempdir().unwrap();
    let s = spec(dir.path(), 2, false);
    let lock = s.set_dir().join(LOCK_FILE);

    let out = run_set(
        &s,
        &mut |r: &RunRequest| {
            assert!(lock.exists(), "held while the set runs");
            fake_run(r)
        },
        |_| {},
    )
    .unwrap();
    assert!(out.took_over_lock.is_none());
    assert!(!lock.exists(), "gone after a set that succeeded");

    // refused (results already there, no --resume) after taking the lock
    assert!(run_set(&s, &mut |r: &RunRequest| fake_run(r), |_| {}).is_err());
    assert!(!lock.exists(), "gone after a set that was refused");

    // fails mid-set: the run crashes and its log cannot be closed (a folder where it should be)
    let s3 = spec(dir.path(), 3, true);
    let err = run_set(
        &s3,
        &mut |r: &RunRequest| {
            std::fs::create_dir_all(&r.log_path).unwrap();
            anyhow::bail!("simulated crash")
        },
        |_| {},
    )
    .expect_err("an unclosable log fails the set");
    assert!(format!("{err:#}").contains("result_2.txt"), "{err:#}");
    assert!(!lock.exists(), "gone after a set that failed");
}

/// Resumed with another --seeds list, a set would mix two lists (and could repeat a seed): the
/// kept run's seed and the one --seeds gives are named, and nothing runs.
#[test]
fn resuming_with_other_seeds_is_refused_naming_the_file_and_both_seeds() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec(dir.path(), 3, false);
    s.seeds = Some(vec![11, 12, 13]);
    let first = run_set(&s, &mut |r: &RunRequest| fake_run(r), |_| {}).unwrap();
    assert_eq!(first.runs.len(), 3);
    std::fs::remove_file(s.result_path(2)).unwrap();
    let mut again = spec(dir.path(), 3, true);
    again.seeds = Some(vec![21, 22, 23]);
    let mut ran = 0;
    let err = run_set(
        &again,
        &mut |r: &RunRequest| {
            ran += 1;
            fake_run(r)
        },
        |_| {},
    )
    .unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("result_0.txt ran seed 11, but --seeds gives 21 for run 0")
            && msg.contains("original --seeds"),
        "{msg}"
    );
    assert_eq!(ran, 0);
    // the same list resumes
    again.seeds = Some(vec![11, 12, 13]);
    let out = run_set(&again, &mut |r: &RunRequest| fake_run(r), |_| {}).unwrap();
    assert_eq!(out.runs.len(), 3);
}

/// A system name that is not one folder (empty, a path, '..') would put the results outside
/// RESULTS/SYSTEM/BENCHMARK; a results folder in the place of a file is named as such.
#[test]
fn a_system_name_that_is_no_folder_name_and_a_results_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for system in ["", "../../elsewhere", "a/b", ".."] {
        let mut s = spec(dir.path(), 1, false);
        s.system = system.into();
        let err = run_set(&s, &mut |r: &RunRequest| fake_run(r), |_| {}).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains(&format!("the system name {system:?}")) && msg.contains("--system NAME"),
            "{msg}"
        );
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing made"
    );
    let file = dir.path().join("results.txt");
    std::fs::write(&file, "x").unwrap();
    let s = spec(&file, 1, false);
    let msg = format!(
        "{:#}",
        run_set(&s, &mut |r: &RunRequest| fake_run(r), |_| {}).unwrap_err()
    );
    assert!(
        msg.contains(&format!("{} is a file", file.display())) && msg.contains("--results"),
        "{msg}"
    );
}

/// The tiny CPU ResNet set through the binary.
#[cfg(feature = "torch")]
mod binary {
    use super::LOCK_FILE;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    fn set_command(results: &Path, resume: bool) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_mlperf-run"));
        c.args(["resnet", "--division", "open", "--config"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu.toml"))
            .arg("--results")
            .arg(results)
            .args(["--system", "tiny", "--runs", "2"]);
        if resume {
            c.arg("--resume");
        }
        c
    }

    /// Wait until `path` exists (the set holds its lock and has started its first run).
    fn wait_for(child: &mut Child, path: &Path) {
        let deadline = Instant::now() + Duration::from_secs(240);
        while !path.exists() {
            assert!(
                Instant::now() < deadline,
                "{} never appeared",
                path.display()
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "the set ended before {} appeared",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(child: &Child, signal: i32) {
        // SAFETY: kill on our own child's pid.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    }

    fn set_dir(results: &Path) -> PathBuf {
        results.join("tiny/resnet")
    }

    #[test]
    fn a_second_set_into_the_same_folder_is_refused_and_ctrl_c_removes_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let set = set_dir(tmp.path());
        let mut first = set_command(tmp.path(), false)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for(&mut first, &set.join("result_0.txt"));
        let lock = std::fs::read_to_string(set.join(LOCK_FILE)).unwrap();
        assert!(lock.contains(&format!("pid: {}", first.id())), "{lock}");

        for resume in [false, true] {
            let second = set_command(tmp.path(), resume).output().unwrap();
            let stderr = String::from_utf8_lossy(&second.stderr);
            assert_eq!(second.status.code(), Some(2), "{stderr}");
            assert!(stderr.contains(&set.display().to_string()), "{stderr}");
            assert!(stderr.contains(&format!("pid {}", first.id())), "{stderr}");
        }
        assert!(
            !set.join("interrupted").exists(),
            "a refused --resume moved the running log aside"
        );

        signal(&first, libc::SIGINT);
        let status = first.wait().unwrap();
        // 130: the set stopped there (how many runs finished before the signal depends on the
        // machine's speed: a run of the tiny preset takes about a second)
        assert_eq!(status.code(), Some(130));
        assert!(!set.join(LOCK_FILE).exists(), "gone after Ctrl-C");
        // a run that Ctrl-C cut is not a result: its log went to interrupted/, for a resume
        for entry in std::fs::read_dir(&set).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "txt") {
                let log = std::fs::read_to_string(&path).unwrap();
                assert!(
                    !log.contains("\"reason\": \"interrupted\""),
                    "{} is a cut run left in the set: {log}",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn a_second_ctrl_c_exits_at_once_and_removes_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let set = set_dir(tmp.path());
        let mut child = set_command(tmp.path(), false)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&mut child, &set.join("result_0.txt"));
        assert!(set.join(LOCK_FILE).exists());
        // Two stops that cannot merge (SIGINT and SIGTERM), delivered together while the
        // process is stopped, so that the first cannot end the set before the second comes.
        signal(&child, libc::SIGSTOP);
        signal(&child, libc::SIGINT);
        signal(&child, libc::SIGTERM);
        signal(&child, libc::SIGCONT);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "{stderr}");
        assert!(stderr.contains("interrupted twice"), "{stderr}");
        assert!(!set.join(LOCK_FILE).exists(), "gone after a second Ctrl-C");
    }

    /// Through the binary: a system name that is no folder name is refused with exit 2 and
    /// the message, before anything is made.
    #[test]
    fn the_binary_refuses_a_system_name_that_is_no_folder_name() {
        let tmp = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
            .args(["resnet", "--division", "open", "--config"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu.toml"))
            .arg("--results")
            .arg(tmp.path())
            .args(["--system", "../outside", "--runs", "1"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("the system name \"../outside\"") && stderr.contains("--system NAME"),
            "{stderr}"
        );
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }
}
