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

// libtorch's own log lines (c10's LOG, c10d's warnings)
extern "C" {
    fn mr_set_cpp_log_level(level: c_int);
    fn mr_cpp_log_level() -> c_int;
}

/// The least severity of libtorch's own log lines that reach stderr (c10's `LOG`, c10d's
/// warnings): what `TORCH_CPP_LOG_LEVEL` sets when libtorch loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CppLogLevel {
    Info = 0,
    Warning = 1,
    Error = 2,
    Fatal = 3,
}

/// Set libtorch's log level for the rest of the process.
pub fn set_cpp_log_level(level: CppLogLevel) {
    // SAFETY: sets an int flag c10 reads when it logs; no pointer crosses.
    unsafe { mr_set_cpp_log_level(level as c_int) }
}

/// libtorch's log level now (its raw value: 0 info .. 3 fatal).
pub fn cpp_log_level() -> i32 {
    // SAFETY: reads an int flag.
    unsafe { mr_cpp_log_level() }
}
