//! Ctrl-C handling: the first SIGINT/SIGTERM asks the current run to stop cleanly (the trainer
//! ends its log with `run_stop` status aborted and the set stops); a second one exits at once,
//! removing first the files registered with [`remove_on_exit_now`] (a run set's lock file).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

static REQUESTED: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Files a second Ctrl-C removes before it exits (no destructor runs then).
static REMOVE_ON_EXIT_NOW: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Install the handler (idempotent; errors are logged, not fatal).
pub fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let result = ctrlc::set_handler(|| {
            REQUESTED.store(true, Ordering::SeqCst);
            if COUNT.fetch_add(1, Ordering::SeqCst) >= 1 {
                eprintln!("interrupted twice: exiting now");
                if let Ok(paths) = REMOVE_ON_EXIT_NOW.lock() {
                    for p in paths.iter() {
                        let _ = std::fs::remove_file(p);
                    }
                }
                // _exit, not process::exit: the main thread is still inside libtorch, and the
                // exit handlers and static destructors process::exit runs can crash under it
                // (the process then dies of a signal instead of exiting 130).
                let code: i32 = crate::util::ExitStatus::Interrupted.code().into();
                // SAFETY: _exit ends the process at once; nothing after it runs.
                unsafe { libc::_exit(code) };
            }
            eprintln!(
                "interrupt: finishing the current run's log as aborted (Ctrl-C again to exit now)"
            );
        });
        if let Err(e) = result {
            tracing::warn!("cannot install the Ctrl-C handler: {e}");
        }
    });
}

/// True once a stop was requested.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// Ask for a stop from code (tests, fatal errors on other ranks).
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Remove `path` if a second Ctrl-C exits the process at once (its owner's destructor, which
/// removes it otherwise, does not run then). Undone by [`keep_on_exit_now`].
pub fn remove_on_exit_now(path: &Path) {
    if let Ok(mut paths) = REMOVE_ON_EXIT_NOW.lock() {
        paths.push(path.to_path_buf());
    }
}

/// Forget a path given to [`remove_on_exit_now`] (its owner has removed it).
pub fn keep_on_exit_now(path: &Path) {
    if let Ok(mut paths) = REMOVE_ON_EXIT_NOW.lock() {
        if let Some(i) = paths.iter().position(|p| p == path) {
            paths.remove(i);
        }
    }
}
