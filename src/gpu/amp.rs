//! Automatic mixed precision: an autocast region for any device and dtype, through the C++ shim
//! (`shim/tensor.cpp`), because tch 0.24 only toggles CUDA autocast in fp16.
//!
//! Inside an [`Autocast`] region libtorch runs the ops on its lower-precision list (matmul,
//! linear, conv, SDPA, ...) in the region's dtype and keeps the fp32 list (softmax, layer norm,
//! losses, ...) in fp32, exactly as `torch.autocast(device_type, dtype)` in Python. Parameters
//! stay fp32; the backward pass runs through the recorded casts. The CPU supports bf16 autocast
//! too, so GPU mixed-precision code has a CPU twin that tests can run.
use crate::shim::error::call;
use crate::shim::tensor::{
    mr_autocast_enabled, mr_autocast_enter, mr_autocast_exit, mr_grad_set_none,
};
use anyhow::{bail, Result};
use std::os::raw::c_int;
use tch::Device;

/// The lower precision of an autocast region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LowPrecision {
    BFloat16,
    Float16,
}

impl LowPrecision {
    fn code(self) -> c_int {
        match self {
            LowPrecision::BFloat16 => 0,
            LowPrecision::Float16 => 1,
        }
    }
}

fn device_code(device: Device) -> Result<c_int> {
    match device {
        Device::Cpu => Ok(0),
        Device::Cuda(_) => Ok(1),
        other => bail!("autocast is supported on the CPU and CUDA devices, not {other:?}"),
    }
}

/// An autocast region on one device type; the previous state comes back when it is dropped.
/// Autocast state is per thread: create, use and drop the guard on the same thread.
#[must_use = "autocast ends when the guard is dropped"]
pub struct Autocast {
    device: c_int,
    prev_enabled: c_int,
    prev_dtype: c_int,
    // not Send: the state it restores belongs to this thread
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl Autocast {
    /// Enter autocast on `device`'s type with `precision`.
    pub fn enter(device: Device, precision: LowPrecision) -> Result<Autocast> {
        let dev = device_code(device)?;
        let (mut prev_enabled, mut prev_dtype) = (0, 0);
        // SAFETY: plain values and out-pointers to locals.
        call("", |err| unsafe {
            mr_autocast_enter(
                dev,
                precision.code(),
                &mut prev_enabled,
                &mut prev_dtype,
                err,
            )
        })?;
        Ok(Autocast {
            device: dev,
            prev_enabled,
            prev_dtype,
            _thread_bound: std::marker::PhantomData,
        })
    }

    /// Whether autocast is on for `device`'s type in this thread.
    pub fn is_enabled(device: Device) -> bool {
        // SAFETY: a plain value.
        device_code(device).is_ok_and(|d| unsafe { mr_autocast_enabled(d) } == 1)
    }
}

impl Drop for Autocast {
    fn drop(&mut self) {
        // SAFETY: plain values and the out-pointer `call` passes.
        let left = call("leaving autocast failed", |err| unsafe {
            mr_autocast_exit(self.device, self.prev_enabled, self.prev_dtype, err)
        });
        if let Err(e) = left {
            tracing::error!("{e}");
        }
    }
}

impl std::fmt::Display for LowPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LowPrecision::BFloat16 => "bf16",
            LowPrecision::Float16 => "fp16",
        })
    }
}

/// The autocast precision a config asks for (`setting`, named in the warning) on `device`,
/// with a warning off CUDA (correct there, but slow without the hardware).
pub fn precision_switch(
    precision: Option<LowPrecision>,
    device: Device,
    setting: &str,
) -> Option<LowPrecision> {
    if let Some(p) = precision.filter(|_| !device.is_cuda()) {
        tracing::warn!(
            "{setting} on the CPU: {p} autocast is correct there but slow without {p} hardware"
        );
    }
    precision
}

/// [`precision_switch`] for a config's bf16 on/off switch.
pub fn bf16_switch(on: bool, device: Device, setting: &str) -> Option<LowPrecision> {
    precision_switch(on.then_some(LowPrecision::BFloat16), device, setting)
}

/// Run `f` in an autocast region when `precision` is set, plainly otherwise.
pub fn maybe_autocast<T>(
    device: Device,
    precision: Option<LowPrecision>,
    f: impl FnOnce() -> T,
) -> Result<T> {
    let _guard = match precision {
        Some(p) => Some(Autocast::enter(device, p)?),
        None => None,
    };
    Ok(f())
}

/// Drop a tensor's `.grad` (PyTorch's `zero_grad(set_to_none=True)`): the next backward hands
/// its gradient over instead of adding it into a zeroed buffer, which saves two passes over
/// every gradient per step.
pub fn set_grad_none(t: &tch::Tensor) -> Result<()> {
    // SAFETY: `as_ptr` is the live at::Tensor behind `t`; resetting its grad slot does not
    // invalidate the tensor itself.
    call("", |err| unsafe { mr_grad_set_none(t.as_ptr(), err) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Kind, Tensor};

    #[test]
    fn cpu_bf16_region_casts_matmuls_and_restores() {
        let x = Tensor::randn([4, 8], (Kind::Float, Device::Cpu));
        let w = Tensor::randn([3, 8], (Kind::Float, Device::Cpu));
        assert!(!Autocast::is_enabled(Device::Cpu));
        {
            let _outer = Autocast::enter(Device::Cpu, LowPrecision::BFloat16).unwrap();
            assert!(Autocast::is_enabled(Device::Cpu));
            assert_eq!(x.linear::<Tensor>(&w, None).kind(), Kind::BFloat16);
            // fp32-list ops stay fp32
            assert_eq!(x.log_softmax(-1, None).kind(), Kind::Float);
            {
                let _inner = Autocast::enter(Device::Cpu, LowPrecision::BFloat16).unwrap();
                assert_eq!(x.matmul(&w.tr()).kind(), Kind::BFloat16);
            }
            assert!(
                Autocast::is_enabled(Device::Cpu),
                "inner exit keeps the outer region"
            );
        }
        assert!(!Autocast::is_enabled(Device::Cpu));
        assert_eq!(x.linear::<Tensor>(&w, None).kind(), Kind::Float);
    }

    #[test]
    fn grad_set_none_drops_the_buffer_and_backward_refills_it() {
        let w = Tensor::ones([3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        (&w * 2.0).sum(None).backward();
        assert!(w.grad().defined());
        set_grad_none(&w).unwrap();
        assert!(!w.grad().defined());
        (&w * 3.0).sum(None).backward();
        assert_eq!(Vec::<f32>::try_from(w.grad()).unwrap(), vec![3.0, 3.0, 3.0]);
    }
}
