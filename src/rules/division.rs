//! The MLPerf division a run, a result set or a package is in.

use serde::Deserialize;

/// Closed: the reference model, optimizer and hyperparameter rules (any mathematically
/// equivalent implementation); open: methods that change the math.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Division {
    Closed,
    Open,
}

impl Division {
    pub fn as_str(self) -> &'static str {
        match self {
            Division::Closed => "closed",
            Division::Open => "open",
        }
    }
}
