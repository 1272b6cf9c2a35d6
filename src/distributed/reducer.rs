//! Gradient all-reduce overlapped with the backward pass (the shim's reducer,
//! `shim/reducer.cpp`): autograd hooks copy each parameter's final gradient into its bucket and
//! start the bucket's asynchronous all-reduce as soon as the bucket is complete (buckets in
//! order, as PyTorch DDP's reducer); [`Reducer::finish`] waits on the work handles and averages.
use super::buckets::plan;
use super::group::ProcessGroup;
use super::sync::GradSource;
use crate::shim::error::call;
use crate::shim::reducer as ffi;
use anyhow::{bail, Result};
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::NonNull;
use tch::Tensor;

/// Per-bucket times of one step, in seconds from the moment the hooks were armed (just before
/// the backward of the last micro-batch).
#[derive(Debug, Clone, PartialEq)]
pub struct OverlapTimings {
    /// The backward returned (the trainer asked for the averages).
    pub backward_end: f64,
    /// The averages were in the gradients.
    pub finished: f64,
    pub buckets: Vec<BucketTimes>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketTimes {
    /// The bucket's last gradient became final (its last hook fired), or the backward ended.
    pub ready: f64,
    /// Its all-reduce was started.
    pub launched: f64,
    /// Its all-reduce completed (-1 when not recorded).
    pub done: f64,
}

impl OverlapTimings {
    /// Seconds during which at least one all-reduce was in flight.
    pub fn comm_seconds(&self) -> f64 {
        measure(&self.intervals(f64::INFINITY))
    }

    /// The fraction of the all-reduce time hidden behind the backward: of the time during which
    /// any all-reduce was in flight, the part before the backward ended.
    pub fn hidden_fraction(&self) -> f64 {
        let total = self.comm_seconds();
        if total <= 0.0 {
            return 0.0;
        }
        measure(&self.intervals(self.backward_end)) / total
    }

    /// Seconds from the end of the backward to the averaged gradients (what the step waits).
    pub fn exposed_seconds(&self) -> f64 {
        (self.finished - self.backward_end).max(0.0)
    }

