//! Hostile trees (issue 42, part 5): `score`, `check` and `package` given symbolic links (out
//! of the tree, loops), FIFOs, unreadable files and folders, a folder of 10,000 files and a
//! 2 GB log answer with an error naming the file and what to do, or the right answer, in
//! bounded time and memory; `package` reads no link into a package and writes nothing outside
//! OUT. The policy is in docs/packaging.md ("Hostile trees") and src/util/tree.rs.

use crate::common;

use crate::common::package as ps;
use mlperf_run::mllog;
use mlperf_run::score::{score_path, ScoreOptions};
use mlperf_run::submission::{package, result_sets};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a command run by [`run_cli`] did.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
    /// Peak anonymous resident memory of the process, in KiB: the largest RssAnon seen while
    /// it ran (polled every 20 ms). Anonymous memory is what reading a log whole would grow;
    /// VmHWM also counts the pages of libtorch's libraries a command happens to touch, which
    /// varies by tens of MB from run to run (wait4's ru_maxrss would count the test binary's
    /// own memory, which a child inherits at exec).
    max_rss_kib: u64,
    seconds: f64,
}

/// Run `mlperf-run ARGS`, killing it (and failing) past `limit`: a command that waits on a
/// FIFO must not pass by hanging. Its peak RSS comes from wait4's rusage of that very child.
// The child is reaped by wait4 (for its rusage), which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn run_cli(args: &[&str], limit: Duration) -> Ran {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args(args)
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let read_out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).ok();
        s
    });
    let read_err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).ok();
        s
    });
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut max_rss_kib = 0;
    loop {
        max_rss_kib = max_rss_kib.max(rss_anon_kib(pid));
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(r >= 0, "wait4 failed");
        if r == pid {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            panic!(
                "mlperf-run {} still running after {limit:?} (blocked?)",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Ran {
        code,
        stdout: read_out.join().unwrap(),
        stderr: read_err.join().unwrap(),
        max_rss_kib,
        seconds: start.elapsed().as_secs_f64(),
    }
}

/// The anonymous resident memory (RssAnon) of process `pid` now, in KiB; 0 once it has exited.
fn rss_anon_kib(pid: libc::pid_t) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("RssAnon:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// An error exit (2) with `needle` in stderr, and no panic.
fn assert_error(ran: &Ran, needle: &str) {
    assert!(!ran.stderr.contains("panicked"), "{}", ran.stderr);
    assert_eq!(
        ran.code, 2,
        "stdout: {}\nstderr: {}",
        ran.stdout, ran.stderr
    );
    assert!(
        ran.stderr.contains(needle),
        "stderr lacks '{needle}':\n{}",
        ran.stderr
    );
}

fn five_open_runs(set: &Path) {
    std::fs::create_dir_all(set).unwrap();
    for (i, m) in [10.0, 11.0, 12.0, 13.0, 14.0].iter().enumerate() {
        let text = common::emitter_logs::open_resnet_text(*m, Some("success"), 256, 1000.0);
        std::fs::write(set.join(format!("result_{i}.txt")), text).unwrap();
    }
}

fn err_of<T>(r: anyhow::Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error, got an answer"),
        Err(e) => format!("{e:#}"),
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(s(path)).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
}

/// A closed ResNet set of 5 logs under `dir` and a system TOML; the logs' paths.
fn closed_set(dir: &Path) -> (Vec<PathBuf>, PathBuf) {
    let toml = ps::write_system_toml(dir, "onprem");
    let logs = ps::write_set(&dir.join("runs"), "closed", "sys_a", &ps::distinct_seeds(5));
    (logs, toml)
}

#[test]
fn links_inside_the_tree_are_read_links_out_of_it_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("tree");
    let set = tree.join("results/sysA/resnet");
    five_open_runs(&set);
    // result_4.txt a link to a file elsewhere in the tree: read (score), refused (package)
    std::fs::create_dir_all(tree.join("raw")).unwrap();
    std::fs::rename(set.join("result_4.txt"), tree.join("raw/run4.log")).unwrap();
    symlink("../../../raw/run4.log", set.join("result_4.txt")).unwrap();
    let sets = score_path(&tree, &ScoreOptions::default()).unwrap();
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0].runs.len(), 5);
    assert_eq!(sets[0].olympic, Some(12.0));
    // a link to a folder inside the tree is not followed: no set is scored twice, no loop
    symlink("..", set.join("up")).unwrap();
    symlink(&tree, tree.join("results/loop")).unwrap();
    assert_eq!(
        score_path(&tree, &ScoreOptions::default()).unwrap().len(),
        1
    );

    // a link out of the tree: refused, naming the link and its target
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::rename(tree.join("raw/run4.log"), outside.join("run4.log")).unwrap();
    std::fs::remove_file(set.join("result_4.txt")).unwrap();
    symlink(outside.join("run4.log"), set.join("result_4.txt")).unwrap();
    let err = err_of(score_path(&tree, &ScoreOptions::default()));
    assert!(
        err.contains("result_4.txt is a symbolic link to")
            && err.contains("outside")
            && err.contains("copy the file into the tree"),
        "{err}"
    );
    assert_error(
        &run_cli(&["score", s(&tree)], Duration::from_secs(20)),
        "outside",
    );
    assert_error(
        &run_cli(&["check", s(&tree)], Duration::from_secs(20)),
        "outside",
    );
    // a link to a folder out of the tree
    std::fs::remove_file(set.join("result_4.txt")).unwrap();
    symlink(&outside, tree.join("results/elsewhere")).unwrap();
    let err = err_of(score_path(&tree, &ScoreOptions::default()));
    assert!(
        err.contains("elsewhere is a symbolic link to the folder"),
        "{err}"
    );

    // package: no link inside a results folder is read, wherever it points
    let (mut logs, toml) = closed_set(tmp.path());
    let runs = logs[0].parent().unwrap().to_path_buf();
    std::fs::rename(&logs[4], tmp.path().join("run4.txt")).unwrap();
    symlink(tmp.path().join("run4.txt"), &logs[4]).unwrap();
    let out = tmp.path().join("out");
    let err = err_of(package::package(&ps::options(
        "Org",
        "sys_a",
        "closed",
        vec![runs.clone()],
        &out,
        &toml,
    )));
    assert!(
        err.contains("result_4.txt is a symbolic link")
            && err.contains("no link inside a results folder is read into a package"),
        "{err}"
    );
    assert!(!out.exists(), "nothing written on refusal");
    // named on the command line, the same link is read (the user chose it), and only once
    logs.push(tmp.path().join("run4.txt"));
    let report =
        package::package(&ps::options("Org", "sys_a", "closed", logs, &out, &toml)).unwrap();
    let packaged = report.org_dir.join("results/sys_a/resnet");
    let results = std::fs::read_dir(&packaged)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("result_"))
        .count();
    assert_eq!(results, 5);
    assert!(std::fs::symlink_metadata(packaged.join("result_4.txt"))
        .unwrap()
        .is_file());
}

