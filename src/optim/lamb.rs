//! LAMB (You et al.) as the MLPerf BERT reference runs it, and AdamW, plus the reference's
//! learning-rate schedule.
//!
//! One step, for every parameter `w` with gradient `g` (t = 1, 2, ... counts steps):
//! 1. global gradient clipping: `g *= c / max(|G|, c)` with `|G|` the L2 norm over all
//!    gradients and `c = max_grad_norm` (1.0); skipped when `max_grad_norm` is None;
//! 2. `m = b1*m + (1-b1)*g`, `v = b2*v + (1-b2)*g^2`, `m^ = m/(1-b1^t)`, `v^ = v/(1-b2^t)`;
//! 3. `u = m^ / (sqrt(v^) + eps) + wd*w` (decoupled weight decay; no `wd*w` for excluded params);
//! 4. LAMB: `r = |w|/|u|` when both norms are > 0, else 1.0 (the reference's `tf.where` pair);
//!    `r = 1` for excluded params. AdamW: `r = 1` always;
//! 5. `w -= lr * r * u`.
//!
//! (Steps 1-5 run as multi-tensor kernels, see [`Lamb`].)
//!
//! The gradients are the step's averaged ones: [`Lamb`] is an [`Optimizer`] over
//! [`ParamGroups`], and the training step hands it its gradient list after the all-reduce
//! (src/train/bert/workload.rs), so the clip of step 1 sees the norm of the averaged gradients, as the
//! reference's does.
//!
//! Excluded from weight decay and the trust ratio: the parameters [`super::exempt_from_decay`]
//! exempts (1-d: biases and LayerNorm weights), the rule of all our optimizers. For BERT it
//! selects exactly the reference's `exclude_from_weight_decay = ["LayerNorm", "layer_norm",
//! "bias"]` (every variable whose name contains `LayerNorm` or `layer_norm`, or ends in `bias`);
//! tests/numerics/bert_optim.rs checks that over the model's variables.
//!
//! Schedule ([`PolyWarmup`], the reference's `create_optimizer`): for the update made at
//! `step` (0 for the first) `lr = (base - end) * (1 - min(step, total)/total)^power + end`,
//! except during warmup, `0 <= step - start_warmup_step < warmup_steps`, where
//! `lr = base * (step - start_warmup_step) / warmup_steps`.

use super::foreach::{self, AdamArgs, AdamKind, DeviceScalar, Lr};
use super::{split_defined, zeroed_state, Optimizer, ParamGroups, StepLr};
use anyhow::{bail, Context, Result};
use tch::{Kind, Tensor};

/// LAMB / AdamW hyperparameters.
#[derive(Debug, Clone, PartialEq)]
pub struct LambConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Global-norm clip of the (averaged) gradients before the step (the reference: 1.0).
    pub max_grad_norm: Option<f64>,
    /// true: LAMB (layer-wise trust ratio); false: AdamW.
    pub trust_ratio: bool,
}

impl Default for LambConfig {
    fn default() -> Self {
        LambConfig {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-6,
            weight_decay: 0.01,
            max_grad_norm: Some(1.0),
            trust_ratio: true,
        }
    }
}

/// LAMB or AdamW ([`LambConfig::trust_ratio`]) as an [`Optimizer`].
///
/// One step runs in multi-tensor kernels ([`super::foreach`]): the global gradient norm from
/// one `_foreach_norm`; the clip as the fused kernels' `grad_scale`; AdamW as libtorch's fused
/// AdamW kernel (one pass per weight-decay group); LAMB's Adam direction `u = m^/(sqrt(v^)+eps)`
/// from libtorch's fused Adam kernel run at learning rate -1 on a zeroed buffer (the same
/// moment updates and bias corrections), then decay, trust ratios as one device vector, and the
/// update as list operations. The learning rate and step count live in device scalars, written
/// by [`Optimizer::begin_step`], which also makes the state (zeros like each parameter) on the
/// first step; [`Optimizer::apply`] only launches kernels (capturable in a CUDA graph).
pub struct Lamb {
    pub config: LambConfig,
    /// Per parameter: the first and second moments, and (LAMB only) the Adam direction `u` of
    /// the step (a persistent buffer).
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    u: Vec<Tensor>,
    /// Steps begun so far.
    steps: i64,
    /// The step count as a device scalar (bias corrections).
    step_t: Option<DeviceScalar>,
    lr: StepLr,
    /// The last [`Optimizer::apply`]'s global gradient norm.
    grad_norm: Option<Tensor>,
}

