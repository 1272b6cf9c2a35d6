//! `data.gpu_cache_mb`: the decoded-image cache (`data::imagenet::cache`), through the device
//! augmentation's CPU twin (the cache's tensors on `Device::Cpu`, the same code a GPU run runs
//! with its device): two epochs with the cache on hit every image of the second, report the hit
//! rate right, and give the uncached loader's batches up to rounding (the uncached region
//! decoder may use DCT scaling; a cached crop is cut from the whole image at full scale), with
//! controls (boxes moved, flips inverted) that must fail the same bar; a budget smaller than
//! the set stores only what fits and never exceeds it; bad values of the key are refused,
//! naming it.
#![cfg(feature = "torch")]

use mlperf_run::data::imagenet::device_augment::{denormalize, DeviceAugment};
use mlperf_run::data::imagenet::{
    Batch, CacheStats, DeviceCrop, ImageFolder, JpegHeader, Loader, LoaderConfig,
};
use mlperf_run::gpu::transfer::Transfer;
use mlperf_run::rules::Division;
use mlperf_run::train::resnet::config::ResnetRunConfig;
use std::collections::HashMap;
use tch::{Device, Kind, Tensor};

/// PSNR (dB) below which a cached crop is not the uncached one.
const BAR: f64 = 30.0;

/// A synth-imagenet train split shaped like ImageNet's (200-600 px, about 400x350).
fn imagenet_like(per_class: usize) -> (tempfile::TempDir, ImageFolder) {
    let (dir, train, _) = crate::gpu_augment::imagenet_shaped(per_class, 1, 41);
    (dir, train)
}

/// A device-augmented training loader with a cache of `cache_bytes` (0: none).
fn loader(folder: &ImageFolder, cache_bytes: u64) -> Loader {
    let c = LoaderConfig {
        threads: 2,
        device_augment: true,
        cache_bytes,
        ..LoaderConfig::train(8, 7)
    };
    Loader::new(folder, c).unwrap()
}

/// One epoch through the hand-off's arena and the twin (which stores the cache's fills), each
/// batch's crops changed by `tamper` first: every image by sample index, in pixel values
/// `[size, size, 3]`; and the batches.
fn epoch(
    loader: &Loader,
    e: u64,
    size: u32,
    tamper: &dyn Fn(&Batch, &mut [DeviceCrop]),
) -> (HashMap<usize, Tensor>, Vec<Batch>) {
    let aug = DeviceAugment::new(Device::Cpu, Kind::Float, true).unwrap();
    let t = Transfer::new(Device::Cpu).unwrap();
    let mut images = HashMap::new();
    let mut batches = Vec::new();
    for b in loader.epoch(e, size) {
        let b = b.unwrap();
        let mut crops = b.crops.clone();
        tamper(&b, &mut crops);
        let x = aug
            .ragged_batch(&crops, &b.images, None, b.cache.clone(), size, &t)
            .unwrap();
        let x = denormalize(&x).unwrap();
        for (k, &i) in b.indices.iter().enumerate() {
            images.insert(i, x.get(k as i64));
        }
        if let Some(stats) = loader.cache_stats() {
            let budget = loader.config().cache_bytes;
            assert!(stats.bytes <= budget, "over the budget {budget}: {stats:?}");
        }
        batches.push(b);
    }
    (images, batches)
}

fn untouched(_: &Batch, _: &mut [DeviceCrop]) {}

/// The worst per-image PSNR of `a` against `reference` (the same samples).
fn worst_psnr(what: &str, a: &HashMap<usize, Tensor>, reference: &HashMap<usize, Tensor>) -> f64 {
    assert_eq!(a.len(), reference.len(), "{what}: other samples");
    let mut scores = Vec::new();
    for (i, x) in a {
        let mse = (x - &reference[i])
            .square()
            .mean(Kind::Double)
            .double_value(&[]);
        scores.push(10.0 * (255.0f64 * 255.0 / mse.max(1e-12)).log10());
    }
    let worst = scores.iter().cloned().fold(f64::INFINITY, f64::min);
    let mean = scores.iter().sum::<f64>() / scores.len() as f64;
    eprintln!(
        "{what}: {} images, worst PSNR {worst:.1} dB, mean {mean:.1} dB",
        scores.len()
    );
    worst
}

