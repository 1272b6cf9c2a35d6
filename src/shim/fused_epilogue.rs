//! `shim/fused_epilogue.cpp`: the encoder epilogue kernels (NVRTC) and their autograd ops. Use [`crate::fused::epilogue`].
use std::os::raw::{c_char, c_int};
use torch_sys::C_tensor;

pub type T = *const C_tensor;

/// [`Epilogue`] as the shim takes it (`MrFeEpilogue` in shim/fused_epilogue.cpp: same fields,
/// same order).
#[repr(C)]
pub struct EpilogueArgs {
    pub residual: T,
    pub gamma: T,
    pub beta: T,
    pub mask: T,
    pub p: f64,
    pub train: c_int,
    pub eps: f64,
    pub mode: c_int,
    pub out_type: c_int,
    pub fp8_scale: T,
}

pub type Err = *mut *mut c_char;

extern "C" {
    pub fn mr_fe_bias_dropout_add_ln(
        h: T,
        bias: T,
        e: *const EpilogueArgs,
        out: *mut *mut C_tensor,
        fp8_out: *mut *mut C_tensor,
        used_kernel: *mut c_int,
        err: Err,
    ) -> c_int;
    pub fn mr_fe_dense_dropout_add_ln(
        x: T,
        w: T,
        b: T,
        e: *const EpilogueArgs,
        out: *mut *mut C_tensor,
        fp8_out: *mut *mut C_tensor,
        used_kernel: *mut c_int,
        err: Err,
    ) -> c_int;
    pub fn mr_fe_dense_bias_gelu(
        x: T,
        w: T,
        b: T,
        mode: c_int,
        out: *mut *mut C_tensor,
        used_kernel: *mut c_int,
        err: Err,
    ) -> c_int;
    pub fn mr_fe_bias_gelu(
        z: T,
        b: T,
        fp8_scale: T,
        mode: c_int,
        out: *mut *mut C_tensor,
        fp8_out: *mut *mut C_tensor,
        used_kernel: *mut c_int,
        err: Err,
    ) -> c_int;
    pub fn mr_fe_qkv_projection(
        x: T,
        w: T,
        b: T,
        heads: i64,
        mode: c_int,
        out: *mut *mut C_tensor,
        used_kernel: *mut c_int,
        err: Err,
    ) -> c_int;
    pub fn mr_fe_kernel_status(msg: Err) -> c_int;
    pub fn mr_fe_v4_launches(which: c_int) -> i64;
    pub fn mr_fe_set_thread_mask_draw(in_kernel: c_int);
    pub fn mr_fe_kernel_built() -> c_int;
    pub fn mr_fe_nvrtc_compile(
        nvrtc_path: *const c_char,
        arch: *const c_char,
        ht: c_int,
        rt: c_int,
        ot: c_int,
        size: *mut usize,
        err: Err,
    ) -> c_int;
}
