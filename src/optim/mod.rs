//! Optimizers, learning-rate schedules and losses, written out as the reference equations
//! (tests/numerics/optim_equivalence.rs checks them step by step against plain PyTorch).
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
pub use params::{exempt_from_decay, Param, ParamGroups};

#[cfg(feature = "torch")]
mod params {
    use tch::{nn::VarStore, Tensor};

    /// The one weight-decay exemption rule of all four optimizers: a parameter of at most one
    /// dimension (biases, BatchNorm and LayerNorm weights) gets no weight decay, and no trust
    /// ratio from LARS or LAMB (SGD decays it too with `decay_bn_bias`).
    ///
    /// The MLPerf references say it two ways. ResNet's by layer kind (BN parameters and biases),
    /// BERT's by name (`exclude_from_weight_decay = ["LayerNorm", "layer_norm", "bias"]`: a name
    /// containing `LayerNorm` or `layer_norm`, or ending in `bias`). For our
    /// [`crate::models::bert::BertForPreTraining`] both select exactly the same tensors: every
    /// 1-d variable is a bias or a LayerNorm weight, every one of those is 1-d, and every other
    /// variable (dense weights, the three embedding tables) is 2-d. tests/numerics/bert_optim.rs
    /// (`decay_exemption_by_dimension_is_the_reference_name_rule_for_bert`) checks it over a tiny
    /// model's variables.
    pub fn exempt_from_decay(t: &Tensor) -> bool {
        t.dim() <= 1
    }

    /// One trainable tensor and whether [`exempt_from_decay`] exempts it from weight decay and
    /// trust ratios (a bias, BN or LayerNorm parameter).
    pub struct Param {
        pub name: String,
        pub tensor: Tensor,
        pub exempt: bool,
    }

    /// The trainable variables of a var store in a stable (name) order: the order of the
    /// gradient lists the optimizers take, and of the gradient exchange.
    pub struct ParamGroups {
        pub params: Vec<Param>,
    }

    impl ParamGroups {
        pub fn from_var_store(vs: &VarStore) -> ParamGroups {
            Self::from_named(vs.variables())
        }

        /// (name, variable) pairs; those that require a gradient, sorted by name (so the order,
        /// and thus floating-point sums, are deterministic).
        pub fn from_named(vars: impl IntoIterator<Item = (String, Tensor)>) -> ParamGroups {
            let mut named: Vec<(String, Tensor)> = vars
                .into_iter()
                .filter(|(_, t)| t.requires_grad())
                .collect();
            named.sort_by(|a, b| a.0.cmp(&b.0));
            let params = named
                .into_iter()
                .map(|(name, tensor)| Param {
                    exempt: exempt_from_decay(&tensor),
                    name,
                    tensor,
                })
                .collect();
            ParamGroups { params }
        }

        /// Names of the parameters exempt from weight decay and trust ratios, in order.
        pub fn exempt_names(&self) -> Vec<&str> {
            self.params
                .iter()
                .filter(|p| p.exempt)
                .map(|p| p.name.as_str())
                .collect()
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

        /// Drop every `.grad` (for the `backward()` path; PyTorch's `set_to_none=True`): the
        /// next backward hands its gradients over instead of adding into zeroed buffers.
        pub fn zero_grad(&mut self) -> anyhow::Result<()> {
            for p in &self.params {
                crate::gpu::amp::set_grad_none(&p.tensor)?;
            }
            Ok(())
        }

        pub fn tensors(&self) -> Vec<Tensor> {
            self.params
                .iter()
                .map(|p| p.tensor.shallow_clone())
                .collect()
        }

        /// (name, tensor) pairs, in order.
        pub fn named(&self) -> Vec<(String, Tensor)> {
            self.params
                .iter()
                .map(|p| (p.name.clone(), p.tensor.shallow_clone()))
                .collect()
        }
    }
}

/// An optimizer: updates the parameters in place from their gradients (`grads[i]` belongs to
/// `params.params[i]`; undefined tensors are skipped) at this step's learning rate. The
/// gradients are scratch space: an optimizer may overwrite them. No value is read back to the
/// host: the learning rate goes to the kernels through a device scalar. SGD, LARS, LAMB and
/// AdamW ([`sgd::Sgd`], [`lars::Lars`], [`lamb::Lamb`]) all take this shape, and all exempt the
/// parameters [`exempt_from_decay`] names ([`Param::exempt`]) from weight decay and trust ratios.
///
/// A training step (src/train/resnet/workload.rs, src/train/bert/workload.rs) calls [`Optimizer::begin_step`],
/// then builds the step's gradient list in the parameters' order (autograd's returned
/// gradients, or the `.grad` buffers), averages it across ranks in place
/// ([`crate::distributed::GradSync::all_reduce_grads`]) and hands that list to
/// [`Optimizer::apply`] (or [`Optimizer::apply_or_skip`]). Whatever an optimizer does to all
/// gradients together (LAMB's and AdamW's global-norm clip) thus sees the averaged gradients.
///
/// A step has two parts so that the update can be captured in a CUDA graph
/// ([`crate::gpu::cuda_graph`]): [`Optimizer::begin_step`] does the host-side bookkeeping (step
/// count, the learning rate written into device scalars, state allocated on the first step) and
/// runs eagerly every step; [`Optimizer::apply`] launches only kernels whose arguments do not
/// change between steps.
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
