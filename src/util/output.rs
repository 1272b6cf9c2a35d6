//! Standard output, for what a subcommand prints as its result. `println!` panics when the
//! reader has gone (`mlperf-run score DIR | head`: "failed printing to stdout: Broken pipe");
//! [`stdout`] returns that as an error instead, tagged [`StdoutClosed`], which the subcommand
//! returns up to `cli::main` with `?`, where it ends the process quietly with exit status 0
//! (`cli::ExitStatus::of_error`), as ripgrep does. Only stdout is tagged: a broken pipe to a
//! child process (the official checker) stays an error.
//!
//! A subcommand whose output is its result ([`print()`]) stops at a closed stdout. One whose work
//! goes on after it prints (package writes the tree after its score table) uses
//! [`print_beside_work`]: the text is dropped and the work finishes; a later [`print()`] then ends
//! the process quietly.

use anyhow::Result;
use std::io::{self, Write};

/// The error a write to a closed stdout returns (inside an [`io::Error`] of kind BrokenPipe).
#[derive(Debug, thiserror::Error)]
#[error("standard output is closed (the reading end of the pipe has gone)")]
pub struct StdoutClosed;

/// Locked stdout whose write errors are returned; a closed pipe is tagged [`StdoutClosed`].
pub struct Stdout(io::StdoutLock<'static>);

/// Stdout for a subcommand's result: `writeln!(util::output::stdout(), ...)?`.
pub fn stdout() -> Stdout {
    Stdout(io::stdout().lock())
}

fn tag(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        io::Error::new(io::ErrorKind::BrokenPipe, StdoutClosed)
    } else {
        e
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(tag)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(tag)
    }
}

/// Print `text` to stdout (and flush it); an error ([`StdoutClosed`] when the reader has gone)
/// to return with `?`.
pub fn print(text: &str) -> Result<()> {
    let mut out = stdout();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Print `text` beside work that must go on: a closed stdout drops the text (the work finishes,
/// and the subcommand's next [`print()`] ends the process quietly); other errors are returned.
pub fn print_beside_work(text: &str) -> Result<()> {
    match print(text) {
        Err(e) if is_stdout_closed(&e) => Ok(()),
        other => other,
    }
}

/// True when `err`, or an error it wraps, is a write to a closed stdout.
pub fn is_stdout_closed(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.is::<StdoutClosed>()
            || cause
                .downcast_ref::<io::Error>()
                .and_then(|e| e.get_ref())
                .is_some_and(|inner| inner.is::<StdoutClosed>())
    })
}

/// A number for a message: as Rust prints it where that is short (`-1`, `0.5`, `NaN`, `inf`),
/// in scientific notation from 1e15 up and below 1e-4 (`1e300`, not its 301 digits).
pub fn number(x: f64) -> String {
    let a = x.abs();
    if x.is_finite() && a != 0.0 && !(1e-4..1e15).contains(&a) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn only_a_tagged_broken_pipe_is_a_closed_stdout() {
        let closed: anyhow::Error = tag(io::Error::from(io::ErrorKind::BrokenPipe)).into();
        assert!(is_stdout_closed(&closed));
        assert!(is_stdout_closed(&closed.context("cannot print the table")));
        let wrapped = Err::<(), _>(tag(io::ErrorKind::BrokenPipe.into()))
            .context("outer")
            .context("outermost")
            .unwrap_err();
        assert!(is_stdout_closed(&wrapped));
        // a broken pipe to a child process is an error, not a reader that has gone
        let child: anyhow::Error = io::Error::from(io::ErrorKind::BrokenPipe).into();
        assert!(!is_stdout_closed(&child));
        let other: anyhow::Error = tag(io::ErrorKind::PermissionDenied.into()).into();
        assert!(!is_stdout_closed(&other));
    }

    #[test]
    fn numbers_in_messages_are_short() {
        for (x, want) in [
            (-1.0, "-1"),
            (0.5, "0.5"),
            (0.0, "0"),
            (65536.0, "65536"),
            (1e300, "1e300"),
            (-1e300, "-1e300"),
            (1e15, "1e15"),
            (1e-9, "1e-9"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(number(x), want);
        }
    }
}