    /// [launched, done] of every bucket with a recorded completion, cut at `until`.
    fn intervals(&self, until: f64) -> Vec<(f64, f64)> {
        self.buckets
            .iter()
            .filter(|b| b.done >= 0.0 && b.launched >= 0.0)
            .map(|b| (b.launched, b.done.min(until)))
            .filter(|(a, b)| b > a)
            .collect()
    }
}

/// Length of the union of intervals.
fn measure(intervals: &[(f64, f64)]) -> f64 {
    let mut v = intervals.to_vec();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut current: Option<(f64, f64)> = None;
    for (a, b) in v {
        current = match current {
            Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some((a, b)) = current {
        total += b - a;
    }
    total
}

/// The shim pointers of `tensors`, all defined (any layout: they are copied to and from the
/// flat buckets).
fn defined_ptrs(tensors: &[Tensor], what: &str) -> Result<Vec<*const torch_sys::C_tensor>> {
    if let Some(i) = tensors.iter().position(|t| !t.defined()) {
        bail!("{what} #{i} is undefined");
    }
    Ok(tensors.iter().map(|t| t.as_ptr()).collect())
}

/// Hooks on a fixed list of parameters and the flat buckets their gradients are averaged in.
/// Must be dropped before its process group (the owner declares it first).
pub(super) struct Reducer {
    raw: NonNull<c_void>,
    n_params: usize,
    n_buckets: usize,
    /// The flat buffers (the shim holds references too).
    _flats: Vec<Tensor>,
}

// Used from one thread at a time (the trainer's); the hooks run inside that thread's backward.
unsafe impl Send for Reducer {}

impl Reducer {
    /// Hooks `params` and plans buckets of about `bucket_bytes` over them in the order `order`
    /// (a permutation of the parameters' indices: the order their gradients become final).
    pub(super) fn new(
        pg: &ProcessGroup,
        params: &[Tensor],
        order: &[usize],
        bucket_bytes: usize,
    ) -> Result<Reducer> {
        let planned = plan(params, order, bucket_bytes)?;
        let mut bucket_of = vec![-1i64; params.len()];
        let mut offset_of = vec![0i64; params.len()];
        let mut flats = Vec::with_capacity(planned.len());
        for (b, p) in planned.iter().enumerate() {
            for &(i, off, _) in &p.slots {
                bucket_of[i] = b as i64;
                offset_of[i] = off;
            }
            flats.push(Tensor::f_zeros([p.numel], (p.kind, p.device))?);
        }
        if let Some(i) = bucket_of.iter().position(|&b| b < 0) {
            bail!("parameter #{i} is missing from the bucket order");
        }
        let param_ptrs = defined_ptrs(params, "parameter")?;
        let flat_refs: Vec<&Tensor> = flats.iter().collect();
        let flat_ptrs = pg.ptrs(&flat_refs)?;
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; the shim copies what it keeps.
        let raw = unsafe {
            ffi::mr_reducer_new(
                pg.raw(),
                param_ptrs.as_ptr(),
                param_ptrs.len(),
                bucket_of.as_ptr(),
                offset_of.as_ptr(),
                flat_ptrs.as_ptr(),
                flat_ptrs.len(),
                &mut err,
            )
        };
        match NonNull::new(raw) {
            Some(raw) => Ok(Reducer {
                raw,
                n_params: params.len(),
                n_buckets: flats.len(),
                _flats: flats,
            }),
            None => {
                // SAFETY: on failure the shim set err (or left it null).
                let msg = unsafe { crate::shim::error::take(err) };
                bail!("could not hook the parameters for the overlapped gradient all-reduce: {msg}")
            }
        }
    }

    pub(super) fn num_buckets(&self) -> usize {
        self.n_buckets
    }

    /// Activates the hooks for the next backward. `clip`: bucket-wise clipping; `timing`:
    /// record per-bucket times ([`Reducer::timings`]).
    pub(super) fn arm(
        &mut self,
        source: &GradSource<'_>,
        clip: Option<f64>,
        timing: bool,
    ) -> Result<()> {
        let (mode, accum): (c_int, Vec<*const torch_sys::C_tensor>) = match source {
            GradSource::GradBuffers => (1, Vec::new()),
            GradSource::Returned { accum } => {
                if !accum.is_empty() && accum.len() != self.n_params {
                    bail!(
                        "{} accumulated gradients for {} parameters",
                        accum.len(),
                        self.n_params
                    );
                }
                (2, accum.iter().map(|t| t.as_ptr()).collect())
            }
        };
        let clip = match clip {
            Some(c) if !(c > 0.0 && c.is_finite()) => {
                bail!("the bucket-wise clipping norm must be a positive number (got {c})")
            }
            Some(c) => c,
            None => 0.0,
        };
        // SAFETY: raw is live; accum's pointers are valid for the call (the shim keeps copies).
        call("could not arm the gradient hooks", |err| unsafe {
            ffi::mr_reducer_arm(
                self.raw.as_ptr(),
                mode,
                accum.as_ptr(),
                accum.len(),
                clip,
                timing as c_int,
                err,
            )
        })
    }

    /// Waits for every bucket's all-reduce (launching those whose gradients no hook saw, from
    /// `grads`), and writes the averages into `grads`.
    pub(super) fn finish(&mut self, pg: &mut ProcessGroup, grads: &[Tensor]) -> Result<()> {
        if grads.len() != self.n_params {
            bail!(
                "{} gradients for {} hooked parameters",
                grads.len(),
                self.n_params
            );
        }
        pg.ensure_usable()?;
        let ptrs = defined_ptrs(grads, "gradient")?;
        let raw = self.raw.as_ptr();
        pg.call("gradient all-reduce", |_, err| unsafe {
            ffi::mr_reducer_finish(raw, ptrs.as_ptr(), ptrs.len(), err)
        })
    }

    /// The parameters' indices in the order their gradients became final in the last step.
    pub(super) fn order(&self) -> Vec<usize> {
        let mut out = vec![0i64; self.n_params];
        // SAFETY: out has room for n_params entries.
        let n = unsafe { ffi::mr_reducer_order(self.raw.as_ptr(), out.as_mut_ptr(), out.len()) };
        out.truncate(n.min(self.n_params));
        out.into_iter().map(|i| i as usize).collect()
    }

    /// The last finished step's times (per bucket: ready, launched, done).
    pub(super) fn timings(&self) -> Option<OverlapTimings> {
        let mut out = vec![0f64; 2 + 3 * self.n_buckets];
        // SAFETY: out has room for the values asked for.
        let n = unsafe { ffi::mr_reducer_timings(self.raw.as_ptr(), out.as_mut_ptr(), out.len()) };
        if n != out.len() {
            return None;
        }
        Some(OverlapTimings {
            backward_end: out[0],
            finished: out[1],
            buckets: out[2..]
                .chunks(3)
                .map(|c| BucketTimes {
                    ready: c[0],
                    launched: c[1],
                    done: c[2],
                })
                .collect(),
        })
    }

    /// (all-reduces launched, bytes all-reduced) since the reducer was made.
    pub(super) fn counters(&self) -> (u64, u64) {
        let (mut launches, mut bytes) = (0u64, 0u64);
        // SAFETY: raw is live; both out-pointers are valid.
        unsafe { ffi::mr_reducer_counters(self.raw.as_ptr(), &mut launches, &mut bytes) };
        (launches, bytes)
    }
}

impl Drop for Reducer {
    fn drop(&mut self) {
        // SAFETY: raw came from mr_reducer_new and is freed once, before the group (see the
        // owner's field order).
        unsafe { ffi::mr_reducer_free(self.raw.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(backward_end: f64, finished: f64, b: &[(f64, f64)]) -> OverlapTimings {
        OverlapTimings {
            backward_end,
            finished,
            buckets: b
                .iter()
                .map(|&(launched, done)| BucketTimes {
                    ready: launched,
                    launched,
                    done,
                })
                .collect(),
        }
    }

    #[test]
    fn hidden_fraction_counts_overlapping_all_reduces_once() {
        // in flight [1, 4] (two overlapping buckets) and [6, 8]; backward ends at 3
        let x = t(3.0, 8.0, &[(1.0, 3.0), (2.0, 4.0), (6.0, 8.0)]);
        assert!((x.comm_seconds() - 5.0).abs() < 1e-12);
        assert!((x.hidden_fraction() - 2.0 / 5.0).abs() < 1e-12);
        assert!((x.exposed_seconds() - 5.0).abs() < 1e-12);
        // everything after the backward: nothing hidden
        assert_eq!(t(1.0, 3.0, &[(1.5, 3.0)]).hidden_fraction(), 0.0);
        // everything before it: all hidden; unrecorded completions are ignored
        assert_eq!(
            t(9.0, 9.5, &[(1.0, 2.0), (3.0, -1.0)]).hidden_fraction(),
            1.0
        );
    }
}
