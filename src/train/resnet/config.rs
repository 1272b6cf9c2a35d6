//! ResNet run configuration (`configs/resnet/*.toml`): hyperparameters and system settings.
//! Unknown keys are refused (`deny_unknown_fields`), enum values list the allowed ones, and
//! [`ResnetRunConfig::validate`] refuses closed-division configs that break the closed rules
//! before a run starts. The hyperparameter keys of the log come from these values
//! ([`ResnetRunConfig::hyperparameters`]), never retyped.

use crate::methods::MethodSet;
pub use crate::methods::{Amp, ResnetMethods};
use crate::rules::Division;
use crate::runs::system::SystemConfig;
use crate::train::config::{
    check_batch, check_number, load_file, local_batch, refuse_empty, takes_key, toml_error,
    ConfigKind, MemoryPart,
};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::Path;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub classes: i64,
    /// Planes of the first stage (64 in ResNet-50).
    pub width: i64,
    /// Bottlenecks per stage ([3, 4, 6, 3] in ResNet-50).
    pub blocks: [i64; 4],
    #[serde(default)]
    pub zero_init_last_bn: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataSource {
    /// `train/<class>/*.JPEG` and `val/<class>/*.JPEG` under --data.
    Imagefolder,
    /// Images generated in memory from the run's data seed (no files; --data is ignored).
    SyntheticMemory,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticConfig {
    pub train_per_class: usize,
    pub eval_per_class: usize,
    /// Per-pixel noise (std, in u8 levels) added to the class patterns; higher is harder.
    pub noise: f64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    pub source: DataSource,
    /// Full training image size (224 in the reference; 176 in MosaicML's recipe).
    pub train_image_size: i64,
    pub eval_image_size: i64,
    /// Decode workers for image folders (0: this process's share of the CPUs: all it is bound
    /// to, or the CPUs divided among the job's processes on this node; see
    /// `train::resnet::data::default_decode_workers`, which needs the `torch` feature).
    #[serde(default)]
    pub workers: usize,
    /// JPEG decoder for image folders: "cpu" (libjpeg-turbo, only the crop's region; default),
    /// "cpu-full" (zune-jpeg, whole image) or "nvjpeg" (GPU; the CPU decoder when missing).
    #[serde(default)]
    pub decoder: crate::data::imagenet::Decoder,
    /// Where crops are resized, flipped and normalised: "cpu" (the decode workers, into u8
    /// crops; default) or "gpu" (the batch hand-off, by the ragged kernels on the device, over
    /// each crop's decoded region; on a CPU run their CPU twin). The same boxes and flips; the
    /// resampling differs only by rounding (docs/data.md).
    #[serde(default)]
    pub augment: crate::data::imagenet::Augment,
    /// With `decoder = "nvjpeg"`: the share of each batch's images nvJPEG decodes, the rest going
    /// to the CPU region decoder at the same time (DALI's hw_decoder_load). Absent: the default
    /// for the GPU model (0.99 on H100/H200, 0.65 on A100 and others, 0.5 without a hardware
    /// JPEG engine).
    #[serde(default)]
    pub hw_decoder_load: Option<f64>,
    /// MiB (2^20 bytes) of whole decoded training images kept on the device after the epoch
    /// that first decodes them, later crops being cut from there (DALI's decoder cache; 12 GB
    /// per GPU in NVIDIA's H100/H200 runs). 0 (default): off. Needs `augment = "gpu"` and an
    /// image folder; filled until the budget is reached, never evicted
    /// ([`crate::data::imagenet::cache`]).
    #[serde(default)]
    pub gpu_cache_mb: i64,
    /// Training batches staged on the device ahead of the step (the hand-off's depth; the
    /// decode workers work one batch further ahead). Absent: [`DataConfig::DEFAULT_PREFETCH`].
    #[serde(default)]
    pub prefetch_batches: Option<usize>,
    #[serde(default)]
    pub synthetic: Option<SyntheticConfig>,
}

impl DataConfig {
    /// Batches staged ahead of the step when `prefetch_batches` is absent: enough to hide a
    /// batch's decode and copy behind the step before it.
    pub const DEFAULT_PREFETCH: usize = 2;

    /// The hand-off's depth: `prefetch_batches` or the default.
    pub fn prefetch(&self) -> usize {
        self.prefetch_batches.unwrap_or(Self::DEFAULT_PREFETCH)
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// The eval_accuracy at which the run stops with status success.
    pub target: f64,
    pub global_batch_size: u64,
    pub gradient_accumulation_steps: u64,
    /// Epoch limit: the run stops aborted after this many epochs without reaching the target.
    pub max_epochs: u64,
    /// Evaluate after 0-based epoch e when e >= eval_offset and (e - eval_offset) % eval_period == 0.
    pub eval_offset: u64,
    pub eval_period: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OptName {
    Lars,
    Sgd,
}

impl OptName {
    pub fn as_str(self) -> &'static str {
        match self {
            OptName::Lars => "lars",
            OptName::Sgd => "sgd",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DecayKind {
    Poly,
    Cosine,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    pub name: OptName,
    pub base_lr: f64,
    pub end_lr: f64,
    pub warmup_epochs: f64,
    pub decay: DecayKind,
    /// Power of the polynomial decay (2 in the closed division).
    #[serde(default = "default_power")]
    pub poly_power: f64,
    /// Length of the schedule in epochs, warmup included (NVIDIA: 37 at GBS 3264).
    pub schedule_epochs: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    #[serde(default)]
    pub nesterov: bool,
    /// LARS trust coefficient (0.001 in the reference).
    #[serde(default = "default_eta")]
    pub lars_eta: f64,
    #[serde(default)]
    pub lars_epsilon: f64,
    /// SGD only: also decay BN parameters and biases (torch's default).
    #[serde(default)]
    pub decay_bn_bias: bool,
}

fn default_power() -> f64 {
    2.0
}
fn default_eta() -> f64 {
    0.001
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ResnetRunConfig {
    /// What this preset is (shown in errors and logs).
    pub description: String,
    pub system: SystemConfig,
    pub model: ModelConfig,
    pub data: DataConfig,
    pub train: TrainConfig,
    pub optimizer: OptimizerConfig,
    #[serde(default)]
    pub methods: ResnetMethods,
}

/// A ResNet config as a note on a key of another benchmark's config names it: which keys it
/// takes is asked of [`ResnetRunConfig`] itself.
pub const KIND: ConfigKind = ConfigKind {
    benchmark: "resnet",
    preset: "configs/resnet/tiny_cpu.toml",
    takes: takes_key::<ResnetRunConfig>,
};

/// Samples of the full ImageNet training set (defined with the data pipeline, which also
/// holds the validation count and the class count).
pub use crate::data::imagenet::IMAGENET_TRAIN_SAMPLES;

impl ResnetRunConfig {
    /// Read and validate `path` for `division`.
    pub fn load(path: &Path, division: Division) -> Result<ResnetRunConfig> {
        load_file(path, |text| Self::parse(text, division))
    }

    pub fn parse(text: &str, division: Division) -> Result<ResnetRunConfig> {
        refuse_empty(text, KIND.preset)?;
        let cfg: ResnetRunConfig =
            toml::from_str(text).map_err(|e| toml_error(text, &e.to_string()))?;
        cfg.validate(division)?;
        Ok(cfg)
    }

    /// Sanity checks for every division, then the closed rules for `Division::Closed`.
    pub fn validate(&self, division: Division) -> Result<()> {
        self.system.validate()?;
        self.validate_model_and_train()?;
        self.validate_data()?;
        self.validate_optimizer()?;
        self.validate_methods()?;
        if division == Division::Closed {
            self.validate_closed()?;
        }
        Ok(())
    }

    /// `[model]` and `[train]`: sizes, the batch, the eval cadence, the target.
    fn validate_model_and_train(&self) -> Result<()> {
        let t = &self.train;
        if self.model.classes < 2 {
            bail!(
                "model.classes must be at least 2, got {}",
                self.model.classes
            );
        }
        if self.model.width < 1 || self.model.blocks.iter().any(|&b| b < 1) {
            bail!("model.width and every model.blocks entry must be at least 1");
        }
        check_batch(t.global_batch_size, t.gradient_accumulation_steps)?;
        if t.max_epochs == 0 || t.eval_period == 0 {
            bail!("train.max_epochs and train.eval_period must be at least 1");
        }
        if t.eval_offset >= t.max_epochs {
            bail!(
                "train.eval_offset ({}) must be below train.max_epochs ({})",
                t.eval_offset,
                t.max_epochs
            );
        }
        if !(t.target > 0.0 && t.target < 1.0) {
            bail!(
                "train.target must be a fraction in (0, 1), got {}",
                t.target
            );
        }
        Ok(())
    }

    /// `[data]`: image sizes, the decoder and its share, the prefetch depth, the source.
    fn validate_data(&self) -> Result<()> {
        if self.data.train_image_size < 8 || self.data.eval_image_size < 8 {
            bail!("data.train_image_size and data.eval_image_size must be at least 8");
        }
        if let Some(l) = self.data.hw_decoder_load {
            if !(0.0..=1.0).contains(&l) {
                bail!(
                    "data.hw_decoder_load must be within 0..1 (the share of each batch nvJPEG \
                     decodes), got {l}"
                );
            }
            if self.data.decoder != crate::data::imagenet::Decoder::Nvjpeg {
                bail!(
                    "data.hw_decoder_load is for data.decoder = \"nvjpeg\" (the share of each \
                     batch it decodes): set the decoder or remove the key"
                );
            }
        }
        if let Some(n) = self.data.prefetch_batches {
            if !(1..=16).contains(&n) {
                bail!(
                    "data.prefetch_batches must be within 1..16 (training batches staged on the \
                     device ahead of the step), got {n}"
                );
            }
        }
        if self.data.decoder == crate::data::imagenet::Decoder::Nvjpeg
            && self.data.augment != crate::data::imagenet::Augment::Gpu
        {
            bail!(
                "data.decoder = \"nvjpeg\" decodes into GPU memory, for crops resized on the \
                 device: set data.augment = \"gpu\" (or data.decoder = \"cpu\" to decode and \
                 resize on the host)"
            );
        }
        self.validate_gpu_cache()?;
        if self.data.source == DataSource::SyntheticMemory && self.data.synthetic.is_none() {
            bail!("data.source = \"synthetic-memory\" needs a [data.synthetic] table");
        }
        if let Some(s) = &self.data.synthetic {
            check_number(
                "data.synthetic.noise",
                s.noise,
                s.noise >= 0.0,
                "at least 0",
            )?;
        }
        if self.data.source == DataSource::SyntheticMemory {
            self.validate_synthetic_sizes()?;
        }
        Ok(())
    }

    /// An ImageFolder set (`data.source = "imagefolder"`) as listed under `root`: `train` and
    /// `val` images. One that cannot feed a training step or an eval is refused before the first
    /// run, naming the folder, its count and the key (it was found by each run's data load, so a
    /// run set wrote an aborted log per run and exited 1).
    pub fn check_folder_sizes(&self, root: &Path, train: usize, val: usize) -> Result<()> {
        let gbs = self.train.global_batch_size;
        if (train as u64) < gbs {
            bail!(
                "{} holds {train} training images, fewer than train.global_batch_size ({gbs}), \
                 the images of one training step: lower train.global_batch_size in the config to \
                 at most {train}, or give --data a set with at least {gbs} training images",
                root.join("train").display()
            );
        }
        if val == 0 {
            bail!(
                "{} holds no images, so there is nothing to evaluate: add <class>/<image>.JPEG \
                 files to it (the same classes as train/)",
                root.join("val").display()
            );
        }
        Ok(())
    }

    /// An ImageFolder set as listed under `root` with `classes` class folders: the model's
    /// `model.classes` outputs must be as many (one per class folder). Refused before the first
    /// run, naming the folder, both counts and the key (each run's build found it, so a run set
    /// wrote an aborted log per run, exited 1 and named neither the folder nor the key's file).
    pub fn check_folder_classes(&self, root: &Path, classes: usize) -> Result<()> {
        if classes as i64 != self.model.classes {
            bail!(
                "{} holds {classes} class folders but model.classes is {}: set model.classes = \
                 {classes} in the config, or give --data a set with {} classes (a class folder \
                 too many or too few in train/ and val/?)",
                root.join("train").display(),
                self.model.classes,
                self.model.classes
            );
        }
        Ok(())
    }

    /// `[data.synthetic]` with `data.source = "synthetic-memory"`: a set its sizes make is known
    /// before the run, so one that cannot feed a step or an eval is refused here (it used to
    /// start every run of a set, each ending aborted with a log in the results folder).
    fn validate_synthetic_sizes(&self) -> Result<()> {
        let Some(s) = &self.data.synthetic else {
            return Ok(());
        };
        if s.train_per_class == 0 || s.eval_per_class == 0 {
            bail!(
                "data.synthetic.train_per_class and data.synthetic.eval_per_class must be at \
                 least 1 (images made per class for training and for the eval), got {} and {}",
                s.train_per_class,
                s.eval_per_class
            );
        }
        let classes = self.model.classes as u64;
        for (key, per_class) in [
            ("train_per_class", s.train_per_class),
            ("eval_per_class", s.eval_per_class),
        ] {
            // 10^11 images: the first epoch's shuffled order failed to allocate (an abort)
            let n = classes.saturating_mul(per_class as u64);
            if n > Self::MAX_SYNTHETIC_IMAGES {
                bail!(
                    "the synthetic set (model.classes {classes} x data.synthetic.{key} \
                     {per_class} = {n} images) must be at most {} images (about 100 ImageNets, \
                     made in memory for tests): lower data.synthetic.{key} to at most {}",
                    Self::MAX_SYNTHETIC_IMAGES,
                    Self::MAX_SYNTHETIC_IMAGES / classes
                );
            }
        }
        let images = classes.saturating_mul(s.train_per_class as u64);
        let gbs = self.train.global_batch_size;
        if images < gbs {
            bail!(
                "the synthetic training set (model.classes {} x data.synthetic.train_per_class \
                 {} = {images} images) is smaller than train.global_batch_size ({gbs}): raise \
                 data.synthetic.train_per_class to at least {} or lower the batch",
                self.model.classes,
                s.train_per_class,
                gbs.div_ceil(self.model.classes as u64)
            );
        }
        Ok(())
    }

    /// `data.gpu_cache_mb`: a size in MiB, for crops resized on the device from an image folder.
    fn validate_gpu_cache(&self) -> Result<()> {
        let mb = self.data.gpu_cache_mb;
        if !(0..=Self::MAX_GPU_CACHE_MB).contains(&mb) {
            bail!(
                "data.gpu_cache_mb must be within 0..{} (MiB of decoded images kept on the \
                 device; 0 turns the cache off), got {mb}",
                Self::MAX_GPU_CACHE_MB
            );
        }
        if mb > 0 && self.data.augment != crate::data::imagenet::Augment::Gpu {
            bail!(
                "data.gpu_cache_mb = {mb} keeps decoded images on the device, for crops resized \
                 there: set data.augment = \"gpu\" (or data.gpu_cache_mb = 0)"
            );
        }
        if mb > 0 && self.data.source != DataSource::Imagefolder {
            bail!(
                "data.gpu_cache_mb = {mb} caches decoded JPEGs of an image folder: set \
                 data.source = \"imagefolder\" (or data.gpu_cache_mb = 0)"
            );
        }
        Ok(())
    }

    /// The most images of a synthetic set (`data.synthetic`), for training and for the eval
    /// each: 2^27, about 100 times ImageNet's training set.
    pub const MAX_SYNTHETIC_IMAGES: u64 = 1 << 27;

    /// The largest `data.gpu_cache_mb`: 1 TiB, more than any GPU's memory.
    pub const MAX_GPU_CACHE_MB: i64 = 1 << 20;

    /// `[optimizer]`: the learning-rate schedule, momentum and weight decay; each number finite.
    fn validate_optimizer(&self) -> Result<()> {
        let o = &self.optimizer;
        check_number("optimizer.base_lr", o.base_lr, o.base_lr > 0.0, "above 0")?;
        check_number("optimizer.end_lr", o.end_lr, o.end_lr >= 0.0, "at least 0")?;
        let w = o.warmup_epochs;
        check_number("optimizer.warmup_epochs", w, w >= 0.0, "at least 0")?;
        check_number(
            "optimizer.schedule_epochs",
            o.schedule_epochs,
            o.schedule_epochs > w,
            &format!("above optimizer.warmup_epochs ({w})"),
        )?;
        check_number(
            "optimizer.poly_power",
            o.poly_power,
            o.poly_power > 0.0,
            "above 0",
        )?;
        let m = o.momentum;
        check_number(
            "optimizer.momentum",
            m,
            (0.0..1.0).contains(&m),
            "in [0, 1)",
        )?;
        let wd = o.weight_decay;
        check_number("optimizer.weight_decay", wd, wd >= 0.0, "at least 0")?;
        check_number(
            "optimizer.lars_eta",
            o.lars_eta,
            o.lars_eta >= 0.0,
            "at least 0",
        )?;
        let eps = o.lars_epsilon;
        check_number("optimizer.lars_epsilon", eps, eps >= 0.0, "at least 0")?;
        Ok(())
    }

    /// `[methods]`: label smoothing, progressive resizing, EMA, the fp16 loss scale.
    fn validate_methods(&self) -> Result<()> {
        let m = &self.methods;
        if !(0.0..1.0).contains(&m.label_smoothing) {
            bail!(
                "methods.label_smoothing must be in [0, 1), got {}",
                m.label_smoothing
            );
        }
        if let Some(p) = &m.progressive_resizing {
            p.validate()
                .map_err(|e| anyhow::anyhow!("methods.progressive_resizing: {e}"))?;
        }
        if let Some(e) = &m.ema {
            // an infinite half-life was taken: the average never moved from the initial weights
            let h = e.half_life_steps;
            check_number("methods.ema.half_life_steps", h, h > 0.0, "above 0")?;
            if e.update_interval == 0 {
                // it ran as 1 and was logged as 0
                bail!(
                    "methods.ema.update_interval must be at least 1 (the steps between updates \
                     of the average), got 0"
                );
            }
        }
        if let Some(l) = &m.loss_scale {
            if m.amp != Amp::Fp16 {
                bail!(
                    "methods.loss_scale is for methods.amp = \"fp16\" (bf16 and fp32 need no \
                     loss scaling): remove it or set amp = \"fp16\""
                );
            }
            l.config()
                .validate()
                .map_err(|e| anyhow::anyhow!("methods.loss_scale: {e}"))?;
        }
        Ok(())
    }

    fn validate_closed(&self) -> Result<()> {
        let o = &self.optimizer;
        let t = &self.train;
        let m = &self.methods;
        let refuse = |msg: String| -> Result<()> { bail!("closed division: {msg}") };
        let bench = crate::benchmarks::get("resnet")?;
        if t.target < bench.target {
            refuse(format!(
                "train.target must be at least {} (the ResNet quality target), got {}",
                bench.target_text(),
                t.target
            ))?;
        }
        if o.decay != DecayKind::Poly {
            refuse("optimizer.decay must be \"poly\" (allowed: poly)".into())?;
        }
        if o.end_lr != 1e-4 {
            refuse(format!("optimizer.end_lr must be 0.0001, got {}", o.end_lr))?;
        }
        if o.poly_power != 2.0 {
            refuse(format!(
                "optimizer.poly_power must be 2, got {}",
                o.poly_power
            ))?;
        }
        let n = (o.weight_decay / 1e-4).log2();
        if !(o.weight_decay > 0.0 && (n - n.round()).abs() < 1e-9) {
            refuse(format!(
                "optimizer.weight_decay must be 0.0001 * 2^N, got {}",
                o.weight_decay
            ))?;
        }
        match o.name {
            OptName::Lars if o.lars_epsilon != 0.0 => refuse(format!(
                "optimizer.lars_epsilon must be 0.0, got {}",
                o.lars_epsilon
            ))?,
            OptName::Sgd if ((o.base_lr / 0.001) - (o.base_lr / 0.001).round()).abs() > 1e-6 => {
                refuse(format!(
                    "optimizer.base_lr must be a multiple of 0.001 with sgd, got {}",
                    o.base_lr
                ))?
            }
            _ => {}
        }
        let (every, max_offset) = bench.eval_epochs()?;
        if t.eval_period != every || t.eval_offset > max_offset {
            refuse(format!(
                "evaluate every {every} epochs with an offset 0..={max_offset} (train.eval_period = {every}, train.eval_offset in 0..={max_offset}), got period {} offset {}",
                t.eval_period, t.eval_offset
            ))?;
        }
        m.refuse_in_closed()?;
        Ok(())
    }

    /// The model's trainable parameters, counted from `[model]` as `models::resnet` builds
    /// them (convolutions without biases, two per BatchNorm channel, the fc layer's weight and
    /// bias), in f64 so that no size overflows and without building the model.
    pub fn param_count(&self) -> f64 {
        let m = &self.model;
        let w = m.width as f64;
        let bn = |c: f64| 2.0 * c;
        let mut n = 49.0 * 3.0 * w + bn(w);
        let mut c_in = w;
        for (stage, &blocks) in m.blocks.iter().enumerate() {
            let p = w * (1u64 << stage) as f64;
            let out = 4.0 * p;
            let block = |c_in: f64| c_in * p + bn(p) + 9.0 * p * p + bn(p) + p * out + bn(out);
            // the first block of a stage projects (strided, or more channels); the rest do not
            let project = stage > 0 || c_in != out;
            n += block(c_in) + if project { c_in * out + bn(out) } else { 0.0 };
            n += (blocks as f64 - 1.0) * block(out);
            c_in = out;
        }
        n + c_in * m.classes as f64 + m.classes as f64
    }

    /// The memory each of `world_size` processes certainly needs ([`check_memory`]): the fp32
    /// parameters, their gradients and the optimizer's one buffer each (LARS's velocity, SGD's
    /// momentum), and one micro-batch of fp32 images at the larger of the eval size and the
    /// full training size (without progressive resizing; with it, its first epochs train
    /// smaller).
    ///
    /// [`check_memory`]: crate::train::config::check_memory
    pub fn memory_floor(&self, world_size: u64) -> Vec<MemoryPart> {
        let t = &self.train;
        let micro = t.global_batch_size as f64
            / (world_size.max(1) as f64 * t.gradient_accumulation_steps.max(1) as f64);
        let d = &self.data;
        let mut size = d.eval_image_size;
        if self.methods.progressive_resizing.is_none() {
            size = size.max(d.train_image_size);
        }
        let side = size as f64;
        let params = self.param_count();
        vec![
            MemoryPart {
                what: format!(
                    "the model's {params:.3e} parameters with their gradients and optimizer \
                     state (model.width {}, model.blocks {:?}, model.classes {})",
                    self.model.width, self.model.blocks, self.model.classes
                ),
                bytes: params * 4.0 * 3.0,
            },
            MemoryPart {
                what: format!(
                    "one micro-batch of {micro} images of 3 x {size} x {size} as fp32 \
                     (train.global_batch_size {} over {world_size} process(es) and \
                     train.gradient_accumulation_steps {}; data.train_image_size {}, \
                     data.eval_image_size {})",
                    t.global_batch_size,
                    t.gradient_accumulation_steps,
                    d.train_image_size,
                    d.eval_image_size
                ),
                bytes: micro * 3.0 * side * side * 4.0,
            },
        ]
    }

    /// Local (per-process, per-micro-batch) batch size for `world_size` processes.
    pub fn local_batch(&self, world_size: u64) -> Result<u64> {
        let t = &self.train;
        local_batch(
            &format!("train.global_batch_size ({})", t.global_batch_size),
            t.global_batch_size,
            world_size,
            t.gradient_accumulation_steps,
        )
    }

    /// The hyperparameter keys the log carries (after the submission keys and the seed), in
    /// order, with values straight from this config. `steps_per_epoch` turns epochs into the
    /// logged decay steps; `train_samples`/`eval_samples` come from the data set.
    pub fn hyperparameters(
        &self,
        division: Division,
        steps_per_epoch: u64,
        train_samples: u64,
        eval_samples: u64,
        world_size: u64,
    ) -> Vec<(&'static str, Value)> {
        let t = &self.train;
        let o = &self.optimizer;
        let decay_steps =
            ((o.schedule_epochs - o.warmup_epochs) * steps_per_epoch as f64).round() as u64;
        let mut kv: Vec<(&'static str, Value)> = vec![
            ("global_batch_size", json!(t.global_batch_size)),
            (
                "gradient_accumulation_steps",
                json!(t.gradient_accumulation_steps),
            ),
            ("opt_name", json!(o.name.as_str())),
        ];
        match o.name {
            OptName::Lars => kv.extend([
                ("lars_opt_base_learning_rate", json!(o.base_lr)),
                ("lars_opt_end_learning_rate", json!(o.end_lr)),
                (
                    "lars_opt_learning_rate_decay_poly_power",
                    json!(o.poly_power),
                ),
                ("lars_opt_learning_rate_decay_steps", json!(decay_steps)),
                ("lars_epsilon", json!(o.lars_epsilon)),
                (
                    "lars_opt_learning_rate_warmup_epochs",
                    json!(o.warmup_epochs),
                ),
                ("lars_opt_momentum", json!(o.momentum)),
                ("lars_opt_weight_decay", json!(o.weight_decay)),
            ]),
            OptName::Sgd => kv.extend([
                ("sgd_opt_base_learning_rate", json!(o.base_lr)),
                ("sgd_opt_end_learning_rate", json!(o.end_lr)),
                (
                    "sgd_opt_learning_rate_decay_poly_power",
                    json!(o.poly_power),
                ),
                ("sgd_opt_learning_rate_decay_steps", json!(decay_steps)),
                ("sgd_opt_weight_decay", json!(o.weight_decay)),
                ("sgd_opt_momentum", json!(o.momentum)),
                (
                    "model_bn_span",
                    json!(self.local_batch(world_size).unwrap_or(t.global_batch_size)),
                ),
                ("opt_learning_rate_warmup_epochs", json!(o.warmup_epochs)),
            ]),
        }
        if division == Division::Open {
            kv.extend([(
                "opt_learning_rate_decay_schedule",
                json!(format!("{:?}", o.decay).to_lowercase()),
            )]);
        }
        kv.extend(self.method_hyperparameters(division));
        kv.extend([
            ("train_samples", json!(train_samples)),
            ("eval_samples", json!(eval_samples)),
        ]);
        kv.extend(self.system.device_log_keys());
        kv.push(("cuda_graph", json!(self.methods.cuda_graph)));
        kv
    }

    /// The methods' hyperparameter keys: in every log, as BERT's (a closed run's
    /// implementation choices, fused BN+ReLU, fp16 and its loss scale, are on record too), and
    /// the open methods' settings.
    fn method_hyperparameters(&self, division: Division) -> Vec<(&'static str, Value)> {
        let m = &self.methods;
        let mut kv = m.log_keys();
        if m.amp == Amp::Fp16 {
            let l = m.loss_scale.unwrap_or_default();
            kv.extend([
                ("amp_loss_scale_init", json!(l.init_scale)),
                ("amp_loss_scale_growth_interval", json!(l.growth_interval)),
            ]);
        }
        if division == Division::Open {
            if let Some(p) = &m.progressive_resizing {
                kv.extend([
                    ("progressive_resizing_initial_scale", json!(p.initial_scale)),
                    (
                        "progressive_resizing_delay_fraction",
                        json!(p.delay_fraction),
                    ),
                    (
                        "progressive_resizing_finetune_fraction",
                        json!(p.finetune_fraction),
                    ),
                    (
                        "progressive_resizing_size_increment",
                        json!(p.size_increment),
                    ),
                ]);
            }
            if let Some(e) = &m.ema {
                kv.extend([
                    ("ema_half_life_steps", json!(e.half_life_steps)),
                    ("ema_update_interval", json!(e.update_interval)),
                ]);
            }
        }
        kv
    }

    /// 0-based epochs after which the closed cadence evaluates, up to max_epochs.
    pub fn eval_epochs(&self) -> Vec<u64> {
        let t = &self.train;
        let mut out: Vec<u64> = (t.eval_offset..t.max_epochs)
            .step_by(t.eval_period as usize)
            .collect();
        // always evaluate after the last epoch so a run never ends without a verdict
        if out.last() != Some(&(t.max_epochs - 1)) {
            out.push(t.max_epochs - 1);
        }
        out
    }
}
