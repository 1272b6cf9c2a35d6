//! ResNet-50 v1.5: its run config ([`config`]), its image data sets ([`data`]: synthetic and
//! ImageFolder, behind one trait) and its workload ([`ResnetWorkload`], [`run_once`]).

pub mod config;
#[cfg(feature = "torch")]
pub mod data;
#[cfg(feature = "torch")]
mod workload;

pub use config::ResnetRunConfig;
#[cfg(feature = "torch")]
pub use workload::{
    list_data, model_parameters, open_data, run_once, run_once_emulating, ResnetRun,
    ResnetWorkload, StepTiming, WaitReport,
};
