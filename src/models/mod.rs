//! Model definitions in plain tch (tch-rs examples style). Feature `torch`. Their fused ops
//! live in [`crate::fused`].

pub mod bert;
pub mod resnet;

use tch::Tensor;

/// The same tensor with channels-last (NHWC) strides, as `torch.channels_last` gives.
/// 4-d tensors only; others are returned as a shallow clone.
pub fn to_channels_last(t: &Tensor) -> Tensor {
    if t.dim() != 4 {
        return t.shallow_clone();
    }
    t.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2])
}

/// Number of trainable parameters (elements) of a var store.
pub fn parameter_count(vs: &tch::nn::VarStore) -> i64 {
    vs.trainable_variables()
        .iter()
        .map(|t| t.numel() as i64)
        .sum()
}
