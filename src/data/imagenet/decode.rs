//! JPEG decoding to packed RGB (zune-jpeg, strict mode so truncated files are errors).

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

/// A decoded image: `height` rows of `width` RGB pixels, packed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgbImage {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

/// Decode a JPEG file's bytes to RGB (grayscale and CMYK inputs are converted).
/// Truncated or corrupt data is an error, as it is for PIL.
pub fn decode_jpeg(bytes: &[u8]) -> Result<RgbImage, String> {
    let options = DecoderOptions::default()
        .jpeg_set_out_colorspace(ColorSpace::RGB)
        .set_strict_mode(true)
        .set_max_width(1 << 15)
        .set_max_height(1 << 15);
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    let pixels = decoder
        .decode()
        .map_err(|e| format!("not a decodable JPEG: {e:?}"))?;
    let info = decoder.info().ok_or("JPEG headers missing")?;
    let (width, height) = (info.width as u32, info.height as u32);
    let expected = width as usize * height as usize * 3;
    if width == 0 || height == 0 || pixels.len() != expected {
        return Err(format!(
            "JPEG decoded to {} bytes for {width}x{height} RGB (expected {expected})",
            pixels.len()
        ));
    }
    Ok(RgbImage {
        width,
        height,
        pixels,
    })
}
