//! `mlperf-run data bench-imagenet` (hidden): time the training pipeline on an ImageFolder,
//! for scripts/bench_data.sh, and (with `--augment gpu --device cuda`) the data path alone up to
//! the normalised fp16 tensor on the GPU, for scripts/bench_gpu.sh part e.

use super::{Augment, CacheStats, Decoder, ImageFolder, Loader, LoaderConfig};
use anyhow::Result;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct BenchImagenetArgs {
    /// An ImageFolder directory (`<class>/<image>.JPEG`), e.g. DIR/train.
    #[arg(long)]
    pub dir: PathBuf,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Output crop size.
    #[arg(long, default_value_t = 224)]
    pub size: u32,
    #[arg(long, default_value_t = 64)]
    pub batch_size: usize,
    /// Epochs to time (after one untimed warm-up batch).
    #[arg(long, default_value_t = 1)]
    pub epochs: u64,
    /// RandomResizedCrop's smallest crop area (0.08 as torchvision's default; MLPerf uses 0.05).
    #[arg(long, default_value_t = 0.08)]
    pub scale_min: f64,
    /// JPEG decoder: cpu (libjpeg-turbo, only the crop's region), cpu-full (zune-jpeg, whole
    /// image) or nvjpeg (GPU; falls back to cpu when libnvjpeg or CUDA is missing).
    #[arg(long, default_value = "cpu")]
    pub decoder: Decoder,
    /// Print the result as one JSON line (for scripts/bench_gpu.sh) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Fail (instead of measuring the CPU fallback) when the asked decoder cannot be used.
    #[arg(long)]
    pub require_decoder: bool,
    /// Where crops are resized: cpu (the workers, u8 crops) or gpu (the workers decode each
    /// crop's region; the batch hand-off copies the batch to --device and crops, resizes, flips
    /// and normalises it there into fp16 channels-last: the training run's data path up to the
    /// model's input). gpu needs the default build.
    #[arg(long, default_value = "cpu")]
    pub augment: Augment,
    /// The device of --augment gpu: cpu (the CPU twin) or cuda / cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// With --decoder nvjpeg: the share of each batch nvJPEG decodes, the rest going to the CPU
    /// region decoder at the same time (default: the GPU model's).
    #[arg(long)]
    pub hw_decoder_load: Option<f64>,
    /// With --augment gpu: before timing, compare this many batches with the CPU region
    /// decoder's (the same boxes, both through the device op) and fail when an image is below
    /// 30 dB PSNR: checks that the decoder's pixels are right, not only fast.
    #[arg(long, default_value_t = 2)]
    pub check_batches: usize,
    /// With --augment gpu: stop at the batch's arena on the device (nvJPEG's decode and the host
    /// regions' copy, no crop/resize kernels): with --decoder nvjpeg --hw-decoder-load 1, the
    /// JPEG engine's own rate on these images, the ceiling of the data path.
    #[arg(long)]
    pub engine_only: bool,
    /// With --augment gpu: MiB of whole decoded images kept on --device (`data.gpu_cache_mb`);
    /// one untimed epoch fills the cache first, then the timed epochs cut their crops from it.
    /// The hit rate of the timed epochs is reported.
    #[arg(long, default_value_t = 0)]
    pub gpu_cache_mb: u64,
}

/// The CUDA device index of `--device` (None: the CPU).
fn device_index(device: &str) -> Result<Option<usize>> {
    match device {
        "cpu" => Ok(None),
        "cuda" => Ok(Some(0)),
        d => d
            .strip_prefix("cuda:")
            .and_then(|i| i.parse().ok())
            .map(Some)
            .ok_or_else(|| anyhow::anyhow!("--device {d:?}: use cpu, cuda or cuda:N")),
    }
}

