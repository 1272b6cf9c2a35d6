//! What the trainer needs from an image data set: u8 NHWC RGB batches per epoch (shuffled and
//! augmented from the run's seed, sharded by rank, at the epoch's image size) and eval batches.
//! [`SyntheticImages`] generates a learnable in-memory set; the ImageFolder pipeline
//! (`crate::data::imagenet`) plugs in through the same trait.

use crate::data::rng::Rng;
use anyhow::Result;

/// One batch: `images` is N x H x W x 3 RGB u8 (NHWC), `labels` N class indices; or, with
/// `data.augment = "gpu"`, a ragged batch the hand-off crops and resizes on the device. The data
/// pipeline's batch ([`crate::data::imagenet::Batch`]), which the synthetic sets make too.
pub use crate::data::imagenet::Batch;

pub type BatchIter = Box<dyn Iterator<Item = Result<Batch>> + Send>;

/// Shard of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub rank: usize,
    pub world_size: usize,
}

pub trait ImageData: Send {
    fn num_classes(&self) -> usize;
    /// Training samples (all ranks).
    fn train_len(&self) -> usize;
    /// Evaluation samples (all ranks).
    fn eval_len(&self) -> usize;
    /// The device the batches are for (`Device::Cuda(local rank)` on a GPU run): where nvJPEG
    /// decodes. Called once before the first epoch; data sets that do not care ignore it.
    fn use_device(&mut self, _device: tch::Device) {}
    /// What the decoders did so far over the training and eval loaders (the split between
    /// nvJPEG and the CPU decoder, the arenas, the backend). None: not a JPEG data set.
    fn decoder_stats(&self) -> Option<crate::data::imagenet::DecoderStats> {
        None
    }
    /// One epoch of training batches of `batch` images of `size` px for `shard`: the order and
    /// augmentation derive from (`seed`, `epoch`); only whole batches, the same count on every rank.
    fn train_epoch(
        &self,
        epoch: u64,
        size: usize,
        batch: usize,
        seed: u64,
        shard: Shard,
    ) -> Result<BatchIter>;
    /// The evaluation set for `shard` (every sample once across ranks; the last batch may be short).
    fn eval(&self, size: usize, batch: usize, shard: Shard) -> Result<BatchIter>;
}

/// Decode workers for `data.workers = 0`: this process's share of the machine's CPUs. A process
/// bound to some of the CPUs its cgroup offers (`system.cpu_bind`, Slurm's task binding,
/// `taskset`, `numactl`: [`crate::cpu_bind::launcher_bound`]) decodes on all of its own; an
/// unbound one shares the CPUs it may use with the other processes of its job on this node
/// (LOCAL_WORLD_SIZE, or Slurm's tasks per node): 8 ranks on a 128-core node decode with 16
/// threads each, not 128 each.
pub fn default_decode_workers() -> usize {
    let usable = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let local = crate::distributed::local_processes().unwrap_or(1);
    let bound = crate::cpu_bind::launcher_bound().unwrap_or(false);
    decode_worker_share(usable, bound, local)
}

/// [`default_decode_workers`] from its inputs: `usable`, the CPUs this process may use (its
/// affinity, within any cgroup quota); `bound`, whether its affinity is narrower than its
/// cgroup's CPU set; `local_processes`, the job's processes on this node.
pub fn decode_worker_share(usable: usize, bound: bool, local_processes: usize) -> usize {
    if bound {
        usable.max(1)
    } else {
        (usable / local_processes.max(1)).max(1)
    }
}

/// A deterministic permutation of 0..n from `seed`.
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    Rng::from_state(seed).shuffle(&mut idx);
    idx
}

/// Mix a seed with stream numbers (epoch, purpose) into an independent seed.
pub fn derive_seed(seed: u64, a: u64, b: u64) -> u64 {
    Rng::from_state(
        seed ^ a.wrapping_mul(0xA076_1D64_78BD_642F) ^ b.wrapping_mul(0xE703_7ED1_A0B4_28DB),
    )
    .next_u64()
}

/// A synthetic image classification set made in memory. Class `c` has a fixed 4x4 colour
/// pattern; each image mixes its class pattern with a random distractor pattern and noise,
/// shifted by a few pixels. The set itself is fixed (data seed); the run's seed only drives
/// order and augmentation (flips).
pub struct SyntheticImages {
    classes: usize,
    train_per_class: usize,
    eval_per_class: usize,
    noise: f64,
    patterns: std::sync::Arc<Vec<[f32; 48]>>,
}

const GRID: usize = 4;
const DATA_SEED: u64 = 0x5EED_DA7A;
/// Weight of the class pattern against the distractor.
const SIGNAL: f32 = 0.55;

