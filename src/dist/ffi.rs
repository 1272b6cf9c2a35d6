//! Raw bindings to the C++ shim (`shim/dist.cpp`). Use [`super::ProcessGroup`] instead.
//!
//! Tensors cross as `at::Tensor*`, which is what tch's `Tensor::as_ptr()` returns
//! (torch-sys: `typedef torch::Tensor *tensor`). Errors come back as malloc'd C strings: take
//! them with `crate::shim_error::take`.
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
}

// The gradient reducer (shim/reducer.cpp).
extern "C" {
    pub fn mr_reducer_new(
        group: *mut c_void,
        params: *const *const C_tensor,
        n: usize,
        bucket_of: *const i64,
        offset_of: *const i64,
        flats: *const *const C_tensor,
        n_buckets: usize,
        err: *mut *mut c_char,
    ) -> *mut c_void;
    pub fn mr_reducer_free(reducer: *mut c_void);
    pub fn mr_reducer_arm(
        reducer: *mut c_void,
        mode: c_int,
        accum: *const *const C_tensor,
        n_accum: usize,
        clip: f64,
        timing: c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_reducer_finish(
        reducer: *mut c_void,
        grads: *const *const C_tensor,
        n: usize,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_reducer_order(reducer: *mut c_void, out: *mut i64, cap: usize) -> usize;
    pub fn mr_reducer_timings(reducer: *mut c_void, out: *mut f64, cap: usize) -> usize;
    pub fn mr_reducer_counters(reducer: *mut c_void, launches: *mut u64, bytes: *mut u64);
}
