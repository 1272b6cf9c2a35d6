//! Gradient synchronisation between data-parallel replicas: [`BucketedGradSync`] implements
//! the trainer's [`GradSync`](super::GradSync) hook (explicit gradient tensors,
//! averaged in ~25 MB buckets; eval counts and stop flags summed; rank 0's state broadcast).
use super::buckets::{Buckets, DEFAULT_BUCKET_BYTES};
use super::group::{ProcessGroup, ReduceOp};
use super::peers::Peers;
use super::reducer::{OverlapTimings, Reducer};
use super::sync::{GradSource, GradSync};
use anyhow::{bail, Context, Result};
use tch::{Device, Tensor};

/// Averages gradients over the process group, one allreduce per bucket of about
/// `bucket_bytes`.
///
/// Overlapped (the default): every bucket's all-reduce starts during the backward of the step's
/// last micro-batch, as soon as its gradients are final, and [`GradSync::all_reduce_grads`]
/// waits on them. The first step's buckets follow the parameters' order; after it, as PyTorch
/// DDP rebuilds its buckets, they follow the order in which rank 0's gradients became final, so
/// the buckets complete one after the other during the backward. Blocking (overlap off): the
/// buckets (parameters' order) are all-reduced one after the other once the backward is done.
/// Both compute the same sums and give bit-identical averages with 2 ranks.
pub struct BucketedGradSync {
    /// Declared before `pg`: the reducer's hooks and buffers go before the group.
    reducer: Option<Reducer>,
    pg: ProcessGroup,
    bucket_bytes: usize,
    /// The blocking path's buckets, planned from the first gradient list it sees (the same
    /// order, shapes and kinds on every rank, which the sorted parameter order guarantees).
    buckets: Option<Buckets>,
    overlap: bool,
    bucket_clip: Option<f64>,
    /// The reducer is armed for the current step.
    armed: bool,
    /// The reducer's buckets follow the measured gradient order.
    rebuilt: bool,
    /// The hooked parameters (to rebuild the reducer).
    params: Vec<Tensor>,
    timing: bool,
    last_timings: Option<OverlapTimings>,
    /// Blocking path: (all-reduces, bytes) so far.
    blocking_counts: (u64, u64),
    /// Reducers replaced by the rebuild: their (all-reduces, bytes).
    retired_counts: (u64, u64),
}

impl BucketedGradSync {
    pub fn new(pg: ProcessGroup, bucket_bytes: usize) -> Result<Self> {
        if bucket_bytes == 0 {
            bail!("the bucket size must be positive");
        }
        Ok(BucketedGradSync {
            reducer: None,
            pg,
            bucket_bytes,
            buckets: None,
            overlap: true,
            bucket_clip: None,
            armed: false,
            rebuilt: false,
            params: Vec::new(),
            timing: false,
            last_timings: None,
            blocking_counts: (0, 0),
            retired_counts: (0, 0),
        })
    }

    /// With PyTorch DDP's 25 MB buckets.
    pub fn with_default_buckets(pg: ProcessGroup) -> Self {
        Self::new(pg, DEFAULT_BUCKET_BYTES).expect("the default bucket size is positive")
    }

    /// Overlap the all-reduces with the backward (default true), or run them after it.
    pub fn with_overlap(mut self, overlap: bool) -> Self {
        self.overlap = overlap;
        self
    }

    /// Record per-bucket times of every overlapped step ([`BucketedGradSync::last_timings`]).
    pub fn with_timing(mut self, timing: bool) -> Self {
        self.timing = timing;
        self
    }

    pub fn overlap(&self) -> bool {
        self.overlap
    }

    /// Buckets planned so far (0 before the first gradient sync).
    pub fn num_buckets(&self) -> usize {
        match &self.reducer {
            Some(r) => r.num_buckets(),
            None => self.buckets.as_ref().map_or(0, Buckets::len),
        }
    }

    /// The last overlapped step's per-bucket times (with timing on).
    pub fn last_timings(&self) -> Option<&OverlapTimings> {
        self.last_timings.as_ref()
    }

    /// (gradient all-reduces, bytes all-reduced) since the start, both paths together.
    pub fn allreduce_counts(&self) -> (u64, u64) {
        let live = self.reducer.as_ref().map_or((0, 0), Reducer::counters);
        (
            self.blocking_counts.0 + self.retired_counts.0 + live.0,
            self.blocking_counts.1 + self.retired_counts.1 + live.1,
        )
    }

    /// The group, for other collectives between steps.
    pub fn group(&mut self) -> &mut ProcessGroup {
        &mut self.pg
    }

