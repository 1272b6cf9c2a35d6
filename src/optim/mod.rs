//! Optimizers, learning-rate schedules and losses, written out as the reference equations
//! (tests/optim_equivalence.rs checks them step by step against plain PyTorch).
//!
//! - [`foreach`]: multi-tensor kernels (libtorch's `_foreach_*` and fused optimizers) that the
//!   optimizers are written in: a few kernels per step for all parameters, per-step factors in
//!   device tensors
//! - [`lars`]: LARS as the MLPerf ResNet reference (no trust ratio or weight decay on BN/bias)
//! - [`lamb`]: LAMB and AdamW as the MLPerf BERT reference, with its warmup + polynomial schedule
//! - [`sgd`]: SGD with momentum and optional Nesterov, PyTorch semantics
//! - [`schedule`]: linear warmup then polynomial (MLPerf) or cosine (Composer) decay
//! - [`loss`]: cross-entropy with label smoothing
//! - [`loss_scale`]: dynamic loss scaling for fp16 (GradScaler's, skipping on the device)
//! - [`crate::methods::ema`]: weight EMA

#[cfg(feature = "torch")]
pub mod foreach;
#[cfg(feature = "torch")]
pub mod lamb;
#[cfg(feature = "torch")]
pub mod lars;
#[cfg(feature = "torch")]
pub mod loss;
pub mod loss_scale;
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
/// `params.params[i]`; undefined tensors are skipped) at this step's learning rate. The
/// gradients are scratch space: an optimizer may overwrite them. No value is read back to the
/// host: the learning rate goes to the kernels through a device scalar.
///
/// A step has two parts so that the update can be captured in a CUDA graph
/// ([`crate::cuda_graph`]): [`Optimizer::begin_step`] does the host-side bookkeeping (step
/// count, the learning rate written into device scalars) and runs eagerly every step;
/// [`Optimizer::apply`] launches only kernels whose arguments do not change between steps.
#[cfg(feature = "torch")]
pub trait Optimizer {
    fn begin_step(&mut self, params: &ParamGroups, lr: f64) -> anyhow::Result<()>;

    fn apply(&mut self, params: &mut ParamGroups, grads: &[tch::Tensor]) -> anyhow::Result<()>;

    /// [`Optimizer::apply`] under a dynamic loss scale ([`loss_scale`]): the gradients are
    /// unscaled already ([`loss_scale::DynamicLossScale::unscale`]) and may hold inf or NaN;
    /// where `found_inf` (0-dim f32 on the device, 0 or 1) is 1 the step changes nothing,
    /// neither weights nor optimizer state, decided on the device without a read-back. SGD
    /// and LARS do; the default refuses (BERT's optimizers never see fp16).
    fn apply_or_skip(
        &mut self,
        params: &mut ParamGroups,
        grads: &[tch::Tensor],
        found_inf: &tch::Tensor,
    ) -> anyhow::Result<()> {
        let _ = (params, grads, found_inf);
        anyhow::bail!(
            "this optimizer cannot skip an overflowing step on the device, which fp16 loss \
             scaling needs (sgd and lars can)"
        )
    }

    fn step(
        &mut self,
        params: &mut ParamGroups,
        grads: &[tch::Tensor],
        lr: f64,
    ) -> anyhow::Result<()> {
        self.begin_step(params, lr)?;
        self.apply(params, grads)
    }
}

/// A step's learning rate as a 0-dim tensor on the parameters' device, written in place by
/// [`Optimizer::begin_step`] so that an update captured in a CUDA graph reads each step's value.
#[cfg(feature = "torch")]
#[derive(Default)]
pub(crate) struct StepLr(Option<foreach::DeviceScalar>);

#[cfg(feature = "torch")]
impl StepLr {
    pub fn set(&mut self, params: &ParamGroups, lr: f64) -> anyhow::Result<()> {
        if let Some(first) = params.params.first() {
            self.0
                .get_or_insert_with(|| foreach::DeviceScalar::new(first.tensor.device()))
                .set(lr)?;
        }
        Ok(())
    }

    /// The tensor (`who`: the optimizer, for the error when no step has begun).
    pub fn tensor(&self, who: &str) -> anyhow::Result<tch::Tensor> {
        use anyhow::Context;
        Ok(self
            .0
            .as_ref()
            .with_context(|| format!("{who}: apply before begin_step"))?
            .tensor()
            .shallow_clone())
    }
}

/// Per-parameter optimizer state (momentum, velocity), zeros like each parameter, made on the
/// first step (or again if the parameter list changed).
#[cfg(feature = "torch")]
pub(crate) fn zeroed_state(state: &mut Vec<tch::Tensor>, params: &ParamGroups) {
    if state.len() != params.params.len() {
        *state = tch::no_grad(|| {
            params
                .params
                .iter()
                .map(|p| p.tensor.zeros_like())
                .collect()
        });
    }
}

/// The (parameter, gradient) pairs of the parameters that have a gradient, split by `keep`:
/// (those where `keep` is true, the others), each as parallel lists plus the parameters' indices.
#[cfg(feature = "torch")]
pub(crate) struct Split {
    pub idx: Vec<usize>,
    pub params: Vec<tch::Tensor>,
    pub grads: Vec<tch::Tensor>,
}

#[cfg(feature = "torch")]
pub(crate) fn split_defined(
    params: &ParamGroups,
    grads: &[tch::Tensor],
    keep: impl Fn(&Param) -> bool,
) -> (Split, Split) {
    let empty = || Split {
        idx: Vec::new(),
        params: Vec::new(),
        grads: Vec::new(),
    };
    let (mut yes, mut no) = (empty(), empty());
    for (i, (p, g)) in params.params.iter().zip(grads).enumerate() {
        if !g.defined() {
            continue;
        }
        let s = if keep(p) { &mut yes } else { &mut no };
        s.idx.push(i);
        s.params.push(p.tensor.shallow_clone());
        s.grads.push(g.shallow_clone());
    }
    (yes, no)
}
