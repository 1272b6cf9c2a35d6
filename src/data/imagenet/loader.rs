//! The batch pipeline: read, decode, crop and resize on a rayon pool, hand ready u8 batches to
//! the trainer through a bounded crossbeam channel, in a deterministic order.
//!
//! Determinism: the epoch's permutation comes from (seed, epoch) and every sample's
//! augmentation draws from (seed, epoch, sample index), so the bytes of each batch do not
//! depend on thread count or timing. Batches are yielded in order (a small reorder buffer
//! holds those that finish early).
//!
//! Sharding: rank r of w takes positions r, r+w, r+2w, ... of the epoch's permutation, so
//! ranks are disjoint and together cover the epoch. With `drop_last` (training) every rank gets
//! floor(n/w) samples and the same number of full batches; without it (evaluation) nothing is
//! dropped and ranks differ by at most one sample (and one batch).

use super::cache::{CacheHit, CacheJob, CacheStats, DecodedCache};
use super::decode::decode_jpeg;
use super::decode::RgbImage;
use super::folder::{ImageFolder, Sample};
use super::nvjpeg::Nvjpeg;
use super::region::{ends_with_image, plan_region, region_at, JpegHeader, RegionPlan};
use super::transform::{center_crop_box, crop_resize_into, CropBox, DeviceCrop, RandomResizedCrop};
use crate::data::rng::Rng;
use anyhow::{bail, Context, Result};
use crossbeam_channel::{Receiver, Sender};
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Stream tags keep the shuffle and augmentation streams apart for the same (seed, epoch).
const STREAM_SHUFFLE: u64 = 0x5348_5546;
const STREAM_AUGMENT: u64 = 0x4155_474d;

/// One batch, ready for the device: `labels` has N entries; `indices` are the samples' positions
/// in the ImageFolder (for tracing and tests). N is the batch size except for a last partial batch
/// (without drop_last) or when corrupt images were skipped.
///
/// With `data.augment = "cpu"` (the default) `images` is N*H*W*3 bytes, NHWC, RGB: the finished
/// crops, H = W = `size`, and `crops` is empty. With `"gpu"` ([`LoaderConfig::device_augment`])
/// the batch is **ragged**: `crops` says, per image, its decoded region's size, the crop box in
/// it and the flip, and the regions lie back to back in the batch's arena (each as large as its
/// crop needs, no padding; `device_augment::RaggedLayout`): the first `engine.jpegs.len()`
/// images are decoded there by nvJPEG on the device ([`EngineJob`]), then come those decoded on
/// the host (`images` holds their regions back to back), then those cut from the decoded-image
/// cache on the device (`cache`'s hits). H and W are 0 then. The hand-off crops, resizes, flips
/// and normalises on the device.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub images: Vec<u8>,
    pub labels: Vec<i64>,
    pub indices: Vec<usize>,
    pub height: u32,
    pub width: u32,
    /// The output size (the crops' `size` x `size`).
    pub size: u32,
    /// Per image, what the device does with its region (empty: already done on the host).
    pub crops: Vec<DeviceCrop>,
    /// The images nvJPEG decodes on the device (device-augmented batches with nvJPEG only).
    pub engine: Option<EngineJob>,
    /// The decoded-image cache's hits and fills (`data.gpu_cache_mb`; device-augmented batches
    /// only).
    pub cache: Option<CacheJob>,
}

/// The engine's share of a device-augmented batch: JPEG files that nvJPEG decodes straight into
/// the batch's arena on the device, at the hand-off (on its stream, while the GPU trains on the
/// batch before). They are the batch's first images, in order.
#[derive(Clone)]
pub struct EngineJob {
    /// The rank's decoder (it decoded nothing yet: the workers only parsed the files).
    pub decoder: Arc<Nvjpeg>,
    /// Each file's bytes and its full-scale region.
    pub jpegs: Vec<(Vec<u8>, RegionPlan)>,
}

impl std::fmt::Debug for EngineJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineJob")
            .field("jpegs", &self.jpegs.len())
            .field("gpu", &self.decoder.gpu_index())
            .finish()
    }
}

impl PartialEq for EngineJob {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.decoder, &other.decoder) && self.jpegs == other.jpegs
    }
}

/// Where crops are resized: `data.augment`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Augment {
    /// On the host, in the decode workers, into u8 crops (fast_image_resize; the reference).
    #[default]
    Cpu,
    /// On the device: the workers only decode each crop's region; the batch hand-off crops,
    /// resizes, flips and normalises the batch there in one batched op
    /// (`data::imagenet::device_augment`; on a CPU run, its CPU twin).
    Gpu,
}

impl Augment {
    pub fn as_str(self) -> &'static str {
        match self {
            Augment::Cpu => "cpu",
            Augment::Gpu => "gpu",
        }
    }
}

impl std::str::FromStr for Augment {
    type Err = String;
    fn from_str(s: &str) -> Result<Augment, String> {
        match s {
            "cpu" => Ok(Augment::Cpu),
            "gpu" => Ok(Augment::Gpu),
            _ => Err(format!(
                "unknown augmentation device {s:?}: use \"cpu\" or \"gpu\""
            )),
        }
    }
}

