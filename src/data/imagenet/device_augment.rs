//! `data.augment = "gpu"`: crop, resize, flip, normalise and lay out a batch on the device, as
//! one batched op after the hand-off's copy (on its stream).
//!
//! The host decodes each sample's region and picks its crop box and flip exactly as for the CPU
//! path ([`super::loader`]); the batch arrives as u8 regions padded to the largest
//! ([`super::Batch::crops`]). The resampling is the CPU path's: the bilinear (triangle) filter
//! widened by the downscale factor, as PIL and fast_image_resize do it (antialiased), so the two
//! differ only by rounding. It is separable, so each image's resize is two matrix products with
//! its own weight matrices (`[size, padded width]` and `[size, padded height]`, built on the
//! device from the boxes, zero outside each region): two batched matmuls for the whole batch,
//! then the normalisation into the training dtype, channels-last. The same tensor ops run on
//! the CPU (the twin the tests compare with the CPU path) and on a GPU.

use super::loader::DeviceCrop;
use anyhow::{bail, Result};
use tch::{Device, Kind, Tensor};

/// Values per image in the parameter tensor: region width, region height, crop left, top,
/// width, height, flip (0 or 1).
pub const PARAMS: usize = 7;

/// ImageNet's channel means and standard deviations in u8 units (the reference's
/// `Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])` times 255).
pub const MEAN: [f32; 3] = [0.485 * 255.0, 0.456 * 255.0, 0.406 * 255.0];
pub const STD: [f32; 3] = [0.229 * 255.0, 0.224 * 255.0, 0.225 * 255.0];

/// The op, with its constants on one device.
pub struct DeviceAugment {
    mean: Tensor,
    std: Tensor,
    device: Device,
    /// The matmuls' dtype: fp16 on a GPU (tensor cores; weights and pixels are exact enough,
    /// accumulation is fp32), fp32 on the CPU.
    compute: Kind,
    /// The output's dtype: the forward's (fp16/bf16 under `methods.amp`, else fp32).
    out: Kind,
    channels_last: bool,
}

impl Clone for DeviceAugment {
    fn clone(&self) -> Self {
        DeviceAugment {
            mean: self.mean.shallow_clone(),
            std: self.std.shallow_clone(),
            ..*self
        }
    }
}

// SAFETY: the constant tensors are never written after construction; libtorch tensors may be
// read from several threads.
unsafe impl Send for DeviceAugment {}

impl DeviceAugment {
    /// The op on `device`, writing `out` (Float, Half or BFloat16) tensors, channels-last
    /// strides when `channels_last` (else contiguous NCHW).
    pub fn new(device: Device, out: Kind, channels_last: bool) -> Result<DeviceAugment> {
        if !matches!(out, Kind::Float | Kind::Half | Kind::BFloat16) {
            bail!("device augmentation writes fp32, fp16 or bf16 images, not {out:?}");
        }
        Ok(DeviceAugment {
            mean: Tensor::f_from_slice(&MEAN)?.f_to_device(device)?,
            std: Tensor::f_from_slice(&STD)?.f_to_device(device)?,
            device,
            compute: if device.is_cuda() {
                Kind::Half
            } else {
                Kind::Float
            },
            out,
            channels_last,
        })
    }