impl SyntheticImages {
    pub fn new(classes: usize, train_per_class: usize, eval_per_class: usize, noise: f64) -> Self {
        let mut rng = Rng::from_state(DATA_SEED);
        let patterns = (0..classes)
            .map(|_| {
                let mut p = [0f32; 48];
                for v in p.iter_mut() {
                    *v = (rng.next_f64() * 2.0 - 1.0) as f32;
                }
                p
            })
            .collect();
        SyntheticImages {
            classes,
            train_per_class,
            eval_per_class,
            noise,
            patterns: std::sync::Arc::new(patterns),
        }
    }
}

/// Everything needed to render one image, shareable with iterator closures.
#[derive(Clone)]
struct Renderer {
    patterns: std::sync::Arc<Vec<[f32; 48]>>,
    classes: usize,
    noise: f32,
}

impl Renderer {
    /// Render image `id` (label `id % classes`) at `size`, appending to `out`.
    fn render(&self, id: u64, size: usize, flip: bool, out: &mut Vec<u8>) -> i64 {
        let label = (id % self.classes as u64) as usize;
        let mut rng = Rng::from_state(derive_seed(DATA_SEED, id, 1));
        let mut distractor = [0f32; 48];
        for v in distractor.iter_mut() {
            *v = (rng.next_f64() * 2.0 - 1.0) as f32;
        }
        let shift_x = rng.below(3) as isize - 1;
        let shift_y = rng.below(3) as isize - 1;
        let class = &self.patterns[label];
        let cell = size as f32 / GRID as f32;
        for y in 0..size {
            for x in 0..size {
                let sx = if flip { size - 1 - x } else { x };
                let gx = (((sx as isize + shift_x * (cell as isize / 2)).clamp(0, size as isize - 1)
                    as f32)
                    / cell) as usize;
                let gy = (((y as isize + shift_y * (cell as isize / 2)).clamp(0, size as isize - 1)
                    as f32)
                    / cell) as usize;
                let g = (gy.min(GRID - 1) * GRID + gx.min(GRID - 1)) * 3;
                for ch in 0..3 {
                    let n = (rng.next_f64() + rng.next_f64() - 1.0) as f32 * self.noise;
                    let v = 128.0
                        + 90.0 * (SIGNAL * class[g + ch] + (1.0 - SIGNAL) * distractor[g + ch])
                        + n;
                    out.push(v.clamp(0.0, 255.0) as u8);
                }
            }
        }
        label as i64
    }
}

impl SyntheticImages {
    fn renderer(&self) -> Renderer {
        Renderer {
            patterns: self.patterns.clone(),
            classes: self.classes,
            noise: self.noise as f32,
        }
    }
}

impl ImageData for SyntheticImages {
    fn num_classes(&self) -> usize {
        self.classes
    }
    fn train_len(&self) -> usize {
        self.classes * self.train_per_class
    }
    fn eval_len(&self) -> usize {
        self.classes * self.eval_per_class
    }

    fn train_epoch(
        &self,
        epoch: u64,
        size: usize,
        batch: usize,
        seed: u64,
        shard: Shard,
    ) -> Result<BatchIter> {
        let n = self.train_len();
        let order = permutation(n, derive_seed(seed, epoch, 2));
        let per_rank = n / shard.world_size / batch * batch;
        let mine: Vec<usize> = order
            .into_iter()
            .skip(shard.rank)
            .step_by(shard.world_size)
            .take(per_rank)
            .collect();
        let r = self.renderer();
        let mut aug = Rng::from_state(derive_seed(seed, epoch, 3 + shard.rank as u64));
        let flips: Vec<bool> = mine.iter().map(|_| aug.next_u64() & 1 == 1).collect();
        let chunks: Vec<Vec<(usize, bool)>> = mine
            .into_iter()
            .zip(flips)
            .collect::<Vec<_>>()
            .chunks(batch)
            .map(|c| c.to_vec())
            .collect();
        Ok(Box::new(chunks.into_iter().map(move |items| {
            let mut images = Vec::with_capacity(items.len() * size * size * 3);
            let labels = items
                .iter()
                .map(|&(i, flip)| r.render(i as u64, size, flip, &mut images))
                .collect();
            let indices = items.iter().map(|&(i, _)| i).collect();
            Ok(Batch::finished(images, labels, indices, size as u32))
        })))
    }

    fn eval(&self, size: usize, batch: usize, shard: Shard) -> Result<BatchIter> {
        let base = self.train_len() as u64;
        let ids: Vec<u64> = (0..self.eval_len() as u64)
            .skip(shard.rank)
            .step_by(shard.world_size)
            .map(|i| base + i)
            .collect();
        let r = self.renderer();
        let chunks: Vec<Vec<u64>> = ids.chunks(batch.max(1)).map(|c| c.to_vec()).collect();
        Ok(Box::new(chunks.into_iter().map(move |items| {
            let mut images = Vec::with_capacity(items.len() * size * size * 3);
            let labels = items
                .iter()
                .map(|&i| r.render(i, size, false, &mut images))
                .collect();
            let indices = items.iter().map(|&i| (i - base) as usize).collect();
            Ok(Batch::finished(images, labels, indices, size as u32))
        })))
    }
}

