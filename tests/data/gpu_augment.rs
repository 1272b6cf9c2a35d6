//! `data.augment = "gpu"`: the ragged op's CPU twin (`data::imagenet::device_augment`, the same
//! per-pixel functions the GPU kernels run, over regions back to back without padding) against
//! the CPU path (u8 crops from fast_image_resize) over epochs of the loader's own boxes and
//! flips, at the training crop and the eval resize + center crop, and against the earlier padded
//! formulation; controls with wrong boxes that must fail the same checks; batches mixing
//! baseline, progressive, grayscale, CMYK and corrupt JPEGs.
#![cfg(feature = "torch")]

use crate::common;
use mlperf_run::data::imagenet::device_augment::{
    denormalize, nvrtc_compile, DeviceAugment, PARAMS,
};
use mlperf_run::data::imagenet::{Batch, DeviceCrop, ImageFolder, Loader, LoaderConfig};
use mlperf_run::data::synth_imagenet::{write_synth_imagenet, SizeDist, SynthSpec};
use mlperf_run::gpu::transfer::Transfer;
use tch::{Device, Kind, Tensor};

/// A synth-imagenet train or val split shaped like ImageNet's (about 400x350 on average).
fn imagenet_like(per_class: usize) -> (tempfile::TempDir, ImageFolder, ImageFolder) {
    imagenet_shaped(per_class, per_class / 2, 23)
}

/// Two classes of `per_class` training and `val_per_class` validation JPEGs drawn like
/// ImageNet's sizes (200-600 px), from `seed`.
pub fn imagenet_shaped(
    per_class: usize,
    val_per_class: usize,
    seed: u64,
) -> (tempfile::TempDir, ImageFolder, ImageFolder) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("set");
    let spec = SynthSpec {
        classes: 2,
        per_class,
        val_per_class,
        seed,
        min_size: 200,
        max_size: 600,
        quality: 90,
        sizes: SizeDist::Imagenet,
    };
    write_synth_imagenet(&root, &spec, false).unwrap();
    let train = ImageFolder::open(&root.join("train")).unwrap();
    let val = ImageFolder::open(&root.join("val")).unwrap();
    (dir, train, val)
}

/// A loader of `c`'s settings with the crops resized on the "device" (ragged batches).
fn device_augmented(folder: &ImageFolder, c: LoaderConfig) -> Loader {
    Loader::new(
        folder,
        LoaderConfig {
            device_augment: true,
            ..c
        },
    )
    .unwrap()
}

fn batches(loader: &Loader, epoch: u64, size: u32) -> Vec<Batch> {
    loader
        .epoch(epoch, size)
        .collect::<anyhow::Result<Vec<_>>>()
        .unwrap()
}

/// The ragged twin's output for a device-augmented batch (with `crops` in place of the batch's
/// own), back in pixel values: `[n, size, size, 3]`.
fn twin(b: &Batch, crops: &[DeviceCrop]) -> Tensor {
    let n = b.len() as i64;
    assert_eq!((b.width, b.height), (0, 0), "a ragged batch");
    let aug = DeviceAugment::new(Device::Cpu, Kind::Float, true).unwrap();
    let t = Transfer::new(Device::Cpu).unwrap();
    let out = aug
        .ragged_batch(
            crops,
            &b.images,
            b.engine.clone(),
            b.cache.clone(),
            b.size,
            &t,
        )
        .unwrap();
    assert_eq!(out.size(), [n, 3, b.size as i64, b.size as i64]);
    denormalize(&out).unwrap()
}

/// The padded formulation's output for the same batch (`compute`: its matmuls' dtype, fp16 as on
/// a GPU): the regions copied into slots of the largest, then `apply_padded`.
fn padded(b: &Batch, compute: Kind, crops: &[DeviceCrop]) -> Tensor {
    let n = b.len();
    let w = crops.iter().map(|c| c.width).max().unwrap() as usize;
    let h = crops.iter().map(|c| c.height).max().unwrap() as usize;
    let mut images = vec![0u8; n * h * w * 3];
    let mut at = 0;
    for (i, c) in crops.iter().enumerate() {
        let row = c.width as usize * 3;
        for y in 0..c.height as usize {
            let dst = (i * h + y) * w * 3;
            images[dst..dst + row].copy_from_slice(&b.images[at..at + row]);
            at += row;
        }
    }
    assert_eq!(at, b.images.len());
    let images = Tensor::from_slice(&images).view([n as i64, h as i64, w as i64, 3]);
    let params = Tensor::from_slice(&DeviceAugment::params(crops)).view([n as i64, PARAMS as i64]);
    let aug = DeviceAugment::new(Device::Cpu, Kind::Float, true)
        .unwrap()
        .with_compute(compute);
    denormalize(&aug.apply_padded(&images, &params, b.size as i64).unwrap()).unwrap()
}

