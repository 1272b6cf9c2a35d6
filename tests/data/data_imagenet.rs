//! The ImageNet ImageFolder reader and batch pipeline: listing, shapes, determinism,
//! sharding, corrupt files, eval center crop.

use mlperf_run::data::imagenet::{
    center_crop_box, crop_resize_into, decode_jpeg, plan_region, Batch, Decoder, ImageFolder,
    ImagenetDir, JpegHeader, Loader, LoaderConfig, RegionPlan, RgbImage,
};
use mlperf_run::data::synth_imagenet::{encode_jpeg, write_synth_imagenet, SynthSpec};
use std::collections::BTreeSet;
use std::path::Path;

fn small_spec(classes: usize, per_class: usize) -> SynthSpec {
    SynthSpec {
        classes,
        per_class,
        val_per_class: 2,
        seed: 11,
        min_size: 40,
        max_size: 72,
        quality: 85,
        sizes: Default::default(),
    }
}

/// A synthetic set in a temp dir; returns the dir guard and the train ImageFolder.
fn synth_train(classes: usize, per_class: usize) -> (tempfile::TempDir, ImageFolder) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("set");
    write_synth_imagenet(&root, &small_spec(classes, per_class), false).unwrap();
    let folder = ImageFolder::open(&root.join("train")).unwrap();
    (dir, folder)
}

fn collect(loader: &Loader, epoch: u64, size: u32) -> Vec<Batch> {
    loader
        .epoch(epoch, size)
        .collect::<anyhow::Result<Vec<_>>>()
        .unwrap()
}

fn config(batch: usize, seed: u64, threads: usize) -> LoaderConfig {
    LoaderConfig {
        threads,
        ..LoaderConfig::train(batch, seed)
    }
}

fn write_jpeg(path: &Path, w: u32, h: u32) {
    let image = RgbImage {
        width: w,
        height: h,
        pixels: (0..w * h * 3).map(|i| (i % 251) as u8).collect(),
    };
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, encode_jpeg(&image, 90).unwrap()).unwrap();
}

#[test]
fn image_folder_lists_sorted_classes_and_jpeg_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // Created out of order; torchvision sorts class names.
    write_jpeg(&root.join("n02/b.JPEG"), 8, 8);
    write_jpeg(&root.join("n02/a.jpg"), 8, 8);
    write_jpeg(&root.join("n01/z.jpeg"), 8, 8);
    write_jpeg(&root.join("n10/x.JPG"), 8, 8);
    std::fs::write(root.join("n01/readme.txt"), "not an image").unwrap();
    std::fs::write(root.join("n01/pic.png"), "not a jpeg").unwrap();
    std::fs::write(root.join("labels.txt"), "stray file at the root").unwrap();
    std::fs::create_dir_all(root.join(".cache")).unwrap();

    let folder = ImageFolder::open(root).unwrap();
    assert_eq!(folder.classes, vec!["n01", "n02", "n10"]);
    let listed: Vec<(String, i64)> = folder
        .samples
        .iter()
        .map(|s| {
            (
                s.path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                s.label,
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            ("n01/z.jpeg".into(), 0),
            ("n02/a.jpg".into(), 1),
            ("n02/b.JPEG".into(), 1),
            ("n10/x.JPG".into(), 2)
        ]
    );
}

#[test]
fn image_folder_errors_name_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let err = format!("{:#}", ImageFolder::open(&missing).unwrap_err());
    assert!(
        err.contains(&missing.display().to_string()) && err.contains("does not exist"),
        "{err}"
    );

    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let err = format!("{:#}", ImageFolder::open(&empty).unwrap_err());
    assert!(
        err.contains(&empty.display().to_string()) && err.contains("no class subdirectories"),
        "{err}"
    );

    let class_dir = dir.path().join("noimages/n01");
    std::fs::create_dir_all(&class_dir).unwrap();
    std::fs::write(class_dir.join("a.txt"), "x").unwrap();
    let err = format!(
        "{:#}",
        ImageFolder::open(&dir.path().join("noimages")).unwrap_err()
    );
    assert!(
        err.contains(&class_dir.display().to_string()) && err.contains("no .JPEG"),
        "{err}"
    );

    // train/ and val/ with different classes.
    write_jpeg(&dir.path().join("inet/train/n01/a.JPEG"), 8, 8);
    write_jpeg(&dir.path().join("inet/train/n02/a.JPEG"), 8, 8);
    write_jpeg(&dir.path().join("inet/val/n01/a.JPEG"), 8, 8);
    let err = format!(
        "{:#}",
        ImagenetDir::open(&dir.path().join("inet")).unwrap_err()
    );
    assert!(
        err.contains("train/ has 2 classes and val/ has 1") && err.contains("n02"),
        "{err}"
    );
}

