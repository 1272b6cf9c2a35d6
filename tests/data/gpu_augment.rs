//! `data.augment = "gpu"`: the device op's CPU twin (`data::imagenet::device_augment`, the same
//! tensor ops a GPU runs) against the CPU path (u8 crops from fast_image_resize) over epochs of
//! the loader's own boxes and flips, at the training crop and the eval resize + center crop;
//! a control with wrong boxes that must fail the same check.
#![cfg(feature = "torch")]

use mlperf_run::data::imagenet::device_augment::{denormalize, DeviceAugment, PARAMS};
use mlperf_run::data::imagenet::{Batch, DeviceCrop, ImageFolder, Loader, LoaderConfig};
use mlperf_run::data::synth_imagenet::{write_synth_imagenet, SizeDist, SynthSpec};
use tch::{Device, Kind, Tensor};

/// A synth-imagenet train or val split shaped like ImageNet's (about 400x350 on average).
fn imagenet_like(per_class: usize) -> (tempfile::TempDir, ImageFolder, ImageFolder) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("set");
    let spec = SynthSpec {
        classes: 2,
        per_class,
        val_per_class: per_class / 2,
        seed: 23,
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

fn batches(loader: &Loader, epoch: u64, size: u32) -> Vec<Batch> {
    loader
        .epoch(epoch, size)
        .collect::<anyhow::Result<Vec<_>>>()
        .unwrap()
}

/// The twin's output for a device-augmented batch, back in pixel values: `[n, size, size, 3]`.
fn twin(b: &Batch, compute: Kind, crops: &[DeviceCrop]) -> Tensor {
    let n = b.len() as i64;
    let images = Tensor::from_slice(&b.images).view([n, b.height as i64, b.width as i64, 3]);
    let params = Tensor::from_slice(&DeviceAugment::params(crops)).view([n, PARAMS as i64]);
    let aug = DeviceAugment::new(Device::Cpu, Kind::Float, true)
        .unwrap()
        .with_compute(compute);
    let out = aug.apply(&images, &params, b.size as i64).unwrap();
    assert_eq!(out.size(), [n, 3, b.size as i64, b.size as i64]);
    denormalize(&out).unwrap()
}

/// PSNR in dB of one twin image (f32 pixel values) against the CPU path's u8 crop.
fn psnr(twin: &Tensor, cpu: &[u8]) -> f64 {
    let reference = Tensor::from_slice(cpu)
        .to_kind(Kind::Float)
        .view(twin.size().as_slice());
    let mse = (twin - reference)
        .square()
        .mean(Kind::Double)
        .double_value(&[]);
    10.0 * (255.0f64 * 255.0 / mse.max(1e-12)).log10()
}

/// Per-image PSNR of the twin on the GPU-mode batches against the CPU-mode batches of the same
/// loader settings; `tamper` may change the boxes before the twin runs (the control).
fn compare(
    folder: &ImageFolder,
    c: LoaderConfig,
    epochs: std::ops::Range<u64>,
    size: u32,
    compute: Kind,
    tamper: impl Fn(&mut DeviceCrop),
) -> Vec<f64> {
    let cpu = Loader::new(folder, c.clone()).unwrap();
    let gpu = Loader::new(
        folder,
        LoaderConfig {
            device_augment: true,
            ..c
        },
    )
    .unwrap();
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
            let out = twin(y, compute, &crops);
            for i in 0..x.len() {
                scores.push(psnr(&out.get(i as i64), x.image(i)));
            }
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
    for b in batches(
        &Loader::new(
            &train,
            LoaderConfig {
                device_augment: true,
                ..train_cfg.clone()
            },
        )
        .unwrap(),
        0,
        224,
    ) {
        flips += b.crops.iter().filter(|c| c.flip).count();
    }
    assert!(flips > 0 && flips < train.len(), "{flips} flips");
    drop(probe);
    for size in [224, 64] {
        let s = compare(&train, train_cfg.clone(), 0..2, size, Kind::Float, |_| {});
        let (worst, _) = summary(&format!("train {size} px, fp32"), &s);
        assert!(worst >= 30.0, "train {size}: worst PSNR {worst:.1} dB");
    }
    // the GPU's fp16 matmuls, run on the CPU
    let s = compare(&train, train_cfg.clone(), 0..1, 224, Kind::Half, |_| {});
    let (worst, _) = summary("train 224 px, fp16 matmuls", &s);
    assert!(worst >= 30.0, "fp16: worst PSNR {worst:.1} dB");
    // eval: resize the short side to 256, center crop 224 (a fractional box)
    let s = compare(&val, LoaderConfig::eval(5), 0..1, 224, Kind::Float, |_| {});
    let (worst, _) = summary("eval 256 -> 224", &s);
    assert!(worst >= 30.0, "eval: worst PSNR {worst:.1} dB");

    // The control: the same check with each box moved by a fifth of its size (or the flip
    // dropped) must fail.
    let shifted = compare(&train, train_cfg.clone(), 0..1, 224, Kind::Float, |c| {
        c.crop.left += c.crop.width / 5.0;
        c.crop.top -= c.crop.height / 5.0;
    });
    let (worst, mean) = summary("control: boxes shifted", &shifted);
    assert!(
        worst < 30.0 && mean < 30.0,
        "shifted boxes still pass: {worst:.1} / {mean:.1} dB"
    );
    let unflipped = compare(&train, train_cfg, 0..1, 224, Kind::Float, |c| {
        c.flip = !c.flip
    });
    let (worst, _) = summary("control: flips inverted", &unflipped);
    assert!(worst < 30.0, "inverted flips still pass: {worst:.1} dB");
}

/// A corrupt file in a device-augmented batch is skipped and named as on the CPU path: the batch
/// comes out one image (and one crop box) short, the rest padded to its own largest region.
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
    assert_eq!(
        b.images.len(),
        b.len() * b.height as usize * b.width as usize * 3
    );
    let widest = b.crops.iter().map(|c| c.width).max().unwrap();
    let tallest = b.crops.iter().map(|c| c.height).max().unwrap();
    assert_eq!((b.width, b.height), (widest, tallest));
    let out = twin(&b, Kind::Float, &b.crops);
    assert_eq!(out.size(), [b.len() as i64, 64, 64, 3]);
}
