//! Optimizers, learning-rate schedules and losses, written out as the reference equations
//! (tests/optim_equivalence.rs checks them step by step against plain PyTorch).
//!
//! - [`lars`]: LARS as the MLPerf ResNet reference (no trust ratio or weight decay on BN/bias)
//! - [`lamb`]: LAMB and AdamW as the MLPerf BERT reference, with its warmup + polynomial schedule
//! - [`sgd`]: SGD with momentum and optional Nesterov, PyTorch semantics
//! - [`schedule`]: linear warmup then polynomial (MLPerf) or cosine (Composer) decay
//! - [`loss`]: cross-entropy with label smoothing
//! - [`crate::methods::ema`]: weight EMA

#[cfg(feature = "torch")]
pub mod lamb;
#[cfg(feature = "torch")]
pub mod lars;
#[cfg(feature = "torch")]
pub mod loss;
pub mod schedule;
#[cfg(feature = "torch")]
pub mod sgd;

#[cfg(feature = "torch")]
pub use params::{Param, ParamGroups};

#[cfg(feature = "torch")]
mod params {
    use tch::{nn::VarStore, Tensor};

    /// One trainable tensor and whether it is a BN parameter or bias (1-d), which the MLPerf
    /// reference exempts from weight decay and LARS trust ratios.
    pub struct Param {
        pub name: String,
        pub tensor: Tensor,
        pub bn_or_bias: bool,
    }

    /// The trainable variables of a var store in a stable (name) order.
    pub struct ParamGroups {
        pub params: Vec<Param>,
    }

    impl ParamGroups {
        pub fn from_var_store(vs: &VarStore) -> ParamGroups {
            let mut named: Vec<(String, Tensor)> = vs
                .variables()
                .into_iter()
                .filter(|(_, t)| t.requires_grad())
                .collect();
            named.sort_by(|a, b| a.0.cmp(&b.0));
            let params = named
                .into_iter()
                .map(|(name, tensor)| Param {
                    bn_or_bias: tensor.dim() <= 1,
                    name,
                    tensor,
                })
                .collect();
            ParamGroups { params }
        }

        /// The accumulated `.grad()` of every parameter (after `loss.backward()`), in order;
        /// undefined tensors where a parameter got no gradient.
        pub fn grads(&self) -> Vec<Tensor> {
            self.params.iter().map(|p| p.tensor.grad()).collect()
        }

        /// Gradients of `loss` with respect to every parameter, in order, as fresh tensors
        /// (`torch.autograd.grad`): no `.grad` buffers to zero or accumulate into.
        pub fn gradients_of(&self, loss: &Tensor) -> anyhow::Result<Vec<Tensor>> {
            let inputs: Vec<&Tensor> = self.params.iter().map(|p| &p.tensor).collect();
            Ok(Tensor::f_run_backward(&[loss], &inputs, false, false)?)
        }

        /// Drop every `.grad` (for the `backward()` path; PyTorch's `set_to_none=True`).
        pub fn zero_grad(&mut self) -> anyhow::Result<()> {
            for p in &self.params {
                crate::amp::set_grad_none(&p.tensor)?;
            }
            Ok(())
        }

        pub fn tensors(&self) -> Vec<Tensor> {
            self.params
                .iter()
                .map(|p| p.tensor.shallow_clone())
                .collect()
        }
    }
}

/// An optimizer: updates the parameters in place from their gradients (`grads[i]` belongs to
/// `params.params[i]`; undefined tensors are skipped) at this step's learning rate.
#[cfg(feature = "torch")]
pub trait Optimizer {
    fn step(&mut self, params: &mut ParamGroups, grads: &[tch::Tensor], lr: f64);
}

/// A 0-dim tensor holding `v` like `like` (kind and device), for fused `addcmul_` updates.
#[cfg(feature = "torch")]
pub(crate) fn scalar_like(v: f64, like: &tch::Tensor) -> tch::Tensor {
    tch::Tensor::from(v)
        .to_kind(like.kind())
        .to_device(like.device())
}
