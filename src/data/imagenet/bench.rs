//! `mlperf-run data bench-imagenet` (hidden): time the training pipeline on an ImageFolder,
//! for scripts/bench_data.sh.

use super::{Decoder, ImageFolder, Loader, LoaderConfig};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct BenchImagenetArgs {
    /// An ImageFolder directory (<class>/<image>.JPEG), e.g. DIR/train.
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
}

pub fn run_bench_imagenet(args: BenchImagenetArgs) -> Result<std::process::ExitCode> {
    let folder = ImageFolder::open(&args.dir)?;
    let config = LoaderConfig {
        threads: args.threads,
        drop_last: false,
        decoder: args.decoder,
        crop: super::RandomResizedCrop {
            scale: (args.scale_min, 1.0),
            ..super::RandomResizedCrop::TORCHVISION
        },
        ..LoaderConfig::train(args.batch_size, 1)
    };
    let loader = Loader::new(&folder, config)?;
    if args.require_decoder && loader.decoder_in_use() != args.decoder {
        anyhow::bail!(
            "--require-decoder: {}",
            loader
                .decoder_note()
                .unwrap_or("the asked decoder is not in use")
        );
    }
    // Warm up (page cache, thread start) on one batch.
    if let Some(batch) = loader.epoch(1000, args.size).next() {
        batch?;
    }
    let start = std::time::Instant::now();
    let unix_start = unix_now();
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
    let secs = start.elapsed().as_secs_f64();
    if args.json {
        let line = serde_json::json!({
            "impl": format!("mlperf-run-data-{}", loader.decoder_in_use().as_str()),
            "decoder_asked": args.decoder.as_str(),
            "decoder": loader.decoder_in_use().as_str(),
            "decoder_note": loader.decoder_note(),
            "threads": args.threads,
            "images": images,
            "seconds": secs,
            "img_per_s": images as f64 / secs,
            "window_unix": [unix_start, unix_now()],
        });
        println!("{line}");
        return Ok(std::process::ExitCode::SUCCESS);
    }
    println!(
        "mlperf-run pipeline ({} decoder): {images} images in {secs:.2}s = {:.1} images/s on {} thread(s), {:.1} images/s per core (checksum {checksum})",
        loader.decoder_in_use().as_str(),
        images as f64 / secs,
        args.threads,
        images as f64 / secs / args.threads as f64
    );
    Ok(std::process::ExitCode::SUCCESS)
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
