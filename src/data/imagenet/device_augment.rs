//! `data.augment = "gpu"`: crop, resize, flip, normalise and lay out a batch on the device, after
//! the hand-off's copy (on its stream).
//!
//! The host picks each sample's crop box and flip exactly as for the CPU path
//! ([`super::loader`]); the batch's decoded regions arrive **ragged**: back to back in one u8
//! arena, each region as large as its own crop needs (no padding to the batch's largest), the
//! engine-decoded ones written there by nvJPEG on the device, the CPU-decoded ones copied in
//! after them ([`RaggedLayout`]). [`DeviceAugment::apply_ragged`] reads each image from its own
//! place (offset, width, height, box, flip) and writes the normalised fp16/bf16/fp32
//! channels-last batch directly: two kernels on a GPU (`shim/ragged_resize.cu`, compiled with
//! NVRTC), the same per-pixel functions in loops on the CPU (the twin of CPU runs and tests).
//!
//! The resampling is the CPU path's: the bilinear (triangle) filter widened by the downscale
//! factor, as PIL and fast_image_resize do it (antialiased), so the two differ only by rounding.
//! [`DeviceAugment::apply_padded`] is the earlier formulation of the same op over regions padded
//! to the largest (two batched matmuls with per-image weight matrices), kept as the reference the
//! ragged kernels are checked against.

use super::cache::{cut_hits, store_fills, CacheJob};
use super::loader::EngineJob;
use super::nvjpeg::DecodeFailure;
use super::region::JpegHeader;
use super::transform::DeviceCrop;
use crate::gpu::transfer::Transfer;
use crate::shim::error::call;
use crate::shim::ragged_resize::{mr_ragged_nvrtc_compile, mr_ragged_resize};
use anyhow::{bail, Result};
use tch::{Device, Kind, Tensor};

/// Values per image in the parameter tensor: region width, region height, crop left, top,
/// width, height, flip (0 or 1).
pub const PARAMS: usize = 7;

/// ImageNet's channel means and standard deviations in u8 units (the reference's
/// `Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])` times 255).
pub const MEAN: [f32; 3] = [0.485 * 255.0, 0.456 * 255.0, 0.406 * 255.0];
pub const STD: [f32; 3] = [0.229 * 255.0, 0.224 * 255.0, 0.225 * 255.0];

/// Values per image in a ragged batch's parameter rows ([`RaggedLayout::params`]): arena
/// offset, region width, height, crop left, top, width, height, flip (0/1), first scratch row.
pub const RAGGED_PARAMS: usize = 9;

/// Where the regions of a ragged batch lie in its arena: back to back in the order of the crops,
/// each `width * height * 3` bytes (interleaved RGB rows of `width * 3` bytes), with the
/// parameter rows the kernels read.
#[derive(Clone, Debug, PartialEq)]
pub struct RaggedLayout {
    /// [`RAGGED_PARAMS`] values per image.
    pub params: Vec<f64>,
    /// Each image's offset in the arena (bytes).
    pub offsets: Vec<usize>,
    /// The arena's size: every region's bytes.
    pub bytes: usize,
    /// The regions' total height (the first pass's rows).
    pub rows: usize,
}

impl RaggedLayout {
    /// The layout of `crops` (an error names an empty region or a box outside its region's
    /// reach).
    pub fn of(crops: &[DeviceCrop]) -> Result<RaggedLayout> {
        let mut l = RaggedLayout {
            params: Vec::with_capacity(crops.len() * RAGGED_PARAMS),
            offsets: Vec::with_capacity(crops.len()),
            bytes: 0,
            rows: 0,
        };
        for (i, c) in crops.iter().enumerate() {
            let b = c.crop;
            if c.width == 0 || c.height == 0 {
                bail!(
                    "device augmentation: image {i} has an empty {}x{} region",
                    c.width,
                    c.height
                );
            }
            if !(b.width > 0.0 && b.height > 0.0 && b.left.is_finite() && b.top.is_finite()) {
                bail!("device augmentation: image {i} has an empty or non-finite crop box {b:?}");
            }
            l.offsets.push(l.bytes);
            l.params.extend_from_slice(&[
                l.bytes as f64,
                c.width as f64,
                c.height as f64,
                b.left,
                b.top,
                b.width,
                b.height,
                if c.flip { 1.0 } else { 0.0 },
                l.rows as f64,
            ]);
            l.bytes += c.width as usize * c.height as usize * 3;
            l.rows += c.height as usize;
        }
        Ok(l)
    }

