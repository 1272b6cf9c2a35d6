//! SGD with momentum as `torch.optim.SGD` (dampening 0):
//!
//! ```text
//! g = grad + wd * w                       (wd skipped on BN/bias unless decay_bn_bias)
//! b = g on the first step, else m * b + g
//! w = w - lr * (nesterov ? g + m * b : b)
//! ```

use super::{Optimizer, ParamGroups};
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
    buffers: Vec<Option<Tensor>>,
}

impl Sgd {
    pub fn new(cfg: SgdConfig) -> Sgd {
        Sgd {
            cfg,
            buffers: Vec::new(),
        }
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, params: &mut ParamGroups, grads: &[Tensor], lr: f64) {
        let c = self.cfg;
        if self.buffers.len() != params.params.len() {
            self.buffers = params.params.iter().map(|_| None).collect();
        }
        tch::no_grad(|| {
            for ((p, b), grad) in params
                .params
                .iter_mut()
                .zip(self.buffers.iter_mut())
                .zip(grads)
            {
                if !grad.defined() {
                    continue;
                }
                let neg_lr = super::scalar_like(-lr, &p.tensor);
                let wd = if p.bn_or_bias && !c.decay_bn_bias {
                    0.0
                } else {
                    c.weight_decay
                };
                // g = grad + wd * w (one fused pass; the gradient itself is left untouched)
                let mut g = if wd != 0.0 {
                    let mut g = grad.copy();
                    let _ = g.addcmul_(&p.tensor, &super::scalar_like(wd, &p.tensor));
                    g
                } else {
                    grad.shallow_clone()
                };
                if c.momentum != 0.0 {
                    let buf = match b {
                        Some(buf) => {
                            *buf *= c.momentum;
                            *buf += &g;
                            buf
                        }
                        None => b.insert(g.detach().copy()),
                    };
                    if c.nesterov {
                        if wd == 0.0 {
                            g = g.copy();
                        }
                        let _ = g.addcmul_(buf, &super::scalar_like(c.momentum, buf));
                    } else {
                        g = buf.shallow_clone();
                    }
                }
                // w = w - lr * step
                let _ = p.tensor.addcmul_(&g, &neg_lr);
            }
        });
    }
}
