//! `shim/fused_bias_gelu.cpp`: cuBLASLt's bias + GELU epilogues. Use [`crate::fused::bias_gelu`].
use std::os::raw::{c_char, c_int};
use torch_sys::C_tensor;

pub type T = *const C_tensor;

extern "C" {
    pub fn mr_fbg_dense_gelu_dense(
        x: T,
        w1: T,
        b1: T,
        w2: T,
        mode: c_int,
        out: *mut *mut C_tensor,
        used_lt: *mut c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_fbg_fallback_reason(msg: *mut *mut c_char) -> c_int;
    pub fn mr_fbg_lt_built() -> c_int;
    pub fn mr_fbg_lt_probe(msg: *mut *mut c_char) -> c_int;
}
