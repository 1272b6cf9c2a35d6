//! CUDA streams, events, pinned host memory and math-mode switches, through the C++ shim
//! (`shim/cuda.cpp`), because tch 0.24 exposes none of them. Thin, safe wrappers: the
//! batch hand-off ([`crate::data::handoff`]) and the device set-up of a run
//! ([`configure`]) are built on them. Nothing here runs for CPU training.

use anyhow::{bail, Result};
use std::os::raw::c_int;
use tch::{Device, Kind, Tensor};

use crate::shim::cuda::{
    mr_copy_nonblocking, mr_empty_pinned, mr_event_block, mr_event_free, mr_event_new,
    mr_event_query, mr_event_record, mr_get_cudnn_benchmark, mr_get_tf32, mr_set_cudnn_benchmark,
    mr_set_device, mr_set_tf32, mr_stream_current, mr_stream_exchange, mr_stream_free,
    mr_stream_from_pool, mr_stream_native, mr_stream_synchronize, mr_tensor_record_stream, MrEvent,
    MrStream,
};
use crate::shim::error::call;

fn cuda_index(device: Device) -> Result<c_int> {
    match device {
        Device::Cuda(i) => Ok(i as c_int),
        other => bail!("{other:?} is not a CUDA device"),
    }
}

/// Wait (on the host) for all work queued on `device`; nothing on a CPU. For benchmarks and
/// checks that time GPU work between host clocks.
pub fn synchronize(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Make `device` this thread's current CUDA device (its context and pinned allocations go
/// there): every thread of a process that touches the GPU calls it, so a rank uses only its GPU.
pub fn set_device(device: Device) -> Result<()> {
    let i = cuda_index(device)?;
    // SAFETY: a plain value.
    call("CUDA set device", |e| unsafe { mr_set_device(i, e) })
}

/// A CUDA stream (a handle: dropping it does not destroy libtorch's pooled stream).
pub struct Stream(*mut MrStream);

// SAFETY: a c10::Stream is a plain (device, id) value; CUDA streams may be used from any thread.
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

impl Stream {
    /// A stream from libtorch's pool on `device` (not the default stream): for copies that
    /// should overlap the compute stream's work.
    pub fn from_pool(device: Device) -> Result<Stream> {
        Stream::get(device, mr_stream_from_pool)
    }

    /// This thread's current stream on `device` (where its kernels go).
    pub fn current(device: Device) -> Result<Stream> {
        Stream::get(device, mr_stream_current)
    }

    /// A stream on `device` from `getter`, one of the shim's stream queries.
    fn get(
        device: Device,
        getter: unsafe extern "C" fn(c_int, *mut *mut MrStream, crate::shim::cuda::Err) -> c_int,
    ) -> Result<Stream> {
        let i = cuda_index(device)?;
        let mut s = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        call("CUDA stream", |e| unsafe { getter(i, &mut s, e) })?;
        Ok(Stream(s))
    }

    /// Make this stream the thread's current one on its device until the guard is dropped.
    pub fn enter(&self) -> Result<StreamGuard> {
        let mut prev = std::ptr::null_mut();
        // SAFETY: a live stream handle and an out-pointer to a local.
        call("CUDA stream", |e| unsafe {
            mr_stream_exchange(self.0, &mut prev, e)
        })?;
        Ok(StreamGuard {
            prev: Stream(prev),
            _thread_bound: std::marker::PhantomData,
        })
    }

    /// The stream's native handle (a `cudaStream_t`), for libraries that queue their own work
    /// on it (nvJPEG's decode into a batch's arena).
    pub fn native(&self) -> Result<*mut std::ffi::c_void> {
        let mut out = std::ptr::null_mut();
        // SAFETY: a live stream handle and an out-pointer to a local.
        call("CUDA stream", |e| unsafe {
            mr_stream_native(self.0, &mut out, e)
        })?;
        Ok(out)
    }

    /// Wait (on the host) for the work queued on this stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live stream handle.
        call("CUDA stream synchronize", |e| unsafe {
            mr_stream_synchronize(self.0, e)
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: allocated by the shim, freed once.
        unsafe { mr_stream_free(self.0) }
    }
}

/// Restores the thread's previous current stream when dropped.
#[must_use = "the stream is current until the guard is dropped"]
pub struct StreamGuard {
    prev: Stream,
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut back = std::ptr::null_mut();
        // SAFETY: a live stream handle and out-pointers to a local and the one `call` passes.
        match call("restoring the CUDA stream failed", |err| unsafe {
            mr_stream_exchange(self.prev.0, &mut back, err)
        }) {
            Ok(()) => drop(Stream(back)),
            Err(e) => tracing::error!("{e}"),
        }
    }
}

/// A CUDA event: a point in a stream's work that another stream can wait for.
pub struct Event(*mut MrEvent);

// SAFETY: CUDA events may be recorded and waited for from any thread; the shim's object is only
// touched through &self/&mut self.
unsafe impl Send for Event {}

impl Event {
    pub fn new() -> Result<Event> {
        let mut ev = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        call("CUDA event", |e| unsafe { mr_event_new(&mut ev, e) })?;
        Ok(Event(ev))
    }

    /// Mark the point after the work queued on `stream` so far.
    pub fn record(&mut self, stream: &Stream) -> Result<()> {
        // SAFETY: live handles.
        call("CUDA event record", |e| unsafe {
            mr_event_record(self.0, stream.0, e)
        })
    }

    /// Work queued on `stream` from now on waits for this event; the host does not wait.
    pub fn block(&self, stream: &Stream) -> Result<()> {
        // SAFETY: live handles.
        call("CUDA event wait", |e| unsafe {
            mr_event_block(self.0, stream.0, e)
        })
    }

    /// Whether the work before the event's record has finished (the host does not wait).
    pub fn query(&self) -> Result<bool> {
        let mut done: c_int = 0;
        // SAFETY: a live event and an out-pointer to a local.
        call("CUDA event query", |e| unsafe {
            mr_event_query(self.0, &mut done, e)
        })?;
        Ok(done != 0)
    }
}

/// Waits on the host until the work queued so far on `device`'s current stream has finished,
/// polling at most `timeout`: true when it finished, false when the time ran out. Unlike a
/// blocking read, a device stuck on a collective that no watchdog covers (an all-reduce
/// replayed from a CUDA graph whose peer died) cannot hold the host forever. A CPU device has
/// nothing queued: true at once.
pub fn wait_for_device(device: Device, timeout: std::time::Duration) -> Result<bool> {
    if !device.is_cuda() {
        return Ok(true);
    }
    let mut done = Event::new()?;
    done.record(&Stream::current(device)?)?;
    let start = std::time::Instant::now();
    loop {
        if done.query()? {
            return Ok(true);
        }
        if start.elapsed() >= timeout {
            return Ok(false);
        }
        // short naps: the read this precedes comes every few steps, and a step takes far longer
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: allocated by the shim, freed once.
        unsafe { mr_event_free(self.0) }
    }
}

/// Tell the caching allocator that `t`'s memory is used on `stream` too (PyTorch's
/// `Tensor.record_stream`), so it is not handed out again before that stream's work is done.
pub fn record_stream(t: &Tensor, stream: &Stream) -> Result<()> {
    // SAFETY: a live tensor and stream.
    call("record_stream", |e| unsafe {
        mr_tensor_record_stream(t.as_ptr(), stream.0, e)
    })
}

/// `dst.copy_(src)` without waiting: from pinned host memory to the device it is queued on the
/// current stream and the host goes on (tch's `copy_` blocks until the copy is done).
pub fn copy_nonblocking(dst: &Tensor, src: &Tensor) -> Result<()> {
    // SAFETY: live tensors; the shim checks them.
    call("non-blocking copy", |e| unsafe {
        mr_copy_nonblocking(dst.as_ptr(), src.as_ptr(), e)
    })
}

/// An uninitialised 1-d host tensor of `numel` elements in pinned (page-locked) memory from
/// libtorch's caching host allocator: the source of asynchronous host-to-device copies.
pub fn empty_pinned(numel: usize, kind: Kind) -> Result<Tensor> {
    let code = match kind {
        Kind::Uint8 => 0,
        Kind::Int64 => 1,
        Kind::Float => 2,
        Kind::Int => 3,
        Kind::Double => 4,
        other => bail!("pinned buffers of {other:?} are not supported"),
    };
    let mut t = std::ptr::null_mut();
    // SAFETY: out-pointer to a local.
    call("pinned host memory", |e| unsafe {
        mr_empty_pinned(numel as i64, code, &mut t, e)
    })?;
    // SAFETY: a new at::Tensor we now own.
    Ok(unsafe { Tensor::from_ptr(t) })
}

/// The math-mode and device settings of a run on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceSettings {
    /// cuDNN benchmark mode: time the convolution algorithms for each new input shape once and
    /// keep the fastest (fixed shapes: one tuning step; progressive resizing: one per size).
    pub cudnn_benchmark: bool,
    /// TF32 tensor cores for fp32 matmuls and convolutions (bf16 autocast regions unaffected).
    pub tf32: bool,
}

