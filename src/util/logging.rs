//! Diagnostic logging (tracing): quiet by default, `-v` for more, `RUST_LOG` overrides.

use tracing_subscriber::EnvFilter;

pub fn init(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Log `message` as a warning once per process (the same text again is dropped).
pub fn warn_once(message: &str) {
    static SEEN: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let first = SEEN
        .lock()
        .map(|mut s| s.insert(message.to_string()))
        .unwrap_or(true);
    if first {
        tracing::warn!("{message}");
    }
}
