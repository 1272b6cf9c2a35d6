//! Bucketed collectives over many tensors: tensors are packed into flat buffers of about
//! `bucket_bytes` (one buffer per run of same-kind, same-device tensors), each buffer takes
//! one collective, and the results are copied back. This is how gradients are averaged
//! (one allreduce per ~25 MB instead of one per parameter) and how rank 0's parameters
//! reach every rank at start.
use super::group::{ProcessGroup, ReduceOp};
use anyhow::{bail, Context, Result};
use tch::{Device, Kind, Tensor};

/// PyTorch DDP's default bucket size.
pub const DEFAULT_BUCKET_BYTES: usize = 25 * 1024 * 1024;

struct Bucket {
    /// (index into the tensor list, offset in elements, number of elements)
    slots: Vec<(usize, i64, i64)>,
    kind: Kind,
    device: Device,
    flat: Tensor,
}

/// A fixed packing of a fixed list of tensor shapes. Every rank must build it from the same
/// list (same order, shapes, kinds), which the model's parameter order guarantees.
pub struct Buckets {
    shapes: Vec<Vec<i64>>,
    buckets: Vec<Bucket>,
}

/// One planned bucket: (index into the tensor list, offset in elements, number of elements)
/// per member, and the flat buffer's kind, device and length.
pub(super) struct Plan {
    pub slots: Vec<(usize, i64, i64)>,
    pub kind: Kind,
    pub device: Device,
    pub numel: i64,
}

/// Packs `tensors` (all defined), taken in the order `order` (indices into `tensors`), into
/// runs of same-kind, same-device tensors of at most `bucket_bytes` each (unless a single tensor
/// is larger).
pub(super) fn plan(tensors: &[Tensor], order: &[usize], bucket_bytes: usize) -> Result<Vec<Plan>> {
    if bucket_bytes == 0 {
        bail!("the bucket size must be positive");
    }
    let mut planned: Vec<Plan> = Vec::new();
    let mut open: Option<Plan> = None;
    for &i in order {
        let t = tensors
            .get(i)
            .with_context(|| format!("bucket order names tensor #{i} of {}", tensors.len()))?;
        if !t.defined() {
            bail!("tensor #{i} is undefined and cannot be bucketed");
        }
        let kind = t
            .f_kind()
            .with_context(|| format!("tensor #{i} has no element kind"))?;
        let device = t.device();
        let numel = t.numel() as i64;
        let bytes = numel as usize * kind.elt_size_in_bytes();
        let fits = match &open {
            Some(p) => {
                p.kind == kind
                    && p.device == device
                    && (p.numel as usize * kind.elt_size_in_bytes() + bytes <= bucket_bytes)
            }
            None => false,
        };
        if !fits {
            planned.extend(open.take());
            open = Some(Plan {
                slots: Vec::new(),
                kind,
                device,
                numel: 0,
            });
        }
        let p = open.as_mut().expect("a bucket is open");
        p.slots.push((i, p.numel, numel));
        p.numel += numel;
    }
    planned.extend(open);
    Ok(planned)
}

/// `g_b *= c / max(|g_b|, c)` on one flat bucket (no host read): bucket-wise gradient clipping.
/// The shim's reducer runs the same kernels (shim/reducer.cpp).
pub(super) fn clip_flat_(flat: &Tensor, max_norm: f64) -> Result<()> {
    let scale = flat
        .f_norm()?
        .f_clamp_min(max_norm)?
        .f_reciprocal()?
        .f_mul_scalar(max_norm)?;
    let mut f = flat.shallow_clone();
    let _ = f.f_mul_(&scale)?;
    Ok(())
}