#[test]
fn train_batches_have_the_asked_shape_and_labels() {
    let (_dir, folder) = synth_train(3, 7); // 21 images
    let loader = Loader::new(&folder, config(4, 5, 2)).unwrap();
    assert_eq!(loader.batches_per_epoch(), 5); // drop_last: 21 -> 5 batches of 4
    let batches = collect(&loader, 0, 32);
    assert_eq!(batches.len(), 5);
    for b in &batches {
        assert_eq!((b.len(), b.height, b.width), (4, 32, 32));
        assert_eq!(b.images.len(), 4 * 32 * 32 * 3);
        for (i, &index) in b.indices.iter().enumerate() {
            assert_eq!(b.labels[i], folder.samples[index].label);
        }
    }
    // Progressive resizing: the caller picks each epoch's size.
    let batches = collect(&loader, 1, 24);
    assert!(batches
        .iter()
        .all(|b| b.height == 24 && b.images.len() == 4 * 24 * 24 * 3));
    // An epoch's shuffle is a fresh permutation.
    let order0: Vec<usize> = collect(&loader, 0, 8)
        .iter()
        .flat_map(|b| b.indices.clone())
        .collect();
    let order1: Vec<usize> = collect(&loader, 1, 8)
        .iter()
        .flat_map(|b| b.indices.clone())
        .collect();
    assert_ne!(order0, order1);
}

#[test]
fn train_output_is_deterministic_per_seed_and_independent_of_threads() {
    let (_dir, folder) = synth_train(2, 6);
    let a = collect(&Loader::new(&folder, config(3, 42, 1)).unwrap(), 2, 28);
    let b = collect(&Loader::new(&folder, config(3, 42, 3)).unwrap(), 2, 28);
    assert_eq!(
        a, b,
        "same seed, different thread counts must give identical batches"
    );
    let c = collect(&Loader::new(&folder, config(3, 43, 2)).unwrap(), 2, 28);
    assert_ne!(a, c, "a different seed must change order or augmentation");
    // Same sample, different seed: its augmented pixels differ (not only the order).
    let find = |batches: &[Batch], index: usize| -> Vec<u8> {
        batches
            .iter()
            .find_map(|b| {
                b.indices
                    .iter()
                    .position(|&i| i == index)
                    .map(|p| b.image(p).to_vec())
            })
            .unwrap()
    };
    let common = a[0]
        .indices
        .iter()
        .find(|i| c.iter().any(|b| b.indices.contains(i)))
        .copied()
        .unwrap();
    assert_ne!(find(&a, common), find(&c, common));
}

#[test]
fn eval_is_in_order_keeps_every_sample_and_is_repeatable() {
    let (_dir, folder) = synth_train(2, 5); // 10 images
    let loader = Loader::new(
        &folder,
        LoaderConfig {
            threads: 2,
            ..LoaderConfig::eval(4)
        },
    )
    .unwrap();
    let a = collect(&loader, 0, 20);
    assert_eq!(a.iter().map(Batch::len).collect::<Vec<_>>(), vec![4, 4, 2]);
    let order: Vec<usize> = a.iter().flat_map(|b| b.indices.clone()).collect();
    assert_eq!(order, (0..10).collect::<Vec<_>>());
    assert_eq!(
        a,
        collect(&loader, 7, 20),
        "eval must not depend on the epoch"
    );
}

#[test]
fn shards_are_disjoint_cover_the_epoch_and_have_equal_batch_counts() {
    let (_dir, folder) = synth_train(5, 5); // 25 images
    for drop_last in [true, false] {
        let world = 3;
        let mut all = Vec::new();
        let mut counts = Vec::new();
        for rank in 0..world {
            let cfg = LoaderConfig {
                rank,
                world_size: world,
                drop_last,
                ..config(2, 9, 1)
            };
            let loader = Loader::new(&folder, cfg).unwrap();
            let batches = collect(&loader, 4, 8);
            counts.push(batches.len());
            assert_eq!(batches.len(), loader.batches_per_epoch());
            // The rank's own listing agrees with what it yields.
            let yielded: Vec<usize> = batches.iter().flat_map(|b| b.indices.clone()).collect();
            assert_eq!(yielded, loader.epoch_indices(4)[..yielded.len()]);
            all.extend(yielded);
        }
        let unique: BTreeSet<usize> = all.iter().copied().collect();
        assert_eq!(
            unique.len(),
            all.len(),
            "ranks overlap (drop_last={drop_last})"
        );
        if drop_last {
            // 25 / 3 = 8 per rank, 4 batches of 2 each.
            assert_eq!(counts, vec![4, 4, 4]);
            assert_eq!(all.len(), 24);
        } else {
            // Nothing dropped: 9, 8, 8 samples; batches differ by at most one.
            assert_eq!(unique, (0..25).collect::<BTreeSet<_>>());
            assert_eq!(counts, vec![5, 4, 4]);
        }
    }
}

