//! What one run did: the trainer's account of it, handed back to the run set
//! ([`super::run_set`]) so the set records the run without reading back the log it just wrote.

use std::path::PathBuf;

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Success,
    Aborted(String),
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub seed: u64,
    pub status: Status,
    /// Loss of every optimizer step, in order.
    pub losses: Vec<f64>,
    /// (epoch_num, accuracy) of every eval.
    pub evals: Vec<(u64, f64)>,
    /// run_start to run_stop.
    pub run_seconds: f64,
    pub steps: u64,
    /// Seconds spent inside `Workload::train_step` (the rest of the loop is trainer overhead).
    pub step_seconds: f64,
    /// Seconds of each `Workload::train_step`, in order. On a GPU these are the host's
    /// enqueue times (steps run asynchronously); [`RunOutcome::block_seconds`] ends with a read.
    pub step_times: Vec<f64>,
    /// Seconds of the training part of each block: block_start to after the block's final
    /// loss read (a device sync), so it times the device work too.
    pub block_seconds: Vec<f64>,
    /// Wall-clock bounds of the same spans as [`RunOutcome::block_seconds`] (for matching
    /// outside samples, e.g. nvidia-smi's, to a block).
    pub block_windows: Vec<(std::time::SystemTime, std::time::SystemTime)>,
    /// Host reads of step losses (each covers all steps since the previous read).
    pub loss_reads: u64,
    /// Seconds in the training part of the blocks (block_start to block_stop, logging and
    /// the loop included, evals excluded).
    pub train_seconds: f64,
    pub log_path: Option<PathBuf>,
    /// Why this run was cut rather than ended on its own merits: Ctrl-C on any rank, the
    /// process group could not form or failed (a peer died, was cut off or never came), a CUDA
    /// graph capture failed. The set stops after it (as on Ctrl-C), its log goes to
    /// `interrupted/`, and `--resume` runs it again in a new process.
    pub stop_set: Option<String>,
}

impl RunOutcome {
    pub fn success(&self) -> bool {
        self.status == Status::Success
    }
}

impl Status {
    /// The run_stop status the log records ("success" or "aborted").
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Success => crate::mllog::keys::STATUS_SUCCESS,
            Status::Aborted(_) => crate::mllog::keys::STATUS_ABORTED,
        }
    }
}

impl RunOutcome {
    /// A run of `seed` that ended with `status` and did nothing else worth counting (the start
    /// of an outcome the trainer fills in, and the outcome of fake runs in tests).
    pub fn new(seed: u64, status: Status) -> RunOutcome {
        RunOutcome {
            seed,
            status,
            losses: Vec::new(),
            evals: Vec::new(),
            run_seconds: 0.0,
            steps: 0,
            step_seconds: 0.0,
            step_times: Vec::new(),
            block_seconds: Vec::new(),
            block_windows: Vec::new(),
            loss_reads: 0,
            train_seconds: 0.0,
            log_path: None,
            stop_set: None,
        }
    }
}
