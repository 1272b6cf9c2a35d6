//! `mlperf-run data synth-imagenet`: a synthetic ImageNet-style data set of real JPEG files.
//!
//! Each class is a (hue, texture) pair: objects (ellipses and rectangles) filled with the
//! class's texture (horizontal stripes, vertical stripes, checkerboard or rings, at one of two
//! frequencies) in the class's hue, placed at random positions and scales near the middle of
//! a random gradient background with plain distractor shapes and pixel noise. Neighbouring
//! hues nearly touch and alternate textures, so colour alone confuses neighbours and the texture
//! separates them (with many classes, hues are also shared between textures); the textures are mirror-symmetric so horizontal flips keep the label, and they survive
//! random-resized crops. Images have random sizes between --min-size and --max-size.
//!
//! The set is written into a temporary directory next to --out and renamed at the end. Ctrl-C
//! (or SIGTERM) stops it before the rename: the temporary directory is removed and --out is
//! left as it was (exit 130).

use crate::data::imagenet::RgbImage;
use crate::data::rng::Rng;
use anyhow::{bail, Context, Result};
use rayon::prelude::*;
use std::io::Write as _;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct SynthImagenetArgs {
    /// Output directory (gets train/ and val/ in the ImageFolder layout).
    #[arg(long)]
    pub out: PathBuf,
    /// Number of classes.
    #[arg(long, default_value_t = 10)]
    pub classes: usize,
    /// Training images per class.
    #[arg(long, default_value_t = 100)]
    pub per_class: usize,
    /// Validation images per class [default: per-class / 5, at least 1].
    #[arg(long)]
    pub val_per_class: Option<usize>,
    /// Seed: the same seed and options give byte-identical files.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Smallest image side in pixels.
    #[arg(long, default_value_t = 160)]
    pub min_size: u32,
    /// Largest image side in pixels.
    #[arg(long, default_value_t = 320)]
    pub max_size: u32,
    /// JPEG quality (1-100).
    #[arg(long, default_value_t = 90)]
    pub quality: u8,
    /// How image sizes are drawn: "uniform" (each side uniform in --min-size..--max-size) or
    /// "imagenet" (shaped like ImageNet train: width about 400 +- 90 px, mostly landscape 4:3,
    /// mean about 400x350, within --min-size..--max-size; with quality 90 about 110 KB a file).
    #[arg(long, value_enum, default_value_t = SizeDist::Uniform)]
    pub sizes: SizeDist,
    /// Replace an existing non-empty --out.
    #[arg(long)]
    pub force: bool,
}

/// How image sizes are drawn (`--sizes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SizeDist {
    /// Width and height each uniform in min_size..=max_size.
    #[default]
    Uniform,
    /// Like ImageNet's training images: width about 400 +- 90 px; height from the aspect ratio
    /// (4:3 landscape for 55%, square 20%, 3:4 portrait 15%, 3:2 landscape 10%): mean about
    /// 400x350. Both sides clamped to min_size..=max_size.
    Imagenet,
}

/// What to generate.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SynthSpec {
    pub classes: usize,
    pub per_class: usize,
    pub val_per_class: usize,
    pub seed: u64,
    pub min_size: u32,
    pub max_size: u32,
    pub quality: u8,
    pub sizes: SizeDist,
}

