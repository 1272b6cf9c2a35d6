//! The batch hand-off: host batches to device tensors without stalling the GPU. Every batch a
//! workload trains or evaluates on comes through here.
//!
//! A [`Prefetcher`] runs the host iterator on a thread of its own, a few batches ahead. On CUDA
//! that thread stages each batch in pinned (page-locked) host memory and starts its copies on a
//! side stream (non-blocking), then records an event; the training thread, when it takes the
//! batch, makes its own stream wait for that event (the host does not wait) and tells the caching
//! allocator that the tensors are used on its stream. So the copy of batch k+1 overlaps step k,
//! and nothing in the hand-off synchronises the host with the device.
//!
//! On the CPU the same thread and channel run, and each batch becomes plain tensors as before.
//! A libtorch error while converting (tch panics on those) reaches the consumer as an error
//! ([`crate::util::libtorch_errors::catching`]).

use crate::gpu::cuda::{self, Event, Stream};
use anyhow::{Context, Result};
use crossbeam_channel::{bounded, Receiver};
use std::thread::JoinHandle;
use tch::{Device, Kind, Tensor};

pub use crate::gpu::transfer::Transfer;

/// Values that hold device tensors (so the hand-off can hand them to the compute stream).
pub trait DeviceTensors {
    fn tensors(&self) -> Vec<&Tensor>;
}

impl DeviceTensors for Tensor {
    fn tensors(&self) -> Vec<&Tensor> {
        vec![self]
    }
}

impl DeviceTensors for (Tensor, Tensor) {
    fn tensors(&self) -> Vec<&Tensor> {
        vec![&self.0, &self.1]
    }
}

struct Staged<T> {
    value: T,
    /// Recorded on the copy stream after the value's copies (CUDA only).
    ready: Option<Event>,
}

// SAFETY: tensors and events may move between threads; the value is only touched by one thread
// at a time (produced, sent, consumed).
unsafe impl<T: Send> Send for Staged<T> {}

/// Runs a host iterator `depth` batches ahead on its own thread and hands its batches over as
/// device tensors ready to use on the calling thread's stream.
pub struct Prefetcher<T> {
    rx: Option<Receiver<Result<Staged<T>>>>,
    thread: Option<JoinHandle<()>>,
    device: Device,
}

impl<T: DeviceTensors + Send + 'static> Prefetcher<T> {
    /// Start the thread: it takes items from `items`, turns each into a device value with
    /// `convert` (which uses the [`Transfer`] for every host-to-device copy), and queues at most
    /// `depth` values ahead of the consumer. An error ends the stream after being handed over.
    pub fn spawn<H, I, F>(device: Device, depth: usize, items: I, mut convert: F) -> Result<Self>
    where
        I: Iterator<Item = Result<H>> + Send + 'static,
        F: FnMut(H, &Transfer) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = bounded::<Result<Staged<T>>>(depth.max(1));
        let thread = std::thread::Builder::new()
            .name("mlperf-run-handoff".into())
            .spawn(move || {
                let transfer = match Transfer::new(device) {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = tx.send(Err(e.context("starting the batch hand-off")));
                        return;
                    }
                };
                // this thread's copies go to the copy stream
                let _guard = match transfer.stream().map(Stream::enter).transpose() {
                    Ok(g) => g,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                for item in items {
                    let staged = item.and_then(|h| {
                        let value =
                            crate::util::libtorch_errors::catching(|| convert(h, &transfer))?;
                        let ready = match transfer.stream() {
                            Some(s) => {
                                let mut ev = Event::new()?;
                                ev.record(s)?;
                                Some(ev)
                            }
                            None => None,
                        };
                        Ok(Staged { value, ready })
                    });
                    let failed = staged.is_err();
                    if tx.send(staged).is_err() || failed {
                        return; // the consumer is gone, or the stream ends with the error
                    }
                }
            })
            .context("cannot start the batch hand-off thread")?;
        Ok(Prefetcher {
            rx: Some(rx),
            thread: Some(thread),
            device,
        })
    }

    /// The next value, usable on this thread's current stream; None at the end.
    pub fn next_batch(&mut self) -> Option<Result<T>> {
        let staged = match self.rx.as_ref()?.recv() {
            Ok(s) => s,
            Err(_) => return None, // the thread finished
        };
        Some(staged.and_then(|s| self.receive(s)))
    }

    fn receive(&self, s: Staged<T>) -> Result<T> {
        if let Some(ev) = &s.ready {
            let compute = Stream::current(self.device)?;
            // the compute stream waits for the copies (the host does not), and the caching
            // allocator keeps the memory until the compute stream is done with it
            ev.block(&compute)?;
            for t in s.value.tensors() {
                cuda::record_stream(t, &compute)?;
            }
        }
        Ok(s.value)
    }
}

