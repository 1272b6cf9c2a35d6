//! The MLPerf log format (`mlperf_logging.mllog`): events, an emitter whose lines are
//! byte-compatible with the Python library, and a tolerant parser for published logs.

mod emit;
mod parse;
pub mod pyjson;

pub use emit::{Emitter, Sink};
pub use parse::{
    parse_bytes, parse_file, parse_str, LogFile, ParseIssue, MAX_LINE_BYTES, MAX_MLLOG_BYTES,
};

use serde_json::{Map, Value};

/// The prefix every MLPerf log line carries before its JSON object.
pub const PREFIX: &str = ":::MLLOG ";

/// `event_type` of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    IntervalStart,
    IntervalEnd,
    PointInTime,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::IntervalStart => "INTERVAL_START",
            EventType::IntervalEnd => "INTERVAL_END",
            EventType::PointInTime => "POINT_IN_TIME",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "INTERVAL_START" => Some(EventType::IntervalStart),
            "INTERVAL_END" => Some(EventType::IntervalEnd),
            "POINT_IN_TIME" => Some(EventType::PointInTime),
            _ => None,
        }
    }
}

/// One parsed `:::MLLOG` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub namespace: String,
    /// Milliseconds since the Unix epoch (an integer in every conforming log).
    pub time_ms: f64,
    pub event_type: EventType,
    pub key: String,
    pub value: Value,
    pub metadata: Map<String, Value>,
    /// 1-based line number in the file the event was read from (0 when not read from a file).
    pub line: usize,
}

impl Event {
    /// A metadata field, if present.
    pub fn meta(&self, name: &str) -> Option<&Value> {
        self.metadata.get(name)
    }

    /// `metadata.status` of a run_stop, if present.
    pub fn status(&self) -> Option<&str> {
        self.meta("status").and_then(Value::as_str)
    }

    /// `metadata.epoch_num` as a number.
    pub fn epoch_num(&self) -> Option<f64> {
        self.meta("epoch_num").and_then(Value::as_f64)
    }
}

/// The MLPerf Training keys this tool emits or reads (mlperf_logging.mllog.constants).
pub mod keys {
    pub const CACHE_CLEAR: &str = "cache_clear";
    pub const INIT_START: &str = "init_start";
    pub const INIT_STOP: &str = "init_stop";
    pub const RUN_START: &str = "run_start";
    pub const RUN_STOP: &str = "run_stop";
    pub const BLOCK_START: &str = "block_start";
    pub const BLOCK_STOP: &str = "block_stop";
    pub const EPOCH_START: &str = "epoch_start";
    pub const EPOCH_STOP: &str = "epoch_stop";
    pub const EVAL_START: &str = "eval_start";
    pub const EVAL_STOP: &str = "eval_stop";
    pub const EVAL_ACCURACY: &str = "eval_accuracy";
    pub const TRAIN_SAMPLES: &str = "train_samples";
    pub const EVAL_SAMPLES: &str = "eval_samples";
    pub const SEED: &str = "seed";
    pub const GLOBAL_BATCH_SIZE: &str = "global_batch_size";
    pub const GRADIENT_ACCUMULATION_STEPS: &str = "gradient_accumulation_steps";
    pub const OPT_NAME: &str = "opt_name";
    pub const SUBMISSION_ORG: &str = "submission_org";
    pub const SUBMISSION_PLATFORM: &str = "submission_platform";
    pub const SUBMISSION_DIVISION: &str = "submission_division";
    pub const SUBMISSION_STATUS: &str = "submission_status";
    pub const SUBMISSION_BENCHMARK: &str = "submission_benchmark";
    pub const TRACKED_STATS: &str = "tracked_stats";
    pub const THROUGHPUT: &str = "throughput";
    /// mlperf-run's own key: the recipe (`--recipe`) an open-division run applied. Not an
    /// mllog constant; the official checker accepts keys its rules do not name.
    pub const RECIPE: &str = "recipe";

    pub const STATUS_SUCCESS: &str = "success";
    pub const STATUS_ABORTED: &str = "aborted";
}
