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
    /// run_stop aborted; `--resume` continues it), or a second Ctrl-C that exits at once.
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
    /// (`| head`: the reader has what it wanted, see [`crate::util::output`]), Error otherwise.
    pub fn of_error(err: &anyhow::Error) -> ExitStatus {
        if crate::util::output::is_stdout_closed(err) {
            ExitStatus::Success
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

impl From<ExitStatus> for ExitCode {
    fn from(s: ExitStatus) -> ExitCode {
        ExitCode::from(s.code())
    }
}

#[cfg(test)]
mod tests {
    use super::ExitStatus;

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