impl<T> Drop for Prefetcher<T> {
    fn drop(&mut self) {
        // closing the channel stops the thread after the item it is working on
        self.rx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// u8 NHWC images and i64 labels as device tensors: `[n, h, w, 3]` u8 and `[n]` i64.
pub fn image_batch(
    images: &[u8],
    labels: &[i64],
    height: usize,
    width: usize,
    t: &Transfer,
) -> Result<(Tensor, Tensor)> {
    let n = labels.len() as i64;
    let x = t.tensor(images, &[n, height as i64, width as i64, 3])?;
    let y = t.tensor(labels, &[n])?;
    debug_assert_eq!(x.kind(), Kind::Uint8);
    Ok((x, y))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_handoff_delivers_every_batch_in_order() {
        let items = (0..20u8).map(|i| Ok(vec![i; 12]));
        let mut p = Prefetcher::spawn(Device::Cpu, 2, items, |v: Vec<u8>, t: &Transfer| {
            let labels = vec![v[0] as i64; 1];
            image_batch(&v, &labels, 2, 2, t)
        })
        .unwrap();
        let mut seen = Vec::new();
        while let Some(b) = p.next_batch() {
            let (x, y) = b.unwrap();
            assert_eq!(x.size(), [1, 2, 2, 3]);
            assert_eq!(x.kind(), Kind::Uint8);
            seen.push(y.int64_value(&[0]));
        }
        assert_eq!(seen, (0..20).collect::<Vec<i64>>());
    }

    #[test]
    fn errors_and_panics_end_the_stream_as_errors() {
        let items = (0..5).map(|i| {
            if i == 3 {
                Err(anyhow::anyhow!("corrupt batch"))
            } else {
                Ok(i)
            }
        });
        let mut p = Prefetcher::spawn(Device::Cpu, 1, items, |i: i32, t: &Transfer| {
            t.tensor(&[i as i64], &[1])
        })
        .unwrap();
        for _ in 0..3 {
            let _ = p.next_batch().unwrap().unwrap();
        }
        let e = p.next_batch().unwrap().unwrap_err().to_string();
        assert!(e.contains("corrupt batch"), "{e}");
        assert!(p.next_batch().is_none());

        let items = (0..3).map(Ok);
        let mut p = Prefetcher::spawn(Device::Cpu, 1, items, |_: i32, _: &Transfer| {
            Ok(Tensor::zeros([2], (Kind::Float, Device::Cpu)).view([3]))
        })
        .unwrap();
        let e = p.next_batch().unwrap().unwrap_err().to_string();
        assert!(e.contains("libtorch error: shape '[3]' is invalid"), "{e}");
    }

    #[test]
    fn dropping_early_stops_the_thread() {
        let items = (0..).map(Ok);
        let mut p = Prefetcher::spawn(Device::Cpu, 2, items, |i: i64, t: &Transfer| {
            t.tensor(&[i], &[1])
        })
        .unwrap();
        let _ = p.next_batch().unwrap().unwrap();
        drop(p); // must return: the endless iterator's thread sees the closed channel
    }
}
