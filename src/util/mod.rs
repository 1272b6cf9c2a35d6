//! Small helpers every part uses: atomic file writes and staging folders ([`fs`]), Ctrl-C
//! handling ([`interrupt`]), the tracing set-up ([`logging`]).

pub mod fs;
pub mod interrupt;
pub mod logging;
