//! Multi-tensor kernels: libtorch's `_foreach_*` ops and fused optimizer kernels over lists of
//! tensors, through the C++ shim (`shim/foreach.cpp`; tch 0.24 does not wrap these TensorList
//! ops). On CUDA one call launches a few multi-tensor kernels for a whole list instead of one
//! kernel per tensor; on the CPU the same calls loop over the tensors inside libtorch, so the
//! optimizers built on them have a CPU twin that the tests compare with PyTorch.
//!
//! Every function takes the lists as slices (equal lengths where there are two) and does nothing
//! on empty lists. Factors that change every step (learning rate, clip coefficient, trust
//! ratios) are passed as 0-dim device tensors, so no value is read back to the host.

use crate::shim::error::call;
use crate::shim::foreach::{
    mr_amp_non_finite_check_and_unscale_, mr_foreach_add_list_, mr_foreach_add_scalar_,
    mr_foreach_div, mr_foreach_lerp_scalar_, mr_foreach_mul_list_, mr_foreach_mul_scalar_,
    mr_foreach_mul_tensor, mr_foreach_mul_tensor_, mr_foreach_norm, mr_foreach_sqrt,
    mr_foreach_zero_, mr_fused_adam_, mr_fused_sgd_, Err, Out,
};
use anyhow::{bail, Result};
use std::os::raw::c_int;
use tch::Tensor;
use torch_sys::C_tensor;

/// The raw pointers of a list (valid while the tensors live).
fn ptrs(xs: &[Tensor]) -> Vec<*mut C_tensor> {
    xs.iter().map(|t| t.as_ptr() as *mut C_tensor).collect()
}

fn same_len(op: &str, a: &[Tensor], b: &[Tensor]) -> Result<()> {
    if a.len() != b.len() {
        bail!("{op}: lists of {} and {} tensors", a.len(), b.len());
    }
    Ok(())
}

/// Runs a shim call that returns one new tensor per input.
fn new_list(op: &str, n: usize, f: impl FnOnce(Out, Err) -> c_int) -> Result<Vec<Tensor>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut out: Vec<*mut C_tensor> = vec![std::ptr::null_mut(); n];
    call(op, |err| f(out.as_mut_ptr(), err))?;
    // SAFETY: on success the shim filled every slot with a new at::Tensor we now own.
    Ok(out
        .into_iter()
        .map(|p| unsafe { Tensor::from_ptr(p) })
        .collect())
}

/// Runs an in-place shim call.
fn in_place(op: &str, n: usize, f: impl FnOnce(Err) -> c_int) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    call(op, f)
}

/// `||x||_2` of every tensor (0-dim tensors on the tensors' device).
pub fn norm(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let p = ptrs(xs);
    // SAFETY: pointers of live tensors, `out` has room for n results.
    new_list("foreach norm", xs.len(), |out, err| unsafe {
        mr_foreach_norm(p.as_ptr(), p.len(), out, err)
    })
}

/// The norms of `xs` stacked into one 1-d tensor (one entry per tensor).
pub fn norms(xs: &[Tensor]) -> Result<Tensor> {
    let n = norm(xs)?;
    if n.is_empty() {
        bail!("foreach norms of an empty list");
    }
    Ok(Tensor::f_stack(&n, 0)?)
}

/// `sqrt(x)` of every tensor, as new tensors.
pub fn sqrt(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let p = ptrs(xs);
    // SAFETY: as in `norm`.
    new_list("foreach sqrt", xs.len(), |out, err| unsafe {
        mr_foreach_sqrt(p.as_ptr(), p.len(), out, err)
    })
}

/// `x / y` pairwise, as new tensors.
pub fn div(xs: &[Tensor], ys: &[Tensor]) -> Result<Vec<Tensor>> {
    same_len("foreach div", xs, ys)?;
    let (p, q) = (ptrs(xs), ptrs(ys));
    // SAFETY: as in `norm`; both lists have n entries.
    new_list("foreach div", xs.len(), |out, err| unsafe {
        mr_foreach_div(p.as_ptr(), q.as_ptr(), p.len(), out, err)
    })
}

