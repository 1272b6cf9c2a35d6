//! Decode only what a crop needs (libjpeg-turbo through `shim/jpeg_region.c`): read the JPEG's
//! header, let the caller choose the crop box from the image's size, then decode at the
//! coarsest DCT scale (1/8, 1/4, 1/2) that still leaves the crop at least the output size,
//! only the columns and rows around the box (the resampling filter's reach included).
//!
//! [`plan_region`] is the arithmetic (pure, tested); [`JpegHeader`] the decoding.

use super::decode::RgbImage;
use super::transform::CropBox;
use crate::shim::jpeg_region::{mr_jpeg_decode_region, mr_jpeg_free, mr_jpeg_open, MrJpeg};
use std::ffi::{c_char, c_int, CStr};

const MSG_LEN: usize = 256;

fn message(buf: &[c_char; MSG_LEN]) -> String {
    // SAFETY: the C side always NUL-terminates within MSG_LEN (snprintf); the buffer starts zeroed.
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
    let text = s.to_string_lossy();
    if text.is_empty() {
        "libjpeg failed without a message".to_string()
    } else {
        text.into_owned()
    }
}

/// What to decode for one crop: the DCT scale 1/`denom`, the pixel region (in the scaled
/// image) and the crop box relative to that region (in scaled pixels).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegionPlan {
    pub denom: u32,
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
    pub crop: CropBox,
}

/// The size of the image decoded at scale 1/denom, as libjpeg computes it.
pub fn scaled_size(width: u32, height: u32, denom: u32) -> (u32, u32) {
    (width.div_ceil(denom), height.div_ceil(denom))
}

/// Plan the decode of `crop` (in full-size pixels of a `width` x `height` image) for a
/// `size` x `size` output: the coarsest scale of 1/8, 1/4, 1/2 that leaves the crop at least
/// `size` pixels on both sides (else full size), and the region the bilinear resampling reads:
/// the box plus the filter's reach (one output pixel's footprint, at least one source pixel)
/// and one pixel of slack, clipped to the image. Up to the scale, the output of resampling the
/// region equals that of resampling the whole image.
pub fn plan_region(width: u32, height: u32, crop: CropBox, size: u32) -> RegionPlan {
    let size_f = size.max(1) as f64;
    let denom = [8u32, 4, 2]
        .into_iter()
        .find(|&d| crop.width / d as f64 >= size_f && crop.height / d as f64 >= size_f)
        .unwrap_or(1);
    region_at(width, height, crop, size, denom)
}

/// [`plan_region`] at a given scale 1/`denom` (1 for decoders without scaled IDCT).
pub fn region_at(width: u32, height: u32, crop: CropBox, size: u32, denom: u32) -> RegionPlan {
    let size_f = size.max(1) as f64;
    let (sw, sh) = scaled_size(width, height, denom);
    let d = denom as f64;
    let scaled = CropBox {
        left: crop.left / d,
        top: crop.top / d,
        width: crop.width / d,
        height: crop.height / d,
    };
    let span = |start: f64, len: f64, limit: u32| -> (u32, u32) {
        let reach = (len / size_f).max(1.0).ceil() + 1.0;
        let lo = (start - reach).floor().max(0.0) as u32;
        let hi = ((start + len + reach).ceil() as u32).min(limit);
        let lo = lo.min(limit.saturating_sub(1));
        (lo, hi.max(lo + 1) - lo)
    };
    let (x, w) = span(scaled.left, scaled.width, sw);
    let (y, h) = span(scaled.top, scaled.height, sh);
    RegionPlan {
        denom,
        x,
        y,
        width: w,
        height: h,
        crop: CropBox {
            left: scaled.left - x as f64,
            top: scaled.top - y as f64,
            width: scaled.width,
            height: scaled.height,
        },
    }
}

/// True when the data after the last start-of-scan marker holds the end-of-image marker, i.e.
/// the file was not cut off after its headers. (Entropy-coded data never holds 0xFF followed by
/// 0xD9 or 0xDA: 0xFF bytes there are stuffed with 0x00.) Scanning stops at the first of the two
/// markers found from the end, so a whole file costs a few bytes.
pub fn ends_with_image(bytes: &[u8]) -> bool {
    for i in (0..bytes.len().saturating_sub(1)).rev() {
        if bytes[i] == 0xFF {
            match bytes[i + 1] {
                0xD9 => return true,
                0xDA => return false,
                _ => {}
            }
        }
    }
    false
}

/// A JPEG whose headers have been read: its size is known, nothing decoded yet.
pub struct JpegHeader<'a> {
    handle: *mut MrJpeg,
    bytes: &'a [u8],
    pub width: u32,
    pub height: u32,
}

