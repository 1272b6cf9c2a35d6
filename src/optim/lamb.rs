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
//! Excluded from weight decay and the trust ratio (as the reference's
//! `exclude_from_weight_decay = ["LayerNorm", "layer_norm", "bias"]`): every variable whose
//! name contains `LayerNorm` or `layer_norm`, or ends in `bias`.
//!
//! Schedule ([`PolyWarmup`], the reference's `create_optimizer`): for the update made at
//! `step` (0 for the first) `lr = (base - end) * (1 - min(step, total)/total)^power + end`,
//! except during warmup, `0 <= step - start_warmup_step < warmup_steps`, where
//! `lr = base * (step - start_warmup_step) / warmup_steps`.

use anyhow::{bail, Result};
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
    excluded: bool,
}

/// The optimizer over named variables.
pub struct Lamb {
    pub config: LambConfig,
    params: Vec<Param>,
    /// Steps taken so far.
    pub step: i64,
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
        let params = vars
            .into_iter()
            .map(|(name, w)| Param {
                excluded: excluded_from_decay(&name),
                m: w.zeros_like().detach(),
                v: w.zeros_like().detach(),
                name,
                w,
            })
            .collect();
        Ok(Lamb {
            config,
            params,
            step: 0,
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

    /// One update at learning rate `lr`. Returns the global gradient norm (before clipping) as a
    /// 0-dim tensor on the parameters' device (no host sync here). Parameters without a gradient
    /// are skipped. The `.grad` buffers serve as scratch space (they hold the clipped g^2
    /// afterwards): read gradients before the step.
    pub fn step(&mut self, lr: f64) -> Tensor {
        self.step += 1;
        let c = self.config.clone();
        let t = self.step as f64;
        let bc1 = 1.0 - c.beta1.powf(t);
        let bc2 = 1.0 - c.beta2.powf(t);
        tch::no_grad(|| {
            let grads: Vec<Option<Tensor>> = self
                .params
                .iter()
                .map(|p| {
                    let g = p.w.grad();
                    g.defined().then(|| g.to_kind(Kind::Float))
                })
                .collect();
            // Per-parameter norms (no temporaries), then the global norm.
            let norms: Vec<Tensor> = grads.iter().flatten().map(|g| g.norm()).collect();
            if norms.is_empty() {
                return Tensor::from(0.0f32);
            }
            let total = Tensor::stack(&norms, 0).norm();
            let coef = c.max_grad_norm.map(|mx| mx / total.clamp_min(mx));
            let dev = total.device();
            let wd = Tensor::from(c.weight_decay as f32).to_device(dev);
            let neg_lr = Tensor::from(-lr as f32).to_device(dev);
            // sqrt(v^) + eps, times bc1 so that m / denom = m^ / (sqrt(v^) + eps)
            let (denom_scale, denom_eps) = (bc1 / bc2.sqrt(), c.eps * bc1);
            for (p, g) in self.params.iter_mut().zip(grads) {
                let Some(mut g) = g else { continue };
                // In place, few passes: full-size temporaries cost page faults on big models.
                if let Some(coef) = &coef {
                    let _ = g.g_mul_(coef);
                }
                let _ = p.m.lerp_(&g, 1.0 - c.beta1);
                // the gradient buffer is scratch from here on: it becomes g^2
                let _ = p.v.lerp_(&g.square_(), 1.0 - c.beta2);
                let mut denom = p.v.sqrt();
                let _ = denom.g_mul_scalar_(denom_scale).g_add_scalar_(denom_eps);
                // u = m^ / (sqrt(v^) + eps) (+ wd * w), into denom's buffer
                let mut u = p.m.div_out(&denom, &denom);
                let w32 = p.w.to_kind(Kind::Float);
                if !p.excluded && c.weight_decay != 0.0 {
                    let _ = u.addcmul_(&w32, &wd);
                }
                // w -= lr * r * u, r the trust ratio (LAMB) or 1 (AdamW, excluded params)
                let step = if c.trust_ratio && !p.excluded {
                    let wn = w32.norm();
                    let un = u.norm();
                    let ok = wn.gt(0.0).logical_and(&un.gt(0.0));
                    (&wn / &un).where_self(&ok, &wn.ones_like()) * &neg_lr
                } else {
                    neg_lr.shallow_clone()
                };
                let _ = p.w.addcmul_(&u.to_kind(p.w.kind()), &step);
            }
            total
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