/// `x *= s`.
pub fn mul_scalar_(xs: &[Tensor], s: f64) -> Result<()> {
    let p = ptrs(xs);
    // SAFETY: pointers of live tensors.
    in_place("foreach mul", xs.len(), |err| unsafe {
        mr_foreach_mul_scalar_(p.as_ptr(), p.len(), s, err)
    })
}

/// `x += s`.
pub fn add_scalar_(xs: &[Tensor], s: f64) -> Result<()> {
    let p = ptrs(xs);
    // SAFETY: pointers of live tensors.
    in_place("foreach add", xs.len(), |err| unsafe {
        mr_foreach_add_scalar_(p.as_ptr(), p.len(), s, err)
    })
}

/// `x *= t` for one 0-dim tensor `t` (read on the device).
pub fn mul_tensor_(xs: &[Tensor], t: &Tensor) -> Result<()> {
    let p = ptrs(xs);
    // SAFETY: pointers of live tensors.
    in_place("foreach mul", xs.len(), |err| unsafe {
        mr_foreach_mul_tensor_(p.as_ptr(), p.len(), t.as_ptr(), err)
    })
}

/// `x * t` for one 0-dim tensor `t` (read on the device), as new tensors.
pub fn mul_tensor(xs: &[Tensor], t: &Tensor) -> Result<Vec<Tensor>> {
    let p = ptrs(xs);
    // SAFETY: as in `norm`.
    new_list("foreach mul", xs.len(), |out, err| unsafe {
        mr_foreach_mul_tensor(p.as_ptr(), p.len(), t.as_ptr(), out, err)
    })
}

/// `x *= y` pairwise; `y` may be 0-dim (a per-tensor factor on the device).
pub fn mul_list_(xs: &[Tensor], ys: &[Tensor]) -> Result<()> {
    same_len("foreach mul", xs, ys)?;
    let (p, q) = (ptrs(xs), ptrs(ys));
    // SAFETY: pointers of live tensors; both lists have n entries.
    in_place("foreach mul", xs.len(), |err| unsafe {
        mr_foreach_mul_list_(p.as_ptr(), q.as_ptr(), p.len(), err)
    })
}

/// `x += alpha * y` pairwise.
pub fn add_list_(xs: &[Tensor], ys: &[Tensor], alpha: f64) -> Result<()> {
    same_len("foreach add", xs, ys)?;
    let (p, q) = (ptrs(xs), ptrs(ys));
    // SAFETY: pointers of live tensors; both lists have n entries.
    in_place("foreach add", xs.len(), |err| unsafe {
        mr_foreach_add_list_(p.as_ptr(), q.as_ptr(), p.len(), alpha, err)
    })
}

/// `x += w * (y - x)` pairwise.
pub fn lerp_(xs: &[Tensor], ys: &[Tensor], w: f64) -> Result<()> {
    same_len("foreach lerp", xs, ys)?;
    let (p, q) = (ptrs(xs), ptrs(ys));
    // SAFETY: pointers of live tensors; both lists have n entries.
    in_place("foreach lerp", xs.len(), |err| unsafe {
        mr_foreach_lerp_scalar_(p.as_ptr(), q.as_ptr(), p.len(), w, err)
    })
}

/// `x = 0`.
pub fn zero_(xs: &[Tensor]) -> Result<()> {
    let p = ptrs(xs);
    // SAFETY: pointers of live tensors.
    in_place("foreach zero", xs.len(), |err| unsafe {
        mr_foreach_zero_(p.as_ptr(), p.len(), err)
    })
}