impl SynthSpec {
    pub fn from_args(a: &SynthImagenetArgs) -> SynthSpec {
        SynthSpec {
            classes: a.classes,
            per_class: a.per_class,
            val_per_class: a.val_per_class.unwrap_or((a.per_class / 5).max(1)),
            seed: a.seed,
            min_size: a.min_size,
            max_size: a.max_size,
            quality: a.quality,
            sizes: a.sizes,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.classes == 0 || self.classes > 100_000 {
            bail!("--classes {} must be within 1..=100000", self.classes);
        }
        if self.per_class == 0 || self.per_class > MAX_PER_CLASS {
            bail!(
                "--per-class {} must be within 1..={MAX_PER_CLASS}",
                self.per_class
            );
        }
        if self.val_per_class == 0 || self.val_per_class > MAX_PER_CLASS {
            bail!(
                "--val-per-class {} must be within 1..={MAX_PER_CLASS} (the trainer evaluates \
                 on every class of val/)",
                self.val_per_class
            );
        }
        let images = self.classes * (self.per_class + self.val_per_class);
        if images > MAX_IMAGES {
            bail!(
                "--classes {} x (--per-class {} + --val-per-class {}) is {images} images, more \
                 than {MAX_IMAGES} (ImageNet has 1.33 million): ask for fewer",
                self.classes,
                self.per_class,
                self.val_per_class
            );
        }
        if self.min_size < 16 || self.min_size > self.max_size || self.max_size > 4096 {
            bail!(
                "image sizes --min-size {} --max-size {} must satisfy 16 <= min <= max <= 4096",
                self.min_size,
                self.max_size
            );
        }
        if self.quality == 0 || self.quality > 100 {
            bail!("--quality {} must be within 1..=100", self.quality);
        }
        Ok(())
    }
}

/// The most images of one class and split (their file names have 6 digits).
pub const MAX_PER_CLASS: usize = 1_000_000;
/// The most images of a data set (15 times ImageNet's; the list of them is held in memory).
pub const MAX_IMAGES: usize = 20_000_000;

/// The directory name of class `c` (ImageNet-like wnids that sort in class order).
pub fn class_dir_name(c: usize) -> String {
    format!("n{c:08}")
}

/// The split an image belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Train,
    Val,
}

impl Split {
    pub fn dir_name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Texture {
    HorizontalStripes,
    VerticalStripes,
    Checkerboard,
    Rings,
}

const TEXTURES: [Texture; 4] = [
    Texture::HorizontalStripes,
    Texture::VerticalStripes,
    Texture::Checkerboard,
    Texture::Rings,
];
/// Texture periods as fractions of the image's short side.
const PERIODS: [f64; 2] = [0.13, 0.075];

/// A class's look: its hue (degrees), texture and texture period.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClassStyle {
    pub hue: f64,
    pub hue_spacing: f64,
    texture: Texture,
    pub period: f64,
}

/// Classes are laid out as hue x texture. Up to 12 classes each get their own hue (evenly
/// spread) and neighbouring hues alternate between two textures; more classes use
/// max(12, classes/8) hues and up to 8 textures. Hue jitter (see [`render_image`]) brings
/// neighbouring hues together, so colour alone confuses neighbours and the texture tells them
/// apart.
pub fn class_style(class: usize, classes: usize) -> ClassStyle {
    let max_textures = TEXTURES.len() * PERIODS.len();
    let hues = if classes <= 12 {
        classes
    } else {
        12.max(classes.div_ceil(max_textures))
    };
    let textures = classes.div_ceil(hues).max(classes.min(2)).min(max_textures);
    let (hue_index, row) = (class % hues, class / hues);
    let texture_index = (row + hue_index) % textures;
    ClassStyle {
        hue: 360.0 * hue_index as f64 / hues as f64,
        hue_spacing: 360.0 / hues as f64,
        texture: TEXTURES[texture_index % TEXTURES.len()],
        period: PERIODS[texture_index / TEXTURES.len()],
    }
}

fn hsv_to_rgb(h: f64, s: f64, v: f64) -> [f64; 3] {
    let h = h.rem_euclid(360.0) / 60.0;
    let c = v * s;
    let x = c * (1.0 - (h % 2.0 - 1.0).abs());
    let (r, g, b) = match h as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = v - c;
    [(r + m) * 255.0, (g + m) * 255.0, (b + m) * 255.0]
}

#[derive(Clone, Copy)]
struct Shape {
    cx: f64,
    cy: f64,
    rx: f64,
    ry: f64,
    ellipse: bool,
}

impl Shape {
    fn random(rng: &mut Rng, w: f64, h: f64, short: f64, radius: (f64, f64)) -> Shape {
        let r = short * rng.uniform(radius.0, radius.1);
        let aspect = rng.uniform(0.7, 1.4);
        Shape {
            cx: w * rng.uniform(0.25, 0.75),
            cy: h * rng.uniform(0.25, 0.75),
            rx: r * aspect.sqrt(),
            ry: r / aspect.sqrt(),
            ellipse: rng.chance(0.6),
        }
    }