/// An ImageFolder root (`train/`, `val/`) served by the [`crate::data::imagenet`] pipeline:
/// training batches are random-resized-crops (MLPerf area 0.05..1) with flips at the epoch's
/// size, shuffled and augmented from the run's seed and sharded by rank (whole batches only);
/// evaluation resizes the short side to size * 256/224 and center-crops. Unreadable images are
/// skipped, warned about by the loader and counted per epoch; an epoch fails when they exceed
/// the loader's limit (1%).
pub struct FolderImages {
    /// The listing, shared by every run of a set (listing ImageNet stats 1.3 M files).
    dir: std::sync::Arc<crate::data::imagenet::ImagenetDir>,
    /// Decode workers; 0: [`default_decode_workers`], counted when a loader is built (after the
    /// run bound its CPUs, `system.cpu_bind`).
    threads: usize,
    options: FolderOptions,
    /// The CUDA device nvJPEG decodes on (the rank's GPU); None on a CPU run.
    gpu: Option<usize>,
    /// Loaders are built once per (train, seed, batch, shard) and reused across epochs.
    train_loader:
        std::sync::Mutex<Option<(LoaderKey, std::sync::Arc<crate::data::imagenet::Loader>)>>,
    eval_loader:
        std::sync::Mutex<Option<(LoaderKey, std::sync::Arc<crate::data::imagenet::Loader>)>>,
}

type LoaderKey = (u64, usize, usize, usize);

/// How an ImageFolder's JPEGs become batches (the `[data]` keys `decoder`, `augment`,
/// `hw_decoder_load`, `gpu_cache_mb`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FolderOptions {
    pub decoder: crate::data::imagenet::Decoder,
    pub augment: crate::data::imagenet::Augment,
    pub hw_decoder_load: Option<f64>,
    /// `data.gpu_cache_mb`: MiB of whole decoded training images kept on the device (0: off).
    pub gpu_cache_mb: u64,
    /// Batches the decode workers prepare ahead (0: the loader's default).
    pub prefetch_batches: usize,
}

impl FolderImages {
    /// Open `root` (train/ and val/ with the same classes); `threads` decode workers (0: this
    /// process's share of the CPUs, [`default_decode_workers`]); `options` say how JPEG files
    /// become crops.
    pub fn open(root: &std::path::Path, threads: usize, options: FolderOptions) -> Result<Self> {
        let dir = crate::data::imagenet::ImagenetDir::open(root)?;
        Ok(Self::listed(std::sync::Arc::new(dir), threads, options))
    }

    /// As [`FolderImages::open`], from a root listed before (once for a whole run set).
    pub fn listed(
        dir: std::sync::Arc<crate::data::imagenet::ImagenetDir>,
        threads: usize,
        options: FolderOptions,
    ) -> Self {
        FolderImages {
            dir,
            threads,
            options,
            gpu: None,
            train_loader: std::sync::Mutex::new(None),
            eval_loader: std::sync::Mutex::new(None),
        }
    }

    fn loader(
        &self,
        train: bool,
        seed: u64,
        batch: usize,
        shard: Shard,
    ) -> Result<std::sync::Arc<crate::data::imagenet::Loader>> {
        use crate::data::imagenet::{Loader, LoaderConfig};
        let key = (seed, batch, shard.rank, shard.world_size);
        let slot = if train {
            &self.train_loader
        } else {
            &self.eval_loader
        };
        let mut slot = slot
            .lock()
            .map_err(|_| anyhow::anyhow!("data loader lock poisoned"))?;
        if let Some((k, l)) = slot.as_ref() {
            if *k == key {
                return Ok(l.clone());
            }
        }
        let mut c = if train {
            LoaderConfig::train(batch, seed)
        } else {
            LoaderConfig::eval(batch)
        };
        c.threads = match self.threads {
            0 => default_decode_workers(),
            n => n,
        };
        c.decoder = self.options.decoder;
        c.device_augment = self.options.augment == crate::data::imagenet::Augment::Gpu;
        c.hw_decoder_load = self.options.hw_decoder_load;
        if train && self.options.gpu_cache_mb > 0 {
            c.cache_bytes = self.options.gpu_cache_mb * crate::data::imagenet::cache::MIB;
            tracing::info!(
                "data.gpu_cache_mb = {}: whole decoded training images kept on {} for later \
                 epochs, up to the budget",
                self.options.gpu_cache_mb,
                self.gpu
                    .map_or("the CPU".to_string(), |g| format!("GPU {g}"))
            );
        }
        if self.options.prefetch_batches > 0 {
            c.prefetch_batches = self.options.prefetch_batches;
        }
        c.gpu = self.gpu;
        c.rank = shard.rank;
        c.world_size = shard.world_size;
        let folder = if train {
            &self.dir.train
        } else {
            &self.dir.val
        };
        let l = std::sync::Arc::new(Loader::new(folder, c)?);
        *slot = Some((key, l.clone()));
        Ok(l)
    }
}

