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

impl Buckets {
    /// Plans buckets for `tensors` (all defined), each at most `bucket_bytes` unless a single
    /// tensor is larger. The flat buffers are allocated here.
    pub fn new(tensors: &[Tensor], bucket_bytes: usize) -> Result<Buckets> {
        if bucket_bytes == 0 {
            bail!("the bucket size must be positive");
        }
        let mut buckets: Vec<Bucket> = Vec::new();
        let mut open: Option<(Vec<(usize, i64, i64)>, Kind, Device, i64)> = None;
        let mut close = |open: &mut Option<(Vec<(usize, i64, i64)>, Kind, Device, i64)>| {
            if let Some((slots, kind, device, numel)) = open.take() {
                buckets.push(Bucket {
                    slots,
                    kind,
                    device,
                    flat: Tensor::zeros([numel], (kind, device)),
                });
            }
        };
        for (i, t) in tensors.iter().enumerate() {
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
                Some((_, k, d, n)) => {
                    *k == kind
                        && *d == device
                        && (*n as usize * kind.elt_size_in_bytes() + bytes <= bucket_bytes)
                }
                None => false,
            };
            if !fits {
                close(&mut open);
                open = Some((Vec::new(), kind, device, 0));
            }
            let (slots, _, _, n) = open.as_mut().expect("a bucket is open");
            slots.push((i, *n, numel));
            *n += numel;
        }
        close(&mut open);
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
