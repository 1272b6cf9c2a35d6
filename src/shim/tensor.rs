//! `shim/tensor.cpp`: autocast regions, gradient slots, the host-read counter, error strings.
use std::os::raw::{c_char, c_int};

extern "C" {
    /// Frees an error string a shim function handed back (see [`super::error::take`]).
    pub fn mr_free_str(s: *mut c_char);
}

extern "C" {
    pub fn mr_autocast_enter(
        device: c_int,
        dtype: c_int,
        prev_enabled: *mut c_int,
        prev_dtype: *mut c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_autocast_exit(
        device: c_int,
        prev_enabled: c_int,
        prev_dtype: c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn mr_autocast_enabled(device: c_int) -> c_int;
}

extern "C" {
    pub fn mr_grad_set_none(t: *const torch_sys::C_tensor, err: *mut *mut c_char) -> c_int;
}

// the host-read counter (src/train/host_reads.rs)
extern "C" {
    pub fn mr_host_read_counter_install(err: *mut *mut c_char) -> c_int;
    pub fn mr_host_reads() -> i64;
}