/// Adapts the loader's epoch to a [`BatchIter`], reporting the epoch's unreadable images once
/// it ends.
struct FolderEpoch {
    inner: crate::data::imagenet::EpochIter,
    what: String,
    reported: bool,
}

impl Iterator for FolderEpoch {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        match self.inner.next() {
            Some(batch) => Some(batch),
            None => {
                let bad = self.inner.bad_images().len();
                if bad > 0 && !self.reported {
                    self.reported = true;
                    tracing::warn!("{}: skipped {bad} unreadable images", self.what);
                }
                None
            }
        }
    }
}

impl ImageData for FolderImages {
    fn num_classes(&self) -> usize {
        self.dir.num_classes()
    }
    fn train_len(&self) -> usize {
        self.dir.train.len()
    }
    fn eval_len(&self) -> usize {
        self.dir.val.len()
    }

    fn use_device(&mut self, device: tch::Device) {
        self.gpu = match device {
            tch::Device::Cuda(i) => Some(i),
            _ => None,
        };
    }

    fn decoder_stats(&self) -> Option<crate::data::imagenet::DecoderStats> {
        let mut total = crate::data::imagenet::DecoderStats::default();
        for slot in [&self.train_loader, &self.eval_loader] {
            if let Some((_, l)) = slot.lock().ok()?.as_ref() {
                total = total.plus(l.stats());
            }
        }
        Some(total)
    }

    fn train_epoch(
        &self,
        epoch: u64,
        size: usize,
        batch: usize,
        seed: u64,
        shard: Shard,
    ) -> Result<BatchIter> {
        let l = self.loader(true, seed, batch, shard)?;
        Ok(Box::new(FolderEpoch {
            inner: l.epoch(epoch, size as u32),
            what: format!("training epoch {epoch} ({})", self.dir.train.root.display()),
            reported: false,
        }))
    }

    fn eval(&self, size: usize, batch: usize, shard: Shard) -> Result<BatchIter> {
        let l = self.loader(false, 0, batch, shard)?;
        Ok(Box::new(FolderEpoch {
            inner: l.epoch(0, size as u32),
            what: format!("evaluation ({})", self.dir.val.root.display()),
            reported: false,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_are_deterministic_per_seed_and_sharded() {
        let d = SyntheticImages::new(4, 8, 2, 20.0);
        let one = |seed, shard| -> Vec<i64> {
            d.train_epoch(0, 8, 4, seed, shard)
                .unwrap()
                .flat_map(|b| b.unwrap().labels)
                .collect()
        };
        let all = Shard {
            rank: 0,
            world_size: 1,
        };
        assert_eq!(one(1, all), one(1, all));
        assert_ne!(one(1, all), one(2, all));
        let a = one(
            1,
            Shard {
                rank: 0,
                world_size: 2,
            },
        );
        let b = one(
            1,
            Shard {
                rank: 1,
                world_size: 2,
            },
        );
        assert_eq!(a.len(), 16);
        assert_eq!(b.len(), 16);
        let b0 = d
            .train_epoch(0, 8, 4, 1, all)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(b0.images.len(), 4 * 8 * 8 * 3);
        let eval: usize = d.eval(8, 3, all).unwrap().map(|b| b.unwrap().len()).sum();
        assert_eq!(eval, 8);
    }

    #[test]
    fn an_unbound_process_decodes_on_its_share_of_the_cpus_a_bound_one_on_all_of_its_own() {
        // 8 ranks on a 128-core node, each free to run anywhere: 16 workers each
        assert_eq!(decode_worker_share(128, false, 8), 16);
        // the same ranks bound to 14 cores each (Slurm, numactl): all 14
        assert_eq!(decode_worker_share(14, true, 8), 14);
        // one process, and more processes than CPUs: never 0
        assert_eq!(decode_worker_share(2, false, 1), 2);
        assert_eq!(decode_worker_share(2, false, 8), 1);
        assert_eq!(decode_worker_share(0, true, 1), 1);
    }

    #[test]
    fn a_thread_bound_to_one_cpu_decodes_on_it_alone() {
        // affinity is per thread: bind a fresh thread to the first CPU this process may use
        let workers = std::thread::spawn(|| {
            let mine = crate::cpu_bind::current_affinity().unwrap();
            crate::cpu_bind::set_affinity(&mine[..1]).unwrap();
            default_decode_workers()
        })
        .join()
        .unwrap();
        assert_eq!(workers, 1);
    }
}
