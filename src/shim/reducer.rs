//! `shim/reducer.cpp`: the gradient reducer's autograd hooks. Use [`crate::distributed`]'s
//! `BucketedGradSync` instead.
use std::os::raw::{c_char, c_int, c_void};
use torch_sys::C_tensor;

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
