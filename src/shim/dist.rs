//! `shim/dist.cpp`: the c10d process group. Use [`crate::distributed::ProcessGroup`] instead.
//!
//! Tensors cross as `at::Tensor*`, which is what tch's `Tensor::as_ptr()` returns
//! (torch-sys: `typedef torch::Tensor *tensor`). Errors come back as malloc'd C strings: take
//! them with `crate::shim::error::take`.
use std::os::raw::{c_char, c_int, c_void};
use torch_sys::C_tensor;

extern "C" {
    pub fn mr_dist_new(
        master_addr: *const c_char,
        port: u16,
        rank: c_int,
        size: c_int,
        backend: c_int,
        timeout_ms: i64,
        rendezvous_ms: i64,
        err: *mut *mut c_char,
    ) -> *mut c_void;
    pub fn mr_dist_free(group: *mut c_void);
    pub fn mr_dist_allreduce(
        group: *mut c_void,
        tensors: *const *const C_tensor,
        n: usize,
        op: c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_dist_broadcast(
        group: *mut c_void,
        tensors: *const *const C_tensor,
        n: usize,
        root: c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_dist_barrier(group: *mut c_void, err: *mut *mut c_char) -> c_int;
    pub fn mr_dist_mark_failed(group: *mut c_void);
    pub fn mr_dist_is_failed(group: *const c_void) -> c_int;
    pub fn mr_dist_agree(
        group: *mut c_void,
        failure: *const c_char,
        report: *mut *mut c_char,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_dist_store_set(
        group: *mut c_void,
        key: *const c_char,
        value: *const c_char,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_dist_store_add(
        group: *mut c_void,
        key: *const c_char,
        delta: i64,
        out: *mut i64,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_dist_store_get(
        group: *mut c_void,
        key: *const c_char,
        out: *mut *mut c_char,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_dist_gather_notes(
        group: *mut c_void,
        note: *const c_char,
        report: *mut *mut c_char,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_dist_leave(group: *mut c_void, err: *mut *mut c_char) -> c_int;
}