impl Buckets {
    /// Plans buckets for `tensors` (all defined, in their order), each at most `bucket_bytes`
    /// unless a single tensor is larger. The flat buffers are allocated here.
    pub fn new(tensors: &[Tensor], bucket_bytes: usize) -> Result<Buckets> {
        let order: Vec<usize> = (0..tensors.len()).collect();
        let buckets = plan(tensors, &order, bucket_bytes)?
            .into_iter()
            .map(|p| Bucket {
                flat: Tensor::zeros([p.numel], (p.kind, p.device)),
                slots: p.slots,
                kind: p.kind,
                device: p.device,
            })
            .collect();
        Ok(Buckets {
            shapes: tensors.iter().map(|t| t.size()).collect(),
            buckets,
        })
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    fn check(&self, tensors: &[Tensor]) -> Result<()> {
        if tensors.len() != self.shapes.len() {
            bail!(
                "{} tensors given to buckets planned for {}",
                tensors.len(),
                self.shapes.len()
            );
        }
        for (i, (t, shape)) in tensors.iter().zip(&self.shapes).enumerate() {
            if !t.defined() {
                bail!("tensor #{i} is undefined (a parameter without a gradient on this rank?)");
            }
            if &t.size() != shape {
                bail!("tensor #{i} has shape {:?}, planned {:?}", t.size(), shape);
            }
        }
        for b in &self.buckets {
            for &(i, _, _) in &b.slots {
                let t = &tensors[i];
                if t.kind() != b.kind || t.device() != b.device {
                    bail!("tensor #{i} changed kind or device since the buckets were planned");
                }
            }
        }
        Ok(())
    }

    /// Runs `collective` on each packed bucket and copies the results back into `tensors`.
    fn run(
        &mut self,
        tensors: &[Tensor],
        mut collective: impl FnMut(&Tensor) -> Result<()>,
    ) -> Result<()> {
        self.check(tensors)?;
        tch::no_grad(|| -> Result<()> {
            for b in &mut self.buckets {
                for &(i, off, n) in &b.slots {
                    b.flat
                        .f_narrow(0, off, n)?
                        .f_view(&self.shapes[i][..])?
                        .f_copy_(&tensors[i])?;
                }
                collective(&b.flat)?;
                for &(i, off, n) in &b.slots {
                    let mut t = tensors[i].shallow_clone();
                    t.f_copy_(&b.flat.f_narrow(0, off, n)?.f_view(&self.shapes[i][..])?)?;
                }
            }
            Ok(())
        })
    }

    /// In-place allreduce of every tensor.
    pub fn allreduce(
        &mut self,
        pg: &mut ProcessGroup,
        tensors: &[Tensor],
        op: ReduceOp,
    ) -> Result<()> {
        self.run(tensors, |flat| pg.allreduce(&[flat], op))
    }

    /// In-place allreduce of every tensor, each bucket first clipped to norm `max_norm` on this
    /// rank (`clip_flat_`) when given.
    pub fn allreduce_clipped(
        &mut self,
        pg: &mut ProcessGroup,
        tensors: &[Tensor],
        op: ReduceOp,
        max_norm: Option<f64>,
    ) -> Result<()> {
        self.run(tensors, |flat| {
            if let Some(c) = max_norm {
                clip_flat_(flat, c)?;
            }
            pg.allreduce(&[flat], op)
        })
    }

    /// Bucket-wise clipping of `tensors` in place, with no collective (a single process).
    pub fn clip_(&mut self, tensors: &[Tensor], max_norm: f64) -> Result<()> {
        self.run(tensors, |flat| clip_flat_(flat, max_norm))
    }

    /// Overwrites every tensor with `root`'s values.
    pub fn broadcast(
        &mut self,
        pg: &mut ProcessGroup,
        tensors: &[Tensor],
        root: usize,
    ) -> Result<()> {
        self.run(tensors, |flat| pg.broadcast(&[flat], root))
    }
}

/// Copies rank 0's values of `vars` (parameters and buffers, in the same order on every rank)
/// to every rank: call once before training so all replicas start identical.
pub fn broadcast_from_root(pg: &mut ProcessGroup, vars: &[Tensor]) -> Result<()> {
    if pg.size() == 1 || vars.is_empty() {
        return Ok(());
    }
    Buckets::new(vars, DEFAULT_BUCKET_BYTES)?
        .broadcast(pg, vars, 0)
        .context("broadcasting rank 0's parameters")
}
