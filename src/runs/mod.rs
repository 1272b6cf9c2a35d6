//! Run sets: N seeded runs of one benchmark into `RESULTS/SYSTEM/BENCHMARK/result_<i>.txt`.
//!
//! - [`set`]: the set itself: which runs remain, seeds, resume, closing a crashed run's log
//!   ([`run_set`]), with any [`RunExecutor`] (the trainer, or a fake in tests);
//! - [`lock`]: one set at a time per results folder (`run_set.lock`, with the holder's pid);
//! - [`outcome`]: what one run did ([`RunOutcome`]), as the trainer returns it to the set;
//! - [`driver`]: the `mlperf-run resnet|bert` side: the flags, the node's system description,
//!   the progress line and the report at the end ([`driver::run_and_report`]);
//! - [`system`]: the `[system]` table of a run config ([`system::SystemConfig`]);
//! - [`progress`], [`plot`]: the live view of a run from its log, and the accuracy plot.

pub mod driver;
pub mod lock;
pub mod outcome;
pub mod plot;
pub mod progress;
pub mod set;
pub mod system;

pub use outcome::{RunOutcome, Status};
pub use set::{
    os_seed, parse_seed_list, run_set, RunExecutor, RunRecord, RunRequest, SetEvent, SetOutcome,
    SetSpec,
};
