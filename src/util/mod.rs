//! Small helpers every part uses: atomic file writes and staging folders ([`fs`]), Ctrl-C
//! handling ([`interrupt`]), the tracing set-up ([`logging`]), a subcommand's result on stdout
//! ([`output`]: a closed pipe is an error to return, not a panic).

pub mod fs;
pub mod interrupt;
pub mod logging;
pub mod output;