#[test]
fn symlink_loops_end_with_an_error_naming_the_link() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("results/sysA/resnet");
    five_open_runs(&set);
    symlink("result_5.txt", set.join("result_6.txt")).unwrap();
    symlink("result_6.txt", set.join("result_5.txt")).unwrap();
    let err = err_of(score_path(tmp.path(), &ScoreOptions::default()));
    assert!(
        err.contains("is a symbolic link loop (-> result_") && err.contains("remove the link"),
        "{err}"
    );
    for cmd in ["score", "check"] {
        let ran = run_cli(&[cmd, s(tmp.path())], Duration::from_secs(20));
        assert_error(&ran, "symbolic link loop");
    }
    // the same loop under a name nobody reads is still refused (a walk cannot tell what it
    // stood for); a self-loop too
    std::fs::remove_file(set.join("result_5.txt")).unwrap();
    std::fs::remove_file(set.join("result_6.txt")).unwrap();
    symlink("self", set.join("self")).unwrap();
    let err = err_of(score_path(tmp.path(), &ScoreOptions::default()));
    assert!(err.contains("self is a symbolic link loop"), "{err}");
    let err = err_of(result_sets::find_logs(&[tmp.path().to_path_buf()]));
    assert!(err.contains("self is a symbolic link loop"), "{err}");
    // given directly, the loop is named by the open
    let err = err_of(mllog::parse_file(&set.join("self")));
    assert!(err.contains("too many levels of symbolic links"), "{err}");
}