    /// After the first overlapped step: every rank rebuilds its buckets in the order rank 0's
    /// gradients became final (broadcast, so all ranks issue the same collectives).
    fn rebuild_in_gradient_order(&mut self) -> Result<()> {
        let n = self.params.len();
        let local = self
            .reducer
            .as_ref()
            .map(Reducer::order)
            .unwrap_or_default();
        let local: Vec<i64> = if local.len() == n {
            local.into_iter().map(|i| i as i64).collect()
        } else {
            (0..n as i64).collect()
        };
        let t = Tensor::from_slice(&local).to_device(self.pg.control_device());
        self.pg
            .broadcast(&[&t], 0)
            .context("agreeing on the gradient bucket order")?;
        let order: Vec<i64> = Vec::<i64>::try_from(t.to_device(Device::Cpu))?;
        let mut seen = vec![false; n];
        let mut perm = Vec::with_capacity(n);
        for &i in &order {
            let i = usize::try_from(i).ok().filter(|&i| i < n && !seen[i]);
            let Some(i) = i else {
                bail!("rank 0's gradient order is not a permutation of the {n} parameters");
            };
            seen[i] = true;
            perm.push(i);
        }
        if let Some(old) = self.reducer.take() {
            let (a, b) = old.counters();
            self.retired_counts = (self.retired_counts.0 + a, self.retired_counts.1 + b);
        }
        self.reducer = Some(Reducer::new(
            &self.pg,
            &self.params,
            &perm,
            self.bucket_bytes,
        )?);
        self.rebuilt = true;
        Ok(())
    }
}

/// The process-group duties are the group's own; the gradient exchange only forwards them
/// (`any` stays the trait's sum-based default, as before the split).
impl Peers for BucketedGradSync {
    fn rank(&self) -> usize {
        self.pg.rank()
    }
    fn world_size(&self) -> usize {
        self.pg.size()
    }
    fn all_reduce_sum(&mut self, values: &mut [f64]) -> Result<()> {
        Peers::all_reduce_sum(&mut self.pg, values)
    }
    fn broadcast_from_root(&mut self, vars: &[Tensor]) -> Result<()> {
        Peers::broadcast_from_root(&mut self.pg, vars)
    }
    fn peer_timeout(&self) -> Option<std::time::Duration> {
        Peers::peer_timeout(&self.pg)
    }
    fn abandon(&mut self) {
        Peers::abandon(&mut self.pg)
    }
    fn share_failures(&mut self, failure: Option<&str>) -> Result<Vec<(usize, String)>> {
        self.pg.share_failures(failure)
    }
}

impl GradSync for BucketedGradSync {
    fn before_last_backward(&mut self, params: &[Tensor], source: GradSource<'_>) -> Result<bool> {
        if !self.overlap {
            return Ok(false);
        }
        if self.reducer.is_none() {
            self.params = params.iter().map(Tensor::shallow_clone).collect();
            let order: Vec<usize> = (0..params.len()).collect();
            self.reducer = Some(Reducer::new(&self.pg, params, &order, self.bucket_bytes)?);
        } else if params.len() != self.params.len() {
            bail!(
                "{} parameters given to a gradient exchange hooked on {}",
                params.len(),
                self.params.len()
            );
        }
        let reducer = self.reducer.as_mut().expect("made above");
        reducer.arm(&source, self.bucket_clip, self.timing)?;
        self.armed = true;
        Ok(true)
    }

    fn set_bucket_clip(&mut self, max_norm: Option<f64>) -> Result<()> {
        if let Some(c) = max_norm {
            if !(c > 0.0 && c.is_finite()) {
                bail!("the bucket-wise clipping norm must be a positive number (got {c})");
            }
        }
        self.bucket_clip = max_norm;
        Ok(())
    }

    fn all_reduce_grads(&mut self, grads: &[Tensor]) -> Result<()> {
        if let Some(i) = grads.iter().position(|g| !g.defined()) {
            self.armed = false;
            bail!(
                "trainable parameter #{i} has no gradient on rank {}; every trainable \
                 parameter must take part in the loss on every rank",
                self.pg.rank()
            );
        }
        if self.armed {
            self.armed = false;
            let reducer = self.reducer.as_mut().expect("armed");
            reducer
                .finish(&mut self.pg, grads)
                .context("averaging gradients across ranks")?;
            if self.timing {
                self.last_timings = reducer.timings();
            }
            if !self.rebuilt {
                self.rebuild_in_gradient_order()?;
            }
            return Ok(());
        }
        if self.buckets.is_none() {
            self.buckets = Some(Buckets::new(grads, self.bucket_bytes)?);
        }
        let buckets = self.buckets.as_mut().expect("planned above");
        buckets
            .allreduce_clipped(&mut self.pg, grads, ReduceOp::Avg, self.bucket_clip)
            .context("averaging gradients across ranks")?;
        self.blocking_counts.0 += buckets.len() as u64;
        self.blocking_counts.1 += grads
            .iter()
            .map(|g| g.numel() as u64 * g.kind().elt_size_in_bytes() as u64)
            .sum::<u64>();
        Ok(())
    }

    fn all_reduce_max(&mut self, tensors: &[Tensor]) -> Result<()> {
        let refs: Vec<&Tensor> = tensors.iter().collect();
        self.pg
            .allreduce(&refs, ReduceOp::Max)
            .context("reducing the step's maxima across ranks")
    }
}

/// `MLPERF_RUN_GRAD_OVERLAP`: `0` runs the gradient all-reduces after the backward (the
/// blocking path), `1` or unset overlaps them with it.
pub fn overlap_from_env() -> Result<bool> {
    match std::env::var("MLPERF_RUN_GRAD_OVERLAP") {
        Err(_) => Ok(true),
        Ok(v) => match v.trim() {
            "" | "1" => Ok(true),
            "0" => Ok(false),
            other => bail!("MLPERF_RUN_GRAD_OVERLAP must be 0 or 1 (got {other:?})"),
        },
    }
}
