//! ImageNet in the ImageFolder layout, and the training/evaluation batch pipeline.
//!
//! - [`folder`]: list `train/<wnid>/*.JPEG` and `val/<wnid>/*.JPEG`
//! - [`cache`]: `data.gpu_cache_mb`, whole decoded images kept on the device for later epochs
//! - [`decode`]: JPEG to RGB, the whole image (zune-jpeg)
//! - [`nvjpeg`]: the crop regions of a batch decoded on the GPU into device memory (nvJPEG,
//!   loaded at run time)
//! - [`region`]: JPEG to RGB, only the region a crop needs at the coarsest DCT scale that
//!   keeps it at least the output size (libjpeg-turbo, `shim/jpeg_region.c`)
//! - [`transform`]: random-resized-crop + flip (train), resize + center crop (eval)
//! - `device_augment` (feature `torch`): the same crop + resize + flip, and the normalisation,
//!   on the device (`data.augment = "gpu"`), over ragged batches of decoded regions; and the
//!   batch's way onto the device (nvJPEG's decode, the host regions' copy, the kernels)
//! - [`loader`]: the worker pool and bounded queue yielding u8 NHWC batches, deterministic per
//!   seed and sharded per rank
//!
//! The trainer turns each [`Batch`] into a tensor and normalises it on the device.

/// Images in the full ILSVRC2012 training set (`ILSVRC2012_img_train.tar`).
pub const IMAGENET_TRAIN_SAMPLES: u64 = 1_281_167;
/// Images in the full ILSVRC2012 validation set (`ILSVRC2012_img_val.tar`).
pub const IMAGENET_VAL_SAMPLES: u64 = 50_000;
/// Classes (synsets) of ILSVRC2012.
pub const IMAGENET_CLASSES: usize = 1000;

pub mod bench;
pub mod cache;
pub mod decode;
#[cfg(feature = "torch")]
pub mod device_augment;
pub mod folder;
pub mod loader;
pub mod nvjpeg;
pub mod region;
pub mod transform;

pub use cache::{CacheHit, CacheJob, CacheStats, DecodedCache};
pub use decode::{decode_jpeg, RgbImage};
pub use folder::{ImageFolder, ImagenetDir, Sample};
pub use loader::{
    Augment, BadImage, Batch, Decoder, DecoderStats, EngineJob, EpochIter, Loader, LoaderConfig,
};
pub use region::{plan_region, region_at, JpegHeader, RegionPlan};
pub use transform::{center_crop_box, crop_resize_into, CropBox, DeviceCrop, RandomResizedCrop};
