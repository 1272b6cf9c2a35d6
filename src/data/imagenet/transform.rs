//! Image transforms: torchvision's RandomResizedCrop (+ horizontal flip) for training and
//! Resize + CenterCrop for evaluation, each done as one crop-and-resize pass
//! (fast_image_resize, bilinear convolution as PIL does it) straight into the batch buffer.

use super::decode::RgbImage;
use crate::data::rng::Rng;
use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use std::cell::RefCell;

/// A source rectangle in pixels (may be fractional for the eval crop).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CropBox {
    pub left: f64,
    pub top: f64,
    pub width: f64,
    pub height: f64,
}

/// One image of a device-augmented batch: its region is `width` x `height` pixels at the top left
/// of its slot; `crop` (in those pixels) is resized to the output size, then mirrored when `flip`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceCrop {
    pub width: u32,
    pub height: u32,
    pub crop: CropBox,
    pub flip: bool,
}

/// RandomResizedCrop's parameters: the crop's area as a fraction of the image and its aspect
/// ratio (width/height), drawn uniformly in log space.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomResizedCrop {
    pub scale: (f64, f64),
    pub ratio: (f64, f64),
}

impl RandomResizedCrop {
    /// The MLPerf ResNet reference: area 0.05..1, aspect 3/4..4/3.
    pub const MLPERF: RandomResizedCrop = RandomResizedCrop {
        scale: (0.05, 1.0),
        ratio: (3.0 / 4.0, 4.0 / 3.0),
    };
    /// torchvision's default: area 0.08..1, aspect 3/4..4/3.
    pub const TORCHVISION: RandomResizedCrop = RandomResizedCrop {
        scale: (0.08, 1.0),
        ratio: (3.0 / 4.0, 4.0 / 3.0),
    };

    /// Check the ranges; the error says which one is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let (s0, s1) = self.scale;
        if !(s0 > 0.0 && s0 <= s1 && s1 <= 1.0) {
            return Err(format!(
                "crop scale range {s0}..{s1} must satisfy 0 < min <= max <= 1"
            ));
        }
        let (r0, r1) = self.ratio;
        if !(r0 > 0.0 && r0 <= r1 && r1.is_finite()) {
            return Err(format!(
                "crop aspect-ratio range {r0}..{r1} must satisfy 0 < min <= max"
            ));
        }
        Ok(())
    }

    /// torchvision's `RandomResizedCrop.get_params`: up to 10 tries at a random area and
    /// log-uniform aspect ratio that fits, else a center crop clamped to the ratio range.
    pub fn sample(&self, width: u32, height: u32, rng: &mut Rng) -> CropBox {
        let (w_img, h_img) = (width as f64, height as f64);
        let area = w_img * h_img;
        let (log_r0, log_r1) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..10 {
            let target_area = area * rng.uniform(self.scale.0, self.scale.1);
            let aspect = rng.uniform(log_r0, log_r1).exp();
            let w = (target_area * aspect).sqrt().round_ties_even();
            let h = (target_area / aspect).sqrt().round_ties_even();
            if w > 0.0 && h > 0.0 && w <= w_img && h <= h_img {
                let top = rng.below((h_img - h) as u64 + 1) as f64;
                let left = rng.below((w_img - w) as u64 + 1) as f64;
                return CropBox {
                    left,
                    top,
                    width: w,
                    height: h,
                };
            }
        }
        let in_ratio = w_img / h_img;
        let (w, h) = if in_ratio < self.ratio.0 {
            (w_img, (w_img / self.ratio.0).round_ties_even())
        } else if in_ratio > self.ratio.1 {
            ((h_img * self.ratio.1).round_ties_even(), h_img)
        } else {
            (w_img, h_img)
        };
        CropBox {
            left: ((w_img - w) / 2.0).floor(),
            top: ((h_img - h) / 2.0).floor(),
            width: w,
            height: h,
        }
    }
}