impl Lamb {
    pub fn new(config: LambConfig) -> Result<Lamb> {
        for (name, v, lo, hi) in [
            ("beta1", config.beta1, 0.0, 1.0),
            ("beta2", config.beta2, 0.0, 1.0),
        ] {
            if !(lo..hi).contains(&v) {
                bail!("optimizer.{name} must be in [0, 1) (got {v})");
            }
        }
        if config.eps <= 0.0 || config.weight_decay < 0.0 {
            bail!("optimizer.eps must be > 0 and optimizer.weight_decay >= 0");
        }
        Ok(Lamb {
            config,
            m: Vec::new(),
            v: Vec::new(),
            u: Vec::new(),
            steps: 0,
            step_t: None,
            lr: StepLr::default(),
            grad_norm: None,
        })
    }

    /// Steps begun so far.
    pub fn steps(&self) -> i64 {
        self.steps
    }

    /// The global gradient norm (before clipping) of the last [`Optimizer::apply`], a 0-dim
    /// tensor on the parameters' device (not read back here); None before the first.
    pub fn grad_norm(&self) -> Option<&Tensor> {
        self.grad_norm.as_ref()
    }

    /// Zeroed moments (and `u`) like every parameter, made on the first step (or again if the
    /// parameter list changed). The kernels keep fp32 parameters.
    fn make_state(&mut self, params: &ParamGroups) -> Result<()> {
        if self.m.len() == params.params.len() {
            return Ok(());
        }
        for p in &params.params {
            if p.tensor.kind() != Kind::Float {
                bail!(
                    "{}: the LAMB/AdamW kernels keep fp32 parameters (bf16 runs in autocast), \
                     this one is {:?}",
                    p.name,
                    p.tensor.kind()
                );
            }
        }
        zeroed_state(&mut self.m, params);
        zeroed_state(&mut self.v, params);
        if self.config.trust_ratio {
            zeroed_state(&mut self.u, params);
        }
        Ok(())
    }
}

impl Optimizer for Lamb {
    /// The host-side part of a step: the state on the first step, the step count and `lr` into
    /// device scalars (outside a CUDA graph).
    fn begin_step(&mut self, params: &ParamGroups, lr: f64) -> Result<()> {
        let Some(first) = params.params.first() else {
            return Ok(());
        };
        self.make_state(params)?;
        self.steps += 1;
        let device = first.tensor.device();
        self.step_t
            .get_or_insert_with(|| DeviceScalar::new(device))
            .set(self.steps as f64)?;
        self.lr.set(params, lr)
    }

