//! A counter of host reads of device values (`item()`, `double_value`, `int64_value`, bool
//! conversions, `equal`): on a GPU each one makes the host wait for the device. Installed on
//! demand (a libtorch RecordFunction callback in `shim/tensor.cpp`); tests use it to check that
//! a block of training steps reads at most once per `system.loss_check_steps` steps.

use anyhow::{bail, Result};
use std::os::raw::{c_char, c_int};

extern "C" {
    fn mr_host_read_counter_install(err: *mut *mut c_char) -> c_int;
    fn mr_host_reads() -> i64;
}

/// Start counting (idempotent; the counter is process-wide).
pub fn install() -> Result<()> {
    let mut err = std::ptr::null_mut();
    // SAFETY: an out-pointer to a local.
    if unsafe { mr_host_read_counter_install(&mut err) } != 0 {
        // SAFETY: set by the failed call.
        bail!("{}", unsafe { crate::shim_error::take(err) });
    }
    Ok(())
}

/// Host reads counted since [`install`] (all threads).
pub fn count() -> i64 {
    // SAFETY: reads an atomic.
    unsafe { mr_host_reads() }
}