    fn contains(&self, x: f64, y: f64) -> bool {
        let (dx, dy) = ((x - self.cx) / self.rx, (y - self.cy) / self.ry);
        if self.ellipse {
            dx * dx + dy * dy <= 1.0
        } else {
            dx.abs() <= 1.0 && dy.abs() <= 1.0
        }
    }
}

/// Render image `index` of `class` in `split`: deterministic in (seed, split, class, index).
pub fn render_image(spec: &SynthSpec, split: Split, class: usize, index: usize) -> RgbImage {
    let mut rng = Rng::keyed(&[spec.seed, split as u64, class as u64, index as u64]);
    let (width, height) = match spec.sizes {
        SizeDist::Uniform => {
            let width = rng.range_inclusive(spec.min_size as u64, spec.max_size as u64) as u32;
            let height = rng.range_inclusive(spec.min_size as u64, spec.max_size as u64) as u32;
            (width, height)
        }
        SizeDist::Imagenet => {
            let (lo, hi) = (spec.min_size as f64, spec.max_size as f64);
            let width = (400.0 + 90.0 * rng.approx_normal()).round();
            let u = rng.next_f64();
            let aspect = if u < 0.55 {
                0.75
            } else if u < 0.75 {
                1.0
            } else if u < 0.9 {
                4.0 / 3.0
            } else {
                2.0 / 3.0
            };
            let height = (width * aspect).round();
            (width.clamp(lo, hi) as u32, height.clamp(lo, hi) as u32)
        }
    };
    let (w, h) = (width as f64, height as f64);
    let short = w.min(h);

    // Background: a gradient between two muted colours.
    let bg0 = hsv_to_rgb(
        rng.uniform(0.0, 360.0),
        rng.uniform(0.0, 0.4),
        rng.uniform(0.25, 0.9),
    );
    let bg1 = hsv_to_rgb(
        rng.uniform(0.0, 360.0),
        rng.uniform(0.0, 0.4),
        rng.uniform(0.25, 0.9),
    );
    let angle = rng.uniform(0.0, std::f64::consts::TAU);
    let (gx, gy) = (angle.cos() / w.max(h), angle.sin() / w.max(h));

    // Distractors: plain shapes of any colour.
    let distractors: Vec<(Shape, [f64; 3])> = (0..rng.below(3))
        .map(|_| {
            let s = Shape::random(&mut rng, w, h, short, (0.08, 0.25));
            let colour = hsv_to_rgb(
                rng.uniform(0.0, 360.0),
                rng.uniform(0.1, 0.7),
                rng.uniform(0.3, 1.0),
            );
            (s, colour)
        })
        .collect();

    // Class objects: textured in the class's hue (jittered by up to 45% of the hue spacing, so
    // neighbouring classes' hues nearly touch).
    let style = class_style(class, spec.classes);
    let hue = style.hue + rng.uniform(-0.45, 0.45) * style.hue_spacing;
    let bright = hsv_to_rgb(hue, rng.uniform(0.55, 1.0), rng.uniform(0.65, 1.0));
    let dark = hsv_to_rgb(hue, rng.uniform(0.4, 1.0), rng.uniform(0.1, 0.4));
    let period = style.period * short * rng.uniform(0.8, 1.25);
    let phase = rng.uniform(0.0, period);
    let objects: Vec<Shape> = (0..rng.range_inclusive(1, 3))
        .map(|_| Shape::random(&mut rng, w, h, short, (0.16, 0.36)))
        .collect();
    let noise = rng.uniform(6.0, 22.0);

    let mut pixels = Vec::with_capacity(width as usize * height as usize * 3);
    for y in 0..height {
        let yf = y as f64 + 0.5;
        for x in 0..width {
            let xf = x as f64 + 0.5;
            let mut colour = if let Some(obj) = objects.iter().find(|o| o.contains(xf, yf)) {
                let t = texture_value(style.texture, xf - obj.cx, yf - obj.cy, period, phase);
                [0, 1, 2].map(|c| dark[c] + (bright[c] - dark[c]) * t)
            } else if let Some((_, c)) = distractors.iter().find(|(s, _)| s.contains(xf, yf)) {
                *c
            } else {
                let t = (0.5 + xf * gx + yf * gy).clamp(0.0, 1.0);
                [0, 1, 2].map(|c| bg0[c] + (bg1[c] - bg0[c]) * t)
            };
            for c in colour.iter_mut() {
                *c += noise * rng.approx_normal();
            }
            pixels.extend(colour.map(|c| c.round().clamp(0.0, 255.0) as u8));
        }
    }
    RgbImage {
        width,
        height,
        pixels,
    }
}