/// Where `keep` (a 0-dim tensor on the lists' device, 0 or 1) is 0, every element of every
/// tensor becomes +0.0, inf and NaN included; where it is 1, every bit stays as it was. A float
/// multiply by 0 leaves inf and NaN as NaN, so the bit patterns are multiplied instead: each
/// tensor viewed as integers of its element's width, times `keep` as that integer type (one
/// multi-tensor pass per element width; nothing is read back to the host).
pub fn zero_unless_(xs: &[Tensor], keep: &Tensor) -> Result<()> {
    let mut widths: Vec<(tch::Kind, Vec<Tensor>)> = Vec::new();
    for x in xs {
        let int = same_width_int(x.f_kind()?)?;
        let view = x.f_view_dtype(int)?;
        match widths.iter_mut().find(|(k, _)| *k == int) {
            Some((_, views)) => views.push(view),
            None => widths.push((int, vec![view])),
        }
    }
    for (int, views) in &widths {
        mul_tensor_(views, &keep.f_to_kind(*int)?)?;
    }
    Ok(())
}

/// The integer type as wide as `kind`'s elements (for viewing a tensor's bits).
fn same_width_int(kind: tch::Kind) -> Result<tch::Kind> {
    Ok(match kind.elt_size_in_bytes() {
        1 => tch::Kind::Int8,
        2 => tch::Kind::Int16,
        4 => tch::Kind::Int,
        8 => tch::Kind::Int64,
        n => bail!("foreach zero_unless: no integer type of {n} bytes"),
    })
}

/// libtorch's fused SGD kernel (`torch.optim.SGD(fused=True)`): `g = grad + wd*w`;
/// `buf = g` on the first step, else `momentum*buf + g`; `w -= lr * (nesterov ? g +
/// momentum*buf : buf)`. `bufs` is empty when `momentum` is 0. `lr` is a 0-dim tensor on the
/// parameters' device. With `found_inf` (0-dim f32, 0 or 1: a dynamic loss scale's overflow
/// flag, [`super::loss_scale`]) the kernel changes nothing, neither weights nor buffers,
/// where it is 1: the step is skipped on the device, without a read-back.
#[allow(clippy::too_many_arguments)]
pub fn fused_sgd_(
    params: &[Tensor],
    grads: &[Tensor],
    bufs: &[Tensor],
    weight_decay: f64,
    momentum: f64,
    lr: &Tensor,
    nesterov: bool,
    is_first_step: bool,
    found_inf: Option<&Tensor>,
) -> Result<()> {
    same_len("fused sgd", params, grads)?;
    if momentum != 0.0 {
        same_len("fused sgd", params, bufs)?;
    }
    let (p, g, b) = (ptrs(params), ptrs(grads), ptrs(bufs));
    let found_inf = found_inf.map_or(std::ptr::null(), |f| f.as_ptr());
    // SAFETY: pointers of live tensors with the lengths given; a null found_inf is allowed.
    in_place("fused sgd", params.len(), |err| unsafe {
        mr_fused_sgd_(
            p.as_ptr(),
            g.as_ptr(),
            b.as_ptr(),
            p.len(),
            b.len(),
            weight_decay,
            momentum,
            lr.as_ptr(),
            nesterov as c_int,
            is_first_step as c_int,
            found_inf,
            err,
        )
    })
}

/// GradScaler's overflow check (`torch._amp_foreach_non_finite_check_and_unscale_`): sets
/// `found_inf` (0-dim f32; only ever set to 1 here, never reset) if any element of `xs` is inf
/// or NaN, and multiplies every x by `inv_scale` (0-dim f32) in the same pass.
pub fn non_finite_check_and_unscale_(
    xs: &[Tensor],
    found_inf: &Tensor,
    inv_scale: &Tensor,
) -> Result<()> {
    let x = ptrs(xs);
    // SAFETY: pointers of live tensors; found_inf is updated in place, not replaced.
    in_place("amp overflow check", xs.len(), |err| unsafe {
        mr_amp_non_finite_check_and_unscale_(
            x.as_ptr(),
            x.len(),
            found_inf.as_ptr() as *mut C_tensor,
            inv_scale.as_ptr(),
            err,
        )
    })
}

/// Which update [`fused_adam_`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdamKind {
    /// `torch.optim.Adam`: `wd*w` is added to the gradient.
    Adam,
    /// `torch.optim.AdamW`: decoupled decay, `w *= 1 - lr*wd` before the Adam update.
    AdamW,
}