fn corrupt_folder() -> (tempfile::TempDir, ImageFolder) {
    let (dir, _) = synth_train(2, 5);
    let train = dir.path().join("set/train");
    let good = std::fs::read(train.join("n00000000/n00000000_000000.JPEG")).unwrap();
    std::fs::write(
        train.join("n00000000/truncated.JPEG"),
        &good[..good.len() / 2],
    )
    .unwrap();
    std::fs::write(
        train.join("n00000001/text.JPEG"),
        "this is not a JPEG file\n",
    )
    .unwrap();
    let folder = ImageFolder::open(&train).unwrap();
    assert_eq!(folder.len(), 12);
    (dir, folder)
}

#[test]
fn corrupt_images_are_skipped_and_reported_below_the_limit() {
    let (_dir, folder) = corrupt_folder();
    let cfg = LoaderConfig {
        max_bad_fraction: 0.25,
        drop_last: false,
        ..config(4, 1, 2)
    };
    let loader = Loader::new(&folder, cfg).unwrap();
    let mut it = loader.epoch(0, 16);
    let batches: Vec<Batch> = it.by_ref().collect::<anyhow::Result<_>>().unwrap();
    let mut bad: Vec<String> = it
        .bad_images()
        .iter()
        .map(|b| b.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    bad.sort();
    assert_eq!(bad, vec!["text.JPEG", "truncated.JPEG"]);
    let yielded: usize = batches.iter().map(Batch::len).sum();
    assert_eq!(yielded, 10);
    for b in &batches {
        assert_eq!(b.images.len(), b.len() * 16 * 16 * 3);
        assert!(b
            .indices
            .iter()
            .all(|&i| !folder.samples[i].path.to_string_lossy().contains("t.JPEG")));
    }
}

#[test]
fn corrupt_images_above_the_limit_are_fatal_and_named() {
    let (_dir, folder) = corrupt_folder();
    let cfg = LoaderConfig {
        max_bad_fraction: 0.01,
        drop_last: false,
        ..config(4, 1, 2)
    };
    let loader = Loader::new(&folder, cfg).unwrap();
    let results: Vec<anyhow::Result<Batch>> = loader.epoch(0, 16).collect();
    let err = results
        .iter()
        .find_map(|r| r.as_ref().err())
        .expect("an error past the limit");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("unreadable images") && msg.contains(".JPEG"),
        "{msg}"
    );
    assert!(
        msg.contains("truncated.JPEG") || msg.contains("text.JPEG"),
        "{msg}"
    );
    assert!(
        results.last().unwrap().is_err(),
        "the iterator stops at the error"
    );
}

#[test]
fn truncated_and_non_jpeg_bytes_fail_to_decode() {
    let image = RgbImage {
        width: 64,
        height: 48,
        pixels: (0..64 * 48 * 3).map(|i| (i * 7 % 256) as u8).collect(),
    };
    let jpeg = encode_jpeg(&image, 90).unwrap();
    let decoded = decode_jpeg(&jpeg).unwrap();
    assert_eq!(
        (decoded.width, decoded.height, decoded.pixels.len()),
        (64, 48, 64 * 48 * 3)
    );
    assert!(decode_jpeg(&jpeg[..jpeg.len() / 2]).is_err());
    assert!(decode_jpeg(b"hello").is_err());
}

/// A horizontal and vertical ramp: R = x/2, G = y/2 (so a linear resample is predictable).
fn ramp(width: u32, height: u32) -> RgbImage {
    let mut pixels = Vec::new();
    for y in 0..height {
        for x in 0..width {
            pixels.extend([(x / 2) as u8, (y / 2) as u8, 128]);
        }
    }
    RgbImage {
        width,
        height,
        pixels,
    }
}