impl<'a> JpegHeader<'a> {
    /// Read the headers of `bytes`. Errors say what is wrong with the data.
    pub fn read(bytes: &'a [u8]) -> Result<JpegHeader<'a>, String> {
        let mut handle = std::ptr::null_mut();
        let (mut width, mut height, mut components) = (0u32, 0u32, 0 as c_int);
        let mut msg = [0 as c_char; MSG_LEN];
        // SAFETY: `bytes` outlives the handle (lifetime 'a); every out-pointer is valid.
        let rc = unsafe {
            mr_jpeg_open(
                bytes.as_ptr(),
                bytes.len(),
                &mut handle,
                &mut width,
                &mut height,
                &mut components,
                msg.as_mut_ptr(),
                MSG_LEN,
            )
        };
        if rc != 0 || handle.is_null() {
            return Err(super::decode::not_decodable(bytes, &message(&msg)));
        }
        let header = JpegHeader {
            handle,
            bytes,
            width,
            height,
        };
        if let Some(refusal) = super::decode::check_dimensions(width, height) {
            return Err(refusal);
        }
        if !matches!(components, 1 | 3 | 4) {
            return Err(format!(
                "JPEG with {components} colour components (1, 3 or 4 expected)"
            ));
        }
        Ok(header)
    }

    /// Decode `plan`'s region to RGB (`plan.width` x `plan.height`). A truncated file is an
    /// error even when the cut lies below the region.
    pub fn decode(self, plan: &RegionPlan) -> Result<RgbImage, String> {
        if !ends_with_image(self.bytes) {
            return Err("Premature end of JPEG file (no end-of-image marker)".to_string());
        }
        let mut pixels = vec![0u8; plan.width as usize * plan.height as usize * 3];
        let mut msg = [0 as c_char; MSG_LEN];
        // SAFETY: the handle is live (freed only in Drop); `pixels` holds w*h*3 bytes, which is
        // what the C side writes after checking the region against the scaled image.
        let rc = unsafe {
            mr_jpeg_decode_region(
                self.handle,
                plan.denom,
                plan.x,
                plan.y,
                plan.width,
                plan.height,
                pixels.as_mut_ptr(),
                msg.as_mut_ptr(),
                MSG_LEN,
            )
        };
        if rc != 0 {
            return Err(format!("not a decodable JPEG: {}", message(&msg)));
        }
        Ok(RgbImage {
            width: plan.width,
            height: plan.height,
            pixels,
        })
    }
}

impl Drop for JpegHeader<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from mr_jpeg_open and is freed once.
        unsafe { mr_jpeg_free(self.handle) }
    }
}

// The handle is used by one thread at a time (moved, never shared).
unsafe impl Send for JpegHeader<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(left: f64, top: f64, width: f64, height: f64) -> CropBox {
        CropBox {
            left,
            top,
            width,
            height,
        }
    }

    #[test]
    fn scale_is_the_coarsest_that_keeps_the_crop_at_least_the_output_size() {
        let p = |w, h| plan_region(2000, 2000, boxed(0.0, 0.0, w, h), 224).denom;
        assert_eq!(p(1792.0, 1792.0), 8);
        assert_eq!(p(1791.0, 1792.0), 4);
        assert_eq!(p(896.0, 1000.0), 4);
        assert_eq!(p(895.0, 1000.0), 2);
        assert_eq!(p(448.0, 448.0), 2);
        assert_eq!(p(447.0, 448.0), 1);
        assert_eq!(p(100.0, 100.0), 1);
    }

    #[test]
    fn region_covers_the_box_and_the_filter_reach_inside_the_image() {
        // 500x400 image, a 300x200 box at (100, 50), output 100: scale 1/2 (150x100 >= 100).
        let plan = plan_region(500, 400, boxed(100.0, 50.0, 300.0, 200.0), 100);
        assert_eq!(plan.denom, 2);
        let (sw, sh) = scaled_size(500, 400, 2);
        assert_eq!((sw, sh), (250, 200));
        // Scaled box: 50..200 x 25..125; reach ceil(150/100)+1 = 3 and ceil(100/100)+1 = 2.
        assert_eq!((plan.x, plan.width), (47, 156));
        assert_eq!((plan.y, plan.height), (23, 104));
        assert_eq!(plan.crop, boxed(3.0, 2.0, 150.0, 100.0));
        // At an image corner the region is clipped.
        let plan = plan_region(300, 300, boxed(0.0, 250.0, 50.0, 50.0), 224);
        assert_eq!(plan.denom, 1);
        assert_eq!((plan.x, plan.y), (0, 248));
        assert_eq!((plan.x + plan.width, plan.y + plan.height), (52, 300));
        assert_eq!(plan.crop, boxed(0.0, 2.0, 50.0, 50.0));
    }

    #[test]
    fn end_of_image_marker_is_found_after_the_last_scan_only() {
        assert!(ends_with_image(&[
            0xFF, 0xD8, 0xFF, 0xDA, 1, 2, 0xFF, 0x00, 0xFF, 0xD9
        ]));
        assert!(ends_with_image(&[0xFF, 0xDA, 1, 0xFF, 0xD9, 0, 0]));
        // A thumbnail's EOI before the main scan does not count.
        assert!(!ends_with_image(&[0xFF, 0xD9, 0xFF, 0xDA, 1, 2, 3]));
        assert!(!ends_with_image(&[0xFF]));
        assert!(!ends_with_image(&[]));
    }
}