impl Batch {
    /// A batch of finished `size` x `size` crops (`images` N*size*size*3 bytes, NHWC, RGB):
    /// nothing is left for the device but the copy and the normalisation.
    pub fn finished(images: Vec<u8>, labels: Vec<i64>, indices: Vec<usize>, size: u32) -> Batch {
        Batch {
            images,
            labels,
            indices,
            height: size,
            width: size,
            size,
            crops: Vec::new(),
            engine: None,
            cache: None,
        }
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The bytes of image `i` (H*W*3) of a batch of finished crops (`data.augment = "cpu"`).
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.height as usize * self.width as usize * 3;
        &self.images[i * n..(i + 1) * n]
    }
}

/// How JPEG files become crops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decoder {
    /// libjpeg-turbo, decoding only the crop's region at the coarsest DCT scale that keeps the
    /// crop at least the output size (the default).
    #[default]
    Cpu,
    /// zune-jpeg, the whole image at full size, then the crop (the reference path).
    CpuFull,
    /// nvJPEG on the GPU, loaded at run time; the CPU decoder when it cannot be loaded.
    Nvjpeg,
}

impl Decoder {
    pub fn as_str(self) -> &'static str {
        match self {
            Decoder::Cpu => "cpu",
            Decoder::CpuFull => "cpu-full",
            Decoder::Nvjpeg => "nvjpeg",
        }
    }
}

impl std::str::FromStr for Decoder {
    type Err = String;
    fn from_str(s: &str) -> Result<Decoder, String> {
        match s {
            "cpu" => Ok(Decoder::Cpu),
            "cpu-full" => Ok(Decoder::CpuFull),
            "nvjpeg" => Ok(Decoder::Nvjpeg),
            _ => Err(format!(
                "unknown JPEG decoder {s:?}: use \"cpu\", \"cpu-full\" or \"nvjpeg\""
            )),
        }
    }
}

/// How a loader draws and shapes its batches.
#[derive(Clone, Debug)]
pub struct LoaderConfig {
    pub batch_size: usize,
    /// Worker threads decoding and transforming (the rayon pool's size).
    pub threads: usize,
    pub seed: u64,
    pub rank: usize,
    pub world_size: usize,
    /// Training: shuffle each epoch, random-resized-crop and flip. Otherwise: in order,
    /// resize and center crop.
    pub train: bool,
    /// Drop each rank's last partial batch (and the samples that do not divide by world_size).
    pub drop_last: bool,
    pub crop: RandomResizedCrop,
    pub flip_probability: f64,
    /// Eval: the short side is resized to round(size * ratio) before the center crop
    /// (256/224 as in the reference).
    pub eval_resize_ratio: f64,
    /// Fail the epoch when more than this fraction of its samples are unreadable.
    pub max_bad_fraction: f64,
    /// Batches in flight at once (decoded ahead of the trainer).
    pub prefetch_batches: usize,
    pub decoder: Decoder,
    /// `data.augment = "gpu"`: ship decoded regions and crop boxes ([`Batch::crops`]) instead of
    /// finished crops.
    pub device_augment: bool,
    /// nvJPEG: the CUDA device to decode on (the rank's GPU). None: the device current on the
    /// thread that builds the loader.
    pub gpu: Option<usize>,
    /// nvJPEG: the share of each batch's images sent to the GPU's hardware JPEG engine; the rest
    /// is decoded by the CPU region decoder at the same time (DALI's `hw_decoder_load`). None:
    /// the default for the GPU model ([`super::nvjpeg::default_hw_load`]).
    pub hw_decoder_load: Option<f64>,
    /// `data.gpu_cache_mb` in bytes: whole decoded images kept on the hand-off's device for later
    /// epochs ([`super::cache`]); 0: no cache. Needs `device_augment`.
    pub cache_bytes: u64,
}

impl LoaderConfig {
    /// Training defaults: MLPerf crop scale 0.05..1, flip 0.5, drop_last, 1% bad-image limit.
    pub fn train(batch_size: usize, seed: u64) -> LoaderConfig {
        LoaderConfig {
            batch_size,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            seed,
            rank: 0,
            world_size: 1,
            train: true,
            drop_last: true,
            crop: RandomResizedCrop::MLPERF,
            flip_probability: 0.5,
            eval_resize_ratio: 256.0 / 224.0,
            max_bad_fraction: 0.01,
            prefetch_batches: 3,
            decoder: Decoder::Cpu,
            device_augment: false,
            gpu: None,
            hw_decoder_load: None,
            cache_bytes: 0,
        }
    }

    /// Evaluation defaults: in order, resize 256/224 then center crop, keep every sample.
    pub fn eval(batch_size: usize) -> LoaderConfig {
        LoaderConfig {
            train: false,
            drop_last: false,
            ..LoaderConfig::train(batch_size, 0)
        }
    }

    fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            bail!("batch size must be at least 1");
        }
        if self.threads == 0 {
            bail!("data loader threads must be at least 1");
        }
        if self.world_size == 0 || self.rank >= self.world_size {
            bail!(
                "rank {} must be below world size {} (and world size at least 1)",
                self.rank,
                self.world_size
            );
        }
        if !(0.0..=1.0).contains(&self.flip_probability) {
            bail!(
                "flip probability {} must be within 0..1",
                self.flip_probability
            );
        }
        if !(self.eval_resize_ratio >= 1.0 && self.eval_resize_ratio.is_finite()) {
            bail!(
                "eval resize ratio {} must be at least 1 (256/224 in the reference)",
                self.eval_resize_ratio
            );
        }
        if let Some(l) = self.hw_decoder_load {
            if !(0.0..=1.0).contains(&l) {
                bail!("data.hw_decoder_load {l} must be within 0..1 (the share of each batch sent to the hardware JPEG decoder)");
            }
        }
        if self.cache_bytes > 0 && !self.device_augment {
            bail!(
                "data.gpu_cache_mb keeps decoded images on the device, for crops resized there: \
                 set data.augment = \"gpu\" (or data.gpu_cache_mb = 0)"
            );
        }
        if !(0.0..=1.0).contains(&self.max_bad_fraction) {
            bail!(
                "maximum bad-image fraction {} must be within 0..1",
                self.max_bad_fraction
            );
        }
        self.crop.validate().map_err(anyhow::Error::msg)
    }
}

struct Shared {
    samples: Vec<Sample>,
    root: PathBuf,
    config: LoaderConfig,
    /// Files already reported as unreadable (each is warned about once per loader).
    reported_bad: Mutex<BTreeSet<PathBuf>>,
    /// The GPU decoder when `decoder = nvjpeg`, the crops are resized on the device and it loaded.
    nvjpeg: Option<Arc<Nvjpeg>>,
    /// Why the asked decoder is not the one in use (nvJPEG missing), for the user.
    decoder_note: Option<String>,
    /// With nvJPEG: the share of each batch sent to it (the rest to the CPU region decoder).
    hw_load: f64,
    /// Images nvJPEG decoded (the rest of the loaded ones went through the CPU decoder).
    decoded_on_gpu: AtomicU64,
    /// Images loaded (decoded by either decoder), for the decoder split.
    loaded: AtomicU64,
    /// Device-augmented batches built, and their arenas' bytes (every region), for the report.
    ragged_batches: AtomicU64,
    ragged_bytes: AtomicU64,
    /// `data.gpu_cache_mb`: the decoded-image cache (None: off).
    cache: Option<Arc<DecodedCache>>,
}

/// A data loader over one ImageFolder for one rank. Cheap to iterate many epochs; the worker
/// pool lives as long as the loader.
pub struct Loader {
    shared: Arc<Shared>,
    pool: Arc<rayon::ThreadPool>,
}

impl Loader {
    pub fn new(folder: &ImageFolder, config: LoaderConfig) -> Result<Loader> {
        config
            .validate()
            .with_context(|| format!("data loader for {}", folder.root.display()))?;
        if folder.samples.is_empty() {
            bail!("image folder {} has no images", folder.root.display());
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(config.threads)
            .thread_name(|i| format!("data-{i}"))
            .build()
            .context("cannot start the data loader's worker threads")?;
        let (nvjpeg, decoder_note) = match (config.decoder, config.device_augment) {
            (Decoder::Nvjpeg, false) => {
                let note = "data.decoder = \"nvjpeg\" decodes into GPU memory, for crops resized \
                            on the device (data.augment = \"gpu\"); with data.augment = \"cpu\" \
                            decoding on the CPU (libjpeg-turbo) instead"
                    .to_string();
                crate::util::logging::warn_once(&note);
                (None, Some(note))
            }
            (Decoder::Nvjpeg, true) => match Nvjpeg::load(None, config.gpu) {
                Ok(n) => {
                    tracing::info!(
                        "decoding JPEG crops on GPU {} ({}) with {} ({})",
                        n.gpu_index(),
                        n.gpu_name(),
                        n.library.display(),
                        n.backend()
                    );
                    (Some(Arc::new(n)), None)
                }
                Err(e) => {
                    let note = format!(
                        "data.decoder = \"nvjpeg\" is unavailable: {e}. Decoding on the CPU \
                         (libjpeg-turbo) instead"
                    );
                    // one warning per reason and process (the train and eval loaders, and each
                    // run of a set, would repeat it)
                    crate::util::logging::warn_once(&note);
                    (None, Some(note))
                }
            },
            _ => (None, None),
        };
        let hw_load = match (&nvjpeg, config.hw_decoder_load) {
            (None, _) => 0.0,
            (Some(_), Some(l)) => l,
            (Some(n), None) => n.default_load(),
        };
        let cache =
            (config.cache_bytes > 0).then(|| Arc::new(DecodedCache::new(config.cache_bytes)));
        let shared = Shared {
            samples: folder.samples.clone(),
            root: folder.root.clone(),
            config,
            reported_bad: Mutex::new(BTreeSet::new()),
            nvjpeg,
            decoder_note,
            hw_load,
            decoded_on_gpu: AtomicU64::new(0),
            loaded: AtomicU64::new(0),
            ragged_batches: AtomicU64::new(0),
            ragged_bytes: AtomicU64::new(0),
            cache,
        };
        Ok(Loader {
            shared: Arc::new(shared),
            pool: Arc::new(pool),
        })
    }

    pub fn config(&self) -> &LoaderConfig {
        &self.shared.config
    }

    /// The decoder actually used: the configured one, or `Cpu` when nvJPEG could not be
    /// loaded (see [`Loader::decoder_note`]).
    pub fn decoder_in_use(&self) -> Decoder {
        match self.shared.config.decoder {
            Decoder::Nvjpeg if self.shared.nvjpeg.is_none() => Decoder::Cpu,
            d => d,
        }
    }

    /// Why the configured decoder is not in use, when it is not.
    pub fn decoder_note(&self) -> Option<&str> {
        self.shared.decoder_note.as_deref()
    }

    /// What the decoders did so far ([`DecoderStats`]).
    pub fn stats(&self) -> DecoderStats {
        let s = &self.shared;
        DecoderStats {
            decoded_on_gpu: s.decoded_on_gpu.load(Ordering::Relaxed),
            loaded: s.loaded.load(Ordering::Relaxed),
            ragged_batches: s.ragged_batches.load(Ordering::Relaxed),
            ragged_bytes: s.ragged_bytes.load(Ordering::Relaxed),
            nvjpeg_backend: self.nvjpeg_backend(),
            cache: self.cache_stats(),
        }
    }

    /// What the decoded-image cache did so far (None: no cache).
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.shared.cache.as_ref().map(|c| c.stats())
    }