#[test]
fn eval_center_crop_takes_the_middle_as_torchvision_does() {
    // 300x200, size 32, ratio 256/224: Resize -> short side 37 (55x37), CenterCrop(32) at
    // left round(11.5)=12, top round(2.5)=2 in the resized image: source box left 65.45,
    // top 10.81, 174.5 x 172.97.
    let image = ramp(300, 200);
    let crop = center_crop_box(300, 200, 32, 256.0 / 224.0);
    assert!((crop.left - 12.0 * 300.0 / 55.0).abs() < 1e-9, "{crop:?}");
    assert!((crop.top - 2.0 * 200.0 / 37.0).abs() < 1e-9, "{crop:?}");
    let mut out = vec![0u8; 32 * 32 * 3];
    crop_resize_into(&image, crop, 32, false, &mut out).unwrap();
    // Interior output pixels sample the source at crop.left + (j + 0.5) * crop.width / 32.
    for i in 4..28usize {
        for j in 4..28usize {
            let sx = crop.left + (j as f64 + 0.5) * crop.width / 32.0;
            let sy = crop.top + (i as f64 + 0.5) * crop.height / 32.0;
            let px = &out[(i * 32 + j) * 3..][..3];
            assert!(
                (px[0] as f64 - (sx - 0.5) / 2.0).abs() <= 1.5,
                "R at ({i},{j}): {} vs {}",
                px[0],
                sx / 2.0
            );
            assert!(
                (px[1] as f64 - (sy - 0.5) / 2.0).abs() <= 1.5,
                "G at ({i},{j}): {} vs {}",
                px[1],
                sy / 2.0
            );
            assert_eq!(px[2], 128);
        }
    }
    // Flip mirrors each row.
    let mut flipped = vec![0u8; 32 * 32 * 3];
    crop_resize_into(&image, crop, 32, true, &mut flipped).unwrap();
    assert_eq!(&flipped[..3], &out[31 * 3..32 * 3]);
}

#[test]
fn eval_loader_center_crops_a_jpeg_with_a_marked_middle() {
    // A 160x120 JPEG: white everywhere except a black border band outside the centre crop
    // region, so an eval crop (of 224/256 of the short side) sees only white, while the full
    // image would include the black band.
    let dir = tempfile::tempdir().unwrap();
    let (w, h) = (160u32, 120u32);
    let mut pixels = Vec::new();
    for y in 0..h {
        for x in 0..w {
            // Eval box for size 56 (resize 64): side 105 source px centred: x 27.5..132.5, y 7.5..112.5.
            let inside = (22..138).contains(&x) && (3..117).contains(&y);
            pixels.extend(if inside { [250, 250, 250] } else { [0, 0, 0] });
        }
    }
    let path = dir.path().join("c/a.JPEG");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        encode_jpeg(
            &RgbImage {
                width: w,
                height: h,
                pixels,
            },
            95,
        )
        .unwrap(),
    )
    .unwrap();
    let folder = ImageFolder::open(dir.path()).unwrap();
    let loader = Loader::new(
        &folder,
        LoaderConfig {
            threads: 1,
            ..LoaderConfig::eval(1)
        },
    )
    .unwrap();
    let batch = collect(&loader, 0, 56).remove(0);
    let min = *batch.images.iter().min().unwrap();
    assert!(min > 200, "eval crop reached the black border (min {min})");
    // Training crops are random and sometimes include the border.
    let train = Loader::new(
        &folder,
        LoaderConfig {
            threads: 1,
            drop_last: false,
            ..LoaderConfig::train(1, 3)
        },
    )
    .unwrap();
    let darkest = (0..20)
        .map(|e| *collect(&train, e, 56)[0].images.iter().min().unwrap())
        .min()
        .unwrap();
    assert!(darkest < 50, "20 random-resized crops never saw the border");
}

#[test]
fn bad_loader_settings_are_refused_with_the_setting_named() {
    let (_dir, folder) = synth_train(1, 2);
    let check = |cfg: LoaderConfig, needle: &str| {
        let err = format!("{:#}", Loader::new(&folder, cfg).err().expect("refused"));
        assert!(err.contains(needle), "{err}");
    };
    check(config(0, 1, 1), "batch size");
    check(config(1, 1, 0), "threads");
    check(
        LoaderConfig {
            rank: 2,
            world_size: 2,
            ..config(1, 1, 1)
        },
        "rank 2",
    );
    let mut bad_crop = config(1, 1, 1);
    bad_crop.crop.scale = (0.5, 0.1);
    check(bad_crop, "crop scale");
    let err = loader_size_zero(&folder);
    assert!(err.contains("image size"), "{err}");
}

fn loader_size_zero(folder: &ImageFolder) -> String {
    let loader = Loader::new(folder, config(1, 1, 1)).unwrap();
    format!("{:#}", loader.epoch(0, 0).next().unwrap().unwrap_err())
}

// ---- The region decoder (libjpeg-turbo, only what the crop needs) against the full path ----

/// Peak signal-to-noise ratio of two u8 images in dB (infinite when equal).
fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mse = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum::<f64>()
        / a.len() as f64;
    10.0 * (255.0f64 * 255.0 / mse).log10()
}