/// `mlperf-run data bench-imagenet`: warm up, check the decoder's pixels (`--augment gpu`),
/// time the epochs and print the rate.
pub fn run_bench_imagenet(args: BenchImagenetArgs) -> Result<crate::util::ExitStatus> {
    let folder = ImageFolder::open(&args.dir)?;
    let gpu = device_index(&args.device)?;
    let loader = bench_loader(&folder, &args, gpu)?;
    // Warm up (page cache, thread start) on one batch.
    if let Some(batch) = loader.epoch(1000, args.size).next() {
        batch?;
    }
    let psnr_worst = check_pixels(&folder, &loader, &args, gpu)?;
    // with the decoded-image cache, epoch 0 fills it untimed
    let first = u64::from(args.gpu_cache_mb > 0);
    if first == 1 {
        on_device(&loader, &args, gpu, 0..1)?;
    }
    let before = loader.cache_stats();
    let start = std::time::Instant::now();
    let unix_start = unix_now();
    let (images, checksum) = match args.augment {
        Augment::Gpu => (
            on_device(&loader, &args, gpu, first..first + args.epochs)?,
            0,
        ),
        Augment::Cpu => on_host(&loader, &args)?,
    };
    let timed = Timed {
        images,
        checksum,
        secs: start.elapsed().as_secs_f64(),
        unix_start,
        psnr_worst,
        cache: loader
            .cache_stats()
            .zip(before)
            .map(|(after, before)| CacheStats {
                lookups: after.lookups - before.lookups,
                hits: after.hits - before.hits,
                ..after
            }),
    };
    if args.json {
        print_json(&loader, &args, &timed)?;
    } else {
        print_text(&loader, &args, &timed)?;
    }
    Ok(crate::util::ExitStatus::Success)
}

/// What the timed epochs did.
struct Timed {
    images: usize,
    /// A sum over a sample of the host batches' bytes (0 with `--augment gpu`).
    checksum: u64,
    secs: f64,
    /// When timing began (Unix seconds).
    unix_start: f64,
    /// The worst PSNR against the CPU region decoder (`--augment gpu` with --check-batches).
    psnr_worst: Option<f64>,
    /// The decoded-image cache: the timed epochs' lookups and hits, the images stored in all.
    cache: Option<CacheStats>,
}

/// The loader the arguments ask for; with `--require-decoder`, an error when it could not use
/// the asked decoder.
fn bench_loader(
    folder: &ImageFolder,
    args: &BenchImagenetArgs,
    gpu: Option<usize>,
) -> Result<Loader> {
    let config = LoaderConfig {
        threads: args.threads,
        drop_last: false,
        decoder: args.decoder,
        device_augment: args.augment == Augment::Gpu,
        gpu,
        hw_decoder_load: args.hw_decoder_load,
        cache_bytes: args.gpu_cache_mb * super::cache::MIB,
        crop: super::RandomResizedCrop {
            scale: (args.scale_min, 1.0),
            ..super::RandomResizedCrop::TORCHVISION
        },
        ..LoaderConfig::train(args.batch_size, 1)
    };
    let loader = Loader::new(folder, config)?;
    if args.require_decoder && loader.decoder_in_use() != args.decoder {
        anyhow::bail!(
            "--require-decoder: {}",
            loader
                .decoder_note()
                .unwrap_or("the asked decoder is not in use")
        );
    }
    Ok(loader)
}

/// With `--augment gpu` and --check-batches: the worst PSNR of the loader's crops against the
/// CPU region decoder's, an error below 30 dB; None when not checked.
fn check_pixels(
    folder: &ImageFolder,
    loader: &Loader,
    args: &BenchImagenetArgs,
    gpu: Option<usize>,
) -> Result<Option<f64>> {
    if args.augment != Augment::Gpu || args.check_batches == 0 {
        return Ok(None);
    }
    let cpu = Loader::new(
        folder,
        LoaderConfig {
            decoder: Decoder::Cpu,
            cache_bytes: 0,
            ..loader.config().clone()
        },
    )?;
    let worst = check_against(loader, &cpu, args, gpu)?;
    if worst < 30.0 {
        anyhow::bail!(
            "the {} decoder's crops differ from the CPU region decoder's: worst PSNR \
             {worst:.1} dB over {} batch(es) (30 dB expected)",
            loader.decoder_in_use().as_str(),
            args.check_batches
        );
    }
    Ok(Some(worst))
}

