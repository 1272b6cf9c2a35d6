//! No panic reaches a user through a closed pipe (`mlperf-run score DIR | head -c 10`): every
//! subcommand's `--help`, and the real output of the log-only subcommands (check, score, regress,
//! sysinfo, package, verify), into a stdout whose reader goes away end quietly with exit status
//! 0, no "panicked" and no error on stderr; package and `regress --record` still finish their
//! work. Each command runs twice: with the pipe closed before its first byte (the child's first
//! write fails, whatever its size), and closing after 1 byte, with the pipe's capacity cut to one
//! page so that an output longer than that is cut mid-way.

use crate::common::package as ps;
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};

/// The smallest pipe capacity Linux allows (one page).
const PIPE_BYTES: usize = 4096;

/// How the reader of the child's stdout goes away.
#[derive(Debug, Clone, Copy)]
enum Reader {
    /// Closed before the child starts.
    GoneAtOnce,
    /// Reads 1 byte, then closes.
    OneByte,
}

/// Run mlperf-run `args` with stdout into a pipe that `reader` closes; panics unless it ended
/// with 0 and a quiet stderr.
fn assert_quiet_through_closed_pipe(args: &[OsString], reader: Reader, scratch: &Path) {
    let (mut read_end, write_end) = std::io::pipe().unwrap();
    // SAFETY: fcntl on a pipe descriptor this process owns.
    let rc = unsafe { libc::fcntl(read_end.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES as i32) };
    assert!(rc >= 0, "F_SETPIPE_SZ: {}", std::io::Error::last_os_error());
    let stderr_path = scratch.join("stderr.txt");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mlperf-run"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(write_end)
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    if let Reader::GoneAtOnce = reader {
        drop(read_end);
        let mut child = cmd.spawn().unwrap();
        drop(cmd); // our copy of the write end
        let status = child.wait().unwrap();
        check_status(args, reader, status, &stderr_path);
        return;
    }
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let mut byte = [0u8; 1];
    let _ = read_end.read(&mut byte).unwrap();
    drop(read_end);
    let status = child.wait().unwrap();
    check_status(args, reader, status, &stderr_path);
}

fn check_status(
    args: &[OsString],
    reader: Reader,
    status: std::process::ExitStatus,
    stderr_path: &Path,
) {
    let stderr = std::fs::read_to_string(stderr_path).unwrap();
    let shown = args
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "mlperf-run {shown} ({reader:?}) panicked, exit {:?}:\n{stderr}",
        status.code()
    );
    assert_eq!(
        status.code(),
        Some(0),
        "mlperf-run {shown} ({reader:?}): a closed stdout ends quietly with 0:\n{stderr}"
    );
    assert!(
        !stderr.lines().any(|l| l.starts_with("error")),
        "mlperf-run {shown} ({reader:?}) printed an error:\n{stderr}"
    );
}

fn through_both(args: &[OsString], scratch: &Path) {
    for reader in [Reader::GoneAtOnce, Reader::OneByte] {
        assert_quiet_through_closed_pipe(args, reader, scratch);
    }
}

/// The command's whole stdout, when nothing closes it (and its exit status).
fn full_output(args: &[OsString]) -> (Option<i32>, Vec<u8>) {
    let out = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args(args)
        .output()
        .unwrap();
    (out.status.code(), out.stdout)
}

fn os(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    args.iter().map(|a| a.as_ref().to_os_string()).collect()
}