/// PSNR in dB of one twin image (f32 pixel values) against the CPU path's u8 crop.
fn psnr(twin: &Tensor, cpu: &[u8]) -> f64 {
    let reference = Tensor::from_slice(cpu)
        .to_kind(Kind::Float)
        .view(twin.size().as_slice());
    psnr_of(twin, &reference)
}

/// PSNR in dB of two images of pixel values.
fn psnr_of(a: &Tensor, reference: &Tensor) -> f64 {
    let mse = (a - reference)
        .square()
        .mean(Kind::Double)
        .double_value(&[]);
    10.0 * (255.0f64 * 255.0 / mse.max(1e-12)).log10()
}

/// Per-image PSNR of the ragged twin on the GPU-mode batches against the CPU-mode batches of
/// the same loader settings; `tamper` may change the boxes before the twin runs (the control).
fn compare(
    folder: &ImageFolder,
    c: LoaderConfig,
    epochs: std::ops::Range<u64>,
    size: u32,
    tamper: impl Fn(&mut DeviceCrop),
) -> Vec<f64> {
    let cpu = Loader::new(folder, c.clone()).unwrap();
    let gpu = device_augmented(folder, c);
    let mut scores = Vec::new();
    for epoch in epochs {
        let (a, b) = (batches(&cpu, epoch, size), batches(&gpu, epoch, size));
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((&x.indices, &x.labels), (&y.indices, &y.labels));
            assert!(x.crops.is_empty());
            assert_eq!(y.crops.len(), y.len());
            assert_eq!(y.size, size);
            let mut crops = y.crops.clone();
            crops.iter_mut().for_each(&tamper);
            let out = twin(y, &crops);
            for i in 0..x.len() {
                scores.push(psnr(&out.get(i as i64), x.image(i)));
            }
        }
    }
    scores
}

/// Per-image PSNR of the ragged twin against the padded formulation on the same GPU-mode
/// batches (the padded op's boxes tampered with by `tamper`, the control).
fn ragged_vs_padded(
    folder: &ImageFolder,
    c: LoaderConfig,
    size: u32,
    compute: Kind,
    tamper: impl Fn(&mut DeviceCrop),
) -> Vec<f64> {
    let gpu = device_augmented(folder, c);
    let mut scores = Vec::new();
    for b in batches(&gpu, 0, size) {
        let mut crops = b.crops.clone();
        crops.iter_mut().for_each(&tamper);
        let (r, p) = (twin(&b, &b.crops), padded(&b, compute, &crops));
        for i in 0..b.len() as i64 {
            scores.push(psnr_of(&r.get(i), &p.get(i)));
        }
    }
    scores
}

fn summary(what: &str, scores: &[f64]) -> (f64, f64) {
    let worst = scores.iter().cloned().fold(f64::INFINITY, f64::min);
    let mean = scores.iter().sum::<f64>() / scores.len() as f64;
    eprintln!(
        "{what}: {} images, worst PSNR {worst:.1} dB, mean {mean:.1} dB",
        scores.len()
    );
    (worst, mean)
}

#[test]
fn gpu_augment_twin_matches_the_cpu_path_over_epochs_of_boxes_flips_and_both_sizes() {
    let (_dir, train, val) = imagenet_like(12);
    let train_cfg = LoaderConfig {
        threads: 2,
        drop_last: false,
        ..LoaderConfig::train(8, 31)
    };
    // training: random-resized crops (area 5-100%, so up- and downscaling, DCT scales 1/1 to
    // 1/2 at 224) and flips, two epochs of boxes, at 224 and at a small size (more downscaling)
    let mut flips = 0;
    let probe = Loader::new(&train, train_cfg.clone()).unwrap();
    for b in batches(&device_augmented(&train, train_cfg.clone()), 0, 224) {
        flips += b.crops.iter().filter(|c| c.flip).count();
    }
    assert!(flips > 0 && flips < train.len(), "{flips} flips");
    drop(probe);
    for size in [224, 64] {
        let s = compare(&train, train_cfg.clone(), 0..2, size, |_| {});
        let (worst, _) = summary(&format!("train {size} px, ragged twin"), &s);
        assert!(worst >= 30.0, "train {size}: worst PSNR {worst:.1} dB");
    }
    // eval: resize the short side to 256, center crop 224 (a fractional box)
    let s = compare(&val, LoaderConfig::eval(5), 0..1, 224, |_| {});
    let (worst, _) = summary("eval 256 -> 224", &s);
    assert!(worst >= 30.0, "eval: worst PSNR {worst:.1} dB");

    // The control: the same check with each box moved by a fifth of its size (or the flip
    // dropped) must fail.
    let shifted = compare(&train, train_cfg.clone(), 0..1, 224, |c| {
        c.crop.left += c.crop.width / 5.0;
        c.crop.top -= c.crop.height / 5.0;
    });
    let (worst, mean) = summary("control: boxes shifted", &shifted);
    assert!(
        worst < 30.0 && mean < 30.0,
        "shifted boxes still pass: {worst:.1} / {mean:.1} dB"
    );
    let unflipped = compare(&train, train_cfg, 0..1, 224, |c| c.flip = !c.flip);
    let (worst, _) = summary("control: flips inverted", &unflipped);
    assert!(worst < 30.0, "inverted flips still pass: {worst:.1} dB");
}

