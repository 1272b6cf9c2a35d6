//! `plan --config`: project a configuration of one's own to other process counts. The config's
//! global batch is kept at every count (each process trains its share, as `launch` runs it);
//! the samples to converge are what the measured runs' logs show (no RCP table holds a config
//! of one's own; [`super::measure::convergence_from_logs`]); the all-reduce carries the
//! config's model's gradients, fp32 as the gradient reducer sends them. Nothing is written
//! but the plot and plan.json: the config is run as it is.

use super::hardware::ModelCost;
use anyhow::{bail, Result};
use std::path::Path;

/// What the projection needs from a run config.
#[derive(Debug, Clone, PartialEq)]
pub struct Given {
    /// Samples per step (all processes).
    pub global_batch: u64,
    /// Micro-batches per step.
    pub accum: u64,
    /// The unit the batch splits over the processes in: samples, or packed rows of this many
    /// sequences (BERT with `methods.packing`).
    pub samples_per_row: u64,
    /// Trainable parameters of the configured model.
    pub parameters: f64,
}

impl Given {
    /// Whether `n` processes can share the batch: whole rows per process and micro-batch (the
    /// trainer's own check, `train::config::local_batch`).
    pub fn fits(&self, n: u64) -> bool {
        let rows = self.global_batch / self.samples_per_row.max(1);
        crate::train::config::local_batch("the global batch", rows, n, self.accum).is_ok()
    }

    /// The benchmark's costs with this model's gradients (fp32) in place of the full model's;
    /// `overhead_s` (the per-step cost that does not shrink with the batch) is the caller's.
    pub fn costs(&self, mut model: ModelCost, overhead_s: f64) -> ModelCost {
        model.parameters = self.parameters;
        model.grad_bytes = 4.0;
        model.step_overhead_s = overhead_s;
        model
    }
}

/// Read `path` as a `benchmark` run config (validated as the open division, which every
/// closed config also passes) and count its model's parameters.
#[cfg(feature = "torch")]
pub fn read(benchmark: &str, path: &Path) -> Result<Given> {
    use crate::rules::Division;
    match benchmark {
        "resnet" => {
            let cfg = crate::train::resnet::ResnetRunConfig::load(path, Division::Open)
                .map_err(|e| crate::train::with_config_hint("resnet", e))?;
            Ok(Given {
                global_batch: cfg.train.global_batch_size,
                accum: cfg.train.gradient_accumulation_steps,
                samples_per_row: 1,
                parameters: cfg.param_count(),
            })
        }
        "bert" => {
            let cfg = crate::train::bert::BertRunConfig::load(path, Division::Open)
                .map_err(|e| crate::train::with_config_hint("bert", e))?;
            let t = &cfg.train;
            Ok(Given {
                global_batch: t.global_batch_size,
                accum: t.gradient_accumulation_steps,
                samples_per_row: if cfg.methods.packing {
                    t.packing_factor
                } else {
                    1
                },
                parameters: cfg.model.param_count() as f64,
            })
        }
        other => bail!("plan --config: no run config for benchmark {other:?}"),
    }
}

/// Without libtorch there is no model to count.
#[cfg(not(feature = "torch"))]
pub fn read(_benchmark: &str, path: &Path) -> Result<Given> {
    bail!(
        "plan --config {}: counting the model's parameters needs the libtorch build of \
         mlperf-run",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_fits_only_whole_rows_per_process_and_micro_batch() {
        let g = Given {
            global_batch: 64,
            accum: 2,
            samples_per_row: 1,
            parameters: 1e6,
        };
        assert!(g.fits(1) && g.fits(2) && g.fits(32));
        assert!(!g.fits(3) && !g.fits(64) && !g.fits(0));
        let packed = Given {
            samples_per_row: 2,
            accum: 1,
            ..g
        };
        assert!(packed.fits(32) && !packed.fits(64));
    }

    #[test]
    fn the_costs_carry_this_models_fp32_gradients() {
        let g = Given {
            global_batch: 64,
            accum: 1,
            samples_per_row: 1,
            parameters: 1e6,
        };
        let c = g.costs(ModelCost::of("resnet").unwrap(), 0.0);
        assert_eq!(c.gradient_bytes(), 4e6);
        assert_eq!(c.step_overhead_s, 0.0);
    }
}
