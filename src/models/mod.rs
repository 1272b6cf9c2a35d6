//! Models (feature `torch`).

pub mod bert;
