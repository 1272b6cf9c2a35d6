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
    fn step(&mut self, params: &mut ParamGroups, lr: f64) {
        let c = self.cfg;
        if self.buffers.len() != params.params.len() {
            self.buffers = params.params.iter().map(|_| None).collect();
        }
        tch::no_grad(|| {
            for (p, b) in params.params.iter_mut().zip(self.buffers.iter_mut()) {
                let mut g = p.tensor.grad();
                if !g.defined() {
                    continue;
                }
                let wd = if p.bn_or_bias && !c.decay_bn_bias {
                    0.0
                } else {
                    c.weight_decay
                };
                if wd != 0.0 {
                    g = &g + &p.tensor * wd;
                }
                let step = if c.momentum != 0.0 {
                    let buf = match b {
                        Some(buf) => {
                            *buf *= c.momentum;
                            *buf += &g;
                            buf
                        }
                        None => b.insert(g.detach().copy()),
                    };
                    if c.nesterov {
                        &g + &*buf * c.momentum
                    } else {
                        buf.shallow_clone()
                    }
                } else {
                    g
                };
                p.tensor -= step * lr;
            }
        });
    }
}
