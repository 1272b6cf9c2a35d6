//! The trainer's contract with the distributed layer: [`GradSync`], the gradient reducer of
//! data-parallel training, and where a workload's gradients come from ([`GradSource`]). The
//! trainer (`train::engine`) takes any `GradSync`; [`NoSync`] is one process,
//! [`super::BucketedGradSync`] a c10d group. The reducer's peers (rank, sums, agreement,
//! failure sharing) are the process group's duties, [`Peers`].
use super::buckets::{Buckets, DEFAULT_BUCKET_BYTES};
use super::peers::Peers;
use anyhow::{Context, Result};

/// Where a workload's gradients come from in its backward pass: an overlapping [`GradSync`]
/// hooks the parameters accordingly.
pub enum GradSource<'a> {
    /// `loss.backward()`, accumulating into the parameters' `.grad` buffers.
    GradBuffers,
    /// `torch.autograd.grad` (fresh tensors, [`crate::optim::ParamGroups::gradients_of`]);
    /// `accum` holds the sum of the step's earlier micro-batches (empty for the first).
    Returned { accum: &'a [tch::Tensor] },
}

/// The gradient reducer of data-parallel training: the gradients averaged across processes,
/// overlapped with the backward where it can be. Its peers (rank, sums, agreement, failure
/// sharing) are the supertrait [`Peers`], the process group's duties. The single-process
/// implementation is [`NoSync`]; the c10d one ([`super::BucketedGradSync`]) plugs in here.
///
/// One optimizer step: [`GradSync::before_last_backward`] just before the backward of the
/// step's last micro-batch, then [`GradSync::all_reduce_grads`] with the step's gradients before
/// the optimizer runs.
pub trait GradSync: Peers {
    /// Called just before the backward of a step's last micro-batch with the trainable
    /// parameters (in the order of the gradient list [`GradSync::all_reduce_grads`] will get).
    /// An overlapping implementation hooks them so that each gradient bucket's all-reduce
    /// starts as soon as its gradients are final, during the backward. Returns true when it
    /// did: then, for [`GradSource::Returned`], the backward's gradients come out final (the
    /// earlier micro-batches already added in, into the `accum` tensors): the workload must
    /// not add them again. Default: false (nothing hooked).
    fn before_last_backward(
        &mut self,
        _params: &[tch::Tensor],
        _source: GradSource<'_>,
    ) -> Result<bool> {
        Ok(false)
    }
    /// Bucket-wise gradient clipping (open division): with `Some(c)` every gradient bucket is
    /// scaled by `c / max(|g_b|, c)` on each rank before the all-reduce (the workload's
    /// optimizer then does not clip). None (the default): no clipping here.
    fn set_bucket_clip(&mut self, max_norm: Option<f64>) -> Result<()> {
        if max_norm.is_some() {
            anyhow::bail!("this gradient exchange cannot clip bucket-wise");
        }
        Ok(())
    }
    /// Average `grads` (one per parameter, in the parameters' order) across ranks, in place
    /// (waiting for the all-reduces started during the backward, if any).
    fn all_reduce_grads(&mut self, grads: &[tch::Tensor]) -> Result<()>;
    /// The elementwise maximum of `tensors` across ranks, in place, on the device (a
    /// collective of the step like the gradient all-reduce, so a CUDA graph captures it): the
    /// step's FP8 amaxes, so every rank's scales agree. Default (one process): nothing to do.
    fn all_reduce_max(&mut self, _tensors: &[tch::Tensor]) -> Result<()> {
        Ok(())
    }
}

/// One process: nothing to synchronise (bucket-wise clipping, if asked for, clips the local
/// gradients in 25 MB buckets of the parameters' order).
#[derive(Default)]
pub struct NoSync {
    bucket_clip: Option<f64>,
    buckets: Option<Buckets>,
}

impl Peers for NoSync {
    fn all_reduce_sum(&mut self, _values: &mut [f64]) -> Result<()> {
        Ok(())
    }
}

impl GradSync for NoSync {
    fn set_bucket_clip(&mut self, max_norm: Option<f64>) -> Result<()> {
        if self.bucket_clip != max_norm {
            self.buckets = None;
        }
        self.bucket_clip = max_norm;
        Ok(())
    }
    fn all_reduce_grads(&mut self, grads: &[tch::Tensor]) -> Result<()> {
        let Some(c) = self.bucket_clip else {
            return Ok(());
        };
        if self.buckets.is_none() {
            self.buckets = Some(Buckets::new(grads, DEFAULT_BUCKET_BYTES)?);
        }
        let buckets = self.buckets.as_mut().expect("planned above");
        buckets
            .clip_(grads, c)
            .context("bucket-wise gradient clipping")
    }
}