/// The ragged kernels compute what the padded formulation computed (same filter, same boxes):
/// equal up to fp32 rounding (>= 50 dB on every image, training boxes with flips and eval's
/// centre crop); the padded op with the GPU's fp16 matmuls stays above 40 dB; a control with the
/// padded op's boxes shifted by one source pixel must fail the 50 dB bar.
#[test]
fn the_ragged_kernels_equal_the_padded_op_they_replace() {
    let (_dir, train, val) = imagenet_like(8);
    let train_cfg = LoaderConfig {
        threads: 2,
        drop_last: false,
        ..LoaderConfig::train(8, 7)
    };
    for size in [224, 64] {
        let s = ragged_vs_padded(&train, train_cfg.clone(), size, Kind::Float, |_| {});
        let (worst, _) = summary(&format!("ragged vs padded, train {size} px"), &s);
        assert!(worst >= 50.0, "train {size}: worst {worst:.1} dB");
    }
    let s = ragged_vs_padded(&val, LoaderConfig::eval(5), 224, Kind::Float, |_| {});
    let (worst, _) = summary("ragged vs padded, eval", &s);
    assert!(worst >= 50.0, "eval: worst {worst:.1} dB");
    let s = ragged_vs_padded(&train, train_cfg.clone(), 224, Kind::Half, |_| {});
    let (worst, _) = summary("ragged vs padded with fp16 matmuls", &s);
    assert!(worst >= 40.0, "fp16: worst {worst:.1} dB");
    let s = ragged_vs_padded(&train, train_cfg, 224, Kind::Float, |c| c.crop.left += 1.0);
    let (worst, _) = summary("control: padded boxes moved by a pixel", &s);
    assert!(worst < 50.0, "a moved box still equals: {worst:.1} dB");
}

/// A corrupt file in a device-augmented batch is skipped and named as on the CPU path: the batch
/// comes out one image (and one crop box) short, the rest back to back.
#[test]
fn gpu_augment_batches_skip_and_name_corrupt_files() {
    let (_dir, train, _) = imagenet_like(4);
    let bad = train.samples[0].path.clone();
    std::fs::write(&bad, b"not a JPEG\n").unwrap();
    let loader = Loader::new(
        &train,
        LoaderConfig {
            device_augment: true,
            drop_last: false,
            max_bad_fraction: 0.5,
            ..LoaderConfig::eval(train.len())
        },
    )
    .unwrap();
    let mut epoch = loader.epoch(0, 64);
    let b = epoch.next().unwrap().unwrap();
    assert_eq!(b.len(), train.len() - 1);
    assert_eq!(b.crops.len(), b.len());
    assert!(!b.indices.contains(&0));
    assert_eq!(epoch.bad_images().len(), 1);
    assert_eq!(epoch.bad_images()[0].path, bad);
    // ragged: the regions back to back, each its own size, no padding
    let region_bytes: usize = b
        .crops
        .iter()
        .map(|c| c.width as usize * c.height as usize * 3)
        .sum();
    assert_eq!(b.images.len(), region_bytes);
    let out = twin(&b, &b.crops);
    assert_eq!(out.size(), [b.len() as i64, 64, 64, 3]);
}

/// One `w` x `h` test picture (smooth gradients and a bright square, so crops differ) as JPEG
/// bytes of `kind`: baseline RGB, progressive RGB, grayscale or CMYK.
fn picture(kind: &str, w: u16, h: u16, seed: u8) -> Vec<u8> {
    use jpeg_encoder::{ColorType, Encoder};
    let (w_, h_) = (w as usize, h as usize);
    let rgb: Vec<u8> = (0..h_ * w_)
        .flat_map(|k| {
            let (x, y) = (k % w_, k / w_);
            let square = (x / 40 + y / 40) % 3 == 0;
            let v = |a: usize| ((a * 255 / w_.max(h_)) as u8).wrapping_add(seed);
            if square {
                [250, 240, 30]
            } else {
                [v(x), v(y), v(x + y)]
            }
        })
        .collect();
    let mut out = Vec::new();
    let mut e = Encoder::new(&mut out, 90);
    match kind {
        "baseline" => e.encode(&rgb, w, h, ColorType::Rgb),
        "progressive" => {
            e.set_progressive(true);
            e.encode(&rgb, w, h, ColorType::Rgb)
        }
        "grayscale" => {
            let luma: Vec<u8> = rgb.chunks(3).map(|p| p[1]).collect();
            e.encode(&luma, w, h, ColorType::Luma)
        }
        "cmyk" => {
            let cmyk: Vec<u8> = rgb
                .chunks(3)
                .flat_map(|p| [255 - p[0], 255 - p[1], 255 - p[2], 0])
                .collect();
            e.encode(&cmyk, w, h, ColorType::Cmyk)
        }
        other => panic!("no picture kind {other}"),
    }
    .unwrap();
    out
}

