//! Ctrl-C handling: the first SIGINT/SIGTERM asks the current run to stop cleanly (the trainer
//! ends its log with `run_stop` status aborted and the set stops); a second one exits at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Install the handler (idempotent; errors are logged, not fatal).
pub fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let result = ctrlc::set_handler(|| {
            REQUESTED.store(true, Ordering::SeqCst);
            if COUNT.fetch_add(1, Ordering::SeqCst) >= 1 {
                eprintln!("interrupted twice: exiting now");
                std::process::exit(crate::cli::ExitStatus::Interrupted.code().into());
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
