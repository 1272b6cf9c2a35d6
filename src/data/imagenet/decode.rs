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

/// The most pixels an image may have: PIL's decompression-bomb limit (twice
/// `Image.MAX_IMAGE_PIXELS`), past which torchvision's ImageFolder refuses an image too. A
/// header declaring more (60,000 x 60,000, or 32,000 x 32,000 over a few kB of data) is damaged
/// or not a training image: decoding it whole would take gigabytes and minutes per image.
pub const MAX_PIXELS: u64 = 178_956_970;

/// The refusal of a `width` x `height` header: None when it is within [`MAX_PIXELS`] and both
/// sides within 1..=32768.
pub fn check_dimensions(width: u32, height: u32) -> Option<String> {
    let pixels = width as u64 * height as u64;
    if width == 0 || height == 0 || width > 1 << 15 || height > 1 << 15 {
        Some(format!("JPEG of {width}x{height} pixels is out of range"))
    } else if pixels > MAX_PIXELS {
        Some(format!(
            "JPEG of {width}x{height} pixels ({:.0} megapixels) is over the {:.0}-megapixel \
             limit (PIL's decompression-bomb limit): a damaged header, or an image to scale \
             down",
            pixels as f64 / 1e6,
            MAX_PIXELS as f64 / 1e6
        ))
    } else {
        None
    }
}

/// The image format `bytes` begin with, when it is one that is not JPEG (ImageNet's train set
/// holds a PNG and other sets hold more, named `.JPEG`).
fn other_format(bytes: &[u8]) -> Option<&'static str> {
    const MAGIC: [(&[u8], &str); 6] = [
        (b"\x89PNG", "PNG"),
        (b"GIF8", "GIF"),
        (b"BM", "BMP"),
        (b"II*\0", "TIFF"),
        (b"MM\0*", "TIFF"),
        (b"RIFF", "WebP"),
    ];
    MAGIC
        .iter()
        .find(|(magic, _)| bytes.starts_with(magic))
        .map(|&(_, name)| name)
}

/// Why `bytes` are not a decodable JPEG: the decoder's `detail`, or, for a file of another
/// image format, that format and what to do.
pub fn not_decodable(bytes: &[u8], detail: &str) -> String {
    match other_format(bytes) {
        Some(format) => format!(
            "not a decodable JPEG: a {format} image named like a JPEG (this pipeline decodes \
             JPEG only): convert it to JPEG, or remove it"
        ),
        None => format!("not a decodable JPEG: {detail}"),
    }
}

/// Decode a JPEG file's bytes to RGB (grayscale and CMYK inputs are converted).
/// Truncated or corrupt data is an error, as it is for PIL; so is a header over
/// [`MAX_PIXELS`], found before anything is decoded.
pub fn decode_jpeg(bytes: &[u8]) -> Result<RgbImage, String> {
    let options = DecoderOptions::default()
        .jpeg_set_out_colorspace(ColorSpace::RGB)
        .set_strict_mode(true)
        .set_max_width(1 << 15)
        .set_max_height(1 << 15);
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    decoder
        .decode_headers()
        .map_err(|e| not_decodable(bytes, &format!("{e:?}")))?;
    if let Some(info) = decoder.info() {
        if let Some(refusal) = check_dimensions(info.width as u32, info.height as u32) {
            return Err(refusal);
        }
    }
    let pixels = decoder
        .decode()
        .map_err(|e| not_decodable(bytes, &format!("{e:?}")))?;
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