/// The eval crop as torchvision computes it: Resize(short side = round(size * resize_ratio))
/// then CenterCrop(size), expressed as a box in source pixels. resize_ratio 256/224 gives the
/// reference's 256 -> 224.
pub fn center_crop_box(width: u32, height: u32, size: u32, resize_ratio: f64) -> CropBox {
    let resize = (size as f64 * resize_ratio).round().max(size as f64);
    let (w, h) = (width as f64, height as f64);
    // torchvision: the short side becomes `resize`, the long side int(resize * long / short).
    let (rw, rh) = if w <= h {
        (resize, (resize * h / w).floor())
    } else {
        ((resize * w / h).floor(), resize)
    };
    let (sx, sy) = (rw / w, rh / h);
    let crop_top = ((rh - size as f64) / 2.0).round_ties_even();
    let crop_left = ((rw - size as f64) / 2.0).round_ties_even();
    CropBox {
        left: crop_left / sx,
        top: crop_top / sy,
        width: size as f64 / sx,
        height: size as f64 / sy,
    }
}

thread_local! {
    static RESIZER: RefCell<Resizer> = RefCell::new(Resizer::new());
}

/// Resize `crop` of `image` to `size`x`size` RGB into `out` (size*size*3 bytes), mirrored
/// left-right when `flip`.
pub fn crop_resize_into(
    image: &RgbImage,
    crop: CropBox,
    size: u32,
    flip: bool,
    out: &mut [u8],
) -> Result<(), String> {
    let row = size as usize * 3;
    if out.len() != row * size as usize {
        return Err(format!(
            "output buffer holds {} bytes, {size}x{size} RGB needs {}",
            out.len(),
            row * size as usize
        ));
    }
    let src = ImageRef::new(image.width, image.height, &image.pixels, PixelType::U8x3)
        .map_err(|e| e.to_string())?;
    let mut dst =
        Image::from_slice_u8(size, size, out, PixelType::U8x3).map_err(|e| e.to_string())?;
    let options = ResizeOptions::new()
        .resize_alg(ResizeAlg::Convolution(FilterType::Bilinear))
        .crop(crop.left, crop.top, crop.width, crop.height);
    RESIZER
        .with(|r| r.borrow_mut().resize(&src, &mut dst, &options))
        .map_err(|e| e.to_string())?;
    if flip {
        for line in out.chunks_exact_mut(row) {
            let pixels = line.len() / 3;
            for i in 0..pixels / 2 {
                let j = pixels - 1 - i;
                for c in 0..3 {
                    line.swap(3 * i + c, 3 * j + c);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_crops_stay_inside_and_respect_ranges() {
        let t = RandomResizedCrop::MLPERF;
        let mut rng = Rng::keyed(&[1]);
        let mut fallbacks = 0;
        for i in 0..2000 {
            let (w, h) = (100 + (i % 300), 80 + (i * 7 % 400));
            let c = t.sample(w, h, &mut rng);
            assert!(c.left >= 0.0 && c.top >= 0.0, "{c:?}");
            assert!(
                c.left + c.width <= w as f64 && c.top + c.height <= h as f64,
                "{c:?} in {w}x{h}"
            );
            let frac = c.width * c.height / (w * h) as f64;
            if c.width == w as f64 || c.height == h as f64 {
                fallbacks += 1;
            } else {
                assert!(frac > 0.04 && frac < 1.01, "{frac}");
                let ar = c.width / c.height;
                assert!(ar > 0.7 && ar < 1.43, "{ar}");
            }
        }
        assert!(fallbacks < 1000, "{fallbacks}");
    }

    #[test]
    fn extreme_aspect_falls_back_to_clamped_center_crop() {
        // 1000x10: no crop of aspect <= 4/3 and area >= 5% fits, so the center fallback runs.
        let c = RandomResizedCrop::MLPERF.sample(1000, 10, &mut Rng::keyed(&[2]));
        assert_eq!((c.width, c.height), (13.0, 10.0));
        assert_eq!((c.left, c.top), (493.0, 0.0));
    }

    #[test]
    fn center_crop_box_matches_torchvision_arithmetic() {
        // 500x375 -> Resize(256) = 341x256 -> CenterCrop(224) at left Python round(58.5) = 58, top 16.
        let c = center_crop_box(500, 375, 224, 256.0 / 224.0);
        let s = 256.0 / 375.0;
        assert!((c.top - 16.0 / s).abs() < 1e-9);
        assert!((c.height - 224.0 / s).abs() < 1e-9);
        assert!((c.width - 224.0 / (341.0 / 500.0)).abs() < 1e-9);
        assert!((c.left - 58.0 / (341.0 / 500.0)).abs() < 1e-9);
    }
}
