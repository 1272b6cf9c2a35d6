//! Open-division speed-up methods as Composer defines them, each a small switchable unit:
//! [`blurpool`] (model surgery), channels-last ([`crate::models::to_channels_last`]), label
//! smoothing ([`crate::optim::loss`]), [`progressive_resizing`] (per-epoch image size) and
//! [`ema`] (evaluate an exponential moving average of the weights), and [`fused_bn_relu`]
//! (batch norm + residual add + ReLU as one op).

#[cfg(feature = "torch")]
pub mod blurpool;
#[cfg(feature = "torch")]
pub mod ema;
#[cfg(feature = "torch")]
pub mod fused_bn_relu;
pub mod progressive_resizing;