    /// The nvJPEG backend in use ("hardware JPEG decoder" or "CUDA decoder"), when nvJPEG is.
    pub fn nvjpeg_backend(&self) -> Option<&'static str> {
        self.shared.nvjpeg.as_ref().map(|n| n.backend())
    }

    /// The share of each batch sent to nvJPEG (0 when it is not in use).
    pub fn hw_decoder_load(&self) -> f64 {
        self.shared.hw_load
    }

    /// The crop box (in source pixels) and flip that sample `index` of `epoch` gets when its
    /// image is `width` x `height` and the output `size`: drawn from (seed, epoch, index) in
    /// training, the center crop in evaluation. Every decoder uses these.
    pub fn crop_for(
        &self,
        epoch: u64,
        index: usize,
        width: u32,
        height: u32,
        size: u32,
    ) -> (CropBox, bool) {
        augmentation(&self.shared.config, epoch, index, width, height, size)
    }

    /// This rank's samples for `epoch`, in the order they are batched (before drop_last trims
    /// the last partial batch).
    pub fn epoch_indices(&self, epoch: u64) -> Vec<usize> {
        let c = &self.shared.config;
        let n = self.shared.samples.len();
        let mut order: Vec<usize> = (0..n).collect();
        if c.train {
            Rng::keyed(&[c.seed, epoch, STREAM_SHUFFLE]).shuffle(&mut order);
        }
        let per_rank = if c.drop_last {
            n / c.world_size
        } else {
            n.div_ceil(c.world_size)
        };
        (0..per_rank)
            .map(|k| c.rank + k * c.world_size)
            .filter(|&p| p < n)
            .map(|p| order[p])
            .collect()
    }

    /// Batches per epoch for this rank (the same on every rank with drop_last).
    pub fn batches_per_epoch(&self) -> usize {
        let c = &self.shared.config;
        let n = self.epoch_indices(0).len();
        if c.drop_last {
            n / c.batch_size
        } else {
            n.div_ceil(c.batch_size)
        }
    }

    /// Iterate one epoch's batches at `image_size` x `image_size` (the size may change from
    /// epoch to epoch, for progressive resizing).
    pub fn epoch(&self, epoch: u64, image_size: u32) -> EpochIter {
        let c = &self.shared.config;
        let mut indices = self.epoch_indices(epoch);
        if c.drop_last {
            indices.truncate(indices.len() / c.batch_size * c.batch_size);
        }
        let batches: Vec<Vec<usize>> = indices
            .chunks(c.batch_size)
            .map(<[usize]>::to_vec)
            .collect();
        let window = c.prefetch_batches.max(1);
        let (tx, rx) = crossbeam_channel::bounded(window);
        let mut iter = EpochIter {
            shared: self.shared.clone(),
            pool: self.pool.clone(),
            epoch,
            image_size,
            samples_in_epoch: indices.len(),
            batches: batches.into_iter().map(Some).collect(),
            next_spawn: 0,
            next_yield: 0,
            tx,
            rx,
            ready: BTreeMap::new(),
            cancelled: Arc::new(AtomicBool::new(false)),
            bad: Vec::new(),
            failed: false,
        };
        while iter.next_spawn < iter.batches.len() && iter.next_spawn < window {
            iter.spawn_next();
        }
        iter
    }
}