/// Apply `settings` for a run on `device` (nothing on the CPU).
pub fn configure(device: Device, settings: DeviceSettings) -> Result<()> {
    if !device.is_cuda() {
        return Ok(());
    }
    set_device(device)?;
    set_cudnn_benchmark(settings.cudnn_benchmark)?;
    set_tf32(settings.tf32)?;
    tracing::info!(
        "{device:?}: cudnn benchmark {}, tf32 {}",
        settings.cudnn_benchmark,
        settings.tf32
    );
    Ok(())
}

/// TF32 for fp32 matmuls and convolutions on CUDA.
pub fn set_tf32(on: bool) -> Result<()> {
    // SAFETY: plain values.
    call("TF32 switch", |e| unsafe {
        mr_set_tf32(on as c_int, on as c_int, e)
    })
}

/// The current TF32 settings (matmul, convolution).
pub fn tf32() -> Result<(bool, bool)> {
    let (mut m, mut c) = (0, 0);
    // SAFETY: out-pointers to locals.
    call("TF32 switch", |e| unsafe { mr_get_tf32(&mut m, &mut c, e) })?;
    Ok((m != 0, c != 0))
}

/// cuDNN benchmark mode on or off (libtorch's global context, any machine).
pub fn set_cudnn_benchmark(on: bool) -> Result<()> {
    // SAFETY: a plain value.
    call("cuDNN benchmark switch", |e| unsafe {
        mr_set_cudnn_benchmark(on as c_int, e)
    })
}