/// A synth-imagenet train split of 300-500 px images (the benchmark's sizes).
fn synth_large(per_class: usize) -> (tempfile::TempDir, ImageFolder) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("set");
    let spec = SynthSpec {
        min_size: 300,
        max_size: 500,
        ..small_spec(2, per_class)
    };
    write_synth_imagenet(&root, &spec, false).unwrap();
    let folder = ImageFolder::open(&root.join("train")).unwrap();
    (dir, folder)
}

fn with_decoder(c: LoaderConfig, decoder: Decoder) -> LoaderConfig {
    LoaderConfig {
        decoder,
        drop_last: false,
        ..c
    }
}

/// Per-image PSNR of the region decoder's batches against the full-decode path's.
fn region_vs_full_psnr(folder: &ImageFolder, c: LoaderConfig, epoch: u64, size: u32) -> Vec<f64> {
    let full = Loader::new(folder, with_decoder(c.clone(), Decoder::CpuFull)).unwrap();
    let region = Loader::new(folder, with_decoder(c, Decoder::Cpu)).unwrap();
    let (a, b) = (collect(&full, epoch, size), collect(&region, epoch, size));
    assert_eq!(a.len(), b.len());
    let mut out = Vec::new();
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((&x.indices, &x.labels), (&y.indices, &y.labels));
        for i in 0..x.len() {
            out.push(psnr(x.image(i), y.image(i)));
        }
    }
    out
}

#[test]
fn region_decode_uses_todays_boxes_and_differs_only_by_resampling() {
    let (_dir, folder) = synth_large(6);
    // The header gives the same size as a full decode, so crop_for draws the same box.
    for s in &folder.samples {
        let bytes = std::fs::read(&s.path).unwrap();
        let full = decode_jpeg(&bytes).unwrap();
        let header = JpegHeader::read(&bytes).unwrap();
        assert_eq!((header.width, header.height), (full.width, full.height));
    }
    // Output 64 from 300-500 px crops of area 5-100%: scales 1/4, 1/2 and 1 all occur.
    let train = config(4, 9, 2);
    let loader = Loader::new(&folder, train.clone()).unwrap();
    let mut denoms = BTreeSet::new();
    for epoch in 0..3 {
        for (index, s) in folder.samples.iter().enumerate() {
            let bytes = std::fs::read(&s.path).unwrap();
            let header = JpegHeader::read(&bytes).unwrap();
            let (crop, _) = loader.crop_for(epoch, index, header.width, header.height, 64);
            denoms.insert(plan_region(header.width, header.height, crop, 64).denom);
        }
        let scores = region_vs_full_psnr(&folder, train.clone(), epoch, 64);
        let worst = scores.iter().cloned().fold(f64::INFINITY, f64::min);
        eprintln!(
            "epoch {epoch}: worst PSNR {worst:.1} dB over {} images",
            scores.len()
        );
        assert!(worst >= 30.0, "epoch {epoch}: worst PSNR {worst:.1} dB");
    }
    assert!(
        denoms.contains(&1) && denoms.contains(&2) && denoms.contains(&4),
        "{denoms:?}"
    );
    // The comparison can fail: another epoch's boxes score far below 30 dB.
    let full = Loader::new(&folder, with_decoder(train.clone(), Decoder::CpuFull)).unwrap();
    let region = Loader::new(&folder, with_decoder(train, Decoder::Cpu)).unwrap();
    let (a, b) = (collect(&full, 0, 64), collect(&region, 1, 64));
    let mismatched: Vec<f64> = a
        .iter()
        .zip(&b)
        .flat_map(|(x, y)| (0..x.len()).map(move |i| psnr(x.image(i), y.image(i))))
        .collect();
    let mean = mismatched.iter().sum::<f64>() / mismatched.len() as f64;
    eprintln!("other epoch's boxes: mean PSNR {mean:.1} dB");
    assert!(mean < 25.0, "different boxes still score {mean:.1} dB");
}

#[test]
fn region_decode_of_the_eval_center_crop_matches_the_full_path() {
    let (_dir, folder) = synth_large(4);
    for size in [64, 224] {
        let scores = region_vs_full_psnr(&folder, LoaderConfig::eval(3), 0, size);
        let worst = scores.iter().cloned().fold(f64::INFINITY, f64::min);
        eprintln!("eval size {size}: worst PSNR {worst:.1} dB");
        assert!(worst >= 30.0, "size {size}: worst PSNR {worst:.1} dB");
    }
}

