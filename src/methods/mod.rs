//! The speed-up methods of each benchmark, each a small switchable unit (as Composer defines
//! them): one serde struct per benchmark ([`ResnetMethods`], [`BertMethods`]), passed whole to
//! the model, whose methods declare their division legality and log keys in one place
//! ([`declare`]).
//!
//! ResNet: [`blurpool`] (model surgery), channels-last ([`crate::models::to_channels_last`]),
//! label smoothing ([`crate::optim::loss`]), [`progressive_resizing`] (per-epoch image size),
//! [`ema`] (evaluate an exponential moving average of the weights), fused BN+ReLU
//! ([`crate::fused::bn_relu`]: batch norm + residual add + ReLU as one op), mixed precision ([`Amp`]) and CUDA graphs. BERT: see
//! [`BertMethods`].

#[cfg(feature = "torch")]
pub mod blurpool;
#[cfg(feature = "torch")]
pub mod ema;
pub mod progressive_resizing;

pub mod bert;
pub mod declare;
pub mod resnet;

pub use bert::BertMethods;
pub use declare::{parse_list, Closed, Method, MethodSet};
pub use resnet::{EmaConfig, LossScaleSettings, ResnetMethods};

use serde::{Deserialize, Serialize};

/// Mixed precision, for both benchmarks (`methods.amp`): a choice of number format, which the
/// closed division allows (fp16 and bf16 are pre-approved formats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Amp {
    /// fp32.
    #[default]
    None,
    /// Forward passes in a bf16 autocast region.
    Bf16,
    /// fp16 autocast with dynamic loss scaling ([`crate::optim::loss_scale`]).
    Fp16,
}

impl Amp {
    /// The config's spelling ("none", "bf16", "fp16").
    pub fn as_str(self) -> &'static str {
        match self {
            Amp::None => "none",
            Amp::Bf16 => "bf16",
            Amp::Fp16 => "fp16",
        }
    }
}

/// The rules' reason that a number format is an implementation choice.
pub(crate) const NUMBER_FORMAT: &str = "a number format: fp16, bf16 and fp8 are pre-approved in \
     both divisions";
/// The rules' reason that a fused kernel or a graph change is.
pub(crate) const SAME_MATH: &str = "the same math in other kernels: mathematically equivalent \
     graph changes are implementation choices";
