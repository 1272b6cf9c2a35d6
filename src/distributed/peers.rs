//! The process-group duties the trainer needs from its peers, apart from the gradient reducer
//! ([`super::GradSync`]), as PyTorch keeps the ProcessGroup apart from DDP's
//! reducer: who this rank is, sums and agreements across ranks, rank 0's state to everyone,
//! failure sharing, and giving up on a group. One process answers for itself
//! ([`super::NoSync`]); a c10d group ([`super::ProcessGroup`]) for all.
use super::{broadcast_from_root, ProcessGroup, ReduceOp};
use anyhow::{Context, Result};
use tch::Tensor;

pub trait Peers {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    /// Sum `values` across ranks (in place): eval counts, stop decisions.
    fn all_reduce_sum(&mut self, values: &mut [f64]) -> Result<()>;
    /// Overwrite `vars` (parameters and buffers, same order on every rank) with rank 0's.
    fn broadcast_from_root(&mut self, _vars: &[Tensor]) -> Result<()> {
        Ok(())
    }
    /// How long a peer may keep this rank waiting (the group's collective timeout); None for
    /// one process.
    fn peer_timeout(&self) -> Option<std::time::Duration> {
        None
    }
    /// Give up on the group after a peer kept this rank waiting too long: its communicators
    /// are aborted when it is dropped, which also ends collectives stuck on the device (those
    /// replayed from a CUDA graph included), and later collectives fail.
    fn abandon(&mut self) {}
    /// Every rank's failure at this point, by rank (empty when none failed): this rank's is
    /// `failure`. Exchanged on the host (the group's store), so it works when the device cannot
    /// take a collective; every rank calls it at the same points. One process: its own.
    fn share_failures(&mut self, failure: Option<&str>) -> Result<Vec<(usize, String)>> {
        Ok(crate::gpu::cuda_graph::own_failure(self.rank(), failure))
    }
}

impl Peers for ProcessGroup {
    fn rank(&self) -> usize {
        ProcessGroup::rank(self)
    }
    fn world_size(&self) -> usize {
        self.size()
    }
    fn all_reduce_sum(&mut self, values: &mut [f64]) -> Result<()> {
        let t = Tensor::from_slice(values).to_device(self.control_device());
        self.allreduce(&[&t], ReduceOp::Sum)
            .context("summing metrics across ranks")?;
        let back = Vec::<f64>::try_from(t.to_device(tch::Device::Cpu))?;
        values.copy_from_slice(&back);
        Ok(())
    }
    fn broadcast_from_root(&mut self, vars: &[Tensor]) -> Result<()> {
        broadcast_from_root(self, vars)
    }
    fn peer_timeout(&self) -> Option<std::time::Duration> {
        Some(self.timeout())
    }
    fn abandon(&mut self) {
        self.mark_failed();
    }
    fn share_failures(&mut self, failure: Option<&str>) -> Result<Vec<(usize, String)>> {
        ProcessGroup::share_failures(self, failure)
    }
}