#[test]
fn fifos_are_refused_not_waited_on() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("results/sysA/resnet");
    five_open_runs(&set);
    mkfifo(&set.join("result_5.txt"));
    let limit = Duration::from_secs(20);
    for args in [
        vec!["score", s(tmp.path())],
        vec!["check", s(tmp.path())],
        vec!["check", s(&set.join("result_5.txt"))],
    ] {
        assert_error(
            &run_cli(&args, limit),
            "result_5.txt is a named pipe (FIFO), not a regular file",
        );
    }
    // a FIFO with a name nobody reads is ignored; one named scaling.json is refused
    std::fs::remove_file(set.join("result_5.txt")).unwrap();
    mkfifo(&set.join("notes"));
    assert_eq!(
        score_path(tmp.path(), &ScoreOptions::default())
            .unwrap()
            .len(),
        1
    );
    mkfifo(&set.join("scaling.json"));
    let ran = run_cli(&["score", s(tmp.path())], limit);
    assert_error(&ran, "scaling.json is a named pipe (FIFO)");

    // package: a FIFO among the logs, and one given by name
    let (logs, toml) = closed_set(tmp.path());
    let runs = logs[0].parent().unwrap().to_path_buf();
    mkfifo(&runs.join("result_9.log"));
    let out = tmp.path().join("out");
    for results in [vec![runs.clone()], vec![runs.join("result_9.log")]] {
        let err = err_of(package::package(&ps::options(
            "Org", "sys_a", "closed", results, &out, &toml,
        )));
        assert!(err.contains("result_9.log is a named pipe (FIFO)"), "{err}");
    }
    assert!(!out.exists());
}

/// Drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the calling thread's effective set
/// (capabilities are per thread: the raw capset leaves the test binary's other threads as they
/// were), so that a test running as root meets `permission denied` as any user would.
fn drop_dac_capabilities_of_this_thread() -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) != 0 {
            return false;
        }
        data[0].effective &= !((1 << 1) | (1 << 2));
        libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) == 0
    }
}

#[test]
fn unreadable_files_and_folders_are_named_with_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let set = root.join("results/sysA/resnet");
    five_open_runs(&set);
    let file = set.join("result_3.txt");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads a chmod-000 file anyway (CAP_DAC_OVERRIDE): then check in a thread without
    // that capability, which is how an ordinary user meets the tree.
    let as_root = std::fs::File::open(&file).is_ok();
    let results = std::thread::spawn(move || {
        if as_root && !drop_dac_capabilities_of_this_thread() {
            return None;
        }
        if std::fs::File::open(&file).is_ok() {
            return None;
        }
        let score_file = err_of(score_path(&root, &ScoreOptions::default()));
        let package_file = err_of(result_sets::find_logs(&[root.join("results")]));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let folder = root.join("results/sysA");
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o000)).unwrap();
        let score_dir = err_of(score_path(&root, &ScoreOptions::default()));
        let package_dir = err_of(result_sets::find_logs(&[root.join("results")]));
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
        Some([score_file, package_file, score_dir, package_dir])
    })
    .join()
    .unwrap();
    let Some([score_file, package_file, score_dir, package_dir]) = results else {
        eprintln!(
            "unreadable_files_and_folders_are_named_with_the_fix: skipped: running as root and \
             the thread's CAP_DAC_OVERRIDE could not be dropped, so chmod 000 stops no read"
        );
        return;
    };
    for err in [&score_file, &package_file] {
        assert!(
            err.contains("result_3.txt: permission denied: make it readable (chmod a+r"),
            "{err}"
        );
    }
    for err in [&score_dir, &package_dir] {
        assert!(
            err.contains("sysA: permission denied: make it readable (chmod a+rx"),
            "{err}"
        );
    }
}

/// A log of four MLLOG lines: enough for `package` to read its benchmark, division and
/// system, far from compliant.
fn stub_log(i: usize) -> String {
    let line = |key: &str, value: &str| {
        format!(
            ":::MLLOG {{\"namespace\": \"\", \"time_ms\": {}, \"event_type\": \"POINT_IN_TIME\", \
             \"key\": \"{key}\", \"value\": \"{value}\", \"metadata\": {{}}}}\n",
            1_700_000_000_000u64 + i as u64
        )
    };
    [
        line("submission_benchmark", "resnet"),
        line("submission_division", "closed"),
        line("submission_platform", "sys_a"),
        line("submission_org", "Org"),
    ]
    .concat()
}