    /// The update's kernels (capturable), from `grads` as the step averaged them. The global
    /// gradient norm (before clipping) stays on the device ([`Lamb::grad_norm`]). The gradients
    /// serve as scratch space.
    fn apply(&mut self, params: &mut ParamGroups, grads: &[Tensor]) -> Result<()> {
        let c = self.config.clone();
        // the parameters that have a gradient this step, in order, and split by decay
        let (all, _) = split_defined(params, grads, |_| true);
        if all.idx.is_empty() {
            self.grad_norm = Some(Tensor::from(0.0f32));
            return Ok(());
        }
        let (decayed, exempt) = split_defined(params, grads, |p| !p.exempt);
        let step_t = self
            .step_t
            .as_ref()
            .context("lamb: apply before begin_step")?
            .tensor()
            .shallow_clone();
        let lr_t = self.lr.tensor("lamb")?;
        let (m, v, u) = (&self.m, &self.v, &self.u);
        let pick = |state: &[Tensor], idx: &[usize]| -> Vec<Tensor> {
            idx.iter().map(|&i| state[i].shallow_clone()).collect()
        };
        let total = tch::no_grad(|| -> Result<Tensor> {
            let total = foreach::norms(&all.grads)?.f_norm()?;
            // clip: g *= mx / max(|G|, mx), as the fused kernels' divisor max(|G|, mx) / mx
            let grad_scale = match c.max_grad_norm {
                Some(mx) => Some(total.f_clamp_min(mx)?.f_div_scalar(mx)?),
                None => None,
            };
            let steps: Vec<Tensor> = all.idx.iter().map(|_| step_t.shallow_clone()).collect();
            let args = |weight_decay: f64, kind: AdamKind| AdamArgs {
                beta1: c.beta1,
                beta2: c.beta2,
                weight_decay,
                eps: c.eps,
                kind,
            };
            if !c.trust_ratio {
                // AdamW: one fused pass per weight-decay group
                for (group, wd) in [(&decayed, c.weight_decay), (&exempt, 0.0)] {
                    foreach::fused_adam_(
                        &group.params,
                        &group.grads,
                        &pick(m, &group.idx),
                        &pick(v, &group.idx),
                        &steps[..group.idx.len()],
                        Lr::Tensor(&lr_t),
                        args(wd, AdamKind::AdamW),
                        grad_scale.as_ref(),
                    )?;
                }
                return Ok(total);
            }
            // LAMB. u = m^ / (sqrt(v^) + eps): the fused Adam kernel at lr = -1 on zeroed u
            let u_all = pick(u, &all.idx);
            foreach::zero_(&u_all)?;
            foreach::fused_adam_(
                &u_all,
                &all.grads,
                &pick(m, &all.idx),
                &pick(v, &all.idx),
                &steps,
                Lr::Value(-1.0),
                args(0.0, AdamKind::Adam),
                grad_scale.as_ref(),
            )?;
            // u += wd * w, then w -= lr * r * u with r = |w| / |u| (1 if either is 0)
            let (w_dec, u_dec) = (&decayed.params, pick(u, &decayed.idx));
            if c.weight_decay != 0.0 {
                foreach::add_list_(&u_dec, w_dec, c.weight_decay)?;
            }
            if !w_dec.is_empty() {
                let wn = foreach::norms(w_dec)?;
                let un = foreach::norms(&u_dec)?;
                let ok = wn.gt(0.0).logical_and(&un.gt(0.0));
                let r = (&wn / &un).where_self(&ok, &wn.ones_like()) * &lr_t * -1.0;
                foreach::mul_list_(&u_dec, &r.unbind(0))?;
                foreach::add_list_(w_dec, &u_dec, 1.0)?;
            }
            let (w_exc, u_exc) = (&exempt.params, pick(u, &exempt.idx));
            foreach::mul_tensor_(&u_exc, &lr_t)?;
            foreach::add_list_(w_exc, &u_exc, -1.0)?;
            Ok(total)
        })?;
        self.grad_norm = Some(total);
        Ok(())
    }
}

/// The reference's learning-rate schedule: linear warmup from `start_warmup_step`, then
/// polynomial decay (power 1.0 in the reference) to `end_lr` at `total_steps`.
#[derive(Debug, Clone, PartialEq)]
pub struct PolyWarmup {
    pub base_lr: f64,
    pub end_lr: f64,
    pub power: f64,
    pub total_steps: i64,
    pub warmup_steps: i64,
    pub start_warmup_step: i64,
}

impl PolyWarmup {
    /// The learning rate of the update made at `step` (0-based).
    pub fn lr_at(&self, step: i64) -> f64 {
        let total = self.total_steps.max(1) as f64;
        let s = (step.min(self.total_steps)) as f64;
        let decayed =
            (self.base_lr - self.end_lr) * (1.0 - s / total).powf(self.power) + self.end_lr;
        let w = step - self.start_warmup_step;
        if self.warmup_steps > 0 && w < self.warmup_steps {
            // Before start_warmup_step the reference would go negative; we hold at 0.
            self.base_lr * (w.max(0) as f64) / self.warmup_steps as f64
        } else {
            decayed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warmup_then_linear_decay() {
        let s = PolyWarmup {
            base_lr: 1.0,
            end_lr: 0.0,
            power: 1.0,
            total_steps: 100,
            warmup_steps: 10,
            start_warmup_step: 0,
        };
        assert_eq!(s.lr_at(0), 0.0);
        assert!((s.lr_at(5) - 0.5).abs() < 1e-12);
        assert!((s.lr_at(10) - 0.9).abs() < 1e-12);
        assert_eq!(s.lr_at(100), 0.0);
        assert_eq!(s.lr_at(150), 0.0);
        let shifted = PolyWarmup {
            start_warmup_step: -10,
            ..s.clone()
        };
        assert!((shifted.lr_at(0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn exclusions() {
        // the one rule of all optimizers: by dimension
        use crate::optim::exempt_from_decay;
        let t = |s: &[i64]| Tensor::zeros(s, (Kind::Float, tch::Device::Cpu));
        assert!(exempt_from_decay(&t(&[16]))); // a LayerNorm weight or bias
        assert!(exempt_from_decay(&t(&[30528]))); // cls.predictions.bias
        assert!(!exempt_from_decay(&t(&[16, 16]))); // a dense weight
        assert!(!exempt_from_decay(&t(&[2, 16]))); // token_type_embeddings
    }
}
