//! Ctrl-C at a moment of a spawned `mlperf-run` command, and what it must say then.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Wait (at most two minutes) until `started()` while `child` runs, send it one SIGINT, and
/// wait (at most a minute) for it to end; its output. `what` names the command in failures.
pub fn ctrl_c_once(mut child: Child, what: &str, started: impl Fn() -> bool) -> Output {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !started() {
        assert!(Instant::now() < deadline, "{what} never started");
        assert!(
            child.try_wait().unwrap().is_none(),
            "{what} ended before Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: kill on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not stop within a minute of Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// `ended` exited 130 with one line on stderr: "interrupted: {stopped}...", that nothing
/// already written was lost, and to rerun the same command.
pub fn assert_stopped_in_one_line(ended: &Output, stopped: &str) {
    let stderr = String::from_utf8_lossy(&ended.stderr);
    assert_eq!(
        ended.status.code(),
        Some(130),
        "{:?}: {stderr}",
        ended.status
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains(&format!("interrupted: {stopped}"))
            && stderr.contains("nothing already written was lost")
            && stderr.contains("rerun the same command"),
        "{stderr}"
    );
}
