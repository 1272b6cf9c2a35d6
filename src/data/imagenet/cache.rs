//! `data.gpu_cache_mb`: whole decoded training images kept on the run's device, so that later
//! epochs cut their random-resized crops from memory instead of reading and decoding the file.
//!
//! The bookkeeping ([`DecodedCache`]) is the decode workers' and the hand-off's common ground:
//!
//! - a worker asks [`DecodedCache::find`] before reading a sample's file (one lookup; a hit when
//!   the image is stored: the worker picks the crop from the stored size, reads nothing and
//!   decodes nothing, and the batch carries a [`CacheHit`]);
//! - on a miss it reads the header and asks [`DecodedCache::reserve`]: while the reserved bytes
//!   plus this image's (`width * height * 3`) stay within the budget the image is reserved and
//!   decoded **whole** at full scale (by whichever decoder takes it: the CPU region decoder,
//!   zune-jpeg or nvJPEG), so that any later crop can be cut from it; the batch lists it as a
//!   fill;
//! - the hand-off, once the batch's arena is on the device, copies each fill's pixels into a
//!   tensor of their own on that device and [`DecodedCache::store`]s it; each hit's region is
//!   copied from its stored tensor into the arena (`device_augment::ragged_arena`).
//!
//! Once the budget is reached nothing more is inserted and nothing is evicted (DALI's decoder
//! cache does the same: it caches images up to its size, then stops). The budget counts pixel
//! bytes; it is never exceeded, since a reservation comes before the decode. A reservation whose
//! batch never reached the hand-off (an epoch cut short) is taken over by the next epoch that
//! meets the image. The stored pixels are opaque here (`Arc<dyn Any>`): device tensors in the
//! default build (`DeviceImage`), so this module also builds without libtorch.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// One stored image's pixels, as the hand-off stored them (a `DeviceImage` in the torch build).
pub type Pixels = Arc<dyn Any + Send + Sync>;

/// Bytes per MiB: `data.gpu_cache_mb` counts MiB (as DALI's `cache_size`).
pub const MIB: u64 = 1 << 20;

enum Slot {
    /// Reserved (`bytes`) by a worker of `epoch`, which decodes the image whole; the hand-off
    /// stores it.
    Pending { epoch: u64, bytes: u64 },
    Stored {
        width: u32,
        height: u32,
        pixels: Pixels,
    },
}

#[derive(Default)]
struct Inner {
    slots: HashMap<usize, Slot>,
    /// Bytes reserved or stored: never above the budget.
    reserved: u64,
    stats: CacheStats,
}

/// The decoded-image cache of one loader (one rank's training set), keyed by the sample's index
/// in the ImageFolder, with a byte budget.
pub struct DecodedCache {
    inner: Mutex<Inner>,
    budget: u64,
}

/// What a cache did so far, for the run's report and the data bench.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// The budget (bytes of pixels).
    pub budget: u64,
    /// Samples looked up (every training sample loaded), and those found stored.
    pub lookups: u64,
    pub hits: u64,
    /// Images stored and their pixel bytes.
    pub images: u64,
    pub bytes: u64,
}

impl CacheStats {
    /// hits / lookups (0 before any lookup).
    pub fn hit_rate(&self) -> f64 {
        self.hits as f64 / self.lookups.max(1) as f64
    }

    /// The sum of two caches' statistics.
    pub fn plus(self, o: CacheStats) -> CacheStats {
        CacheStats {
            budget: self.budget + o.budget,
            lookups: self.lookups + o.lookups,
            hits: self.hits + o.hits,
            images: self.images + o.images,
            bytes: self.bytes + o.bytes,
        }
    }

    /// One line for a report.
    pub fn describe(&self) -> String {
        format!(
            "decoded-image cache: {} of {} lookups hit ({:.1}%); {} images stored, {:.1} of {:.1} \
             MiB",
            self.hits,
            self.lookups,
            100.0 * self.hit_rate(),
            self.images,
            self.bytes as f64 / MIB as f64,
            self.budget as f64 / MIB as f64
        )
    }
}

/// A sample of a batch whose crop is cut from the cache at the hand-off: its stored image, and
/// where its region (the batch's `DeviceCrop` width and height) starts in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheHit {
    pub index: usize,
    pub x: u32,
    pub y: u32,
}

/// A device-augmented batch's work for the cache at the hand-off: the batch's last `hits.len()`
/// images are cut from stored images, and the images at `fills` (position in the batch, sample
/// index) were decoded whole, to be stored once the arena holds them.
#[derive(Clone)]
pub struct CacheJob {
    pub cache: Arc<DecodedCache>,
    pub hits: Vec<CacheHit>,
    pub fills: Vec<(usize, usize)>,
}

impl std::fmt::Debug for CacheJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheJob")
            .field("hits", &self.hits.len())
            .field("fills", &self.fills.len())
            .finish()
    }
}