/// What a loader's decoders did so far: the decoder split, the device-augmented batches' arena
/// sizes and the nvJPEG backend, for a run's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecoderStats {
    /// Images nvJPEG decoded.
    pub decoded_on_gpu: u64,
    /// Images loaded (decoded by either decoder).
    pub loaded: u64,
    /// Device-augmented (ragged) batches built, and their arenas' bytes in all.
    pub ragged_batches: u64,
    pub ragged_bytes: u64,
    /// The nvJPEG backend in use, if any.
    pub nvjpeg_backend: Option<&'static str>,
    /// The decoded-image cache's statistics, when a loader has one.
    pub cache: Option<CacheStats>,
}

impl DecoderStats {
    /// The sum of two loaders' statistics (the backend of either).
    pub fn plus(self, o: DecoderStats) -> DecoderStats {
        DecoderStats {
            decoded_on_gpu: self.decoded_on_gpu + o.decoded_on_gpu,
            loaded: self.loaded + o.loaded,
            ragged_batches: self.ragged_batches + o.ragged_batches,
            ragged_bytes: self.ragged_bytes + o.ragged_bytes,
            nvjpeg_backend: self.nvjpeg_backend.or(o.nvjpeg_backend),
            cache: match (self.cache, o.cache) {
                (Some(a), Some(b)) => Some(a.plus(b)),
                (a, b) => a.or(b),
            },
        }
    }

    /// One line for a report: the split, the backend and the mean arena.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "decoder split: {} of {} images decoded by nvJPEG ({:.1}%), the rest by the CPU \
             decoder",
            self.decoded_on_gpu,
            self.loaded,
            100.0 * self.decoded_on_gpu as f64 / self.loaded.max(1) as f64
        );
        if let Some(b) = self.nvjpeg_backend {
            s.push_str(&format!("; nvJPEG backend: {b}"));
        }
        if self.ragged_batches > 0 {
            s.push_str(&format!(
                "; device arena {:.1} MB per batch (ragged regions, no padding)",
                self.ragged_bytes as f64 / self.ragged_batches as f64 / 1e6
            ));
        }
        s
    }
}

/// One unreadable image: its file and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadImage {
    pub path: PathBuf,
    pub reason: String,
}

type BatchResult = (usize, Batch, Vec<BadImage>);

/// The batches of one epoch, in order. Yields `Err` (and then stops) when image_size is 0 or
/// when unreadable images exceed the configured fraction.
pub struct EpochIter {
    shared: Arc<Shared>,
    pool: Arc<rayon::ThreadPool>,
    epoch: u64,
    image_size: u32,
    samples_in_epoch: usize,
    batches: Vec<Option<Vec<usize>>>,
    next_spawn: usize,
    next_yield: usize,
    tx: Sender<BatchResult>,
    rx: Receiver<BatchResult>,
    ready: BTreeMap<usize, (Batch, Vec<BadImage>)>,
    cancelled: Arc<AtomicBool>,
    bad: Vec<BadImage>,
    failed: bool,
}

impl EpochIter {
    /// Number of batches this epoch yields (when no error stops it).
    pub fn num_batches(&self) -> usize {
        self.batches.len()
    }

    /// The unreadable images met so far in this epoch (skipped).
    pub fn bad_images(&self) -> &[BadImage] {
        &self.bad
    }

    fn spawn_next(&mut self) {
        let b = self.next_spawn;
        self.next_spawn += 1;
        let Some(indices) = self.batches[b].take() else {
            return;
        };
        let shared = self.shared.clone();
        let tx = self.tx.clone();
        let cancelled = self.cancelled.clone();
        let (epoch, size) = (self.epoch, self.image_size);
        self.pool.spawn(move || {
            if cancelled.load(Ordering::Relaxed) {
                return;
            }
            let (batch, bad) = build_batch(&shared, epoch, size, &indices);
            // The receiver is gone only when the iterator was dropped: nothing to do then.
            let _ = tx.send((b, batch, bad));
        });
    }
}

impl Iterator for EpochIter {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        if self.failed || self.next_yield >= self.batches.len() {
            return None;
        }
        if self.image_size == 0 {
            self.failed = true;
            return Some(Err(anyhow::anyhow!(
                "image size for epoch {} must be at least 1 pixel",
                self.epoch
            )));
        }
        while !self.ready.contains_key(&self.next_yield) {
            match self.rx.recv() {
                Ok((b, batch, bad)) => {
                    self.ready.insert(b, (batch, bad));
                }
                Err(_) => {
                    self.failed = true;
                    return Some(Err(anyhow::anyhow!(
                        "data loader workers stopped unexpectedly"
                    )));
                }
            }
        }
        let (batch, bad) = self.ready.remove(&self.next_yield).expect("checked above");
        self.next_yield += 1;
        if self.next_spawn < self.batches.len() {
            self.spawn_next();
        }
        self.bad.extend(bad);
        let limit = self.shared.config.max_bad_fraction * self.samples_in_epoch as f64;
        if self.bad.len() as f64 > limit {
            self.failed = true;
            self.cancelled.store(true, Ordering::Relaxed);
            let examples: Vec<String> = self
                .bad
                .iter()
                .take(5)
                .map(|b| format!("{} ({})", b.path.display(), b.reason))
                .collect();
            return Some(Err(anyhow::anyhow!(
                "{}: {} unreadable images in epoch {} exceed the allowed {:.2}% of {} samples; \
                 fix or remove them. First ones: {}",
                self.shared.root.display(),
                self.bad.len(),
                self.epoch,
                self.shared.config.max_bad_fraction * 100.0,
                self.samples_in_epoch,
                examples.join("; ")
            )));
        }
        Some(Ok(batch))
    }
}