/// The texture's brightness in 0..1 at offset (dx, dy) from the object's centre.
fn texture_value(texture: Texture, dx: f64, dy: f64, period: f64, phase: f64) -> f64 {
    let wave = |u: f64| 0.5 + 0.5 * (std::f64::consts::TAU * (u + phase) / period).sin();
    let square = |u: f64| {
        if (u + phase).rem_euclid(period) < period / 2.0 {
            1.0
        } else {
            0.0
        }
    };
    match texture {
        Texture::HorizontalStripes => wave(dy),
        Texture::VerticalStripes => wave(dx),
        Texture::Checkerboard => {
            let (a, b) = (square(dx), square(dy));
            if a == b {
                1.0
            } else {
                0.0
            }
        }
        Texture::Rings => wave((dx * dx + dy * dy).sqrt()),
    }
}

/// Encode RGB pixels as a baseline JPEG.
pub fn encode_jpeg(image: &RgbImage, quality: u8) -> Result<Vec<u8>> {
    let (w, h) = (u16::try_from(image.width), u16::try_from(image.height));
    let (Ok(w), Ok(h)) = (w, h) else {
        bail!("image {}x{} too large for JPEG", image.width, image.height)
    };
    let mut out = Vec::new();
    jpeg_encoder::Encoder::new(&mut out, quality)
        .encode(&image.pixels, w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| anyhow::anyhow!("JPEG encoding failed: {e}"))?;
    Ok(out)
}

/// Counts of what was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SynthSummary {
    pub train_images: usize,
    pub val_images: usize,
    pub bytes: u64,
}

fn dir_is_nonempty(dir: &Path) -> Result<bool> {
    Ok(std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .next()
        .is_some())
}

/// Write the data set to `out` (train/ and val/ plus synth-imagenet.json): generated in a
/// temporary sibling directory, renamed into place at the end. An existing non-empty `out`
/// is refused unless `force`.
pub fn write_synth_imagenet(out: &Path, spec: &SynthSpec, force: bool) -> Result<SynthSummary> {
    spec.validate()?;
    if out.exists() {
        if !out.is_dir() {
            bail!(
                "{} exists and is not a directory; choose another --out",
                out.display()
            );
        }
        if dir_is_nonempty(out)? && !force {
            bail!(
                "{} exists and is not empty; pass --force to replace it or choose another --out",
                out.display()
            );
        }
    }
    let stop = || {
        crate::util::interrupt::stop_if_requested(|| {
            format!(
                "interrupted: data synth-imagenet stopped before it wrote {out}: nothing \
                 already written was lost ({out} is as it was; the unfinished set beside it is \
                 removed); rerun the same command to write the data set",
                out = out.display()
            )
        })
    };
    crate::util::fs::with_staging_dir(out, "tmp", |tmp| {
        let summary = write_into(tmp, spec, &stop)?;
        // the last safe point: the rename below replaces --out at once
        stop()?;
        crate::util::fs::replace_dir(tmp, out)?;
        Ok(summary)
    })
}