/// `--augment cpu`: every timed epoch's host batches; returns the images and a checksum over a
/// sample of their bytes.
fn on_host(loader: &Loader, args: &BenchImagenetArgs) -> Result<(usize, u64)> {
    let mut images = 0usize;
    let mut checksum = 0u64;
    for epoch in 0..args.epochs {
        for batch in loader.epoch(epoch, args.size) {
            let batch = batch?;
            images += batch.len();
            checksum = checksum.wrapping_add(
                batch
                    .images
                    .iter()
                    .step_by(4099)
                    .map(|&b| b as u64)
                    .sum::<u64>(),
            );
        }
    }
    Ok((images, checksum))
}

/// The result as one JSON line (`--json`).
fn print_json(loader: &Loader, args: &BenchImagenetArgs, t: &Timed) -> Result<()> {
    let stats = loader.stats();
    let mut out = crate::util::output::stdout();
    let (on_gpu, loaded) = (stats.decoded_on_gpu, stats.loaded);
    let line = serde_json::json!({
        "impl": format!(
            "mlperf-run-data-{}{}",
            loader.decoder_in_use().as_str(),
            match (args.augment, args.engine_only) {
                (Augment::Gpu, true) => "-engine-only",
                (Augment::Gpu, false) => "-gpu-augment",
                _ => "",
            }
        ),
        "decoder_asked": args.decoder.as_str(),
        "decoder": loader.decoder_in_use().as_str(),
        "decoder_note": loader.decoder_note(),
        "augment": args.augment.as_str(),
        "device": args.device,
        "hw_decoder_load": loader.hw_decoder_load(),
        "nvjpeg_backend": loader.nvjpeg_backend(),
        "engine_only": args.engine_only,
        "arena_mb_per_batch": (stats.ragged_batches > 0)
            .then(|| stats.ragged_bytes as f64 / stats.ragged_batches as f64 / 1e6),
        "decoded_on_gpu": on_gpu,
        "decoded": loaded,
        "psnr_vs_cpu_worst_db": t.psnr_worst.filter(|p| p.is_finite()),
        "threads": args.threads,
        "images": t.images,
        "seconds": t.secs,
        "img_per_s": t.images as f64 / t.secs,
        "window_unix": [t.unix_start, unix_now()],
        "gpu_cache_mb": args.gpu_cache_mb,
        "cache_hit_rate": t.cache.map(|c| c.hit_rate()),
        "cache_images": t.cache.map(|c| c.images),
        "cache_mib_used": t.cache.map(|c| c.bytes as f64 / super::cache::MIB as f64),
    });
    writeln!(out, "{line}")?;
    Ok(())
}

/// The result as one line of text.
fn print_text(loader: &Loader, args: &BenchImagenetArgs, t: &Timed) -> Result<()> {
    let stats = loader.stats();
    let mut out = crate::util::output::stdout();
    let (on_gpu, loaded) = (stats.decoded_on_gpu, stats.loaded);
    let (images, secs, checksum) = (t.images, t.secs, t.checksum);
    writeln!(
        out,
        "mlperf-run pipeline ({} decoder, {on_gpu} of {loaded} images decoded by nvJPEG, augment \
         on {}): {images} images in {secs:.2}s = {:.1} images/s on {} thread(s), {:.1} images/s per core (checksum {checksum})",
        loader.decoder_in_use().as_str(),
        if args.augment == Augment::Gpu {
            args.device.as_str()
        } else {
            "cpu"
        },
        images as f64 / secs,
        args.threads,
        images as f64 / secs / args.threads as f64
    )?;
    if let Some(c) = t.cache {
        writeln!(out, "timed epochs' {}", c.describe())?;
    }
    Ok(())
}

