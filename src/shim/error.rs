//! Error messages from the C++ shims (`shim/dist.cpp`, `shim/tensor.cpp`): an entry point that
//! fails returns -1 and hands its message back as a malloc'd C string (`shim/error.hpp`).
use std::os::raw::{c_char, c_int};

use super::tensor::mr_free_str;

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

/// Runs a shim entry point `f` with an error out-parameter: `Ok` when it returns 0, else its
/// message, after `what: ` unless `what` is empty (shims whose messages name themselves).
/// `f` must leave the out-parameter null or set it to a string from the shim.
pub(crate) fn call(what: &str, f: impl FnOnce(*mut *mut c_char) -> c_int) -> anyhow::Result<()> {
    let mut err = std::ptr::null_mut();
    if f(&mut err) == 0 {
        return Ok(());
    }
    // SAFETY: the failed call set `err` (or left it null), as `f` promises.
    let msg = unsafe { take(err) };
    if what.is_empty() {
        anyhow::bail!("{msg}");
    }
    anyhow::bail!("{what}: {msg}")
}

/// A shim query `f` that answers 1 with a message in its out-parameter and 0 with nothing to
/// say (fallback reasons, probes): the message, if any.
pub(crate) fn reported(f: impl FnOnce(*mut *mut c_char) -> c_int) -> Option<String> {
    let mut msg = std::ptr::null_mut();
    if f(&mut msg) != 1 {
        return None;
    }
    // SAFETY: the answer 1 comes with a malloc'd message (or null), as `f` promises.
    Some(unsafe { take(msg) })
}