#[test]
fn ten_thousand_files_get_a_short_answer_in_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    // 10,000 other files beside a valid set: scored as if they were not there
    let set = tmp.path().join("a/results/sysA/resnet");
    five_open_runs(&set);
    for i in 0..10_000 {
        std::fs::write(set.join(format!("notes_{i}.dat")), b"x").unwrap();
    }
    let start = Instant::now();
    let sets = score_path(&tmp.path().join("a"), &ScoreOptions::default()).unwrap();
    assert!(sets[0].valid(), "{:?}", sets[0].problems);
    eprintln!("score, 5 logs among 10,000 files: {:?}", start.elapsed());
    // 10,000 result files in one set: an answer (no score: 10,000 runs) in bounded time
    let many = tmp.path().join("b/results/sysA/resnet");
    std::fs::create_dir_all(&many).unwrap();
    for i in 0..10_000 {
        std::fs::write(many.join(format!("result_{i}.txt")), stub_log(i)).unwrap();
    }
    let ran = run_cli(
        &["score", s(&tmp.path().join("b"))],
        Duration::from_secs(60),
    );
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stdout.contains("10000 result files") && ran.stdout.contains("needs exactly 5"),
        "{}",
        &ran.stdout[..ran.stdout.len().min(2000)]
    );
    eprintln!("score, 10,000 result files: {:.1} s", ran.seconds);
    // package: refused, with a message of a few lines rather than 10,000 paths
    let toml = ps::write_system_toml(tmp.path(), "onprem");
    let start = Instant::now();
    let err = err_of(package::package(&ps::options(
        "Org",
        "sys_a",
        "closed",
        vec![many.clone()],
        &tmp.path().join("out"),
        &toml,
    )));
    eprintln!("package, 10,000 result files: {:?}", start.elapsed());
    assert!(
        err.contains("10000 files do not comply") && err.contains("and 9992 more"),
        "{}",
        &err[..err.len().min(2000)]
    );
    assert!(err.len() < 20_000, "a message of {} bytes", err.len());
}

/// `dir/result_<i>.txt` for the five runs, the last one with a 2 GiB hole (NUL bytes on a line
/// of their own) in the middle of its lines: a sparse file, made in no time.
fn five_runs_one_of_2gib(dir: &Path) -> PathBuf {
    five_open_runs(dir);
    let path = dir.join("result_4.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (head, tail) = lines.split_at(lines.len() / 2);
    let mut f = std::fs::File::create(&path).unwrap();
    use std::io::{Seek, SeekFrom, Write};
    writeln!(f, "{}", head.join("\n")).unwrap();
    f.seek(SeekFrom::Current(2 << 30)).unwrap();
    writeln!(f, "\n{}", tail.join("\n")).unwrap();
    path
}

#[test]
fn a_2gib_log_is_scored_in_bounded_memory_and_refused_by_package_unread() {
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small/results/sysA/resnet");
    five_open_runs(&small);
    let big = tmp.path().join("big/results/sysA/resnet");
    let log = five_runs_one_of_2gib(&big);
    assert!(std::fs::metadata(&log).unwrap().len() > 2 << 30);
    let limit = Duration::from_secs(60);
    let base = run_cli(
        &["score", s(&tmp.path().join("small")), "--format", "json"],
        limit,
    );
    let ran = run_cli(
        &["score", s(&tmp.path().join("big")), "--format", "json"],
        limit,
    );
    eprintln!(
        "score: small set {} KiB peak anonymous RSS ({:.2} s); with a 2 GiB log {} KiB ({:.2} s)",
        base.max_rss_kib, base.seconds, ran.max_rss_kib, ran.seconds
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    // the same answer as without the hole: the NUL line is skipped, every event read
    let score_of = |r: &Ran| {
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        v[0]["score"].clone()
    };
    assert_eq!(score_of(&ran), score_of(&base));
    assert!(
        ran.max_rss_kib < base.max_rss_kib + 64 * 1024,
        "peak RSS {} KiB with the 2 GiB log, {} KiB without",
        ran.max_rss_kib,
        base.max_rss_kib
    );
    let ran = run_cli(&["check", s(&log)], limit);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.max_rss_kib < base.max_rss_kib + 64 * 1024,
        "check: peak RSS {} KiB with the 2 GiB log, score {} KiB without",
        ran.max_rss_kib,
        base.max_rss_kib
    );

    // package refuses it before reading it
    let toml = ps::write_system_toml(tmp.path(), "onprem");
    let start = Instant::now();
    let err = err_of(package::package(&ps::options(
        "Org",
        "sys_a",
        "open",
        vec![big.clone()],
        &tmp.path().join("out"),
        &toml,
    )));
    assert!(
        err.contains("result_4.txt is 2.0 GiB: the submission repository takes no file over 50 MB"),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_log_of_too_many_mllog_lines_is_refused_not_held() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("result_0.txt");
    let line = stub_log(0);
    // a little over the limit (the newlines do not count towards it)
    let n = mllog::MAX_MLLOG_BYTES as usize / line.len() * 102 / 100;
    std::fs::write(&path, line.repeat(n)).unwrap();
    let err = err_of(mllog::parse_file(&path));
    assert!(
        err.contains("more than 64.0 MiB of :::MLLOG lines by line")
            && err.contains("Split it into one result_<i>.txt per run"),
        "{err}"
    );
}

#[test]
fn package_writes_nothing_outside_out_and_packages_no_link() {
    let tmp = tempfile::tempdir().unwrap();
    let (logs, toml) = closed_set(tmp.path());
    let out = tmp.path().join("out");
    let mut opts = ps::options("Org", "sys_a", "closed", logs, &out, &toml);
    opts.tarball = true;
    package::package(&opts).unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), b"not for the package").unwrap();
    // a link planted in the tree: --force refuses to put it in the manifest and tarball
    symlink(
        outside.join("secret.txt"),
        out.join("Org/benchmarks/resnet/implementations/mlperf-run/planted.txt"),
    )
    .unwrap();
    opts.force = true;
    let err = err_of(package::package(&opts));
    assert!(
        err.contains("planted.txt is a symbolic link: a package holds regular files only"),
        "{err}"
    );
    let tarball = std::fs::read(out.join("Org.tar.gz")).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&tarball[..]));
    for entry in archive.entries().unwrap() {
        let entry = entry.unwrap();
        assert!(!entry.path().unwrap().to_string_lossy().contains("planted"));
    }
    // a folder of OUT replaced by a link to somewhere else: nothing is written through it
    std::fs::remove_file(out.join("Org/benchmarks/resnet/implementations/mlperf-run/planted.txt"))
        .unwrap();
    std::fs::rename(out.join("Org/results"), tmp.path().join("moved")).unwrap();
    symlink(&outside, out.join("Org/results")).unwrap();
    let err = err_of(package::package(&opts));
    assert!(err.contains("Org/results is a symbolic link"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&outside).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "package wrote into {}", outside.display());
    // verify names the link too, rather than reading through it
    let report = mlperf_run::submission::verify::verify(&out);
    let text = match report {
        Ok(r) => r.problems.join("\n"),
        Err(e) => format!("{e:#}"),
    };
    assert!(text.contains("results is a symbolic link"), "{text}");
}

