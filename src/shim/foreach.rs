//! `shim/foreach.cpp`: ATen's `_foreach_*` kernels over tensor lists. Use [`crate::optim`].
use std::os::raw::{c_char, c_int};
use torch_sys::C_tensor;

pub type List = *const *mut C_tensor;

pub type Out = *mut *mut C_tensor;

pub type Err = *mut *mut c_char;

extern "C" {
    pub fn mr_foreach_norm(xs: List, n: usize, out: Out, err: Err) -> c_int;
    pub fn mr_foreach_sqrt(xs: List, n: usize, out: Out, err: Err) -> c_int;
    pub fn mr_foreach_div(xs: List, ys: List, n: usize, out: Out, err: Err) -> c_int;
    pub fn mr_foreach_mul_scalar_(xs: List, n: usize, s: f64, err: Err) -> c_int;
    pub fn mr_foreach_add_scalar_(xs: List, n: usize, s: f64, err: Err) -> c_int;
    pub fn mr_foreach_mul_tensor_(xs: List, n: usize, t: *const C_tensor, err: Err) -> c_int;
    pub fn mr_foreach_mul_tensor(
        xs: List,
        n: usize,
        t: *const C_tensor,
        out: Out,
        err: Err,
    ) -> c_int;
    pub fn mr_foreach_mul_list_(xs: List, ys: List, n: usize, err: Err) -> c_int;
    pub fn mr_foreach_add_list_(xs: List, ys: List, n: usize, alpha: f64, err: Err) -> c_int;
    pub fn mr_foreach_lerp_scalar_(xs: List, ys: List, n: usize, w: f64, err: Err) -> c_int;
    pub fn mr_foreach_zero_(xs: List, n: usize, err: Err) -> c_int;
    pub fn mr_fused_sgd_(
        params: List,
        grads: List,
        bufs: List,
        n: usize,
        n_bufs: usize,
        weight_decay: f64,
        momentum: f64,
        lr: *const C_tensor,
        nesterov: c_int,
        is_first_step: c_int,
        found_inf: *const C_tensor,
        err: Err,
    ) -> c_int;
    pub fn mr_amp_non_finite_check_and_unscale_(
        xs: List,
        n: usize,
        found_inf: *mut C_tensor,
        inv_scale: *const C_tensor,
        err: Err,
    ) -> c_int;
    pub fn mr_fused_adam_(
        params: List,
        grads: List,
        m: List,
        v: List,
        steps: List,
        n: usize,
        lr: *const C_tensor,
        lr_value: f64,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        decoupled: c_int,
        grad_scale: *const C_tensor,
        err: Err,
    ) -> c_int;
}
