// mlperf-run's multi-tensor shim: libtorch's `_foreach_*` and fused optimizer kernels, which
// tch 0.24 does not wrap (its generator skips these TensorList ops), behind a C API for Rust
// (src/optim/foreach.rs). One call covers a whole list of tensors: on CUDA the foreach ops launch
// a handful of multi-tensor kernels instead of one per tensor, and the fused optimizers do the
// whole update of every parameter in one pass.
//
// Conventions (as tensor.cpp and dist.cpp): tensors cross as tch's C_tensor, i.e. at::Tensor*;
// lists are arrays of such pointers with a length; results that are new tensors come back as
// `new at::Tensor` in a caller-provided array (Rust takes ownership, tch frees them); no C++
// exception crosses the boundary (error.hpp): entry points return -1 with the message in `err`.
#include <ATen/ATen.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/_foreach_sqrt.h>
#include <ATen/ops/_foreach_zero.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>

#include "error.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace {

std::vector<at::Tensor> list(at::Tensor* const* xs, size_t n, const char* what) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    TORCH_CHECK(xs != nullptr && xs[i] != nullptr && xs[i]->defined(), what, ": tensor #", i,
                " is undefined");
    out.push_back(*xs[i]);
  }
  return out;
}

const at::Tensor& one(const at::Tensor* t, const char* what) {
  TORCH_CHECK(t != nullptr && t->defined(), what, ": undefined tensor");
  return *t;
}

std::optional<at::Tensor> maybe(const at::Tensor* t) {
  if (t == nullptr || !t->defined()) return std::nullopt;
  return *t;
}

void give(std::vector<at::Tensor>&& v, at::Tensor** out, size_t n) {
  TORCH_CHECK(v.size() == n, "foreach: expected ", n, " results, got ", v.size());
  for (size_t i = 0; i < n; ++i) out[i] = new at::Tensor(std::move(v[i]));
}

constexpr const char* kWhat = "foreach shim";

}  // namespace

extern "C" {

// out[i] = ||xs[i]||_2 (0-dim, the tensors' dtype)
int mr_foreach_norm(at::Tensor* const* xs, size_t n, at::Tensor** out, char** err) {
  return mr::catching(err, kWhat, [&] { give(at::_foreach_norm(list(xs, n, "norm")), out, n); });
}

// out[i] = sqrt(xs[i])
int mr_foreach_sqrt(at::Tensor* const* xs, size_t n, at::Tensor** out, char** err) {
  return mr::catching(err, kWhat, [&] { give(at::_foreach_sqrt(list(xs, n, "sqrt")), out, n); });
}

// out[i] = xs[i] / ys[i]
int mr_foreach_div(at::Tensor* const* xs, at::Tensor* const* ys, size_t n, at::Tensor** out,
                   char** err) {
  return mr::catching(err, kWhat, [&] {
    give(at::_foreach_div(list(xs, n, "div"), list(ys, n, "div")), out, n);
  });
}

// xs[i] *= s
int mr_foreach_mul_scalar_(at::Tensor* const* xs, size_t n, double s, char** err) {
  return mr::catching(err, kWhat, [&] { at::_foreach_mul_(list(xs, n, "mul"), s); });
}

// xs[i] += s
int mr_foreach_add_scalar_(at::Tensor* const* xs, size_t n, double s, char** err) {
  return mr::catching(err, kWhat, [&] { at::_foreach_add_(list(xs, n, "add"), s); });
}

// xs[i] *= t (one 0-dim tensor for all, read on the device: no host sync)
int mr_foreach_mul_tensor_(at::Tensor* const* xs, size_t n, const at::Tensor* t, char** err) {
  return mr::catching(err, kWhat,
                      [&] { at::_foreach_mul_(list(xs, n, "mul"), one(t, "mul")); });
}

// out[i] = xs[i] * t (one 0-dim tensor for all, read on the device)
int mr_foreach_mul_tensor(at::Tensor* const* xs, size_t n, const at::Tensor* t, at::Tensor** out,
                          char** err) {
  return mr::catching(err, kWhat,
                      [&] { give(at::_foreach_mul(list(xs, n, "mul"), one(t, "mul")), out, n); });
}

// xs[i] *= ys[i] (ys[i] may be a 0-dim tensor: a per-tensor factor kept on the device)
int mr_foreach_mul_list_(at::Tensor* const* xs, at::Tensor* const* ys, size_t n, char** err) {
  return mr::catching(err, kWhat, [&] {
    at::_foreach_mul_(list(xs, n, "mul"), list(ys, n, "mul"));
  });
}

// xs[i] += alpha * ys[i]
int mr_foreach_add_list_(at::Tensor* const* xs, at::Tensor* const* ys, size_t n, double alpha,
                         char** err) {
  return mr::catching(err, kWhat, [&] {
    at::_foreach_add_(list(xs, n, "add"), list(ys, n, "add"), alpha);
  });
}

// xs[i] += w * (ys[i] - xs[i])
int mr_foreach_lerp_scalar_(at::Tensor* const* xs, at::Tensor* const* ys, size_t n, double w,
                            char** err) {
  return mr::catching(err, kWhat, [&] {
    at::_foreach_lerp_(list(xs, n, "lerp"), list(ys, n, "lerp"), w);
  });
}

// xs[i] = 0
int mr_foreach_zero_(at::Tensor* const* xs, size_t n, char** err) {
  return mr::catching(err, kWhat, [&] { at::_foreach_zero_(list(xs, n, "zero")); });
}

// torch.optim.SGD(fused=True)'s kernel: g = grad + wd*w; buf = g (first step) or m*buf + g;
// w -= lr * (nesterov ? g + m*buf : buf). `lr` is a 0-dim tensor on the parameters' device.
// With momentum 0 the buffers are not used (pass n_bufs = 0). found_inf (nullable, 0-dim f32 on
// the device; what GradScaler passes a fused optimizer after unscale_): where it is 1 the kernel
// changes nothing (neither weights nor buffers).
int mr_fused_sgd_(at::Tensor* const* params, at::Tensor* const* grads, at::Tensor* const* bufs,
                  size_t n, size_t n_bufs, double weight_decay, double momentum,
                  const at::Tensor* lr, int nesterov, int is_first_step,
                  const at::Tensor* found_inf, char** err) {
  return mr::catching(err, kWhat, [&] {
    at::_fused_sgd_(list(params, n, "fused_sgd"), list(grads, n, "fused_sgd"),
                    list(bufs, n_bufs, "fused_sgd"), weight_decay, momentum, one(lr, "fused_sgd"),
                    /*dampening=*/0.0, nesterov != 0, /*maximize=*/false, is_first_step != 0,
                    /*grad_scale=*/std::nullopt, maybe(found_inf));
  });
}

// GradScaler's overflow check: found_inf (0-dim f32, not reset here) becomes 1 if any element
// of xs is inf or NaN; every x is multiplied by inv_scale (0-dim f32) in the same pass.
int mr_amp_non_finite_check_and_unscale_(at::Tensor* const* xs, size_t n, at::Tensor* found_inf,
                                         const at::Tensor* inv_scale, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(found_inf != nullptr && found_inf->defined(), "amp check: undefined found_inf");
    at::_amp_foreach_non_finite_check_and_unscale_(list(xs, n, "amp check"), *found_inf,
                                                   one(inv_scale, "amp check"));
  });
}