/// A batch mixing baseline, progressive, grayscale and CMYK JPEGs with a corrupt one, through the
/// device-augmented path (ragged, the CPU twin: no JPEG engine here; the engine's share is
/// checked on a GPU by scripts/bench_gpu.sh part e's PSNR check): every good image is in the
/// batch and equals the CPU path's crop (>= 30 dB), the corrupt one is counted and named, and
/// nothing else is lost.
#[test]
fn a_batch_of_mixed_jpeg_kinds_and_a_corrupt_file_loses_only_the_corrupt_one() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mixed");
    let kinds = ["baseline", "progressive", "grayscale", "cmyk"];
    for (c, class) in ["a", "b"].iter().enumerate() {
        std::fs::create_dir_all(root.join(class)).unwrap();
        for (k, kind) in kinds.iter().enumerate() {
            let (w, h) = (180 + 37 * k as u16, 150 + 23 * c as u16);
            let bytes = picture(kind, w, h, (10 * k + c) as u8);
            std::fs::write(root.join(class).join(format!("{kind}.JPEG")), bytes).unwrap();
        }
    }
    let corrupt = root.join("b").join("truncated.JPEG");
    let good = picture("baseline", 200, 160, 3);
    std::fs::write(&corrupt, &good[..good.len() / 2]).unwrap();
    let folder = ImageFolder::open(&root).unwrap();
    assert_eq!(folder.len(), 9);
    for train in [true, false] {
        let c = LoaderConfig {
            threads: 2,
            drop_last: false,
            max_bad_fraction: 0.5,
            ..if train {
                LoaderConfig::train(9, 5)
            } else {
                LoaderConfig::eval(9)
            }
        };
        let cpu = Loader::new(&folder, c.clone()).unwrap();
        let gpu = device_augmented(&folder, c);
        let mut epoch = gpu.epoch(0, 64);
        let b = epoch.next().unwrap().unwrap();
        assert!(epoch.next().is_none());
        assert_eq!(b.len(), 8, "every good image is trained");
        assert_eq!(epoch.bad_images().len(), 1);
        assert_eq!(epoch.bad_images()[0].path, corrupt);
        assert!(
            epoch.bad_images()[0].reason.contains("end"),
            "{}",
            epoch.bad_images()[0].reason
        );
        let reference = cpu.epoch(0, 64).next().unwrap().unwrap();
        assert_eq!(reference.indices, b.indices);
        let out = twin(&b, &b.crops);
        let scores: Vec<f64> = (0..b.len())
            .map(|i| psnr(&out.get(i as i64), reference.image(i)))
            .collect();
        let (worst, _) = summary(
            &format!("mixed JPEG kinds, {}", if train { "train" } else { "eval" }),
            &scores,
        );
        assert!(worst >= 30.0, "worst {worst:.1} dB");
    }
}

/// The GPU kernels' text compiles with NVRTC for Ampere and Hopper (no GPU needed: the torch
/// wheel's libnvrtc), with every kernel the host launches in the output; NVRTC's own errors come
/// back as errors.
#[test]
fn the_ragged_kernels_compile_with_nvrtc_for_sm80_and_sm90() {
    let Some(nvrtc) = common::venv_nvrtc() else {
        eprintln!(
            "SKIP the_ragged_kernels_compile_with_nvrtc_for_sm80_and_sm90: no libnvrtc.so.13 in \
             the torch venv (a CPU-only torch?); set MLPERF_RUN_NVRTC=/path/to/libnvrtc.so"
        );
        assert!(!common::required(), "CI has the torch venv's NVRTC");
        return;
    };
    for arch in ["compute_80", "compute_90", "sm_80", "sm_90"] {
        let size = nvrtc_compile(&nvrtc, arch).unwrap_or_else(|e| panic!("{arch}: {e:#}"));
        assert!(size > 1000, "{arch}: a {size}-byte binary");
    }
    let msg = format!("{:#}", nvrtc_compile(&nvrtc, "sm_1").unwrap_err());
    assert!(msg.contains("NVRTC"), "{msg}");
}