#[test]
fn region_decode_of_a_whole_image_at_full_scale_equals_libjpeg_pixels_of_zune() {
    // Full-scale region = the whole picture: the same pixels as zune-jpeg up to IDCT rounding.
    let image = ramp(200, 150);
    let jpeg = encode_jpeg(&image, 95).unwrap();
    let full = decode_jpeg(&jpeg).unwrap();
    let header = JpegHeader::read(&jpeg).unwrap();
    let plan = RegionPlan {
        denom: 1,
        x: 0,
        y: 0,
        width: 200,
        height: 150,
        crop: center_crop_box(200, 150, 8, 1.0),
    };
    let region = header.decode(&plan).unwrap();
    assert!(psnr(&region.pixels, &full.pixels) > 40.0);
    // A sub-region is the same pixels as that part of the whole.
    let header = JpegHeader::read(&jpeg).unwrap();
    let part = RegionPlan {
        x: 37,
        y: 21,
        width: 90,
        height: 60,
        ..plan
    };
    let sub = header.decode(&part).unwrap();
    for r in 0..60usize {
        let a = &sub.pixels[r * 90 * 3..(r + 1) * 90 * 3];
        let start = ((21 + r) * 200 + 37) * 3;
        let b = &region.pixels[start..start + 90 * 3];
        let diff = a.iter().zip(b).map(|(&x, &y)| x.abs_diff(y)).max().unwrap();
        assert!(diff <= 2, "row {r}: max difference {diff}");
    }
}

#[test]
fn region_decode_reports_truncation_below_the_crop_and_bad_bytes() {
    let image = ramp(256, 256);
    let jpeg = encode_jpeg(&image, 90).unwrap();
    let top_left = RegionPlan {
        denom: 1,
        x: 0,
        y: 0,
        width: 32,
        height: 32,
        crop: center_crop_box(32, 32, 8, 1.0),
    };
    // Whole: decodes. Cut at 90% (below the region): still an error, naming the cause.
    JpegHeader::read(&jpeg).unwrap().decode(&top_left).unwrap();
    let cut = &jpeg[..jpeg.len() * 9 / 10];
    let err = JpegHeader::read(cut)
        .unwrap()
        .decode(&top_left)
        .unwrap_err();
    assert!(err.contains("Premature end"), "{err}");
    // Cut inside the region's rows: libjpeg's own premature-end warning is an error.
    let err = JpegHeader::read(&jpeg[..jpeg.len() / 3])
        .unwrap()
        .decode(&RegionPlan {
            height: 256,
            y: 0,
            ..top_left
        })
        .unwrap_err();
    assert!(err.contains("Premature end"), "{err}");
    let err = JpegHeader::read(b"this is not a JPEG file").err().unwrap();
    assert!(err.contains("not a decodable JPEG"), "{err}");
    assert!(JpegHeader::read(&jpeg[..20]).is_err());
    // A region outside the image is refused, not read out of bounds.
    let err = JpegHeader::read(&jpeg)
        .unwrap()
        .decode(&RegionPlan { x: 250, ..top_left })
        .unwrap_err();
    assert!(err.contains("outside"), "{err}");
}

#[test]
fn nvjpeg_without_a_gpu_falls_back_to_the_cpu_decoder_with_a_clear_message() {
    // This machine (and CI) has no libnvjpeg or no CUDA device: the loader says so and
    // decodes exactly as the CPU decoder does.
    let (_dir, folder) = synth_train(2, 4);
    let asked = Loader::new(&folder, with_decoder(config(4, 5, 2), Decoder::Nvjpeg)).unwrap();
    let cpu = Loader::new(&folder, with_decoder(config(4, 5, 2), Decoder::Cpu)).unwrap();
    assert_eq!(asked.decoder_in_use(), Decoder::Cpu);
    let note = asked
        .decoder_note()
        .expect("a note saying why nvJPEG is not used");
    assert!(note.contains("nvjpeg") && note.contains("CPU"), "{note}");
    assert!(
        note.contains("libnvjpeg") || note.contains("CUDA") || note.contains("GPU"),
        "{note}"
    );
    assert_eq!(cpu.decoder_in_use(), Decoder::Cpu);
    assert!(cpu.decoder_note().is_none());
    assert_eq!(collect(&asked, 0, 24), collect(&cpu, 0, 24));
    // The setting's spelling.
    assert_eq!("nvjpeg".parse::<Decoder>().unwrap(), Decoder::Nvjpeg);
    assert_eq!("cpu-full".parse::<Decoder>().unwrap(), Decoder::CpuFull);
    let err = "gpu".parse::<Decoder>().unwrap_err();
    assert!(err.contains("nvjpeg") && err.contains("cpu"), "{err}");
    #[derive(serde::Deserialize)]
    struct Data {
        #[serde(default)]
        decoder: Decoder,
    }
    let parse = |s: &str| toml::from_str::<Data>(s).map(|d| d.decoder);
    assert_eq!(parse("").unwrap(), Decoder::Cpu);
    assert_eq!(parse("decoder = \"nvjpeg\"").unwrap(), Decoder::Nvjpeg);
    assert_eq!(parse("decoder = \"cpu-full\"").unwrap(), Decoder::CpuFull);
    assert!(parse("decoder = \"turbo\"").is_err());
}