/// Whether cuDNN benchmark mode is on.
pub fn cudnn_benchmark() -> Result<bool> {
    let mut on = 0;
    // SAFETY: an out-pointer to a local.
    call("cuDNN benchmark switch", |e| unsafe {
        mr_get_cudnn_benchmark(&mut on, e)
    })?;
    Ok(on != 0)
}

/// cuDNN benchmark mode off until dropped, then as it was: for work that cannot wait for the
/// device (a CUDA graph capture of convolution shapes that were never timed: the benchmark
/// times them by running them, and a capture records instead of running).
pub struct CudnnBenchmarkOff {
    was: bool,
}

impl CudnnBenchmarkOff {
    pub fn new() -> Result<CudnnBenchmarkOff> {
        let was = cudnn_benchmark()?;
        set_cudnn_benchmark(false)?;
        Ok(CudnnBenchmarkOff { was })
    }
}

impl Drop for CudnnBenchmarkOff {
    fn drop(&mut self) {
        if let Err(e) = set_cudnn_benchmark(self.was) {
            tracing::warn!("restoring cuDNN benchmark mode: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tf32_switch_round_trips_without_a_gpu() {
        // the setting is libtorch's global context: it can be set and read on any machine
        let before = tf32().unwrap();
        set_tf32(true).unwrap();
        assert_eq!(tf32().unwrap(), (true, true));
        set_tf32(false).unwrap();
        assert_eq!(tf32().unwrap(), (false, false));
        set_tf32(before.0).unwrap();
    }

    #[test]
    fn cudnn_benchmark_is_off_inside_the_guard_and_as_it_was_after() {
        // the only test that touches this global (configure leaves it alone on a CPU)
        let before = cudnn_benchmark().unwrap();
        for was in [true, false] {
            set_cudnn_benchmark(was).unwrap();
            {
                let _off = CudnnBenchmarkOff::new().unwrap();
                assert!(!cudnn_benchmark().unwrap());
            }
            assert_eq!(cudnn_benchmark().unwrap(), was);
        }
        set_cudnn_benchmark(before).unwrap();
    }

    #[test]
    fn cuda_calls_fail_cleanly_on_a_cpu_device() {
        assert!(Stream::current(Device::Cpu).is_err());
        assert!(configure(
            Device::Cpu,
            DeviceSettings {
                cudnn_benchmark: true,
                tf32: true
            }
        )
        .is_ok());
    }
}
