//! `shim/fused_bn.cpp`: cuDNN's fused batch norm + add + ReLU. Use [`crate::fused::bn_relu`].
use std::os::raw::{c_char, c_int, c_longlong};
use torch_sys::C_tensor;

extern "C" {
    pub fn mr_bn_add_relu(
        x: *const C_tensor,
        z: *const C_tensor,
        weight: *const C_tensor,
        bias: *const C_tensor,
        running_mean: *const C_tensor,
        running_var: *const C_tensor,
        training: c_int,
        momentum: f64,
        eps: f64,
        out: *mut *mut C_tensor,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_fused_bn_cudnn_compiled() -> c_int;
    pub fn mr_fused_bn_cudnn_probe(out: *mut *mut c_char) -> c_int;
    pub fn mr_fused_bn_counts(cudnn_calls: *mut c_longlong, composite_calls: *mut c_longlong);
    pub fn mr_fused_bn_fallback_reason(out: *mut *mut c_char) -> c_int;
    pub fn mr_fused_bn_cudnn_eligible(
        x: *const C_tensor,
        z: *const C_tensor,
        weight: *const C_tensor,
        bias: *const C_tensor,
        running_mean: *const C_tensor,
        running_var: *const C_tensor,
        why: *mut *mut c_char,
        err: *mut *mut c_char,
    ) -> c_int;
}
