//! `shim/fp8.cpp`: the FP8 linear layer with delayed scaling, and `shim/fp8_attention.cpp`: the
//! FP8 attention probe. Use [`crate::fused::fp8`].
use std::os::raw::{c_char, c_int};
use torch_sys::C_tensor;

pub type T = *const C_tensor;

extern "C" {
    pub fn mr_fp8_linear(
        x: T,
        w: T,
        b: T,
        scale: T,
        history: T,
        xq: T,
        x_amax: T,
        mode: c_int,
        out: *mut *mut C_tensor,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_fp8_cast(
        t: T,
        scale: T,
        format: c_int,
        amax: T,
        mode: c_int,
        max_blocks: i64,
        out: *mut *mut C_tensor,
        used_kernel: *mut c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_fp8_cast_transpose(
        t: T,
        scale: T,
        format: c_int,
        amax: T,
        mode: c_int,
        rows_out: i64,
        q: *mut *mut C_tensor,
        qt: *mut *mut C_tensor,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_fp8_quantize_dequantize(
        t: T,
        scale: T,
        format: c_int,
        out: *mut *mut C_tensor,
        err: *mut *mut c_char,
    ) -> c_int;
}

extern "C" {
    /// `shim/fp8_attention.cpp`: one attention op on FP8 q, k, v (a probe; `op` 0-5).
    pub fn mr_fp8_attention_probe(
        op: c_int,
        q: T,
        k: T,
        v: T,
        out: *mut *mut C_tensor,
        err: *mut *mut c_char,
    ) -> c_int;
}
