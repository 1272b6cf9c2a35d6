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

use super::foreach::{self, DeviceScalar};
use super::{split_defined, Optimizer, ParamGroups};
use anyhow::{Context, Result};
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
    lr: Option<DeviceScalar>,
}

impl Lars {
    pub fn new(cfg: LarsConfig) -> Lars {
        Lars {
            cfg,
            velocity: Vec::new(),
            lr: None,
        }
    }
}

impl Optimizer for Lars {
    fn begin_step(&mut self, params: &ParamGroups, lr: f64) -> Result<()> {
        if let Some(first) = params.params.first() {
            self.lr
                .get_or_insert_with(|| DeviceScalar::new(first.tensor.device()))
                .set(lr)?;
        }
        Ok(())
    }

    fn apply(&mut self, params: &mut ParamGroups, grads: &[Tensor]) -> Result<()> {
        let c = self.cfg;
        if self.velocity.len() != params.params.len() {
            self.velocity = tch::no_grad(|| {
                params
                    .params
                    .iter()
                    .map(|p| p.tensor.zeros_like())
                    .collect()
            });
        }
        if params.params.is_empty() {
            return Ok(());
        }
        let lr_t = self
            .lr
            .as_ref()
            .context("Lars::apply before begin_step")?
            .tensor()
            .shallow_clone();
        tch::no_grad(|| -> Result<()> {
            // the gradients become the scaled gradients s in place (they are scratch)
            let (trust, plain) = split_defined(params, grads, |p| !p.bn_or_bias);
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
            // v = m * v + s
            foreach::mul_scalar_(&v, c.momentum)?;
            foreach::add_list_(&v, &s, 1.0)?;
            if c.nesterov {
                // w -= m * v + s
                foreach::add_list_(&p, &v, -c.momentum)?;
                foreach::add_list_(&p, &s, -1.0)?;
            } else {
                foreach::add_list_(&p, &v, -1.0)?;
            }
            Ok(())
        })
    }
}
