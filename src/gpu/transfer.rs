//! How host data becomes device tensors without stalling the GPU: a pinned staging buffer and a
//! non-blocking copy on a copy stream of its own (CUDA), or plain tensors (CPU). The batch
//! hand-off (`data::handoff`) runs one per prefetch thread; the data pipelines' `to_device`
//! steps take it.

use super::cuda::{self, Stream};
use anyhow::Result;
use tch::{Device, Tensor};

/// How host data becomes device tensors on the prefetch thread.
pub struct Transfer {
    device: Device,
    /// The copy stream (CUDA only).
    stream: Option<Stream>,
}

impl Transfer {
    /// The transfer to `device`: on CUDA with a copy stream from the pool (the caller enters it
    /// on the thread that copies), on the CPU plain tensors.
    pub fn new(device: Device) -> Result<Transfer> {
        let stream = match device {
            Device::Cuda(_) => {
                cuda::set_device(device)?;
                Some(Stream::from_pool(device)?)
            }
            _ => None,
        };
        Ok(Transfer { device, stream })
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// The copy stream (CUDA only).
    pub fn stream(&self) -> Option<&Stream> {
        self.stream.as_ref()
    }

    /// Copy `data` into `dst` (a contiguous device tensor of `data.len()` elements, or a CPU
    /// one): on CUDA through a pinned staging buffer and a non-blocking copy on the current
    /// (copy) stream; on the CPU a plain copy.
    pub fn copy_into<T: tch::kind::Element + Copy>(&self, dst: &Tensor, data: &[T]) -> Result<()> {
        if dst.numel() != data.len() || dst.kind() != T::KIND {
            anyhow::bail!(
                "hand-off: {} values of {:?} do not fill a {:?} tensor of shape {:?}",
                data.len(),
                T::KIND,
                dst.kind(),
                dst.size()
            );
        }
        if self.stream.is_none() {
            let mut dst = dst.shallow_clone();
            dst.f_copy_(&Tensor::f_from_slice(data)?.f_view(dst.size().as_slice())?)?;
            return Ok(());
        }
        let pinned = cuda::empty_pinned(data.len(), T::KIND)?;
        // SAFETY: `pinned` is a new contiguous host buffer of data.len() elements of T's kind.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), pinned.data_ptr() as *mut T, data.len());
        }
        // non-blocking from pinned memory, queued on the current (copy) stream; the host
        // allocator keeps the pinned block until the copy has finished
        cuda::copy_nonblocking(dst, &pinned.f_view(dst.size().as_slice())?)
    }

    /// `data` as a tensor of `shape` on the device: on CUDA through a pinned staging buffer and
    /// a non-blocking copy on the copy stream; on the CPU a plain tensor.
    pub fn tensor<T: tch::kind::Element + Copy>(
        &self,
        data: &[T],
        shape: &[i64],
    ) -> Result<Tensor> {
        let numel: i64 = shape.iter().product();
        if numel as usize != data.len() {
            anyhow::bail!(
                "hand-off: {} values do not fill a tensor of shape {shape:?}",
                data.len()
            );
        }
        if self.stream.is_none() {
            return Ok(Tensor::f_from_slice(data)?.f_view(shape)?);
        }
        let pinned = cuda::empty_pinned(data.len(), T::KIND)?;
        // SAFETY: `pinned` is a new contiguous host buffer of data.len() elements of T's kind.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), pinned.data_ptr() as *mut T, data.len());
        }
        // non-blocking from pinned memory: queued on the current (copy) stream; the host
        // allocator keeps the pinned block until the copy has finished
        Ok(pinned
            .f_view(shape)?
            .f_to_device_(self.device, T::KIND, true, false)?)
    }
}
