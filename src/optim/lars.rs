//! LARS as the MLPerf ResNet-50 reference (TF `LARSOptimizer`, NVIDIA's MXNet `sgdwfastlars`):
//!
//! ```text
//! BN and bias:  v = m * v + lr * g
//! others:       trust = eta * |w| / (|g| + wd * |w| + eps)   (1 if |w| = 0 or |g| = 0)
//!               v = m * v + lr * trust * (g + wd * w)
//! w = w - v     (Nesterov: w = w - (m * v + lr * trust * (g + wd * w)))
//! ```
//!
//! Written in multi-tensor kernels ([`super::foreach`]): the norms of all weights and gradients
//! in two calls, the trust ratios as one small vector on the device, the updates as list
//! operations; the learning rate lives in a device scalar. Nothing is read back to the host.
//!
//! Under fp16 loss scaling ([`super::loss_scale`]) a step whose gradients overflowed is skipped
//! on the device: the update's factors are multiplied by `keep = 1 - found_inf`.

use super::foreach;
use super::{split_defined, zeroed_state, Optimizer, ParamGroups, StepLr};
use anyhow::Result;
use tch::Tensor;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LarsConfig {
    pub momentum: f64,
    pub weight_decay: f64,
    pub eta: f64,
    pub epsilon: f64,
    pub nesterov: bool,
}

pub struct Lars {
    cfg: LarsConfig,
    /// One velocity per parameter (zeros before the first step: `m * 0 + s = s`, as the
    /// reference's first step).
    velocity: Vec<Tensor>,
    lr: StepLr,
}

impl Lars {
    pub fn new(cfg: LarsConfig) -> Lars {
        Lars {
            cfg,
            velocity: Vec::new(),
            lr: StepLr::default(),
        }
    }
}

impl Optimizer for Lars {
    fn begin_step(&mut self, params: &ParamGroups, lr: f64) -> Result<()> {
        self.lr.set(params, lr)
    }

    fn apply(&mut self, params: &mut ParamGroups, grads: &[Tensor]) -> Result<()> {
        self.update(params, grads, None)
    }

    /// A skipped step's gradients are zeroed first, in one multi-tensor pass
    /// ([`foreach::zero_unless_`]: their inf and NaN would poison the norms and the velocity even
    /// multiplied by 0), then the update runs with `keep = 1 - found_inf` folded into its
    /// factors: a skipped step leaves velocity and weights as they were.
    fn apply_or_skip(
        &mut self,
        params: &mut ParamGroups,
        grads: &[Tensor],
        found_inf: &Tensor,
    ) -> Result<()> {
        let keep = tch::no_grad(|| -> Result<Tensor> {
            let keep = found_inf.f_neg()?.f_add_scalar(1.0)?;
            let defined: Vec<Tensor> = grads
                .iter()
                .filter(|g| g.defined())
                .map(|g| g.shallow_clone())
                .collect();
            foreach::zero_unless_(&defined, &keep)?;
            Ok(keep)
        })?;
        self.update(params, grads, Some(&keep))
    }
}

impl Lars {
    /// One LARS step; `keep` (0-dim f32 on the device, 0 or 1; None = 1): where it is 0 the
    /// step is skipped (learning rate 0, momentum 1, no weight update), without a read-back.
    fn update(
        &mut self,
        params: &mut ParamGroups,
        grads: &[Tensor],
        keep: Option<&Tensor>,
    ) -> Result<()> {
        let c = self.cfg;
        zeroed_state(&mut self.velocity, params);
        if params.params.is_empty() {
            return Ok(());
        }
        let lr_t = self.lr.tensor("lars")?;
        tch::no_grad(|| -> Result<()> {
            let lr_t = match keep {
                Some(k) => lr_t.f_mul(k)?,
                None => lr_t,
            };
            // the gradients become the scaled gradients s in place (they are scratch)
            let (trust, plain) = split_defined(params, grads, |p| !p.exempt);
            if !trust.params.is_empty() {
                let w_norm = foreach::norms(&trust.params)?;
                let g_norm = foreach::norms(&trust.grads)?;
                let denom = &g_norm + &w_norm * c.weight_decay + c.epsilon;
                let ratio = (&w_norm * c.eta) / denom;
                let ok = w_norm.gt(0.0).logical_and(&g_norm.gt(0.0));
                let ratio = ratio.where_self(&ok, &ratio.ones_like());
                let scale = ratio * &lr_t;
                // s = lr * trust * (g + wd * w)
                foreach::add_list_(&trust.grads, &trust.params, c.weight_decay)?;
                foreach::mul_list_(&trust.grads, &scale.unbind(0))?;
            }
            // BN and bias: s = lr * g
            foreach::mul_tensor_(&plain.grads, &lr_t)?;
            let (mut idx, mut p, mut s) = (trust.idx, trust.params, trust.grads);
            idx.extend(plain.idx);
            p.extend(plain.params);
            s.extend(plain.grads);
            let v: Vec<Tensor> = idx
                .iter()
                .map(|&i| self.velocity[i].shallow_clone())
                .collect();
            // v = m * v + s   (skipped: m = 1 and s = 0)
            match keep {
                None => foreach::mul_scalar_(&v, c.momentum)?,
                Some(k) => {
                    let m = Tensor::f_where_scalar(&k.f_gt(0.5)?, c.momentum, 1.0)?;
                    foreach::mul_tensor_(&v, &m)?;
                }
            }
            foreach::add_list_(&v, &s, 1.0)?;
            // w -= v   (Nesterov: w -= m * v + s); skipped: w stays
            let m_v = if c.nesterov { c.momentum } else { 1.0 };
            match keep {
                None => foreach::add_list_(&p, &v, -m_v)?,
                Some(k) => {
                    let step = foreach::mul_tensor(&v, &k.f_mul_scalar(m_v)?)?;
                    foreach::add_list_(&p, &step, -1.0)?;
                }
            }
            if c.nesterov {
                foreach::add_list_(&p, &s, -1.0)?;
            }
            Ok(())
        })
    }
}
