//! A counter of host reads of device values (`item()`, `double_value`, `int64_value`, bool
//! conversions, `equal`): on a GPU each one makes the host wait for the device. Installed on
//! demand (a libtorch RecordFunction callback in `shim/tensor.cpp`); tests use it to check that
//! a block of training steps reads at most once per `system.loss_check_steps` steps.

use crate::shim::error::call;
use crate::shim::tensor::{mr_host_read_counter_install, mr_host_reads};
use anyhow::Result;

/// Start counting (idempotent; the counter is process-wide).
pub fn install() -> Result<()> {
    // SAFETY: the out-pointer `call` passes.
    call("", |err| unsafe { mr_host_read_counter_install(err) })
}

/// Host reads counted since [`install`] (all threads).
pub fn count() -> i64 {
    // SAFETY: reads an atomic.
    unsafe { mr_host_reads() }
}
