//! The bottom layer. The process's exit statuses ([`exit`], [`ExitStatus`]), and small helpers
//! every part uses: atomic file writes and staging folders ([`fs`]), Ctrl-C
//! handling ([`interrupt`]), the tracing set-up ([`logging`]), a subcommand's result on stdout
//! ([`output`]: a closed pipe is an error to return, not a panic), reading trees from
//! other people ([`tree`]: no FIFO blocks, no link leads out of the tree), the nearest name to
//! a mistyped one ([`suggest`]), the memory this machine has free ([`memory`]).

pub mod exit;
pub mod fs;
pub mod interrupt;
#[cfg(feature = "torch")]
pub mod libtorch_errors;
pub mod logging;
pub mod memory;
pub mod output;
pub mod suggest;
pub mod tree;

pub use exit::ExitStatus;