/// The subcommands `mlperf-run ARGS --help` lists (its "Commands:" section, without `help`).
fn subcommands(args: &[String]) -> Vec<String> {
    let mut with_help = args.to_vec();
    with_help.push("--help".into());
    let out = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args(&with_help)
        .output()
        .unwrap();
    assert!(out.status.success(), "mlperf-run {with_help:?} failed");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // "  name  what it does", not the description's continuation lines
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_help_ends_quietly_when_stdout_closes() {
    let scratch = tempfile::tempdir().unwrap();
    let mut todo = vec![Vec::<String>::new()];
    let mut seen = 0;
    while let Some(path) = todo.pop() {
        let mut args: Vec<OsString> = path.iter().map(OsString::from).collect();
        args.push("--help".into());
        through_both(&args, scratch.path());
        seen += 1;
        for sub in subcommands(&path) {
            let mut deeper = path.clone();
            deeper.push(sub);
            todo.push(deeper);
        }
    }
    // mlperf-run itself, its 11 subcommands, and data's
    assert!(seen >= 14, "only {seen} --help pages found");
}

#[test]
fn log_only_subcommands_end_quietly_when_stdout_closes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("results");
    // several result sets, so that check's and score's outputs pass the pipe's capacity
    for k in 0..12 {
        let system = format!("sys{k}");
        ps::write_set(
            &root.join(&system).join("resnet"),
            "open",
            &system,
            &ps::distinct_seeds(5),
        );
    }
    let toml = ps::write_system_toml(dir.path(), "cloud");
    let baseline = dir.path().join("baseline.csv");
    let set0 = root.join("sys0/resnet");

    // outputs cut mid-way: longer than the pipe holds
    for args in [
        os(&[&"check", &root]),
        os(&[&"check", &"--sets", &"--format", &"json", &root]),
        os(&[&"score", &root, &"--format", &"json"]),
        os(&[&"score", &root]),
    ] {
        let (code, full) = full_output(&args);
        assert_eq!(code, Some(0), "{args:?}");
        eprintln!("{args:?}: {} bytes", full.len());
        assert!(
            full.len() > PIPE_BYTES,
            "{args:?}: {} bytes of output fit the pipe; the test needs more",
            full.len()
        );
        through_both(&args, dir.path());
    }

    // regress --record: the baseline is written although nobody reads the table
    let record = os(&[&"regress", &root, &"--baseline", &baseline, &"--record"]);
    assert_quiet_through_closed_pipe(&record, Reader::GoneAtOnce, dir.path());
    let recorded = std::fs::read_to_string(&baseline).expect("regress --record wrote no baseline");
    assert!(recorded.contains("sys11"), "{recorded}");
    through_both(&record, dir.path());
    through_both(
        &os(&[&"regress", &root, &"--baseline", &baseline]),
        dir.path(),
    );

    for args in [
        os(&[&"sysinfo"]),
        os(&[&"sysinfo", &"--json"]),
        os(&[&"sysinfo", &"--system-config", &toml]),
    ] {
        through_both(&args, dir.path());
    }

    // the data subcommands' reports (what they wrote is still written: the report comes last)
    let images = dir.path().join("images");
    let bert = dir.path().join("bert");
    for args in [
        os(&[
            &"data",
            &"synth-imagenet",
            &"--out",
            &images,
            &"--classes",
            &"2",
            &"--per-class",
            &"2",
            &"--val-per-class",
            &"1",
            &"--min-size",
            &"32",
            &"--max-size",
            &"40",
            &"--force",
        ]),
        os(&[
            &"data",
            &"synth-bert",
            &"--out",
            &bert,
            &"--train-samples",
            &"64",
            &"--eval-samples",
            &"16",
        ]),
        os(&[&"data", &"bert-pack", &"--dir", &bert]),
        os(&[
            &"data",
            &"bert-balance",
            &"--dir",
            &bert,
            &"--ranks",
            &"2",
            &"--batch",
            &"4",
        ]),
    ] {
        through_both(&args, dir.path());
    }
    assert!(
        images.join("train").is_dir(),
        "synth-imagenet wrote nothing"
    );

    // package: the tree is written although nobody reads the table; then verify it
    for (i, reader) in [Reader::GoneAtOnce, Reader::OneByte]
        .into_iter()
        .enumerate()
    {
        let out = dir.path().join(format!("package{i}"));
        let args = os(&[
            &"package",
            &"--submitter",
            &"Org",
            &"--system",
            &"sys0",
            &"--division",
            &"open",
            &"--system-config",
            &toml,
            &"--out",
            &out,
            &"--tarball",
            &set0,
        ]);
        assert_quiet_through_closed_pipe(&args, reader, dir.path());
        assert!(
            out.join("Org/results/sys0/resnet/result_4.txt").is_file(),
            "package ({reader:?}) did not write the tree"
        );
        assert!(out.join("Org.tar.gz").is_file());
        for target in [out.clone(), out.join("Org.tar.gz")] {
            let args = os(&[&"verify", &target]);
            assert_eq!(full_output(&args).0, Some(0), "{args:?}");
            through_both(&args, dir.path());
        }
    }

    #[cfg(feature = "torch")]
    for benchmark in ["resnet", "bert"] {
        through_both(&os(&[&benchmark, &"--recipe", &"list"]), dir.path());
    }
}

/// A failed verification is not hidden by a closed stdout: its verdict is not on stdout.
#[test]
fn a_closed_stdout_does_not_hide_a_failed_verify() {
    let dir = tempfile::tempdir().unwrap();
    let toml = ps::write_system_toml(dir.path(), "cloud");
    let set = dir.path().join("runs");
    ps::write_set(&set, "open", "sys_v", &ps::distinct_seeds(5));
    let out = dir.path().join("out");
    let args = os(&[
        &"package",
        &"--submitter",
        &"Org",
        &"--system",
        &"sys_v",
        &"--division",
        &"open",
        &"--system-config",
        &toml,
        &"--out",
        &out,
        &set,
    ]);
    assert_eq!(full_output(&args).0, Some(0));
    let file = out.join("Org/results/sys_v/resnet/result_1.txt");
    let mut bytes = std::fs::read(&file).unwrap();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();
    let (read_end, write_end) = std::io::pipe().unwrap();
    drop(read_end);
    let o = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args(["verify".as_ref(), out.as_os_str()])
        .stdout(write_end)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("result_1.txt"), "{stderr}");
}