/// The cached images' crops cut at the wrong place or mirrored the wrong way (only the hits:
/// the batch's last `hits` crops).
fn tamper_hits(b: &Batch, crops: &mut [DeviceCrop], f: fn(&mut DeviceCrop)) {
    let hits = b.cache.as_ref().map_or(0, |c| c.hits.len());
    let n = crops.len();
    crops[n - hits..].iter_mut().for_each(f);
}

fn stats(l: &Loader) -> CacheStats {
    l.cache_stats().expect("a loader with a cache")
}

#[test]
fn two_epochs_with_the_cache_hit_every_image_of_the_second_and_match_the_uncached_batches() {
    let (_dir, train) = imagenet_like(16);
    let n = train.len() as u64;
    for size in [224, 64] {
        let cached = loader(&train, 256 << 20);
        let plain = loader(&train, 0);
        assert!(plain.cache_stats().is_none());
        // epoch 0 decodes every image whole and stores it (the budget holds the set)
        let (a, batches) = epoch(&cached, 0, size, &untouched);
        let s = stats(&cached);
        assert_eq!((s.lookups, s.hits, s.images), (n, 0, n), "{s:?}");
        let fills: usize = batches
            .iter()
            .map(|b| b.cache.as_ref().map_or(0, |c| c.fills.len()))
            .sum();
        assert_eq!(fills as u64, n);
        let whole: u64 = pixel_bytes(&train).iter().sum();
        assert_eq!(s.bytes, whole, "the stored bytes are the whole images'");
        let (b, _) = epoch(&plain, 0, size, &untouched);
        let worst = worst_psnr(&format!("{size} px, epoch 0 (fills)"), &a, &b);
        assert!(worst >= BAR, "{size} px epoch 0: {worst:.1} dB");

        // epoch 1 cuts every crop from the cache: nothing read or decoded
        let (a, batches) = epoch(&cached, 1, size, &untouched);
        for b in &batches {
            assert!(b.images.is_empty(), "a host region in an all-cached batch");
            assert_eq!(b.cache.as_ref().unwrap().hits.len(), b.len());
        }
        let s = stats(&cached);
        assert_eq!((s.lookups, s.hits, s.images), (2 * n, n, n), "{s:?}");
        assert_eq!(s.hit_rate(), 0.5);
        assert!(
            s.describe()
                .contains(&format!("{n} of {} lookups hit (50.0%)", 2 * n)),
            "{}",
            s.describe()
        );
        let (b, _) = epoch(&plain, 1, size, &untouched);
        let worst = worst_psnr(&format!("{size} px, epoch 1 (hits)"), &a, &b);
        assert!(worst >= BAR, "{size} px epoch 1: {worst:.1} dB");

        // the controls: hits with their boxes moved by a fifth, or their flips inverted
        let moved = |b: &Batch, c: &mut [DeviceCrop]| {
            tamper_hits(b, c, |c| {
                c.crop.left += c.crop.width / 5.0;
                c.crop.top -= c.crop.height / 5.0;
            })
        };
        let (m, _) = epoch(&cached, 1, size, &moved);
        let worst = worst_psnr(&format!("control {size} px: boxes moved"), &m, &b);
        assert!(worst < BAR, "moved boxes still pass: {worst:.1} dB");
        let flipped = |b: &Batch, c: &mut [DeviceCrop]| tamper_hits(b, c, |c| c.flip = !c.flip);
        let (f, _) = epoch(&cached, 1, size, &flipped);
        let worst = worst_psnr(&format!("control {size} px: flips inverted"), &f, &b);
        assert!(worst < BAR, "inverted flips still pass: {worst:.1} dB");
    }
}

