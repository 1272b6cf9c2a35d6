//! Gradient synchronisation between data-parallel replicas.
//!
//! [`GradSync`] is the hook the trainer calls between backward and the optimizer step.
//! NOTE for integration: the trainer (src/train) defines its own gradient-sync trait; when it
//! lands, implement that trait for [`BucketedGradSync`] (a one-line delegation to
//! [`BucketedGradSync::sync`]) and drop this one if they duplicate each other.
use super::buckets::{Buckets, DEFAULT_BUCKET_BYTES};
use super::group::{ProcessGroup, ReduceOp};
use anyhow::{bail, Context, Result};
use tch::Tensor;

pub trait GradSync {
    /// Makes every trainable parameter's gradient the average over all replicas.
    fn sync_grads(&mut self) -> Result<()>;
    /// Number of replicas (1: nothing to do).
    fn world_size(&self) -> usize;
}

/// A single process: gradients stay as they are.
pub struct NoSync;

impl GradSync for NoSync {
    fn sync_grads(&mut self) -> Result<()> {
        Ok(())
    }
    fn world_size(&self) -> usize {
        1
    }
}

/// Averages the gradients of a fixed parameter list over the process group, one allreduce
/// per bucket of about `bucket_bytes`.
pub struct BucketedGradSync {
    pg: ProcessGroup,
    params: Vec<Tensor>,
    buckets: Buckets,
}

impl BucketedGradSync {
    /// `params`: the trainable parameters, in the same order on every rank.
    pub fn new(pg: ProcessGroup, params: Vec<Tensor>, bucket_bytes: usize) -> Result<Self> {
        if params.is_empty() {
            bail!("no trainable parameters to synchronise");
        }
        let buckets = Buckets::new(&params, bucket_bytes)?;
        Ok(BucketedGradSync {
            pg,
            params,
            buckets,
        })
    }

    /// With PyTorch DDP's 25 MB buckets.
    pub fn with_default_buckets(pg: ProcessGroup, params: Vec<Tensor>) -> Result<Self> {
        Self::new(pg, params, DEFAULT_BUCKET_BYTES)
    }

    pub fn num_buckets(&self) -> usize {
        self.buckets.len()
    }

    /// The group, for eval reductions and stop agreement between steps.
    pub fn group(&mut self) -> &mut ProcessGroup {
        &mut self.pg
    }

    pub fn sync(&mut self) -> Result<()> {
        let grads: Vec<Tensor> = self.params.iter().map(|p| p.grad()).collect();
        if let Some(i) = grads.iter().position(|g| !g.defined()) {
            bail!(
                "trainable parameter #{i} has no gradient on rank {} after backward; every \
                 trainable parameter must take part in the loss on every rank",
                self.pg.rank()
            );
        }
        self.buckets
            .allreduce(&mut self.pg, &grads, ReduceOp::Avg)
            .context("averaging gradients across ranks")
    }
}

impl GradSync for BucketedGradSync {
    fn sync_grads(&mut self) -> Result<()> {
        self.sync()
    }
    fn world_size(&self) -> usize {
        self.pg.size()
    }
}

/// The trainer's hook ([`crate::train::engine::GradSync`]): the trainer hands over fresh
/// gradient tensors (from `autograd.grad`, not `.grad` buffers), averaged in the same buckets;
/// eval counts and stop decisions are summed across ranks.
impl crate::train::engine::GradSync for BucketedGradSync {
    fn rank(&self) -> usize {
        self.pg.rank()
    }
    fn world_size(&self) -> usize {
        self.pg.size()
    }
    fn all_reduce_grads(&mut self, grads: &[Tensor]) -> Result<()> {
        if let Some(i) = grads.iter().position(|g| !g.defined()) {
            bail!(
                "trainable parameter #{i} has no gradient on rank {}; every trainable \
                 parameter must take part in the loss on every rank",
                self.pg.rank()
            );
        }
        self.buckets
            .allreduce(&mut self.pg, grads, ReduceOp::Avg)
            .context("averaging gradients across ranks")
    }
    fn all_reduce_sum(&mut self, values: &mut [f64]) -> Result<()> {
        let device = self.params[0].device();
        let t = Tensor::from_slice(values).to_device(device);
        self.pg
            .allreduce(&[&t], ReduceOp::Sum)
            .context("summing metrics across ranks")?;
        let back = Vec::<f64>::try_from(t.to_device(tch::Device::Cpu))?;
        values.copy_from_slice(&back);
        Ok(())
    }
}