/// `bytes` of a JPEG with the width and height of its frame header (SOF) set to `w` x `h`,
/// its data unchanged (a damaged header, or a decompression bomb).
fn with_declared_size(bytes: &[u8], w: u16, h: u16) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let mut i = 2;
    while i + 9 < b.len() {
        assert_eq!(b[i], 0xFF, "a marker at {i}");
        let (marker, len) = (b[i + 1], u16::from_be_bytes([b[i + 2], b[i + 3]]) as usize);
        if matches!(marker, 0xC0..=0xC2) {
            b[i + 5..i + 7].copy_from_slice(&h.to_be_bytes());
            b[i + 7..i + 9].copy_from_slice(&w.to_be_bytes());
            return b;
        }
        i += 2 + len;
    }
    panic!("no frame header");
}

#[test]
fn entries_named_like_images_that_are_not_image_files_are_refused_by_name() {
    // they used to be passed over without a word: the class trained on fewer images than its
    // folder shows (a link to an unmounted disk dropped them all but named none)
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("train");
    write_jpeg(&root.join("n01/a.JPEG"), 8, 8);
    write_jpeg(&root.join("n02/a.JPEG"), 8, 8);
    let open_err = |what: &str| {
        let err = ImageFolder::open(&root).err().map(|e| format!("{e:#}"));
        err.unwrap_or_else(|| panic!("{what} was passed over"))
    };
    let dangling = root.join("n01/b.JPEG");
    std::os::unix::fs::symlink("/nonexistent/b.JPEG", &dangling).unwrap();
    let err = open_err("a dangling link");
    assert!(
        err.contains(&dangling.display().to_string())
            && err.contains("symbolic link to /nonexistent/b.JPEG, which does not exist"),
        "{err}"
    );
    std::fs::remove_file(&dangling).unwrap();

    let (l1, l2) = (root.join("n01/l1.JPEG"), root.join("n01/l2.JPEG"));
    std::os::unix::fs::symlink(&l2, &l1).unwrap();
    std::os::unix::fs::symlink(&l1, &l2).unwrap();
    let err = open_err("a link loop");
    assert!(err.contains("link loop") && err.contains("n01/l"), "{err}");
    std::fs::remove_file(&l1).unwrap();
    std::fs::remove_file(&l2).unwrap();

    let fifo = root.join("n02/f.JPEG");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let err = open_err("a FIFO");
    assert!(
        err.contains(&fifo.display().to_string()) && err.contains("named pipe"),
        "{err}"
    );
    std::fs::remove_file(&fifo).unwrap();

    let folder = root.join("n02/d.JPEG");
    std::fs::create_dir(&folder).unwrap();
    let err = open_err("a folder");
    assert!(
        err.contains(&folder.display().to_string()) && err.contains("is a folder"),
        "{err}"
    );
    std::fs::remove_dir(&folder).unwrap();

    // a class that is a link to a folder that is gone: the class would be dropped
    let class = root.join("n03");
    std::os::unix::fs::symlink("/nonexistent/n03", &class).unwrap();
    let err = open_err("a dangling class link");
    assert!(
        err.contains(&class.display().to_string()) && err.contains("class folder"),
        "{err}"
    );
    std::fs::remove_file(&class).unwrap();
    // what is left is a set again, and a link to a real image is an image
    std::os::unix::fs::symlink(root.join("n02/a.JPEG"), root.join("n01/c.JPEG")).unwrap();
    assert_eq!(ImageFolder::open(&root).unwrap().len(), 3);
}

#[test]
fn hidden_files_in_a_class_folder_are_not_images() {
    // macOS copies `._NAME.JPEG` (AppleDouble) beside each image: not an image, and not one
    // the loader should warn about and count as unreadable each epoch
    let dir = tempfile::tempdir().unwrap();
    write_jpeg(&dir.path().join("n01/a.JPEG"), 8, 8);
    std::fs::write(dir.path().join("n01/._a.JPEG"), b"\0\x05\x16\x07").unwrap();
    std::fs::write(dir.path().join("n01/.DS_Store"), b"x").unwrap();
    let folder = ImageFolder::open(dir.path()).unwrap();
    let names: Vec<_> = folder.samples.iter().map(|s| s.path.clone()).collect();
    assert_eq!(names, [dir.path().join("n01/a.JPEG")]);
}