impl PartialEq for CacheJob {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.cache, &other.cache)
            && self.hits == other.hits
            && self.fills == other.fills
    }
}

impl DecodedCache {
    /// An empty cache of `budget` bytes of pixels.
    pub fn new(budget: u64) -> DecodedCache {
        DecodedCache {
            inner: Mutex::new(Inner {
                stats: CacheStats {
                    budget,
                    ..CacheStats::default()
                },
                ..Inner::default()
            }),
            budget,
        }
    }

    /// The state, also after a panic elsewhere (the counters and map stay consistent: every
    /// change is made under the lock in one step).
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One lookup of sample `index`: its size when it is stored (a hit).
    pub fn find(&self, index: usize) -> Option<(u32, u32)> {
        let mut g = self.lock();
        g.stats.lookups += 1;
        let found = match g.slots.get(&index) {
            Some(Slot::Stored { width, height, .. }) => Some((*width, *height)),
            _ => None,
        };
        if found.is_some() {
            g.stats.hits += 1;
        }
        found
    }

    /// Whether the worker of `epoch` that missed sample `index` (a `width` x `height` image)
    /// decodes it whole for the cache: yes when it fits in what is left of the budget (it is
    /// reserved then), or when it was reserved before and not stored (a batch that never reached
    /// the hand-off, or this worker's own reservation).
    pub fn reserve(&self, index: usize, epoch: u64, width: u32, height: u32) -> bool {
        let bytes = width as u64 * height as u64 * 3;
        let mut g = self.lock();
        let g = &mut *g;
        match g.slots.get_mut(&index) {
            Some(Slot::Stored { .. }) => false,
            Some(Slot::Pending { epoch: e, bytes: b }) => {
                *e = epoch;
                *b == bytes
            }
            None if g.reserved + bytes <= self.budget => {
                g.reserved += bytes;
                g.slots.insert(index, Slot::Pending { epoch, bytes });
                true
            }
            None => false,
        }
    }

    /// A reserved image that could not be decoded: its bytes go back to the budget.
    pub fn release(&self, index: usize) {
        let mut g = self.lock();
        if let Some(Slot::Pending { bytes, .. }) = g.slots.get(&index) {
            let bytes = *bytes;
            g.slots.remove(&index);
            g.reserved -= bytes;
        }
    }

    /// Store sample `index`'s whole decoded image (`width` x `height`), reserved before; an image
    /// not reserved, already stored or of another size than reserved is not stored.
    pub fn store(&self, index: usize, width: u32, height: u32, pixels: Pixels) {
        let bytes = width as u64 * height as u64 * 3;
        let mut g = self.lock();
        if !matches!(g.slots.get(&index), Some(Slot::Pending { bytes: b, .. }) if *b == bytes) {
            return;
        }
        g.slots.insert(
            index,
            Slot::Stored {
                width,
                height,
                pixels,
            },
        );
        g.stats.images += 1;
        g.stats.bytes += bytes;
    }

    /// The stored pixels of sample `index`.
    pub fn pixels(&self, index: usize) -> Option<Pixels> {
        match self.lock().slots.get(&index) {
            Some(Slot::Stored { pixels, .. }) => Some(pixels.clone()),
            _ => None,
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.lock().stats
    }
}

#[cfg(feature = "torch")]
pub use device::{cut_hits, store_fills, DeviceImage};

/// The hand-off's side: stored images as tensors on its device.
#[cfg(feature = "torch")]
mod device {
    use super::{CacheJob, DecodedCache};
    use crate::data::imagenet::transform::DeviceCrop;
    use crate::gpu::cuda::Event;
    use crate::gpu::transfer::Transfer;
    use anyhow::{Context, Result};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tch::{Kind, Tensor};

    /// One stored image on the hand-off's device: `[height, width, 3]` u8, and on CUDA the event
    /// after the copy that wrote it (on the stream of the hand-off that stored it: another
    /// epoch's, when a hit reads it).
    pub struct DeviceImage {
        pub pixels: Tensor,
        ready: Option<Arc<StoredEvent>>,
        /// The event has passed: no hit waits for it any more.
        passed: AtomicBool,
    }

    /// The event after a batch's fills were copied, shared by its images.
    struct StoredEvent(Event);

    // SAFETY: recorded once before it is shared, then only queried and waited for, which CUDA
    // allows from any thread.
    unsafe impl Send for StoredEvent {}
    unsafe impl Sync for StoredEvent {}

    // SAFETY: the tensor is never written after it is stored, only read (copies on the
    // hand-off's stream); the event is recorded before the image is shared, then only queried
    // and waited for, which CUDA allows from any thread.
    unsafe impl Send for DeviceImage {}
    unsafe impl Sync for DeviceImage {}