    /// Images in the batch.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }
}

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

    /// The ragged batch in `arena` (1-d u8 on this op's device, at least `layout.bytes` long) that
    /// `layout` describes, with `params` its parameter rows uploaded (`[n, RAGGED_PARAMS]` f64,
    /// same device): `[n, 3, size, size]` normalised images of the output dtype (channels-last
    /// strides when asked), what the model's forward takes. On a GPU it runs on the current
    /// stream without waiting for the device.
    pub fn apply_ragged(
        &self,
        arena: &Tensor,
        params: &Tensor,
        layout: &RaggedLayout,
        size: i64,
    ) -> Result<Tensor> {
        let n = layout.len() as i64;
        if arena.kind() != Kind::Uint8 || arena.dim() != 1 {
            bail!(
                "device augmentation: an arena of {:?} {:?}, 1-d u8 expected",
                arena.kind(),
                arena.size()
            );
        }
        if (arena.size()[0] as usize) < layout.bytes {
            bail!(
                "device augmentation: an arena of {} bytes for regions of {} bytes",
                arena.size()[0],
                layout.bytes
            );
        }
        if params.size() != [n, RAGGED_PARAMS as i64] || params.kind() != Kind::Double {
            bail!(
                "device augmentation: ragged parameters {:?} of shape {:?} for {n} images, \
                 [{n}, {RAGGED_PARAMS}] f64 expected",
                params.kind(),
                params.size()
            );
        }
        if !(1..=65535).contains(&size) {
            bail!("device augmentation: output size {size} outside 1..65535");
        }
        let code = match self.out {
            Kind::Float => 0,
            Kind::BFloat16 => 1,
            _ => 2,
        };
        let mut out = std::ptr::null_mut();
        // SAFETY: the tensors are live for the call; MEAN and STD hold 3 values; the layout was
        // built from the same crops as the uploaded parameters and the arena holds its bytes
        // (checked above); on success `out` is a new tensor we own.
        call("device augmentation (ragged resize)", |err| unsafe {
            mr_ragged_resize(
                arena.as_ptr(),
                params.as_ptr(),
                layout.rows as i64,
                size,
                MEAN.as_ptr(),
                STD.as_ptr(),
                code,
                &mut out,
                err,
            )
        })?;
        // SAFETY: the shim handed over a new at::Tensor ([n, size, size, 3]).
        let x = unsafe { Tensor::from_ptr(out) }.f_permute([0, 3, 1, 2])?;
        Ok(if self.channels_last {
            x
        } else {
            x.f_contiguous()?
        })
    }

    /// A ragged batch onto the device ([`ragged_arena`]) and through the op
    /// ([`DeviceAugment::apply_ragged`]), on the hand-off's thread and stream (`t`): the model's
    /// input `[n, 3, size, size]`. Only nvJPEG's decode (`engine`) waits for the device (see
    /// [`super::nvjpeg::Nvjpeg::decode_into`]); the hand-off's event marks the
    /// end.
    pub fn ragged_batch(
        &self,
        crops: &[DeviceCrop],
        host: &[u8],
        engine: Option<EngineJob>,
        cache: Option<CacheJob>,
        size: u32,
        t: &Transfer,
    ) -> Result<Tensor> {
        let (arena, layout) = ragged_arena(crops, host, engine, cache, t)?;
        let params = t.tensor(&layout.params, &[layout.len() as i64, RAGGED_PARAMS as i64])?;
        self.apply_ragged(&arena, &params, &layout, size as i64)
    }

    /// The parameter rows of `crops` ([`PARAMS`] values each), for a `[n, PARAMS]` f32 tensor
    /// ([`DeviceAugment::apply_padded`]).
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

    /// The reference formulation ([`DeviceAugment::apply_ragged`] is the op the runs use).
    /// `images`: `[n, H, W, 3]` u8 regions (each at the top left of its slot); `params`:
    /// `[n, PARAMS]` f32 ([`DeviceAugment::params`]), both on this op's device. Returns `[n, 3,
    /// size, size]` normalised images of the output dtype (channels-last strides when asked):
    /// what the model's forward takes.
    pub fn apply_padded(&self, images: &Tensor, params: &Tensor, size: i64) -> Result<Tensor> {
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

/// A ragged batch's arena on `t`'s device, filled on the current stream (the hand-off's: `t`'s
/// stream entered on its thread), with its layout: the arena is allocated there (libtorch's
/// caching allocator, so the arenas of the batches in flight are separate and their memory is
/// reused in stream order), nvJPEG decodes the `engine`'s images into its first places, the
/// host-decoded regions (`host`, back to back) are copied in after them from pinned memory, and
/// the decoded-image cache's hits (the last places) are cut from their stored images on the
/// device; then the cache's fills are stored. Nothing but nvJPEG's decode waits for the device
/// (its call returns once the decode has run, after the work queued before it). When nvJPEG fails
/// on the batch (warned once), its images are decoded on the CPU here instead, into the same
/// places.
pub fn ragged_arena(
    crops: &[DeviceCrop],
    host: &[u8],
    engine: Option<EngineJob>,
    cache: Option<CacheJob>,
    t: &Transfer,
) -> Result<(Tensor, RaggedLayout)> {
    let layout = RaggedLayout::of(crops)?;
    let on_engine = engine.as_ref().map_or(0, |e| e.jpegs.len());
    let hits = cache.as_ref().map_or(0, |c| c.hits.len());
    if on_engine + hits > layout.len() {
        bail!(
            "a batch of {} images has {on_engine} for the JPEG engine and {hits} from the \
             decoded-image cache",
            layout.len()
        );
    }
    let at = |i: usize| layout.offsets.get(i).copied().unwrap_or(layout.bytes);
    let (engine_bytes, host_end) = (at(on_engine), at(layout.len() - hits));
    if host.len() != host_end - engine_bytes {
        bail!(
            "a ragged batch carries {} bytes of host regions where its crops need {}",
            host.len(),
            host_end - engine_bytes
        );
    }
    let engine = engine.filter(|_| on_engine > 0);
    let arena = if engine.is_none() && hits == 0 {
        t.tensor(host, &[host.len() as i64])?
    } else {
        let arena = Tensor::f_empty([layout.bytes as i64], (Kind::Uint8, t.device()))?;
        if let Some(job) = engine {
            engine_into(&arena, &layout, job, engine_bytes, t)?;
        }
        if !host.is_empty() {
            t.copy_into(
                &arena.f_narrow(0, engine_bytes as i64, host.len() as i64)?,
                host,
            )?;
        }
        arena
    };
    if let Some(job) = &cache {
        cut_hits(job, &arena, crops, &layout.offsets, t)?;
        store_fills(job, &arena, crops, &layout.offsets, t)?;
    }
    Ok((arena, layout))
}

/// nvJPEG decodes `engine`'s images into their places at the start of `arena` (`layout`'s
/// first offsets, `engine_bytes` in all), on `t`'s stream; when it fails on the batch (warned
/// once), the CPU decodes them here and they are copied into the same places.
fn engine_into(
    arena: &Tensor,
    layout: &RaggedLayout,
    engine: EngineJob,
    engine_bytes: usize,
    t: &Transfer,
) -> Result<()> {
    let EngineJob { decoder, jpegs } = engine;
    let on_engine = jpegs.len();
    let decoded = match t.stream() {
        Some(stream) => {
            let native = stream.native()?;
            // SAFETY: the arena is this device's memory of layout.bytes, which holds every
            // engine image's place (the layout's offsets); it is written only by this stream's
            // work until the hand-off's event.
            unsafe {
                decoder.decode_into(
                    jpegs,
                    arena.data_ptr() as *mut u8,
                    &layout.offsets[..on_engine],
                    native,
                )
            }
        }
        None => Err(DecodeFailure {
            why: "the JPEG engine decodes on a CUDA device only".to_string(),
            jpegs,
        }),
    };
    let Err(failed) = decoded else {
        return Ok(());
    };
    crate::util::logging::warn_once(&format!(
        "nvJPEG failed on a batch ({}); decoding such batches on the CPU",
        failed.why
    ));
    let mut pixels = Vec::with_capacity(engine_bytes);
    for (bytes, plan) in &failed.jpegs {
        let want = plan.width as usize * plan.height as usize * 3;
        match JpegHeader::read(bytes).and_then(|h| h.decode(plan)) {
            Ok(img) if img.pixels.len() == want => pixels.extend_from_slice(&img.pixels),
            // the engine took it, the CPU decoder cannot: a black image (no panic, the batch
            // keeps its shape)
            _ => pixels.resize(pixels.len() + want, 0),
        }
    }
    t.copy_into(&arena.f_narrow(0, 0, engine_bytes as i64)?, &pixels)
}

/// Compiles the ragged kernels (`shim/ragged_resize.cu`) with NVRTC loaded from `nvrtc` for
/// `arch` (`sm_XY`: a CUBIN, `compute_XY`: PTX); returns the binary's size, after checking that
/// every kernel the host launches is in it. Needs no GPU: CI uses it to catch errors in the
/// kernel source.
pub fn nvrtc_compile(nvrtc: &std::path::Path, arch: &str) -> Result<usize> {
    let path = std::ffi::CString::new(nvrtc.to_string_lossy().as_bytes())?;
    let arch_c = std::ffi::CString::new(arch)?;
    let mut size = 0usize;
    // SAFETY: valid C strings and out-pointers for the call.
    call("", |err| unsafe {
        mr_ragged_nvrtc_compile(path.as_ptr(), arch_c.as_ptr(), &mut size, err)
    })?;
    Ok(size)
}

/// Undo the normalisation of [`DeviceAugment::apply_ragged`]'s output: `[n, size, size, 3]` f32 pixel
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
            let out = denormalize(&aug.apply_padded(&images, &p, 4).unwrap()).unwrap();
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
        let e = aug.apply_padded(&images, &p, 4).unwrap_err().to_string();
        assert!(e.contains("parameters of shape"), "{e}");
        let e = aug
            .apply_padded(&images.to_kind(Kind::Float), &p, 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("u8 [n, h, w, 3]"), "{e}");
        assert!(DeviceAugment::new(Device::Cpu, Kind::Int64, false).is_err());
    }
}