/// Write the set into `dir`; `stop` is a safe point, asked before each image.
fn write_into(
    dir: &Path,
    spec: &SynthSpec,
    stop: &(dyn Fn() -> Result<()> + Sync),
) -> Result<SynthSummary> {
    let mut jobs = Vec::new();
    for (split, per_class) in [
        (Split::Train, spec.per_class),
        (Split::Val, spec.val_per_class),
    ] {
        for class in 0..spec.classes {
            let class_dir = dir.join(split.dir_name()).join(class_dir_name(class));
            std::fs::create_dir_all(&class_dir)
                .with_context(|| format!("cannot create {}", class_dir.display()))?;
            jobs.extend((0..per_class).map(|i| (split, class, i)));
        }
    }
    let bytes: u64 = jobs
        .par_iter()
        .map(|&(split, class, i)| -> Result<u64> {
            stop()?;
            let image = render_image(spec, split, class, i);
            let jpeg = encode_jpeg(&image, spec.quality)?;
            let class_name = class_dir_name(class);
            let path = dir
                .join(split.dir_name())
                .join(&class_name)
                .join(format!("{class_name}_{i:06}.JPEG"));
            std::fs::write(&path, &jpeg)
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(jpeg.len() as u64)
        })
        .try_reduce(|| 0, |a, b| Ok(a + b))?;
    let manifest = serde_json::json!({
        "generator": "mlperf-run data synth-imagenet",
        "spec": spec,
        "train_images": spec.classes * spec.per_class,
        "val_images": spec.classes * spec.val_per_class,
    });
    let text = serde_json::to_string_pretty(&manifest)? + "\n";
    std::fs::write(dir.join("synth-imagenet.json"), text)
        .context("cannot write synth-imagenet.json")?;
    Ok(SynthSummary {
        train_images: spec.classes * spec.per_class,
        val_images: spec.classes * spec.val_per_class,
        bytes,
    })
}

pub fn run_synth_imagenet(args: SynthImagenetArgs) -> Result<crate::util::ExitStatus> {
    let spec = SynthSpec::from_args(&args);
    // Ctrl-C stops it at a safe point, before --out changes (exit 130)
    crate::util::interrupt::install_with_notice(None);
    let start = std::time::Instant::now();
    let summary = write_synth_imagenet(&args.out, &spec, args.force)?;
    let mut out = crate::util::output::stdout();
    writeln!(
        out,
        "wrote {} training and {} validation JPEGs ({} classes, {:.1} MB) to {} in {:.1}s",
        summary.train_images,
        summary.val_images,
        spec.classes,
        summary.bytes as f64 / 1e6,
        args.out.display(),
        start.elapsed().as_secs_f64()
    )?;
    Ok(crate::util::ExitStatus::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_styles_are_distinct_and_neighbours_differ_in_texture() {
        for classes in [1, 2, 10, 12, 13, 100, 1000] {
            let styles: Vec<ClassStyle> = (0..classes).map(|c| class_style(c, classes)).collect();
            let mut keys: Vec<(u64, String, u64)> = styles
                .iter()
                .map(|s| {
                    (
                        s.hue.to_bits(),
                        format!("{:?}", s.texture),
                        s.period.to_bits(),
                    )
                })
                .collect();
            keys.sort();
            keys.dedup();
            assert_eq!(
                keys.len(),
                classes,
                "{classes} classes must have distinct styles"
            );
        }
        // 10 classes: 10 hues, neighbouring hues alternate between two textures.
        let styles: Vec<ClassStyle> = (0..10).map(|c| class_style(c, 10)).collect();
        for c in 0..10 {
            let next = styles[(c + 1) % 10];
            assert!((next.hue - styles[c].hue).rem_euclid(360.0) - 36.0 < 1e-9);
            assert_ne!(next.texture, styles[c].texture, "{c}");
        }
    }

    #[test]
    fn rendering_is_deterministic_and_sized_in_range() {
        let spec = SynthSpec {
            classes: 10,
            per_class: 1,
            val_per_class: 1,
            seed: 3,
            min_size: 40,
            max_size: 60,
            quality: 90,
            sizes: SizeDist::Uniform,
        };
        let a = render_image(&spec, Split::Train, 4, 7);
        assert_eq!(a, render_image(&spec, Split::Train, 4, 7));
        assert_ne!(a, render_image(&spec, Split::Val, 4, 7));
        assert!((40..=60).contains(&a.width) && (40..=60).contains(&a.height));
        assert_eq!(a.pixels.len(), (a.width * a.height * 3) as usize);
    }
}