// torch.optim.Adam/AdamW(fused=True)'s kernel over params, grads, first and second moments and
// per-parameter step counts (float 0-dim tensors, already incremented for this step; the same
// tensor may appear n times). decoupled != 0: AdamW (w *= 1 - lr*wd), else Adam (wd*w added to
// the gradient). lr: a 0-dim tensor, or null to use lr_value. grad_scale (nullable): gradients
// are divided by it first (and stored back divided).
int mr_fused_adam_(at::Tensor* const* params, at::Tensor* const* grads, at::Tensor* const* m,
                   at::Tensor* const* v, at::Tensor* const* steps, size_t n, const at::Tensor* lr,
                   double lr_value, double beta1, double beta2, double weight_decay, double eps,
                   int decoupled, const at::Tensor* grad_scale, char** err) {
  return mr::catching(err, kWhat, [&] {
    auto p = list(params, n, "fused_adam");
    auto g = list(grads, n, "fused_adam");
    auto ms = list(m, n, "fused_adam");
    auto vs = list(v, n, "fused_adam");
    auto st = list(steps, n, "fused_adam");
    std::vector<at::Tensor> no_max;
    auto scale = maybe(grad_scale);
    if (decoupled != 0) {
      if (lr != nullptr) {
        at::_fused_adamw_(p, g, ms, vs, no_max, st, *lr, beta1, beta2, weight_decay, eps, false,
                          false, scale, std::nullopt);
      } else {
        at::_fused_adamw_(p, g, ms, vs, no_max, st, lr_value, beta1, beta2, weight_decay, eps,
                          false, false, scale, std::nullopt);
      }
    } else {
      if (lr != nullptr) {
        at::_fused_adam_(p, g, ms, vs, no_max, st, *lr, beta1, beta2, weight_decay, eps, false,
                         false, scale, std::nullopt);
      } else {
        at::_fused_adam_(p, g, ms, vs, no_max, st, lr_value, beta1, beta2, weight_decay, eps,
                         false, false, scale, std::nullopt);
      }
    }
  });
}

}  // extern "C"
