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
//! Excluded from weight decay and the trust ratio (as the reference's
//! `exclude_from_weight_decay = ["LayerNorm", "layer_norm", "bias"]`): every variable whose
//! name contains `LayerNorm` or `layer_norm`, or ends in `bias`.
//!
//! Schedule ([`PolyWarmup`], the reference's `create_optimizer`): for the update made at
//! `step` (0 for the first) `lr = (base - end) * (1 - min(step, total)/total)^power + end`,
//! except during warmup, `0 <= step - start_warmup_step < warmup_steps`, where
//! `lr = base * (step - start_warmup_step) / warmup_steps`.

use super::foreach::{self, AdamArgs, AdamKind, DeviceScalar, Lr};
use anyhow::{bail, Context, Result};
use tch::{Kind, Tensor};

/// LAMB / AdamW hyperparameters.
#[derive(Debug, Clone, PartialEq)]
pub struct LambConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Global-norm clip before the step (the reference: 1.0).
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

/// Reference rule: no weight decay and no trust ratio on LayerNorm parameters and biases.
pub fn excluded_from_decay(name: &str) -> bool {
    name.contains("LayerNorm") || name.contains("layer_norm") || name.ends_with("bias")
}

struct Param {
    name: String,
    w: Tensor,
    m: Tensor,
    v: Tensor,
    /// LAMB only: the Adam direction `u` of this step (a persistent buffer).
    u: Option<Tensor>,
    excluded: bool,
}

/// The optimizer over named variables.
///
/// One step runs in multi-tensor kernels ([`super::foreach`]): the global gradient norm from
/// one `_foreach_norm`; the clip as the fused kernels' `grad_scale`; AdamW as libtorch's fused
/// AdamW kernel (one pass per weight-decay group); LAMB's Adam direction `u = m^/(sqrt(v^)+eps)`
/// from libtorch's fused Adam kernel run at learning rate -1 on a zeroed buffer (the same
/// moment updates and bias corrections), then decay, trust ratios as one device vector, and the
/// update as list operations. The learning rate and step count live in device scalars.
pub struct Lamb {
    pub config: LambConfig,
    params: Vec<Param>,
    /// Steps taken so far.
    pub step: i64,
    /// Device scalars: the step count (bias corrections) and the learning rate.
    scalars: Option<(DeviceScalar, DeviceScalar)>,
}

impl Lamb {
    /// `vars`: (name, variable) pairs, e.g. from `VarStore::variables()` (sorted here by name so
    /// the order, and thus floating-point sums, are deterministic).
    pub fn new(
        vars: impl IntoIterator<Item = (String, Tensor)>,
        config: LambConfig,
    ) -> Result<Lamb> {
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
        let mut vars: Vec<(String, Tensor)> = vars.into_iter().collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let mut params = Vec::with_capacity(vars.len());
        for (name, w) in vars {
            if w.kind() != Kind::Float {
                bail!(
                    "{name}: the LAMB/AdamW kernels keep fp32 parameters (bf16 runs in autocast), \
                     this one is {:?}",
                    w.kind()
                );
            }
            let zeros = || w.zeros_like().detach();
            params.push(Param {
                excluded: excluded_from_decay(&name),
                m: zeros(),
                v: zeros(),
                u: config.trust_ratio.then(zeros),
                name,
                w,
            });
        }
        Ok(Lamb {
            config,
            params,
            step: 0,
            scalars: None,
        })
    }

    /// Names of the parameters excluded from decay and trust ratio.
    pub fn excluded_names(&self) -> Vec<&str> {
        self.params
            .iter()
            .filter(|p| p.excluded)
            .map(|p| p.name.as_str())
            .collect()
    }

    /// Drop every gradient (PyTorch's `zero_grad(set_to_none=True)`): the next backward hands
    /// its gradients over instead of adding into zeroed buffers.
    pub fn zero_grad(&mut self) -> Result<()> {
        for p in &self.params {
            crate::amp::set_grad_none(&p.w)?;
        }
        Ok(())
    }

    /// One update at learning rate `lr`: [`Lamb::begin_step`] then [`Lamb::apply`].
    pub fn step(&mut self, lr: f64) -> Result<Tensor> {
        self.begin_step(lr)?;
        self.apply()
    }

    /// The host-side part of a step: the step count and `lr` into device scalars (outside a
    /// CUDA graph; see [`crate::optim::Optimizer`]).
    pub fn begin_step(&mut self, lr: f64) -> Result<()> {
        let Some(first) = self.params.first() else {
            return Ok(());
        };
        self.step += 1;
        let device = first.w.device();
        let (step_t, lr_t) = self
            .scalars
            .get_or_insert_with(|| (DeviceScalar::new(device), DeviceScalar::new(device)));
        step_t.set(self.step as f64)?;
        lr_t.set(lr)?;
        Ok(())
    }