impl Drop for EpochIter {
    fn drop(&mut self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }
}

/// The crop box and flip of one sample (see [`Loader::crop_for`]).
fn augmentation(
    c: &LoaderConfig,
    epoch: u64,
    index: usize,
    width: u32,
    height: u32,
    size: u32,
) -> (CropBox, bool) {
    if c.train {
        let mut rng = Rng::keyed(&[c.seed, epoch, STREAM_AUGMENT, index as u64]);
        let crop = c.crop.sample(width, height, &mut rng);
        let flip = rng.chance(c.flip_probability);
        (crop, flip)
    } else {
        let crop = center_crop_box(width, height, size, c.eval_resize_ratio);
        (crop, false)
    }
}

/// One sample decoded as far as the host takes it: the pixels its crop needs, the crop box
/// in those pixels and the flip.
struct Region {
    image: RgbImage,
    crop: CropBox,
    flip: bool,
    /// Decoded whole for the decoded-image cache (reserved there).
    fill: bool,
}

/// Read and decode one sample: with the CPU region decoder only the region its crop needs, at
/// the coarsest DCT scale that keeps the crop at least the output size; with `cpu-full` the
/// whole image.
fn load_region(shared: &Shared, epoch: u64, size: u32, index: usize) -> Result<Region, String> {
    let bytes = read_sample(shared, index)?;
    region_of(shared, epoch, size, index, &bytes)
}

/// The file of sample `index`.
fn read_sample(shared: &Shared, index: usize) -> Result<Vec<u8>, String> {
    let path = &shared.samples[index].path;
    std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => format!(
            "cannot read: permission denied (make it readable: chmod a+r {})",
            path.display()
        ),
        _ => format!("cannot read: {e}"),
    })
}

/// [`load_region`] of the file's `bytes`, already read.
fn region_of(
    shared: &Shared,
    epoch: u64,
    size: u32,
    index: usize,
    bytes: &[u8],
) -> Result<Region, String> {
    let c = &shared.config;
    if c.decoder == Decoder::CpuFull {
        let image = decode_jpeg(bytes)?;
        let (crop, flip) = augmentation(c, epoch, index, image.width, image.height, size);
        let fill = reserve(shared, epoch, index, image.width, image.height);
        return Ok(Region {
            image,
            crop,
            flip,
            fill,
        });
    }
    // The box comes from the header's size, then only its region is decoded (the whole image,
    // at full scale, for the decoded-image cache).
    let header = JpegHeader::read(bytes)?;
    let (w, h) = (header.width, header.height);
    let (crop, flip) = augmentation(c, epoch, index, w, h, size);
    let fill = reserve(shared, epoch, index, w, h);
    let plan = match fill {
        true => whole_image(w, h, crop),
        false => plan_region(w, h, crop, size),
    };
    let image = header.decode(&plan).inspect_err(|_| {
        if fill {
            release(shared, index)
        }
    })?;
    Ok(Region {
        image,
        crop: plan.crop,
        flip,
        fill,
    })
}

/// The plan that decodes a `width` x `height` image whole at full scale, `crop` in its pixels.
fn whole_image(width: u32, height: u32, crop: CropBox) -> RegionPlan {
    RegionPlan {
        denom: 1,
        x: 0,
        y: 0,
        width,
        height,
        crop,
    }
}

/// Whether sample `index` (a `width` x `height` image, missed by the cache) is decoded whole for
/// the decoded-image cache (reserved there); false without a cache.
fn reserve(shared: &Shared, epoch: u64, index: usize, width: u32, height: u32) -> bool {
    shared
        .cache
        .as_ref()
        .is_some_and(|c| c.reserve(index, epoch, width, height))
}

/// A reserved sample that could not be decoded.
fn release(shared: &Shared, index: usize) {
    if let Some(c) = &shared.cache {
        c.release(index);
    }
}

/// The batch's samples stored in the decoded-image cache (one lookup each), with their crops in
/// the stored images, and the others (to read and decode).
fn cache_hits(
    shared: &Shared,
    epoch: u64,
    size: u32,
    indices: &[usize],
) -> (Vec<(DeviceCrop, CacheHit)>, Vec<usize>) {
    let Some(cache) = &shared.cache else {
        return (Vec::new(), indices.to_vec());
    };
    let mut hits = Vec::new();
    let mut misses = Vec::with_capacity(indices.len());
    for &index in indices {
        match cache.find(index) {
            Some((w, h)) => {
                let (crop, flip) = augmentation(&shared.config, epoch, index, w, h, size);
                // the region the resampling reads, at full scale, cut from the stored image
                let plan = region_at(w, h, crop, size, 1);
                let device_crop = DeviceCrop {
                    width: plan.width,
                    height: plan.height,
                    crop: plan.crop,
                    flip,
                };
                let (x, y) = (plan.x, plan.y);
                hits.push((device_crop, CacheHit { index, x, y }));
            }
            None => misses.push(index),
        }
    }
    (hits, misses)
}

