//! Optimizers and learning-rate schedules (feature `torch`).

pub mod lamb;