    /// The update's kernels, from the `.grad` buffers (capturable). Returns the global gradient
    /// norm (before clipping) as a 0-dim tensor on the parameters' device (no host sync here).
    /// Parameters without a gradient are skipped. The `.grad` buffers serve as scratch space
    /// (they hold the clipped gradients, or less, afterwards): read gradients before the step.
    pub fn apply(&mut self) -> Result<Tensor> {
        let c = self.config.clone();
        // the parameters that have a gradient this step
        let live: Vec<(usize, Tensor)> = self
            .params
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let g = p.w.grad();
                g.defined().then_some((i, g))
            })
            .collect();
        if live.is_empty() {
            return Ok(Tensor::from(0.0f32));
        }
        let (step_t, lr_t) = self
            .scalars
            .as_ref()
            .context("Lamb::apply before begin_step")?;
        let (step_t, lr_t) = (
            step_t.tensor().shallow_clone(),
            lr_t.tensor().shallow_clone(),
        );
        let params = &self.params;
        tch::no_grad(|| -> Result<Tensor> {
            let pick = |f: &dyn Fn(&Param) -> Tensor, keep: &dyn Fn(&Param) -> bool| {
                live.iter()
                    .filter(|(i, _)| keep(&params[*i]))
                    .map(|(i, _)| f(&params[*i]))
                    .collect::<Vec<Tensor>>()
            };
            let grads_of = |keep: &dyn Fn(&Param) -> bool| {
                live.iter()
                    .filter(|(i, _)| keep(&params[*i]))
                    .map(|(_, g)| g.shallow_clone())
                    .collect::<Vec<Tensor>>()
            };
            let all = |_: &Param| true;
            let grads = grads_of(&all);
            let total = foreach::norms(&grads)?.f_norm()?;
            // clip: g *= mx / max(|G|, mx), as the fused kernels' divisor max(|G|, mx) / mx
            let grad_scale = match c.max_grad_norm {
                Some(mx) => Some(total.f_clamp_min(mx)?.f_div_scalar(mx)?),
                None => None,
            };
            let steps: Vec<Tensor> = (0..grads.len()).map(|_| step_t.shallow_clone()).collect();
            let args = |weight_decay: f64, kind: AdamKind| AdamArgs {
                beta1: c.beta1,
                beta2: c.beta2,
                weight_decay,
                eps: c.eps,
                kind,
            };
            if !c.trust_ratio {
                // AdamW: one fused pass per weight-decay group
                let decayed = |p: &Param| !p.excluded;
                let excluded = |p: &Param| p.excluded;
                for (keep, wd) in [
                    (&decayed as &dyn Fn(&Param) -> bool, c.weight_decay),
                    (&excluded, 0.0),
                ] {
                    let g = grads_of(keep);
                    foreach::fused_adam_(
                        &pick(&|p| p.w.shallow_clone(), keep),
                        &g,
                        &pick(&|p| p.m.shallow_clone(), keep),
                        &pick(&|p| p.v.shallow_clone(), keep),
                        &steps[..g.len()],
                        Lr::Tensor(&lr_t),
                        args(wd, AdamKind::AdamW),
                        grad_scale.as_ref(),
                    )?;
                }
                return Ok(total);
            }
            // LAMB. u = m^ / (sqrt(v^) + eps): the fused Adam kernel at lr = -1 on zeroed u
            let u_of = |p: &Param| p.u.as_ref().map(Tensor::shallow_clone).unwrap_or_default();
            let u = pick(&u_of, &all);
            foreach::zero_(&u)?;
            foreach::fused_adam_(
                &u,
                &grads,
                &pick(&|p| p.m.shallow_clone(), &all),
                &pick(&|p| p.v.shallow_clone(), &all),
                &steps,
                Lr::Value(-1.0),
                args(0.0, AdamKind::Adam),
                grad_scale.as_ref(),
            )?;
            // u += wd * w, then w -= lr * r * u with r = |w| / |u| (1 if either is 0)
            let decayed = |p: &Param| !p.excluded;
            let excluded = |p: &Param| p.excluded;
            let (w_dec, u_dec) = (
                pick(&|p| p.w.shallow_clone(), &decayed),
                pick(&u_of, &decayed),
            );
            if c.weight_decay != 0.0 {
                foreach::add_list_(&u_dec, &w_dec, c.weight_decay)?;
            }
            if !w_dec.is_empty() {
                let wn = foreach::norms(&w_dec)?;
                let un = foreach::norms(&u_dec)?;
                let ok = wn.gt(0.0).logical_and(&un.gt(0.0));
                let r = (&wn / &un).where_self(&ok, &wn.ones_like()) * &lr_t * -1.0;
                foreach::mul_list_(&u_dec, &r.unbind(0))?;
                foreach::add_list_(&w_dec, &u_dec, 1.0)?;
            }
            let (w_exc, u_exc) = (
                pick(&|p| p.w.shallow_clone(), &excluded),
                pick(&u_of, &excluded),
            );
            foreach::mul_tensor_(&u_exc, &lr_t)?;
            foreach::add_list_(&w_exc, &u_exc, -1.0)?;
            Ok(total)
        })
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
        assert!(excluded_from_decay(
            "bert.encoder.layer.0.output.LayerNorm.weight"
        ));
        assert!(excluded_from_decay("cls.predictions.bias"));
        assert!(!excluded_from_decay(
            "bert.encoder.layer.0.output.dense.weight"
        ));
    }
}