/// Read, decode and transform one sample into `out`.
fn load_sample(
    shared: &Shared,
    epoch: u64,
    size: u32,
    index: usize,
    out: &mut [u8],
) -> Result<(), String> {
    let r = load_region(shared, epoch, size, index)?;
    crop_resize_into(&r.image, r.crop, size, r.flip, out)
}

/// The largest side of a full-scale region that nvJPEG decodes (in output sizes): a larger one
/// goes to the CPU region decoder, which decodes it at a DCT scale that keeps it small (less to
/// decode, copy and resample).
const MAX_GPU_REGION: u32 = 4;

/// A sample planned for the engine: its bytes and full-scale region, and its crop and flip.
struct EngineItem {
    bytes: Vec<u8>,
    plan: RegionPlan,
    flip: bool,
    /// Decoded whole for the decoded-image cache (reserved there).
    fill: bool,
}

/// Sample `index` planned for nvJPEG (its file, header, box and full-scale region) when the
/// engine takes it, else decoded on the host from the same bytes (which also names a corrupt
/// file).
fn engine_or_host(
    shared: &Shared,
    gpu: &Nvjpeg,
    epoch: u64,
    size: u32,
    index: usize,
) -> Result<EngineItem, Loaded> {
    let bytes = read_sample(shared, index).map_err(Err)?;
    let planned = JpegHeader::read(&bytes).ok().and_then(|header| {
        if !ends_with_image(&bytes) {
            return None;
        }
        let (w, h) = (header.width, header.height);
        let (crop, flip) = augmentation(&shared.config, epoch, index, w, h, size);
        // a cache fill is decoded whole, whatever its size
        let fill = reserve(shared, epoch, index, w, h);
        let plan = match fill {
            true => whole_image(w, h, crop),
            false => region_at(w, h, crop, size, 1),
        };
        let fits = plan.width.max(plan.height) <= size.saturating_mul(MAX_GPU_REGION).max(1);
        ((fill || fits) && gpu.supports(&bytes, &plan)).then_some((plan, flip, fill))
    });
    match planned {
        Some((plan, flip, fill)) => Ok(EngineItem {
            bytes,
            plan,
            flip,
            fill,
        }),
        // a reservation made above is this worker's own: region_of decodes it whole
        None => Err(region_of(shared, epoch, size, index, &bytes)),
    }
}

/// A sample that could not be read: warned about once per loader, returned for the epoch's count.
fn report_bad(shared: &Shared, index: usize, reason: String) -> BadImage {
    let path = shared.samples[index].path.clone();
    let first_time = shared
        .reported_bad
        .lock()
        .map(|mut s| s.insert(path.clone()))
        .unwrap_or(true);
    if first_time {
        tracing::warn!("skipping unreadable image {}: {reason}", path.display());
    }
    BadImage { path, reason }
}

/// Build one batch; unreadable samples are left out and returned.
fn build_batch(
    shared: &Shared,
    epoch: u64,
    size: u32,
    indices: &[usize],
) -> (Batch, Vec<BadImage>) {
    shared
        .loaded
        .fetch_add(indices.len() as u64, Ordering::Relaxed);
    if shared.config.device_augment {
        return build_device_batch(shared, epoch, size, indices);
    }
    let per_image = size as usize * size as usize * 3;
    let mut images = vec![0u8; per_image * indices.len()];
    let results: Vec<Result<(), String>> = images
        .par_chunks_mut(per_image)
        .zip(indices.par_iter())
        .map(|(out, &index)| load_sample(shared, epoch, size, index, out))
        .collect();
    let mut bad = Vec::new();
    let mut kept = 0;
    let mut labels = Vec::with_capacity(indices.len());
    let mut kept_indices = Vec::with_capacity(indices.len());
    for (slot, (result, &index)) in results.into_iter().zip(indices).enumerate() {
        match result {
            Ok(()) => {
                if kept != slot {
                    images.copy_within(slot * per_image..(slot + 1) * per_image, kept * per_image);
                }
                kept += 1;
                labels.push(shared.samples[index].label);
                kept_indices.push(index);
            }
            Err(reason) => bad.push(report_bad(shared, index, reason)),
        }
    }
    images.truncate(kept * per_image);
    (Batch::finished(images, labels, kept_indices, size), bad)
}

/// A sample decoded on the host, or why it could not be.
type Loaded = Result<Region, String>;

/// A batch's samples (by index) planned for the engine, and those decoded on the host.
type EngineAndHost = (Vec<(usize, EngineItem)>, Vec<(usize, Loaded)>);