/// `--augment gpu`: every timed epoch through the training run's batch hand-off to `device`
/// and the device augmentation (fp16, channels-last), waited for at the end. Returns the images.
#[cfg(feature = "torch")]
fn on_device(
    loader: &Loader,
    args: &BenchImagenetArgs,
    gpu: Option<usize>,
    epochs: std::ops::Range<u64>,
) -> Result<usize> {
    use super::device_augment::{ragged_arena, DeviceAugment};
    use crate::data::handoff::Prefetcher;
    let device = gpu.map_or(tch::Device::Cpu, tch::Device::Cuda);
    let aug = DeviceAugment::new(device, tch::Kind::Half, true)?;
    let mut images = 0usize;
    for epoch in epochs {
        let aug = aug.clone();
        let engine_only = args.engine_only;
        let mut batches = Prefetcher::spawn(
            device,
            2,
            loader.epoch(epoch, args.size),
            move |b: super::Batch, t| {
                let y = t.tensor(&b.labels, &[b.len() as i64])?;
                if engine_only {
                    let (arena, _) = ragged_arena(&b.crops, &b.images, b.engine, b.cache, t)?;
                    return Ok((arena, y));
                }
                let x = aug.ragged_batch(&b.crops, &b.images, b.engine, b.cache, b.size, t)?;
                Ok((x, y))
            },
        )?;
        while let Some(b) = batches.next_batch() {
            let (_, y) = b?;
            images += y.size()[0] as usize;
        }
    }
    if let Some(i) = gpu {
        tch::Cuda::synchronize(i as i64);
    }
    Ok(images)
}

/// The worst per-image PSNR (dB) of `loader`'s first `--check-batches` batches against `cpu`'s
/// (the same boxes), both through the device op in fp32 on the bench's device.
#[cfg(feature = "torch")]
fn check_against(
    loader: &Loader,
    cpu: &Loader,
    args: &BenchImagenetArgs,
    gpu: Option<usize>,
) -> Result<f64> {
    use super::device_augment::{denormalize, DeviceAugment};
    use crate::gpu::cuda::Stream;
    use crate::gpu::transfer::Transfer;
    use tch::{Kind, Tensor};
    let device = gpu.map_or(tch::Device::Cpu, tch::Device::Cuda);
    let aug = DeviceAugment::new(device, Kind::Float, false)?;
    let t = Transfer::new(device)?;
    // the decode, the copies and the kernels all on the transfer's stream, as in the hand-off
    let _on_stream = t.stream().map(Stream::enter).transpose()?;
    let pixels = |b: &super::Batch| -> Result<Tensor> {
        let x = aug.ragged_batch(
            &b.crops,
            &b.images,
            b.engine.clone(),
            b.cache.clone(),
            b.size,
            &t,
        )?;
        let x = denormalize(&x)?;
        crate::gpu::cuda::synchronize(device);
        Ok(x)
    };
    let mut worst = f64::INFINITY;
    let pairs = loader.epoch(0, args.size).zip(cpu.epoch(0, args.size));
    for (a, b) in pairs.take(args.check_batches) {
        let (a, b) = (a?, b?);
        let (mut ia, mut ib) = (a.indices.clone(), b.indices.clone());
        ia.sort_unstable();
        ib.sort_unstable();
        if ia != ib {
            anyhow::bail!("the two decoders kept different images of a batch (unreadable files?)");
        }
        // the engine's images come first in a batch: match the images by sample
        let row_of_b: std::collections::HashMap<usize, i64> = b
            .indices
            .iter()
            .enumerate()
            .map(|(k, &i)| (i, k as i64))
            .collect();
        let order: Vec<i64> = a.indices.iter().map(|i| row_of_b[i]).collect();
        let order = Tensor::f_from_slice(&order)?.f_to_device(device)?;
        let mse = (pixels(&a)? - pixels(&b)?.f_index_select(0, &order)?)
            .f_square()?
            .f_mean_dim(&[1i64, 2, 3][..], false, Kind::Double)?
            .f_max()?
            .f_double_value(&[])?;
        worst = worst.min(10.0 * (255.0f64 * 255.0 / mse).log10());
    }
    Ok(worst)
}

#[cfg(not(feature = "torch"))]
fn check_against(_: &Loader, _: &Loader, _: &BenchImagenetArgs, _: Option<usize>) -> Result<f64> {
    anyhow::bail!("--augment gpu needs the default build (libtorch); this is the lite build")
}

#[cfg(not(feature = "torch"))]
fn on_device(
    _: &Loader,
    _: &BenchImagenetArgs,
    _: Option<usize>,
    _: std::ops::Range<u64>,
) -> Result<usize> {
    anyhow::bail!("--augment gpu needs the default build (libtorch); this is the lite build")
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
