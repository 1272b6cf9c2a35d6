//! ResNet-50's methods (`[methods]` of configs/resnet/*.toml): one struct, passed whole to the
//! model and the trainer, each method declared once in [`ResnetMethods::declared`].

use super::declare::{Closed, Method, MethodSet};
use super::progressive_resizing::ProgressiveResizing;
use super::{Amp, NUMBER_FORMAT, SAME_MATH};
use crate::optim::loss_scale::LossScaleConfig;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// `methods.loss_scale` (with `amp = "fp16"`): the dynamic loss scale's start and how many
/// clean steps in a row double it (torch.amp.GradScaler's `init_scale`, `growth_interval`; an
/// overflow halves it and skips the step).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LossScaleSettings {
    pub init_scale: f64,
    pub growth_interval: i64,
}

impl LossScaleSettings {
    /// The loss scale these settings make (GradScaler's growth and backoff factors).
    pub fn config(&self) -> LossScaleConfig {
        LossScaleConfig {
            init_scale: self.init_scale,
            growth_interval: self.growth_interval,
            ..LossScaleConfig::default()
        }
    }
}

/// A key left out takes GradScaler's value.
impl Default for LossScaleSettings {
    fn default() -> Self {
        let c = LossScaleConfig::default();
        LossScaleSettings {
            init_scale: c.init_scale,
            growth_interval: c.growth_interval,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EmaConfig {
    pub half_life_steps: f64,
    #[serde(default = "one")]
    pub update_interval: u64,
}

fn one() -> u64 {
    1
}

/// Every key may be left out: its default is the type's (off, none, 0; `amp` none).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResnetMethods {
    pub blurpool: bool,
    pub channels_last: bool,
    /// 0 = off (closed: 0 or 0.1).
    pub label_smoothing: f64,
    pub progressive_resizing: Option<ProgressiveResizing>,
    pub ema: Option<EmaConfig>,
    /// "bf16": forward passes in a bf16 autocast region (the GPU speed-up; it runs on the CPU
    /// too, slowly there, for tests). "fp16": an fp16 region with dynamic loss scaling, the
    /// overflowing steps skipped on the device by the optimizer (what cuDNN's fused batch norm
    /// of `fused_bn_relu` takes). "none": fp32.
    pub amp: Amp,
    /// The fp16 loss scale's settings (only with `amp = "fp16"`; default GradScaler's).
    pub loss_scale: Option<LossScaleSettings>,
    /// Capture the training step in a CUDA graph and replay it (GPU only; changes no math, so
    /// both divisions allow it). See [`crate::gpu::cuda_graph`].
    pub cuda_graph: bool,
    /// Batch norm + (residual add) + ReLU as one op (cuDNN's fused kernels on a GPU with the
    /// `cuda` feature, the unfused chain's exact math elsewhere; the kernel NVIDIA's closed
    /// ResNet uses, so both divisions allow it). See [`crate::fused::bn_relu`].
    pub fused_bn_relu: bool,
}

impl MethodSet for ResnetMethods {
    fn declared(&self) -> Vec<Method> {
        use Closed::{Allowed, OpenOnly};
        let smoothing = if self.label_smoothing == 0.0 || self.label_smoothing == 0.1 {
            Allowed("the closed rules allow label smoothing 0 or 0.1")
        } else {
            OpenOnly("the closed rules allow label smoothing 0 or 0.1 only")
        };
        vec![
            Method::switch(
                "blurpool",
                self.blurpool,
                OpenOnly("a blur filter before strided convolutions changes the model"),
                "method_blurpool",
            ),
            Method::switch(
                "channels_last",
                self.channels_last,
                Allowed("a memory layout: the same math"),
                "method_channels_last",
            ),
            Method::new(
                "label_smoothing",
                self.label_smoothing != 0.0,
                smoothing,
                Some("method_label_smoothing"),
                json!(self.label_smoothing),
            ),
            Method::switch(
                "progressive_resizing",
                self.progressive_resizing.is_some(),
                OpenOnly("training on smaller images than the reference's 224 px changes the data"),
                "method_progressive_resizing",
            ),
            Method::switch(
                "ema",
                self.ema.is_some(),
                OpenOnly("evaluating an average of the weights changes the model evaluated"),
                "method_ema",
            ),
            Method::new(
                "amp",
                self.amp != Amp::None,
                Allowed(NUMBER_FORMAT),
                Some("method_amp"),
                json!(self.amp.as_str()),
            ),
            Method::switch(
                "fused_bn_relu",
                self.fused_bn_relu,
                Allowed(SAME_MATH),
                "method_fused_bn_relu",
            ),
            Method::cuda_graph(self.cuda_graph),
        ]
    }
}
