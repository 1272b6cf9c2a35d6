//! Error messages from the C++ shims (`shim/dist.cpp`, `shim/tensor.cpp`): an entry point that
//! fails returns -1 and hands its message back as a malloc'd C string (`shim/error.hpp`).
use std::os::raw::c_char;

extern "C" {
    fn mr_free_str(s: *mut c_char);
}

/// Takes ownership of an error string from a shim and frees it (null: a generic message).
///
/// # Safety
/// `err` is null or a string returned through an `err` out-parameter of a shim, not yet freed.
pub(crate) unsafe fn take(err: *mut c_char) -> String {
    if err.is_null() {
        return "the C++ shim reported an error without a message".to_owned();
    }
    let msg = std::ffi::CStr::from_ptr(err).to_string_lossy().into_owned();
    mr_free_str(err);
    msg
}
