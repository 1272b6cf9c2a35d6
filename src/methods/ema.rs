//! EMA of the weights (Composer's `EMA`): every `update_interval` steps,
//! `ema = s * ema + (1 - s) * w` with `s = 2^(-update_interval / half_life)` over all
//! parameters and buffers (BN running statistics included); evaluation uses the EMA weights.

use std::collections::BTreeMap;
use tch::{nn::VarStore, Tensor};

pub struct Ema {
    smoothing: f64,
    update_interval: u64,
    shadow: BTreeMap<String, Tensor>,
    /// (shadow, variable) lists in the same order, for the multi-tensor update.
    lists: Option<(Vec<Tensor>, Vec<Tensor>)>,
}

impl Ema {
    /// Start from the current weights of `vs`.
    pub fn new(vs: &VarStore, half_life_steps: f64, update_interval: u64) -> Ema {
        let update_interval = update_interval.max(1);
        let smoothing = 2f64.powf(-(update_interval as f64) / half_life_steps);
        let shadow = tch::no_grad(|| {
            vs.variables()
                .into_iter()
                .map(|(k, v)| (k, v.detach().copy()))
                .collect()
        });
        Ema {
            smoothing,
            update_interval,
            shadow,
            lists: None,
        }
    }

    pub fn smoothing(&self) -> f64 {
        self.smoothing
    }

    /// Call after optimizer step number `step` (1-based). One multi-tensor lerp over every
    /// parameter and buffer (no per-variable kernels, nothing read back).
    pub fn update(&mut self, vs: &VarStore, step: u64) -> anyhow::Result<()> {
        if !step.is_multiple_of(self.update_interval) {
            return Ok(());
        }
        let s = self.smoothing;
        if self.lists.is_none() {
            let mut ema = Vec::new();
            let mut vars = Vec::new();
            for (name, w) in vs.variables() {
                if let Some(e) = self.shadow.get(&name) {
                    if e.kind() != w.kind() {
                        anyhow::bail!(
                            "EMA of {name}: kinds differ ({:?} vs {:?})",
                            e.kind(),
                            w.kind()
                        );
                    }
                    ema.push(e.shallow_clone());
                    vars.push(w.shallow_clone());
                }
            }
            self.lists = Some((ema, vars));
        }
        let (ema, vars) = self.lists.as_ref().expect("set above");
        // e = s * e + (1 - s) * w
        tch::no_grad(|| crate::optim::foreach::lerp_(ema, vars, 1.0 - s))
    }

    /// Run `f` with the EMA weights swapped into `vs`, then restore the training weights.
    pub fn with_ema_weights<T>(&self, vs: &VarStore, f: impl FnOnce() -> T) -> T {
        let vars = vs.variables();
        let backup: Vec<(Tensor, Tensor)> = tch::no_grad(|| {
            vars.iter()
                .filter_map(|(k, v)| {
                    self.shadow
                        .get(k)
                        .map(|e| (v.shallow_clone(), v.detach().copy(), e))
                })
                .map(|(mut v, saved, e)| {
                    v.copy_(e);
                    (v, saved)
                })
                .collect()
        });
        let out = f();
        tch::no_grad(|| {
            for (mut v, saved) in backup {
                v.copy_(&saved);
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{nn, Device, Kind};

    #[test]
    fn ema_tracks_and_swaps_back() {
        let vs = VarStore::new(Device::Cpu);
        let mut w = vs.root().var("w", &[2], nn::Init::Const(0.0));
        let mut ema = Ema::new(&vs, 1.0, 1);
        assert!((ema.smoothing() - 0.5).abs() < 1e-12);
        tch::no_grad(|| w.copy_(&Tensor::ones([2], (Kind::Float, Device::Cpu))));
        ema.update(&vs, 1).unwrap();
        let seen = ema.with_ema_weights(&vs, || w.double_value(&[0]));
        assert!((seen - 0.5).abs() < 1e-6, "{seen}");
        assert!((w.double_value(&[0]) - 1.0).abs() < 1e-6);
    }
}
