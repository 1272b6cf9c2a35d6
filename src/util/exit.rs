//! The process's exit statuses, in one place (as ripgrep keeps its own): every subcommand ends
//! with one of these, and the README's list is this list.

use std::process::ExitCode;

/// How `mlperf-run` ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: done, and the verdict (if any) is positive; or the reader of stdout has gone (`| head`),
    /// which ends any subcommand quietly.
    Success,
    /// 1: a negative verdict: a non-compliant log, no valid score, a regression, a failed
    /// verification, a run that ended aborted.
    Negative,
    /// 2: an error: bad input (named with file and line and what to do), a tool that could not
    /// run.
    Error,
    /// 130 (128 + SIGINT): a run set stopped by Ctrl-C / SIGTERM (its current log ends with
    /// run_stop aborted; `--resume` continues it), a `package` or `data synth-imagenet`
    /// stopped by one at a safe point (an [`Interrupted`] error), or a second Ctrl-C that exits
    /// at once.
    Interrupted,
    /// `launch`: the status of the first worker that failed, passed through (1 if it was
    /// killed by a signal).
    Worker(u8),
}

impl ExitStatus {
    /// The number the process exits with.
    pub const fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Negative => 1,
            ExitStatus::Error => 2,
            ExitStatus::Interrupted => 130,
            ExitStatus::Worker(code) => code,
        }
    }

    /// The status of a subcommand that returned `err`: Success when stdout was closed under it
    /// (`| head`: the reader has what it wanted, see [`crate::util::output`]), Interrupted
    /// when it stopped on Ctrl-C ([`Interrupted`]), Error otherwise.
    pub fn of_error(err: &anyhow::Error) -> ExitStatus {
        if crate::util::output::is_stdout_closed(err) {
            ExitStatus::Success
        } else if Interrupted::of(err).is_some() {
            ExitStatus::Interrupted
        } else {
            ExitStatus::Error
        }
    }

    /// Success for a positive verdict, Negative otherwise.
    pub fn verdict(positive: bool) -> ExitStatus {
        if positive {
            ExitStatus::Success
        } else {
            ExitStatus::Negative
        }
    }
}

/// The error of a command that Ctrl-C (or SIGTERM) stopped at a safe point: its one line says
/// what was interrupted, that nothing already written was lost, and how to rerun. `cli::main`
/// prints it as it is (no "error:") and exits with [`ExitStatus::Interrupted`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

impl Interrupted {
    /// The [`Interrupted`] in `err`'s chain, if any (under whatever context was added).
    pub fn of(err: &anyhow::Error) -> Option<&Interrupted> {
        err.chain().find_map(|e| e.downcast_ref::<Interrupted>())
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(s: ExitStatus) -> ExitCode {
        ExitCode::from(s.code())
    }
}

#[cfg(test)]
mod tests {
    use super::{ExitStatus, Interrupted};

    /// A Ctrl-C stop is status 130 under any context; other errors are 2.
    #[test]
    fn an_interrupted_error_is_status_130_under_context() {
        let err = anyhow::Error::new(Interrupted("stopped".into())).context("packaging");
        assert_eq!(ExitStatus::of_error(&err), ExitStatus::Interrupted);
        assert_eq!(Interrupted::of(&err).unwrap().0, "stopped");
        let other = anyhow::anyhow!("bad input");
        assert_eq!(ExitStatus::of_error(&other), ExitStatus::Error);
    }

    /// The README lists exactly these codes.
    #[test]
    fn the_readme_lists_every_exit_status() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
            .expect("README.md");
        for s in [
            ExitStatus::Success,
            ExitStatus::Negative,
            ExitStatus::Error,
            ExitStatus::Interrupted,
        ] {
            assert!(
                readme.contains(&format!("| {} |", s.code()))
                    || readme.contains(&format!("`{}`", s.code())),
                "README.md does not list exit status {} ({s:?})",
                s.code()
            );
        }
    }
}
