//! ImageNet in the ImageFolder layout, and the training/evaluation batch pipeline.
//!
//! - [`folder`]: list `train/<wnid>/*.JPEG` and `val/<wnid>/*.JPEG`
//! - [`decode`]: JPEG to RGB (zune-jpeg)
//! - [`transform`]: random-resized-crop + flip (train), resize + center crop (eval)
//! - [`loader`]: the worker pool and bounded queue yielding u8 NHWC batches, deterministic per
//!   seed and sharded per rank
//!
//! The trainer turns each [`Batch`] into a tensor and normalises it on the device.

pub mod bench;
pub mod decode;
pub mod folder;
pub mod loader;
pub mod transform;

pub use decode::{decode_jpeg, RgbImage};
pub use folder::{ImageFolder, ImagenetDir, Sample};
pub use loader::{BadImage, Batch, EpochIter, Loader, LoaderConfig};
pub use transform::{center_crop_box, crop_resize_into, CropBox, RandomResizedCrop};