#[test]
fn images_in_the_wrong_place_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    // a class tar extracted into a folder of its name: train/n01/n01/*.JPEG
    let nested = dir.path().join("nested");
    write_jpeg(&nested.join("n01/n01/a.JPEG"), 8, 8);
    let err = format!("{:#}", ImageFolder::open(&nested).unwrap_err());
    assert!(
        err.contains(&nested.join("n01/n01").display().to_string()) && err.contains("move them up"),
        "{err}"
    );
    // val as extracted from ILSVRC2012_img_val.tar: flat, no class folders
    let flat = dir.path().join("flat");
    write_jpeg(&flat.join("ILSVRC2012_val_00000001.JPEG"), 8, 8);
    write_jpeg(&flat.join("ILSVRC2012_val_00000002.JPEG"), 8, 8);
    let err = format!("{:#}", ImageFolder::open(&flat).unwrap_err());
    assert!(
        err.contains("holds 2 .JPEG files but no class subdirectories")
            && err.contains("prepare-imagenet"),
        "{err}"
    );
    // --data DIR/train instead of DIR
    let set = dir.path().join("set");
    write_jpeg(&set.join("train/n01/a.JPEG"), 8, 8);
    write_jpeg(&set.join("val/n01/a.JPEG"), 8, 8);
    let err = format!("{:#}", ImagenetDir::open(&set.join("train")).unwrap_err());
    assert!(
        err.contains("is a folder of classes itself") && err.contains(&set.display().to_string()),
        "{err}"
    );
    // --data a file
    let err = format!(
        "{:#}",
        ImagenetDir::open(&set.join("train/n01/a.JPEG")).unwrap_err()
    );
    assert!(err.contains("is not a directory"), "{err}");
    assert_eq!(ImagenetDir::open(&set).unwrap().num_classes(), 1);
}

#[test]
fn headers_over_the_pixel_limit_are_refused_before_decoding() {
    // 14,000 x 13,000 (182 megapixels, just over PIL's decompression-bomb limit) declared over
    // a few hundred bytes: the whole-image decoder allocated and filled every pixel of it (a
    // 32,000 x 32,000 header took 6 GB and 90 s per image); both decoders now refuse the header
    let image = RgbImage {
        width: 16,
        height: 16,
        pixels: vec![128; 16 * 16 * 3],
    };
    let jpeg = encode_jpeg(&image, 90).unwrap();
    let bomb = with_declared_size(&jpeg, 14_000, 13_000);
    let started = std::time::Instant::now();
    let err = decode_jpeg(&bomb).unwrap_err();
    assert!(
        err.contains("14000x13000") && err.contains("megapixel"),
        "{err}"
    );
    let err = JpegHeader::read(&bomb).err().unwrap();
    assert!(
        err.contains("14000x13000") && err.contains("megapixel"),
        "{err}"
    );
    assert!(
        started.elapsed().as_secs_f64() < 2.0,
        "{:?}",
        started.elapsed()
    );
    // within the limit the same data decodes as before (libjpeg fills what is missing)
    let ok = with_declared_size(&jpeg, 64, 48);
    assert!(JpegHeader::read(&ok).is_ok());
}

#[test]
fn files_of_other_image_formats_are_named_as_such() {
    // ImageNet's train set holds a PNG named .JPEG; other sets hold GIFs, BMPs and WebPs
    for (bytes, format) in [
        (&b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"[..], "PNG"),
        (b"GIF89a\x10\0\x10\0", "GIF"),
        (b"BM\x36\x03\0\0\0\0", "BMP"),
        (b"RIFF\x24\0\0\0WEBPVP8 ", "WebP"),
    ] {
        let want = format!("a {format} image named like a JPEG");
        let err = decode_jpeg(bytes).unwrap_err();
        assert!(err.contains(&want) && err.contains("convert it"), "{err}");
        let err = JpegHeader::read(bytes).err().unwrap();
        assert!(err.contains(&want), "{err}");
    }
    let err = JpegHeader::read(b"<html>404</html>").err().unwrap();
    assert!(err.contains("not a decodable JPEG"), "{err}");
}

#[test]
fn a_set_whose_classes_differ_from_model_classes_is_refused_before_the_run() {
    // it was found by each run's build: exit 1 (a run aborted, an aborted log per run of a
    // set), naming neither the folder nor where the count comes from
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("set");
    let spec = SynthSpec {
        val_per_class: 1,
        ..small_spec(11, 8)
    };
    write_synth_imagenet(&root, &spec, false).unwrap();
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/resnet/tiny_cpu_jpeg.toml"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args([
            "resnet",
            "--division",
            "open",
            "--config",
            config,
            "--seed",
            "1",
        ])
        .arg("--data")
        .arg(&root)
        .arg("--log")
        .arg(dir.path().join("run.log"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&root.join("train").display().to_string())
            && err.contains("11 class folders but model.classes is 10"),
        "{err}"
    );
    assert!(!dir.path().join("run.log").exists());
}