    /// The same op computing its matmuls in `kind` (tests: the GPU's fp16 on the CPU).
    pub fn with_compute(mut self, kind: Kind) -> DeviceAugment {
        self.compute = kind;
        self
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// The parameter rows of `crops` ([`PARAMS`] values each), for a `[n, PARAMS]` f32 tensor.
    pub fn params(crops: &[DeviceCrop]) -> Vec<f32> {
        crops
            .iter()
            .flat_map(|c| {
                [
                    c.width as f32,
                    c.height as f32,
                    c.crop.left as f32,
                    c.crop.top as f32,
                    c.crop.width as f32,
                    c.crop.height as f32,
                    if c.flip { 1.0 } else { 0.0 },
                ]
            })
            .collect()
    }

    /// `images`: `[n, H, W, 3]` u8 regions (each at the top left of its slot); `params`:
    /// `[n, PARAMS]` f32 ([`DeviceAugment::params`]), both on this op's device. Returns `[n, 3,
    /// size, size]` normalised images of the output dtype (channels-last strides when asked):
    /// what the model's forward takes.
    pub fn apply(&self, images: &Tensor, params: &Tensor, size: i64) -> Result<Tensor> {
        let dims = images.size();
        let [n, h, w, c] = dims[..] else {
            bail!("device augmentation: images of shape {dims:?}, [n, h, w, 3] expected");
        };
        if c != 3 || images.kind() != Kind::Uint8 || size < 1 {
            bail!(
                "device augmentation: {:?} images of shape {dims:?} to {size} px; u8 [n, h, w, 3] \
                 and a size of at least 1 expected",
                images.kind()
            );
        }
        if params.size() != [n, PARAMS as i64] {
            bail!(
                "device augmentation: parameters of shape {:?} for {n} images, [{n}, {PARAMS}] \
                 expected",
                params.size()
            );
        }
        let p = params.f_to_kind(Kind::Float)?;
        let col = |k: i64| -> Result<Tensor> { Ok(p.f_select(1, k)?.f_view([n, 1, 1])?) };
        let (region_w, region_h) = (col(0)?, col(1)?);
        let (left, top, crop_w, crop_h, flip) = (col(2)?, col(3)?, col(4)?, col(5)?, col(6)?);
        let wx = self.weights(&left, &crop_w, &region_w, Some(&flip), size, w)?;
        let wy = self.weights(&top, &crop_h, &region_h, None, size, h)?;
        // horizontal pass: [n, size, W] x [n, W, H*3] -> [n, size(x), H, 3]
        // one pass: the cast and the transpose together
        let mut x = Tensor::f_empty([n, w, h, 3], (self.compute, self.device))?;
        x.f_copy_(&images.f_permute([0, 2, 1, 3])?)?;
        let x = x.f_view([n, w, h * 3])?;
        let x = wx.f_bmm(&x)?.f_view([n, size, h, 3])?;
        // vertical pass: [n, size, H] x [n, H, size*3] -> [n, size(y), size(x), 3], NHWC
        let x = x
            .f_permute([0, 2, 1, 3])?
            .f_contiguous()?
            .f_view([n, h, size * 3])?;
        let x = wy.f_bmm(&x)?.f_view([n, size, size, 3])?;
        let x = x
            .f_to_kind(Kind::Float)?
            .f_sub(&self.mean)?
            .f_div(&self.std)?
            .f_to_kind(self.out)?
            .f_permute([0, 3, 1, 2])?;
        Ok(if self.channels_last {
            x
        } else {
            x.f_contiguous()?
        })
    }

    /// Resampling weights of one axis for every image: `[n, size, padded]`, row `i` the
    /// triangle filter around output pixel `i`'s centre in source pixels (`start + (i + 0.5) *
    /// len / size`, mirrored when `flip`), widened by the downscale factor, zero at and beyond
    /// `extent` (the region's edge), normalised to sum 1.
    fn weights(
        &self,
        start: &Tensor,
        len: &Tensor,
        extent: &Tensor,
        flip: Option<&Tensor>,
        size: i64,
        padded: i64,
    ) -> Result<Tensor> {
        let f = (Kind::Float, self.device);
        let mut i = Tensor::f_arange(size, f)?.f_view([1, size, 1])?;
        if let Some(flip) = flip {
            // output column i shows source column size-1-i
            let mirrored = i.f_neg()?.f_add_scalar((size - 1) as f64)?;
            i = &i + flip * (mirrored - &i);
        }
        let scale = len.f_div_scalar(size as f64)?;
        let support = scale.f_clamp_min(1.0)?;
        let center = start + (i + 0.5) * &scale;
        let j = Tensor::f_arange(padded, f)?
            .f_view([1, 1, padded])?
            .f_add_scalar(0.5)?;
        let inside = j.f_lt_tensor(extent)?.f_to_kind(Kind::Float)?;
        let t = (&j - center).f_div(&support)?.f_abs()?;
        let w = t.f_neg()?.f_add_scalar(1.0)?.f_clamp_min(0.0)? * inside;
        let sum = w
            .f_sum_dim_intlist(-1, true, Kind::Float)?
            .f_clamp_min(1e-12)?;
        Ok(w.f_div(&sum)?.f_to_kind(self.compute)?)
    }
}

/// Undo the normalisation of [`DeviceAugment::apply`]'s output: `[n, size, size, 3]` f32 pixel
/// values (0..255 up to rounding), for comparisons with the CPU path's u8 crops.
pub fn denormalize(images: &Tensor) -> Result<Tensor> {
    let device = images.device();
    let mean = Tensor::f_from_slice(&MEAN)?.f_to_device(device)?;
    let std = Tensor::f_from_slice(&STD)?.f_to_device(device)?;
    Ok(images
        .f_to_kind(Kind::Float)?
        .f_permute([0, 2, 3, 1])?
        .f_mul(&std)?
        .f_add(&mean)?
        .f_contiguous()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::imagenet::CropBox;

    fn crop(w: u32, h: u32, b: (f64, f64, f64, f64), flip: bool) -> DeviceCrop {
        DeviceCrop {
            width: w,
            height: h,
            crop: CropBox {
                left: b.0,
                top: b.1,
                width: b.2,
                height: b.3,
            },
            flip,
        }
    }

    #[test]
    fn an_identity_box_returns_the_region_normalised_and_flips_mirror_it() {
        // a 4x4 region in an 5x6 slot, the whole region to 4 px: the pixels themselves
        let mut px = vec![0u8; 5 * 6 * 3];
        for y in 0..4 {
            for x in 0..4 {
                for c in 0..3 {
                    px[(y * 6 + x) * 3 + c] = (10 * y + x + 50 * c) as u8;
                }
            }
        }
        let images = Tensor::from_slice(&px).view([1, 5, 6, 3]);
        let aug = DeviceAugment::new(Device::Cpu, Kind::Float, true).unwrap();
        for flip in [false, true] {
            let c = [crop(4, 4, (0.0, 0.0, 4.0, 4.0), flip)];
            let p = Tensor::from_slice(&DeviceAugment::params(&c)).view([1, PARAMS as i64]);
            let out = denormalize(&aug.apply(&images, &p, 4).unwrap()).unwrap();
            assert_eq!(out.size(), [1, 4, 4, 3]);
            for y in 0..4i64 {
                for x in 0..4i64 {
                    let sx = if flip { 3 - x } else { x };
                    let want = (10 * y + sx + 50) as f64;
                    let got = out.double_value(&[0, y, x, 1]);
                    assert!(
                        (got - want).abs() < 1e-3,
                        "({x},{y}) flip {flip}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn wrong_shapes_are_errors_not_panics() {
        let aug = DeviceAugment::new(Device::Cpu, Kind::Float, false).unwrap();
        let images = Tensor::zeros([2, 4, 4, 3], (Kind::Uint8, Device::Cpu));
        let p = Tensor::zeros([1, PARAMS as i64], (Kind::Float, Device::Cpu));
        let e = aug.apply(&images, &p, 4).unwrap_err().to_string();
        assert!(e.contains("parameters of shape"), "{e}");
        let e = aug
            .apply(&images.to_kind(Kind::Float), &p, 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("u8 [n, h, w, 3]"), "{e}");
        assert!(DeviceAugment::new(Device::Cpu, Kind::Int64, false).is_err());
    }
}
