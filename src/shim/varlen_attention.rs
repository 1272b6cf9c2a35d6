//! `shim/varlen_attention.cpp`: FlashAttention's varlen kernel. Use [`crate::fused::varlen_attention`].
use torch_sys::C_tensor;

extern "C" {
    pub fn mr_varlen_flash_attention(
        q: *const C_tensor,
        k: *const C_tensor,
        v: *const C_tensor,
        cu_seqlens: *const C_tensor,
        max_len: i64,
        dropout_p: f64,
        out: *mut *mut C_tensor,
        err: *mut *mut std::os::raw::c_char,
    ) -> std::os::raw::c_int;
}
