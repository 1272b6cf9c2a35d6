//! Ctrl-C handling: the first SIGINT/SIGTERM asks the current work to stop cleanly (the trainer
//! ends its log with `run_stop` status aborted and the set stops; `package` and `data
//! synth-imagenet` stop at their next safe point, [`stop_if_requested`]); a second one exits at
//! once, removing first the files registered with [`remove_on_exit_now`] (a run set's lock
//! file).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

static REQUESTED: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Files a second Ctrl-C removes before it exits (no destructor runs then).
static REMOVE_ON_EXIT_NOW: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Install the handler for training (idempotent; errors are logged, not fatal): the first
/// Ctrl-C says that the current run's log is being finished as aborted.
pub fn install() {
    install_with_notice(Some(
        "interrupt: finishing the current run's log as aborted (Ctrl-C again to exit now)",
    ));
}

/// Install the handler (idempotent: the first call's `notice` stays; errors are logged, not
/// fatal). The first Ctrl-C prints `notice`, if any, and asks for a stop ([`requested`]); a
/// command that stops at its next safe point at once passes None and says what it stopped
/// in its [`Interrupted`](crate::util::exit::Interrupted) error.
pub fn install_with_notice(notice: Option<&'static str>) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let result = ctrlc::set_handler(move || {
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
            if let Some(notice) = notice {
                eprintln!("{notice}");
            }
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

/// A safe point: `Err(Interrupted(message()))` once a stop was requested, to be returned
/// before anything more is written (`message`: what was interrupted, that nothing already
/// written was lost, how to rerun).
pub fn stop_if_requested(message: impl FnOnce() -> String) -> anyhow::Result<()> {
    if requested() {
        return Err(crate::util::exit::Interrupted(message()).into());
    }
    Ok(())
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