    impl DeviceImage {
        /// Work queued on `t`'s stream from now on waits for the copy that stored the image;
        /// nothing to do on the CPU or once that copy has finished.
        fn wait(&self, t: &Transfer) -> Result<()> {
            let (Some(ready), Some(stream)) = (&self.ready, t.stream()) else {
                return Ok(());
            };
            if self.passed.load(Ordering::Relaxed) {
                return Ok(());
            }
            if ready.0.query()? {
                self.passed.store(true, Ordering::Relaxed);
                return Ok(());
            }
            ready.0.block(stream)
        }
    }

    /// The stored image of sample `index`.
    fn stored(cache: &DecodedCache, index: usize) -> Result<Arc<dyn std::any::Any + Send + Sync>> {
        cache.pixels(index).with_context(|| {
            format!("decoded-image cache: sample {index} was a hit and is not stored")
        })
    }

    /// Copy each hit's region (the batch's last `job.hits.len()` crops) from its stored image
    /// into its place in `arena` (`offsets`: the ragged layout's), on `t`'s stream.
    pub fn cut_hits(
        job: &CacheJob,
        arena: &Tensor,
        crops: &[DeviceCrop],
        offsets: &[usize],
        t: &Transfer,
    ) -> Result<()> {
        let first = crops.len() - job.hits.len();
        for (k, hit) in job.hits.iter().enumerate() {
            let p = first + k;
            let stored = stored(&job.cache, hit.index)?;
            let image = stored
                .downcast_ref::<DeviceImage>()
                .context("decoded-image cache: a stored image is not a device tensor")?;
            image.wait(t)?;
            let (w, h) = (crops[p].width as i64, crops[p].height as i64);
            let src = image
                .pixels
                .f_narrow(0, hit.y as i64, h)?
                .f_narrow(1, hit.x as i64, w)?;
            let mut dst = arena
                .f_narrow(0, offsets[p] as i64, h * w * 3)?
                .f_view([h, w, 3])?;
            dst.f_copy_(&src)?;
        }
        Ok(())
    }

    /// Store the batch's fills (whole images, decoded into `arena`) in the cache: each copied
    /// into a tensor of its own on `t`'s device, on its stream.
    pub fn store_fills(
        job: &CacheJob,
        arena: &Tensor,
        crops: &[DeviceCrop],
        offsets: &[usize],
        t: &Transfer,
    ) -> Result<()> {
        if job.fills.is_empty() {
            return Ok(());
        }
        let mut images = Vec::with_capacity(job.fills.len());
        for &(p, index) in &job.fills {
            let c = crops
                .get(p)
                .with_context(|| format!("decoded-image cache: fill {p} outside the batch"))?;
            let (w, h) = (c.width as i64, c.height as i64);
            let mut pixels = Tensor::f_empty([h, w, 3], (Kind::Uint8, t.device()))?;
            pixels.f_copy_(
                &arena
                    .f_narrow(0, offsets[p] as i64, h * w * 3)?
                    .f_view([h, w, 3])?,
            )?;
            images.push((index, c.width, c.height, pixels));
        }
        let ready = match t.stream() {
            Some(stream) => {
                let mut event = Event::new()?;
                event.record(stream)?;
                Some(Arc::new(StoredEvent(event)))
            }
            None => None,
        };
        for (index, w, h, pixels) in images {
            let image = DeviceImage {
                pixels,
                ready: ready.clone(),
                passed: AtomicBool::new(false),
            };
            job.cache.store(index, w, h, Arc::new(image));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stay_within_the_budget_and_only_stored_images_hit() {
        // 10x10 images are 300 bytes: a budget of 700 takes two
        let c = DecodedCache::new(700);
        assert_eq!(c.find(1), None);
        assert!(c.reserve(1, 0, 10, 10));
        assert!(c.reserve(2, 0, 10, 10));
        assert!(!c.reserve(3, 0, 10, 10), "over the budget");
        assert_eq!(c.find(1), None, "reserved, not stored yet");
        c.store(1, 10, 10, Arc::new(()));
        c.store(3, 10, 10, Arc::new(()));
        assert!(c.pixels(3).is_none(), "never reserved");
        assert_eq!(c.find(1), Some((10, 10)));
        assert!(!c.reserve(1, 1, 10, 10), "stored");
        // 2's batch never reached the hand-off: the next epoch takes the reservation over
        assert!(c.reserve(2, 1, 10, 10));
        c.release(2);
        assert!(c.reserve(3, 1, 10, 10), "the released bytes are free again");
        let s = c.stats();
        assert_eq!((s.lookups, s.hits, s.images, s.bytes), (3, 1, 1, 300));
        assert!(
            s.describe().contains("1 of 3 lookups hit (33.3%)"),
            "{}",
            s.describe()
        );
    }
}