/// Build one batch for `data.augment = "gpu"`, ragged ([`Batch`]): with nvJPEG, the first
/// `hw_load` share of the samples is read, parsed and planned here (in parallel, each worker with
/// its own parse objects) for the engine, which decodes them at the hand-off; the CPU region
/// decoder takes the rest at the same time, and every sample the engine does not take (from the
/// bytes already read). The
/// engine's images come first, then the host's, then those cut from the decoded-image cache
/// (which are neither read nor decoded), each group in sample order.
fn build_device_batch(
    shared: &Shared,
    epoch: u64,
    size: u32,
    indices: &[usize],
) -> (Batch, Vec<BadImage>) {
    let (hits, misses) = cache_hits(shared, epoch, size, indices);
    let (engine, host) = plan_engine_and_host(shared, epoch, size, &misses);
    shared
        .decoded_on_gpu
        .fetch_add(engine.len() as u64, Ordering::Relaxed);
    let mut bad = Vec::new();
    let mut kept: Vec<(usize, Region)> = Vec::with_capacity(host.len());
    for (index, r) in host {
        match r {
            Ok(r) => kept.push((index, r)),
            Err(reason) => bad.push(report_bad(shared, index, reason)),
        }
    }
    let (mut crops, mut order, images, fills) = ragged_layout(&engine, &kept);
    let cache = shared
        .cache
        .as_ref()
        .filter(|_| !hits.is_empty() || !fills.is_empty())
        .map(|cache| CacheJob {
            cache: cache.clone(),
            hits: hits.iter().map(|(_, h)| *h).collect(),
            fills,
        });
    for (c, h) in hits {
        crops.push(c);
        order.push(h.index);
    }
    shared.ragged_batches.fetch_add(1, Ordering::Relaxed);
    shared.ragged_bytes.fetch_add(
        crops
            .iter()
            .map(|c| c.width as u64 * c.height as u64 * 3)
            .sum(),
        Ordering::Relaxed,
    );
    let engine = match (&shared.nvjpeg, engine.is_empty()) {
        (Some(gpu), false) => Some(EngineJob {
            decoder: gpu.clone(),
            jpegs: engine.into_iter().map(|(_, e)| (e.bytes, e.plan)).collect(),
        }),
        _ => None,
    };
    let batch = Batch {
        images,
        labels: order.iter().map(|&i| shared.samples[i].label).collect(),
        indices: order,
        height: 0,
        width: 0,
        size,
        crops,
        engine,
        cache,
    };
    (batch, bad)
}

/// Split a batch's samples between the engine (the first `hw_load` share, where it takes them)
/// and the host region decoder, working on both at once; without nvJPEG all go to the host.
fn plan_engine_and_host(
    shared: &Shared,
    epoch: u64,
    size: u32,
    indices: &[usize],
) -> EngineAndHost {
    let n = indices.len();
    match &shared.nvjpeg {
        Some(gpu) => {
            let to_gpu = ((shared.hw_load * n as f64).round() as usize).min(n);
            let (planned, rest) = rayon::join(
                || {
                    indices[..to_gpu]
                        .par_iter()
                        .map(|&i| (i, engine_or_host(shared, gpu, epoch, size, i)))
                        .collect::<Vec<_>>()
                },
                || {
                    indices[to_gpu..]
                        .par_iter()
                        .map(|&i| (i, load_region(shared, epoch, size, i)))
                        .collect::<Vec<_>>()
                },
            );
            let mut taken = Vec::with_capacity(planned.len());
            let mut host = Vec::with_capacity(n);
            for (i, p) in planned {
                match p {
                    Ok(item) => taken.push((i, item)),
                    Err(loaded) => host.push((i, loaded)),
                }
            }
            host.extend(rest);
            (taken, host)
        }
        None => (
            Vec::new(),
            indices
                .par_iter()
                .map(|&i| (i, load_region(shared, epoch, size, i)))
                .collect(),
        ),
    }
}

/// The decoded-image cache's fills of a batch: (position in the batch, sample index).
type Fills = Vec<(usize, usize)>;

/// The ragged batch's crops and sample order (the engine's first, then the host's), the host
/// regions' pixels, concatenated, and the images decoded whole for the cache.
fn ragged_layout(
    engine: &[(usize, EngineItem)],
    kept: &[(usize, Region)],
) -> (Vec<DeviceCrop>, Vec<usize>, Vec<u8>, Fills) {
    let mut fills = Vec::new();
    let mut crops = Vec::with_capacity(engine.len() + kept.len());
    let mut order = Vec::with_capacity(engine.len() + kept.len());
    for (index, e) in engine {
        crops.push(DeviceCrop {
            width: e.plan.width,
            height: e.plan.height,
            crop: e.plan.crop,
            flip: e.flip,
        });
        if e.fill {
            fills.push((order.len(), *index));
        }
        order.push(*index);
    }
    let host_bytes: usize = kept.iter().map(|(_, r)| r.image.pixels.len()).sum();
    let mut images = Vec::with_capacity(host_bytes);
    for (index, r) in kept {
        crops.push(DeviceCrop {
            width: r.image.width,
            height: r.image.height,
            crop: r.crop,
            flip: r.flip,
        });
        images.extend_from_slice(&r.image.pixels);
        if r.fill {
            fills.push((order.len(), *index));
        }
        order.push(*index);
    }
    (crops, order, images, fills)
}
