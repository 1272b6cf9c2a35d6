//! LARS as the MLPerf ResNet-50 reference (TF `LARSOptimizer`, NVIDIA's MXNet `sgdwfastlars`):
//!
//! ```text
//! BN and bias:  v = m * v + lr * g
//! others:       trust = eta * |w| / (|g| + wd * |w| + eps)   (1 if |w| = 0 or |g| = 0)
//!               v = m * v + lr * trust * (g + wd * w)
//! w = w - v     (Nesterov: w = w - (m * v + lr * trust * (g + wd * w)))
//! ```

use super::{Optimizer, ParamGroups};
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
    velocity: Vec<Option<Tensor>>,
}

impl Lars {
    pub fn new(cfg: LarsConfig) -> Lars {
        Lars {
            cfg,
            velocity: Vec::new(),
        }
    }
}

impl Optimizer for Lars {
    fn step(&mut self, params: &mut ParamGroups, grads: &[Tensor], lr: f64) {
        let c = self.cfg;
        if self.velocity.len() != params.params.len() {
            self.velocity = params.params.iter().map(|_| None).collect();
        }
        tch::no_grad(|| {
            for ((p, v), g) in params
                .params
                .iter_mut()
                .zip(self.velocity.iter_mut())
                .zip(grads)
            {
                if !g.defined() {
                    continue;
                }
                // the scaled gradient: lr * g, or lr * trust * (g + wd * w)
                let scaled = if p.bn_or_bias {
                    g * lr
                } else {
                    let w_norm = p.tensor.norm();
                    let g_norm = g.norm();
                    let trust =
                        (&w_norm * c.eta) / (&g_norm + &w_norm * c.weight_decay + c.epsilon);
                    let ok = w_norm.gt(0.0).logical_and(&g_norm.gt(0.0));
                    let trust = trust.where_self(&ok, &trust.ones_like());
                    (g + &p.tensor * c.weight_decay) * (trust * lr)
                };
                let vel = match v {
                    Some(vel) => {
                        *vel *= c.momentum;
                        *vel += &scaled;
                        vel
                    }
                    None => v.insert(scaled.copy()),
                };
                let update = if c.nesterov {
                    &*vel * c.momentum + &scaled
                } else {
                    vel.shallow_clone()
                };
                p.tensor -= &update;
            }
        });
    }
}
