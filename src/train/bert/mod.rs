//! BERT-Large phase 2: its run config ([`config`]) and its workload ([`BertWorkload`],
//! [`run_once`]).

pub mod config;
mod workload;

pub use config::BertRunConfig;
pub use workload::{load_eval, run_once, BertWorkload};