/// The learning rate of a fused Adam call: a 0-dim device tensor or a constant.
pub enum Lr<'a> {
    Tensor(&'a Tensor),
    Value(f64),
}

/// Hyperparameters of one fused Adam call.
#[derive(Debug, Clone, Copy)]
pub struct AdamArgs {
    pub beta1: f64,
    pub beta2: f64,
    pub weight_decay: f64,
    pub eps: f64,
    pub kind: AdamKind,
}

/// libtorch's fused Adam/AdamW kernel (`torch.optim.AdamW(fused=True)`): one pass updates
/// `m`, `v` and the parameters: `w -= lr * m^ / (sqrt(v^) + eps)` with bias corrections from
/// `steps` (float 0-dim tensors already counting this step; one per parameter, the same tensor
/// may repeat). With `grad_scale` the gradients are divided by it first (and stored back so).
#[allow(clippy::too_many_arguments)]
pub fn fused_adam_(
    params: &[Tensor],
    grads: &[Tensor],
    m: &[Tensor],
    v: &[Tensor],
    steps: &[Tensor],
    lr: Lr<'_>,
    a: AdamArgs,
    grad_scale: Option<&Tensor>,
) -> Result<()> {
    for l in [grads, m, v, steps] {
        same_len("fused adam", params, l)?;
    }
    let (p, g, mp, vp, sp) = (ptrs(params), ptrs(grads), ptrs(m), ptrs(v), ptrs(steps));
    let (lr_t, lr_v) = match lr {
        Lr::Tensor(t) => (t.as_ptr(), 0.0),
        Lr::Value(x) => (std::ptr::null(), x),
    };
    let scale = grad_scale.map_or(std::ptr::null(), |t| t.as_ptr());
    // SAFETY: pointers of live tensors with n entries each; null lr/scale are allowed.
    in_place("fused adam", params.len(), |err| unsafe {
        mr_fused_adam_(
            p.as_ptr(),
            g.as_ptr(),
            mp.as_ptr(),
            vp.as_ptr(),
            sp.as_ptr(),
            p.len(),
            lr_t,
            lr_v,
            a.beta1,
            a.beta2,
            a.weight_decay,
            a.eps,
            (a.kind == AdamKind::AdamW) as c_int,
            scale,
            err,
        )
    })
}

/// A 0-dim f32 tensor on `device` whose value is set in place every step ([`DeviceScalar::set`]
/// launches a fill: no host-to-device copy, no sync), so kernels read per-step factors such as
/// the learning rate from device memory.
pub struct DeviceScalar {
    t: Tensor,
    last: Option<f64>,
}

impl DeviceScalar {
    pub fn new(device: tch::Device) -> DeviceScalar {
        DeviceScalar {
            t: Tensor::zeros([], (tch::Kind::Float, device)),
            last: None,
        }
    }

    /// Set the value (skipped when unchanged).
    pub fn set(&mut self, v: f64) -> Result<&Tensor> {
        if self.last != Some(v) {
            let _ = self.t.f_fill_(v)?;
            self.last = Some(v);
        }
        Ok(&self.t)
    }