/// The text files of the data tools (`synth-bert --source`, `prepare-imagenet --val-labels` and
/// `--val-synsets`): a FIFO was waited on for ever, a folder said "Is a directory (os error
/// 21)". Each is refused naming the flag, the path once and what to give.
#[test]
fn data_tool_text_inputs_that_are_fifos_or_folders_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("text.fifo");
    mkfifo(&fifo);
    let labels = tmp.path().join("ILSVRC2012_validation_ground_truth.txt");
    std::fs::write(&labels, "1\n2\n").unwrap();
    let out = tmp.path().join("out");
    let limit = Duration::from_secs(20);
    for bad in [&fifo, &tmp.path().to_path_buf()] {
        let kind = if bad == &fifo {
            "is a named pipe (FIFO)"
        } else {
            "is a folder"
        };
        let synth = ["data", "synth-bert", "--out", s(&out), "--source", s(bad)];
        let tars = [
            "data",
            "prepare-imagenet",
            "--train-tar",
            s(&labels),
            "--val-tar",
            s(&labels),
            "--out",
            s(&out),
        ];
        let prepare = |extra: &[&str]| -> Vec<String> {
            tars.iter().chain(extra).map(|a| a.to_string()).collect()
        };
        for (args, flag) in [
            (synth.iter().map(|a| a.to_string()).collect(), "--source"),
            (prepare(&["--val-labels", s(bad)]), "--val-labels"),
            (
                prepare(&["--val-labels", s(&labels), "--val-synsets", s(bad)]),
                "--val-synsets",
            ),
        ] {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let ran = run_cli(&args, limit);
            assert_error(&ran, &format!("error: {flag}: {} {kind}", bad.display()));
            assert_eq!(
                ran.stderr.matches(&bad.display().to_string()).count(),
                1,
                "{}",
                ran.stderr
            );
        }
        assert!(!out.exists(), "nothing written");
    }
}
