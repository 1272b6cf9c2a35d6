//! SGD with momentum as `torch.optim.SGD` (dampening 0):
//!
//! ```text
//! g = grad + wd * w                       (wd skipped on BN/bias unless decay_bn_bias)
//! b = g on the first step, else m * b + g
//! w = w - lr * (nesterov ? g + m * b : b)
//! ```
//!
//! Runs libtorch's fused SGD kernel (`torch.optim.SGD(fused=True)`, [`super::foreach`]): one
//! pass over all parameters per weight-decay group, the learning rate read from a device scalar.

use super::foreach;
use super::{split_defined, zeroed_state, Optimizer, ParamGroups, StepLr};
use anyhow::Result;
use tch::Tensor;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdConfig {
    pub momentum: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
    /// Apply weight decay to BN parameters and biases too (torch's default; MLPerf's is no).
    pub decay_bn_bias: bool,
}

pub struct Sgd {
    cfg: SgdConfig,
    /// One momentum buffer per parameter (filled by the first step).
    buffers: Vec<Tensor>,
    steps: u64,
    lr: StepLr,
}

impl Sgd {
    pub fn new(cfg: SgdConfig) -> Sgd {
        Sgd {
            cfg,
            buffers: Vec::new(),
            steps: 0,
            lr: StepLr::default(),
        }
    }
}

impl Optimizer for Sgd {
    fn begin_step(&mut self, params: &ParamGroups, lr: f64) -> Result<()> {
        self.lr.set(params, lr)?;
        self.steps += 1;
        Ok(())
    }

    fn apply(&mut self, params: &mut ParamGroups, grads: &[Tensor]) -> Result<()> {
        self.update(params, grads, None)
    }

    fn apply_or_skip(
        &mut self,
        params: &mut ParamGroups,
        grads: &[Tensor],
        found_inf: &Tensor,
    ) -> Result<()> {
        self.update(params, grads, Some(found_inf))
    }
}

impl Sgd {
    /// One fused-kernel call per weight-decay group; `found_inf`: see
    /// [`Optimizer::apply_or_skip`] (the kernel itself skips).
    /// A skipped first step leaves the zeroed momentum buffers as they were, so the next
    /// step's `m * 0 + g` still starts them at `g`.
    fn update(
        &mut self,
        params: &mut ParamGroups,
        grads: &[Tensor],
        found_inf: Option<&Tensor>,
    ) -> Result<()> {
        let c = self.cfg;
        if params.params.is_empty() {
            return Ok(());
        }
        if c.momentum != 0.0 {
            zeroed_state(&mut self.buffers, params);
        }
        let lr_t = self.lr.tensor("sgd")?;
        let first_step = self.steps == 1;
        let (decayed, plain) = split_defined(params, grads, |p| !p.exempt || c.decay_bn_bias);
        tch::no_grad(|| -> Result<()> {
            for (group, wd) in [(decayed, c.weight_decay), (plain, 0.0)] {
                let bufs: Vec<Tensor> = if c.momentum != 0.0 {
                    group
                        .idx
                        .iter()
                        .map(|&i| self.buffers[i].shallow_clone())
                        .collect()
                } else {
                    Vec::new()
                };
                foreach::fused_sgd_(
                    &group.params,
                    &group.grads,
                    &bufs,
                    wd,
                    c.momentum,
                    &lr_t,
                    c.nesterov,
                    first_step,
                    found_inf,
                )?;
            }
            Ok(())
        })
    }
}