#[test]
fn a_budget_smaller_than_the_set_stores_only_what_fits() {
    let (_dir, train) = imagenet_like(12);
    let n = train.len() as u64;
    let sizes = pixel_bytes(&train);
    let budget = 1 << 20;
    assert!(
        sizes.iter().sum::<u64>() > 3 * budget,
        "the set must not fit"
    );
    let cached = loader(&train, budget);
    let plain = loader(&train, 0);
    let (a0, _) = epoch(&cached, 0, 64, &untouched);
    let s = stats(&cached);
    assert!(s.images > 0 && s.images < n, "{s:?}");
    assert!(s.bytes <= budget, "{s:?}");
    // greedy: every image left out was larger than what was left when it came
    let (a1, batches) = epoch(&cached, 1, 64, &untouched);
    let stored: Vec<usize> = batches
        .iter()
        .flat_map(|b| b.cache.iter().flat_map(|c| c.hits.iter().map(|h| h.index)))
        .collect();
    assert_eq!(
        stored.len() as u64,
        s.images,
        "every stored image hits in epoch 1"
    );
    assert_eq!(
        stored.iter().map(|&i| sizes[i]).sum::<u64>(),
        s.bytes,
        "the stored bytes are the stored images'"
    );
    for (i, &bytes) in sizes.iter().enumerate() {
        if !stored.contains(&i) {
            assert!(
                bytes > budget - s.bytes,
                "image {i} ({bytes} bytes) would have fit"
            );
        }
    }
    let s1 = stats(&cached);
    assert_eq!(
        (s1.lookups, s1.hits, s1.images, s1.bytes),
        (2 * n, s.images, s.images, s.bytes)
    );
    eprintln!("{}", s1.describe());
    // no more insertions once full, and the batches are still the uncached ones
    let (b0, _) = epoch(&plain, 0, 64, &untouched);
    let (b1, _) = epoch(&plain, 1, 64, &untouched);
    assert!(worst_psnr("partial cache, epoch 0", &a0, &b0) >= BAR);
    assert!(worst_psnr("partial cache, epoch 1", &a1, &b1) >= BAR);
}

#[test]
fn bad_values_of_gpu_cache_mb_are_refused_naming_the_key() {
    let preset = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu_jpeg.toml"),
    )
    .unwrap();
    let with = |lines: &str| {
        assert!(
            preset.contains("decoder = \"cpu\"\n"),
            "the preset's decoder line moved"
        );
        let text = preset.replace(
            "decoder = \"cpu\"\n",
            &format!("decoder = \"cpu\"\n{lines}\n"),
        );
        ResnetRunConfig::parse(&text, Division::Closed).map(|c| c.data.gpu_cache_mb)
    };
    assert_eq!(with("augment = \"gpu\"\ngpu_cache_mb = 64").unwrap(), 64);
    assert_eq!(with("").unwrap(), 0, "off by default");
    for (lines, says) in [
        ("augment = \"gpu\"\ngpu_cache_mb = -1", "must be within 0.."),
        (
            "augment = \"gpu\"\ngpu_cache_mb = 99999999999",
            "must be within 0..",
        ),
        ("gpu_cache_mb = 64", "set data.augment = \"gpu\""),
        ("augment = \"gpu\"\ngpu_cache_mb = 1.5", "gpu_cache_mb"),
        ("augment = \"gpu\"\ngpu_cache_mb = \"12GB\"", "gpu_cache_mb"),
    ] {
        let e = format!("{:#}", with(lines).unwrap_err());
        assert!(
            e.contains("gpu_cache_mb") && e.contains(says),
            "{lines}: {e}"
        );
    }
    // the loader refuses a cache for crops resized on the host too
    let (_dir, train) = imagenet_like(1);
    let c = LoaderConfig {
        cache_bytes: 1 << 20,
        ..LoaderConfig::train(2, 1)
    };
    let e = format!("{:#}", Loader::new(&train, c).err().unwrap());
    assert!(
        e.contains("data.gpu_cache_mb") && e.contains("data.augment"),
        "{e}"
    );
}

/// Each sample's decoded size in bytes (width x height x 3), from its JPEG header.
fn pixel_bytes(train: &ImageFolder) -> Vec<u64> {
    train
        .samples
        .iter()
        .map(|s| {
            let bytes = std::fs::read(&s.path).unwrap();
            let h = JpegHeader::read(&bytes).unwrap();
            h.width as u64 * h.height as u64 * 3
        })
        .collect()
}
