//! BERT run configuration (`configs/bert/*.toml`): data, training and optimizer settings,
//! validated against the closed rules before a run starts; the hyperparameter keys of the log
//! come from these values.

use crate::data::bert::packing;
use crate::methods::{BertMethods, MethodSet};
use crate::models::bert::BertConfig;
use crate::rules::Division;
use crate::runs::system::SystemConfig;
use crate::train::config::{
    check_batch, check_number, load_file, refuse_empty, takes_key, toml_error, ConfigKind,
    MemoryPart,
};
use crate::train::engine::Block;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::Path;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BertDataConfig {
    /// Eval samples (the reference: 10,000); the first ones of DIR/eval in file order.
    pub eval_samples: usize,
    #[serde(default = "default_eval_batch")]
    pub eval_batch_size: usize,
    /// With `methods.packing`: sequences per packed row at most (NVIDIA's packed data: 3).
    #[serde(default = "default_max_per_row")]
    pub max_sequences_per_row: usize,
}

fn default_max_per_row() -> usize {
    packing::DEFAULT_MAX_PER_ROW
}

fn default_eval_batch() -> usize {
    64
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BertTrainConfig {
    /// eval_accuracy (MLM accuracy) at which the run succeeds; closed: at least the target in
    /// benchmarks/bert/benchmark.toml.
    pub target: f64,
    pub global_batch_size: u64,
    pub gradient_accumulation_steps: u64,
    /// Sample limit: the run stops aborted after this many training samples.
    pub max_samples: u64,
    /// Open division only: evaluate every this many samples (closed: the MLPerf formula).
    #[serde(default)]
    pub eval_interval_samples: Option<u64>,
    /// With `methods.packing`: the sequences a packed row counts for in `global_batch_size`
    /// (NVIDIA's `PACKING_FACTOR`, default 2): a step trains `global_batch_size /
    /// packing_factor` rows. The log's `global_batch_size`, the learning-rate schedule (in
    /// steps) and the closed eval interval use `global_batch_size`; `epoch_num` counts the
    /// sequences actually trained, as NVIDIA's v3.0 logs do.
    #[serde(default = "default_packing_factor")]
    pub packing_factor: u64,
}

fn default_packing_factor() -> u64 {
    2
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BertOpt {
    Lamb,
    Adamw,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BertOptimizerConfig {
    /// "lamb" (the reference; required in the closed division) or "adamw".
    pub name: BertOpt,
    pub base_learning_rate: f64,
    #[serde(default)]
    pub end_learning_rate: f64,
    /// Polynomial decay power (the reference: 1.0).
    #[serde(default = "one")]
    pub poly_power: f64,
    /// opt_learning_rate_training_steps: the decay reaches end_learning_rate here.
    pub training_steps: i64,
    pub warmup_steps: i64,
    #[serde(default)]
    pub start_warmup_step: i64,
    pub beta1: f64,
    pub beta2: f64,
    pub epsilon: f64,
    pub weight_decay: f64,
    /// Global gradient-norm clip (the reference: 1.0).
    #[serde(default = "one")]
    pub max_grad_norm: f64,
    /// Where `max_grad_norm` applies: "global" (the reference: the norm of all averaged
    /// gradients, after the all-reduce) or "bucket" (open division: each ~25 MB gradient bucket
    /// on each rank before the all-reduce, `g_b *= c / max(|g_b|, c)`).
    #[serde(default)]
    pub gradient_clipping: GradientClipping,
}

/// See [`BertOptimizerConfig::gradient_clipping`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GradientClipping {
    #[default]
    Global,
    Bucket,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BertRunConfig {
    #[serde(default)]
    pub description: String,
    pub system: SystemConfig,
    pub model: BertConfig,
    pub data: BertDataConfig,
    pub train: BertTrainConfig,
    pub optimizer: BertOptimizerConfig,
    #[serde(default)]
    pub methods: BertMethods,
}

/// A BERT config as a note on a key of another benchmark's config names it: which keys it
/// takes is asked of [`BertRunConfig`] itself.
pub const KIND: ConfigKind = ConfigKind {
    benchmark: "bert",
    preset: "configs/bert/tiny_cpu.toml",
    takes: takes_key::<BertRunConfig>,
};

impl BertRunConfig {
    pub fn load(path: &Path, division: Division) -> Result<BertRunConfig> {
        load_file(path, |text| Self::parse(text, division))
    }

    pub fn parse(text: &str, division: Division) -> Result<BertRunConfig> {
        refuse_empty(text, KIND.preset)?;
        let mut table: toml::Table = toml::from_str(text)?;
        if let Some(toml::Value::Table(methods)) = table.get_mut("methods") {
            for w in crate::methods::bert::migrate_legacy_keys(methods)? {
                tracing::warn!("{w}");
            }
        }
        let cfg: BertRunConfig = toml::Value::Table(table)
            .try_into()
            .map_err(|e| toml_error(text, &e.to_string()))?;
        cfg.validate(division)?;
        Ok(cfg)
    }

    /// Refuse configs that cannot run, or that break the closed rules in the closed division.
    pub fn validate(&self, division: Division) -> Result<()> {
        self.system.validate()?;
        self.model.validate()?;
        let t = &self.train;
        let o = &self.optimizer;
        check_batch(t.global_batch_size, t.gradient_accumulation_steps)?;
        if t.max_samples == 0 {
            // no block to train: every run of a set ended aborted ("epoch limit reached")
            bail!(
                "train.max_samples must be at least 1 (the training samples after which a run \
                 that has not reached train.target stops), got 0"
            );
        }
        if !(t.target > 0.0 && t.target < 1.0) {
            bail!("train.target must be in (0, 1) (got {})", t.target);
        }
        self.validate_optimizer()?;
        if self.data.eval_samples == 0 || self.data.eval_batch_size == 0 {
            bail!("data.eval_samples and data.eval_batch_size must be > 0");
        }
        self.methods.validate()?;
        self.methods
            .check_fp8_shapes(self.model.hidden_size, self.model.intermediate_size)?;
        if self.methods.packing {
            if t.packing_factor == 0 || !t.global_batch_size.is_multiple_of(t.packing_factor) {
                bail!(
                    "train.global_batch_size ({}) must be a multiple of train.packing_factor ({}) \
                     with methods.packing: a step trains global_batch_size / packing_factor rows",
                    t.global_batch_size,
                    t.packing_factor
                );
            }
            let rows = t.global_batch_size / t.packing_factor;
            if !rows.is_multiple_of(t.gradient_accumulation_steps) {
                bail!(
                    "train.global_batch_size / train.packing_factor ({rows} packed rows) must be a \
                     multiple of train.gradient_accumulation_steps ({})",
                    t.gradient_accumulation_steps
                );
            }
            let k = self.data.max_sequences_per_row;
            if k == 0 || t.packing_factor > k as u64 {
                bail!(
                    "data.max_sequences_per_row ({k}) must be at least 1 and at least \
                     train.packing_factor ({})",
                    t.packing_factor
                );
            }
        }
        match division {
            Division::Closed => {
                let bench = crate::benchmarks::get("bert")?;
                if t.target < bench.target {
                    bail!(
                        "train.target = {} is below the closed BERT quality target {}",
                        t.target,
                        bench.target_text()
                    );
                }
                if o.name != BertOpt::Lamb {
                    bail!("optimizer.name must be \"lamb\" in the closed division (the reference optimizer)");
                }
                if t.eval_interval_samples.is_some() {
                    bail!(
                        "train.eval_interval_samples is open-division only; the closed division evaluates every \
                         FLOOR(0.05*(230.23*GBS + 3,000,000), 25,000) samples: remove the key"
                    );
                }
                self.methods.refuse_in_closed()?;
                if o.max_grad_norm != 1.0 {
                    bail!(
                        "optimizer.max_grad_norm must be 1.0 in the closed division (got {})",
                        o.max_grad_norm
                    );
                }
                if o.gradient_clipping != GradientClipping::Global {
                    bail!(
                        "optimizer.gradient_clipping = \"bucket\" is open-division only (the \
                         reference clips the global norm after the all-reduce): remove the key"
                    );
                }
            }
            Division::Open => {
                if t.eval_interval_samples == Some(0) {
                    bail!("train.eval_interval_samples must be > 0");
                }
            }
        }
        Ok(())
    }

    /// `[optimizer]`: the schedule in steps and the optimizer's numbers, each finite and in
    /// its range.
    fn validate_optimizer(&self) -> Result<()> {
        let o = &self.optimizer;
        if o.training_steps <= 0 {
            bail!(
                "optimizer.training_steps must be above 0, got {}",
                o.training_steps
            );
        }
        if o.warmup_steps < 0 || o.warmup_steps > o.training_steps {
            bail!(
                "optimizer.warmup_steps must be in 0..=optimizer.training_steps ({}), got {}",
                o.training_steps,
                o.warmup_steps
            );
        }
        let lr = o.base_learning_rate;
        check_number("optimizer.base_learning_rate", lr, lr > 0.0, "above 0")?;
        let end = o.end_learning_rate;
        check_number("optimizer.end_learning_rate", end, end >= 0.0, "at least 0")?;
        check_number(
            "optimizer.poly_power",
            o.poly_power,
            o.poly_power > 0.0,
            "above 0",
        )?;
        for (key, beta) in [("optimizer.beta1", o.beta1), ("optimizer.beta2", o.beta2)] {
            check_number(key, beta, (0.0..1.0).contains(&beta), "in [0, 1)")?;
        }
        check_number("optimizer.epsilon", o.epsilon, o.epsilon > 0.0, "above 0")?;
        let wd = o.weight_decay;
        check_number("optimizer.weight_decay", wd, wd >= 0.0, "at least 0")?;
        let clip = o.max_grad_norm;
        check_number("optimizer.max_grad_norm", clip, clip > 0.0, "above 0")?;
        Ok(())
    }

    /// Samples between evals in `division`.
    pub fn eval_interval(&self, division: Division) -> Result<u64> {
        let gbs = self.train.global_batch_size;
        match (division, self.train.eval_interval_samples) {
            (Division::Open, Some(n)) => Ok(n),
            _ => crate::benchmarks::get("bert")?
                .eval_interval_samples(gbs)
                .context("benchmarks/bert/benchmark.toml lacks the eval interval formula"),
        }
    }

    /// The memory each process certainly needs ([`check_memory`]): the model's fp32
    /// parameters, their gradients and the optimizer's two moments of each (LAMB's and
    /// AdamW's m and v). The input batches are left out: their sequence length is the data's.
    ///
    /// [`check_memory`]: crate::train::config::check_memory
    pub fn memory_floor(&self) -> Vec<MemoryPart> {
        let m = &self.model;
        let params = m.param_count() as f64;
        vec![MemoryPart {
            what: format!(
                "the model's {params:.3e} parameters with their gradients and optimizer state \
                 (model.hidden_size {}, model.num_layers {}, model.intermediate_size {}, \
                 model.vocab_size {}, model.max_position {})",
                m.hidden_size, m.num_layers, m.intermediate_size, m.vocab_size, m.max_position
            ),
            bytes: params * 4.0 * 4.0,
        }]
    }

    /// The blocks of a run: train until the next eval point (rounded up to whole steps), eval.
    pub fn blocks(&self, division: Division) -> Result<Vec<Block>> {
        let interval = self.eval_interval(division)?.max(1);
        let gbs = self.train.global_batch_size;
        let mut out = Vec::new();
        let mut seen = 0u64;
        let mut k = 1u64;
        while seen < self.train.max_samples {
            let point = k * interval;
            let steps = (point.saturating_sub(seen)).div_ceil(gbs).max(1);
            out.push(Block {
                first_epoch_num: seen,
                epoch_count: steps * gbs,
                eval_epoch_num: seen + steps * gbs,
            });
            seen += steps * gbs;
            while k * interval <= seen {
                k += 1;
            }
        }
        Ok(out)
    }

    /// The hyperparameter keys of the log, from this config.
    pub fn hyperparameters(
        &self,
        division: Division,
        train_samples: u64,
        max_seq_len: i64,
    ) -> Vec<(&'static str, Value)> {
        let t = &self.train;
        let o = &self.optimizer;
        let m = &self.methods;
        let mut kv: Vec<(&'static str, Value)> = vec![
            ("global_batch_size", json!(t.global_batch_size)),
            (
                "gradient_accumulation_steps",
                json!(t.gradient_accumulation_steps),
            ),
            (
                "opt_name",
                json!(match o.name {
                    BertOpt::Lamb => "lamb",
                    BertOpt::Adamw => "adamw",
                }),
            ),
            ("opt_base_learning_rate", json!(o.base_learning_rate)),
            ("opt_lamb_epsilon", json!(o.epsilon)),
            ("opt_learning_rate_training_steps", json!(o.training_steps)),
            ("opt_learning_rate_warmup_steps", json!(o.warmup_steps)),
            ("num_warmup_steps", json!(o.warmup_steps)),
            ("start_warmup_step", json!(o.start_warmup_step)),
            ("opt_lamb_beta_1", json!(o.beta1)),
            ("opt_lamb_beta_2", json!(o.beta2)),
            ("opt_lamb_weight_decay_rate", json!(o.weight_decay)),
            (
                "opt_lamb_learning_rate_decay_poly_power",
                json!(o.poly_power),
            ),
            ("opt_end_learning_rate", json!(o.end_learning_rate)),
            ("opt_gradient_clip_norm", json!(o.max_grad_norm)),
            ("max_sequence_length", json!(max_seq_len)),
        ];
        kv.extend(m.log_keys());
        if m.packing {
            kv.push(("packing_factor", json!(t.packing_factor)));
            kv.push((
                "max_sequences_per_row",
                json!(self.data.max_sequences_per_row),
            ));
        }
        if m.fp8 {
            // the delayed-scaling recipe (src/fused/fp8.rs), so a log says how its scales moved
            kv.extend([
                ("fp8_format", json!("hybrid")),
                ("fp8_amax_history_len", json!(m.fp8_amax_history_len)),
                ("fp8_margin", json!(m.fp8_margin)),
                ("fp8_amax_compute_algo", json!("max")),
                ("fp8_reduce_amax", json!(m.fp8_reduce_amax)),
            ]);
        }
        if division == Division::Open {
            kv.push((
                "eval_interval_samples",
                json!(self.eval_interval(division).unwrap_or(0)),
            ));
        }
        kv.extend([
            ("train_samples", json!(train_samples)),
            ("eval_samples", json!(self.data.eval_samples)),
        ]);
        kv.extend(self.system.device_log_keys());
        kv.push(("cuda_graph", json!(m.cuda_graph)));
        kv
    }
}
