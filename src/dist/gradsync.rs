//! Gradient synchronisation between data-parallel replicas: [`BucketedGradSync`] implements
//! the trainer's [`GradSync`](crate::train::engine::GradSync) hook (explicit gradient tensors,
//! averaged in ~25 MB buckets; eval counts and stop flags summed; rank 0's state broadcast).
use super::buckets::{broadcast_from_root, Buckets, DEFAULT_BUCKET_BYTES};
use super::group::{ProcessGroup, ReduceOp};
use crate::train::engine::GradSync;
use anyhow::{bail, Context, Result};
use tch::Tensor;

/// Averages gradients over the process group, one allreduce per bucket of about
/// `bucket_bytes`. The buckets are planned from the first gradient list it sees (the same
/// order, shapes and kinds on every rank, which the sorted parameter order guarantees).
pub struct BucketedGradSync {
    pg: ProcessGroup,
    bucket_bytes: usize,
    buckets: Option<Buckets>,
}

impl BucketedGradSync {
    pub fn new(pg: ProcessGroup, bucket_bytes: usize) -> Result<Self> {
        if bucket_bytes == 0 {
            bail!("the bucket size must be positive");
        }
        Ok(BucketedGradSync {
            pg,
            bucket_bytes,
            buckets: None,
        })
    }

    /// With PyTorch DDP's 25 MB buckets.
    pub fn with_default_buckets(pg: ProcessGroup) -> Self {
        BucketedGradSync {
            pg,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            buckets: None,
        }
    }

    /// Buckets planned so far (0 before the first gradient sync).
    pub fn num_buckets(&self) -> usize {
        self.buckets.as_ref().map_or(0, Buckets::len)
    }

    /// The group, for other collectives between steps.
    pub fn group(&mut self) -> &mut ProcessGroup {
        &mut self.pg
    }
}

impl GradSync for BucketedGradSync {
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
        if self.buckets.is_none() {
            self.buckets = Some(Buckets::new(grads, self.bucket_bytes)?);
        }
        let buckets = self.buckets.as_mut().expect("planned above");
        buckets
            .allreduce(&mut self.pg, grads, ReduceOp::Avg)
            .context("averaging gradients across ranks")
    }

    fn all_reduce_sum(&mut self, values: &mut [f64]) -> Result<()> {
        let t = Tensor::from_slice(values).to_device(self.pg.control_device());
        self.pg
            .allreduce(&[&t], ReduceOp::Sum)
            .context("summing metrics across ranks")?;
        let back = Vec::<f64>::try_from(t.to_device(tch::Device::Cpu))?;
        values.copy_from_slice(&back);
        Ok(())
    }

    fn broadcast_from_root(&mut self, vars: &[Tensor]) -> Result<()> {
        broadcast_from_root(&mut self.pg, vars)
    }
}