    pub fn tensor(&self) -> &Tensor {
        &self.t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    fn vals(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()
    }

    #[test]
    fn list_ops_match_per_tensor_ops() {
        let xs = vec![
            Tensor::randn([3, 4], (Kind::Float, Device::Cpu)),
            Tensor::randn([5], (Kind::Float, Device::Cpu)),
        ];
        let ys: Vec<Tensor> = xs.iter().map(|x| x.randn_like()).collect();
        let before: Vec<Tensor> = xs.iter().map(|x| x.copy()).collect();
        let n = norm(&xs).unwrap();
        for (x, n) in xs.iter().zip(&n) {
            assert!((x.norm().double_value(&[]) - n.double_value(&[])).abs() < 1e-6);
        }
        add_list_(&xs, &ys, 0.5).unwrap();
        mul_scalar_(&xs, 2.0).unwrap();
        let f = Tensor::from_slice(&[3.0f32, -1.0]);
        mul_list_(&xs, &f.unbind(0)).unwrap();
        mul_tensor_(&xs, &Tensor::from(0.5f32)).unwrap();
        for (i, (x, (b, y))) in xs.iter().zip(before.iter().zip(&ys)).enumerate() {
            let k = [3.0, -1.0][i];
            let want = (b + y * 0.5) * 2.0 * k * 0.5;
            assert_eq!(vals(x).len(), vals(&want).len());
            for (a, w) in vals(x).iter().zip(vals(&want)) {
                assert!((a - w).abs() < 1e-5, "{a} vs {w}");
            }
        }
        let m = mul_tensor(&xs, &Tensor::from(-2.0f32)).unwrap();
        for (x, m) in xs.iter().zip(&m) {
            assert_eq!(vals(&(x * -2.0)), vals(m));
            assert_ne!(
                x.data_ptr(),
                m.data_ptr(),
                "mul_tensor must not work in place"
            );
        }
        let d = div(&xs, &ys).unwrap();
        let r = sqrt(&[xs[0].abs()]).unwrap();
        assert!((&d[1] - &xs[1] / &ys[1]).abs().max().double_value(&[]) < 1e-6);
        assert!((&r[0] - xs[0].abs().sqrt()).abs().max().double_value(&[]) < 1e-6);
        lerp_(&xs, &ys, 1.0).unwrap();
        assert!((&xs[0] - &ys[0]).abs().max().double_value(&[]) < 1e-6);
        zero_(&xs).unwrap();
        assert_eq!(xs[1].abs().sum(Kind::Float).double_value(&[]), 0.0);
        // empty lists are no-ops, mismatched lists are errors (not crashes)
        mul_scalar_(&[], 2.0).unwrap();
        assert!(norm(&[]).unwrap().is_empty());
        assert!(add_list_(&xs, &ys[..1], 1.0).is_err());
    }

    #[test]
    fn zero_unless_clears_inf_and_nan_or_keeps_every_bit() {
        let special = [
            1.5f64,
            f64::INFINITY,
            f64::NAN,
            -0.0,
            f64::NEG_INFINITY,
            -3.25e-3,
        ];
        let make = || -> Vec<Tensor> {
            [Kind::Float, Kind::Half, Kind::BFloat16, Kind::Double]
                .iter()
                .map(|&k| Tensor::from_slice(&special).to_kind(k))
                .collect()
        };
        let bits = |t: &Tensor| {
            let int = same_width_int(t.kind()).unwrap();
            Vec::<i64>::try_from(t.view_dtype(int).to_kind(Kind::Int64)).unwrap()
        };
        let xs = make();
        let before: Vec<Vec<i64>> = xs.iter().map(bits).collect();
        zero_unless_(&xs, &Tensor::from(1.0f32)).unwrap();
        for (x, b) in xs.iter().zip(&before) {
            assert_eq!(&bits(x), b, "keep = 1 changed {:?}", x.kind());
        }
        zero_unless_(&xs, &Tensor::from(0.0f32)).unwrap();
        for x in &xs {
            assert!(bits(x).iter().all(|&b| b == 0), "{:?}: {x}", x.kind());
        }
        zero_unless_(&[], &Tensor::from(0.0f32)).unwrap();
    }

    #[test]
    fn libtorch_errors_come_back_as_errors() {
        let xs = vec![Tensor::zeros([3], (Kind::Float, Device::Cpu))];
        let ys = vec![Tensor::zeros([4], (Kind::Float, Device::Cpu))];
        let e = add_list_(&xs, &ys, 1.0).unwrap_err().to_string();
        assert!(e.contains("foreach add"), "{e}");
    }

    #[test]
    fn device_scalar_is_set_in_place() {
        let mut s = DeviceScalar::new(Device::Cpu);
        let ptr = s.tensor().data_ptr();
        assert_eq!(s.set(0.25).unwrap().double_value(&[]), 0.25);
        assert_eq!(s.set(2.0).unwrap().double_value(&[]), 2.0);
        assert_eq!(s.tensor().data_ptr(), ptr);
    }
}
