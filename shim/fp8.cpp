// mlperf-run's FP8 linear layer with delayed scaling, for BERT's `methods.fp8`
// (src/fused/fp8.rs has the recipe and the Rust side):
//
//   y = x W^T + b    x [M, K], W [N, K], b [N] (optional), y [M, N]
//
// as ONE autograd op in Transformer Engine's HYBRID format: x and W cast to E4M3, the output's
// gradient to E5M2, each with its per-tensor scale from an amax history (delayed scaling: this
// step's cast uses the scale the previous steps' amaxes set; this step's amax is written into
// row 0 of the history, on the device, for the update after the step: the largest over the
// step's calls, one per micro-batch). Accumulation in fp32.
//
// `scale` is a [3] fp32 tensor (input, weight, gradient), `history` a [len, 3] fp32 view of the
// model's history; both stay on the device and no value is read by the host (the op can be
// captured in a CUDA graph).
//
// Casts saturate: x * scale is clamped to the format's largest finite value (448 for E4M3,
// 57344 for E5M2) and then rounded to nearest even by ATen's cast; NaN stays NaN (E4M3's NaN,
// E5M2's NaN); values below the smallest subnormal round to (signed) zero.
//
// Two paths behind one torch::autograd::Function:
// - kernel (mode 0): ATen's _scaled_mm (cuBLASLt's FP8 GEMM) with tensor-wise dequantisation
//   scales (1 / scale), bf16 out for y and dx, fp32 out for dW; the bias in the epilogue; fast
//   accumulation in the forward GEMM only (as Transformer Engine and torchao). Rows
//   are padded to a multiple of 16 where needed (eval batches without padding).
// - emulated (mode 1, any device): the same casts, then dequantised in fp32 (q * (1 / scale))
//   and multiplied in fp32; y in x's dtype (the autocast dtype under autocast). The CPU twin of
//   the kernel path for tests (MLPERF_RUN_TEST_EMULATE_FP8=1) and the GPU numerics check.
// Both compute the bias's gradient from the unquantised output gradient, in fp32.
//
// x may come already cast (`xq`, E4M3 with the input scale, and its amax `x_amax`): a fused
// epilogue that wrote x also wrote those in the same kernel (methods.fp8 with fused epilogues,
// shim/fused_epilogue.cpp). The op then records that amax and multiplies xq instead of casting
// x again; x still receives the input's gradient.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "error.hpp"

namespace {

constexpr const char* kWhat = "fp8 linear shim";
constexpr double kE4M3Max = 448.0;
constexpr double kE5M2Max = 57344.0;

// The columns of `scale` and `history`.
enum Role : int64_t { kInput = 0, kWeight = 1, kGrad = 2 };

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// `t * scale` saturated and cast to E4M3 (format 0) or E5M2 (format 1); `scale` 0-d fp32.
at::Tensor quantize(const at::Tensor& t, const at::Tensor& scale, int format) {
  const double max = format == 0 ? kE4M3Max : kE5M2Max;
  const auto kind = format == 0 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
  return (t.to(at::kFloat) * scale).clamp(-max, max).to(kind);
}

// 1 / scale[role] as a tensor of its own: _scaled_mm hands each dequantisation scale's address
// to cuBLASLt as is, so each gets its own (aligned) allocation, as torchao's scales do, not a
// view at a 4-byte offset into one [3] tensor. With such views the first H200 run of the probe
// (2026-11-28, a 16 x 32 forward GEMM) failed in cublasLtMatmul with CUBLAS_STATUS_NOT_SUPPORTED
// after its heuristic had found an algorithm; a misaligned scale address is the suspect, not
// yet confirmed on a GPU.
at::Tensor inverse(const at::Tensor& s, int64_t role) { return s.select(0, role).reciprocal(); }

// q dequantised in fp32: q * (1 / scale), as _scaled_mm applies its dequantisation scales.
at::Tensor dequantize(const at::Tensor& q, const at::Tensor& inv) { return q.to(at::kFloat) * inv; }

// `amax` (one value) into history[0][role], on the device, as the max with what the step's
// earlier calls wrote there: with gradient accumulation the layer runs once per micro-batch, and
// the step's amax is the largest of them (row 0 starts each step at 0, Fp8State::update, so one
// call per step writes its own amax; a NaN stays NaN).
void record(const at::Tensor& amax, const at::Tensor& history, int64_t role) {
  at::Tensor cell = history.select(0, 0).select(0, role);
  cell.copy_(at::maximum(cell, amax.reshape({}).to(at::kFloat)));
}

// |t|'s largest value (NaN if t has one) recorded as above.
void record_amax(const at::Tensor& t, const at::Tensor& history, int64_t role) {
  record(t.abs().max(), history, role);
}

// _scaled_mm of a [M, K] row-major and b^T for b [N, K] (b made column-major as the kernel
// wants it), rows of a padded to a multiple of 16. `fast_accum`: cuBLASLt's fast FP8
// accumulation (no split accumulator), which Transformer Engine (its forward GEMM's
// use_split_accumulator is false, the gradients' true) and torchao (use_fast_accum for the
// output, not for the gradients) both take for the forward GEMM only.
at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& inv_a,
                     const at::Tensor& inv_b, const c10::optional<at::Tensor>& bias,
                     at::ScalarType out, bool fast_accum) {
  const int64_t m = a.size(0), pad = (16 - m % 16) % 16;
  at::Tensor a2 = a.contiguous();
  if (pad != 0) a2 = at::cat({a2, at::zeros({pad, a.size(1)}, a2.options())}, 0);
  at::Tensor y =
      at::_scaled_mm(a2, b.contiguous().t(), inv_a, inv_b, bias, c10::nullopt, out, fast_accum);
  return pad != 0 ? y.narrow(0, 0, m) : y;
}

struct Fp8Linear : public torch::autograd::Function<Fp8Linear> {
  // b: the bias, or an empty tensor for none (autograd's Function wants defined inputs)
  // pre: x already cast {xq, its amax}, or nullopt (optional: custom Functions take no undefined
  // tensors)
  static variable_list forward(AutogradContext* ctx, at::Tensor x, at::Tensor w, at::Tensor b,
                               bool has_bias, at::Tensor scale, at::Tensor history, bool emulate,
                               int64_t out_kind, std::optional<at::Tensor> pre_q,
                               std::optional<at::Tensor> pre_amax) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    at::NoGradGuard no_grad;
    if (pre_q) {
      record(*pre_amax, history, kInput);
    } else {
      record_amax(x, history, kInput);
    }
    record_amax(w, history, kWeight);
    // this step's scales, kept for the backward (the update after the step rewrites `scale`)
    const at::Tensor s = scale.detach().clone();
    const at::Tensor xq = pre_q ? *pre_q : quantize(x, s.select(0, kInput), 0);
    const at::Tensor wq = quantize(w, s.select(0, kWeight), 0);
    const at::Tensor inv_x = inverse(s, kInput), inv_w = inverse(s, kWeight);
    const auto out = static_cast<at::ScalarType>(out_kind);
    at::Tensor y;
    if (emulate) {
      y = dequantize(xq, inv_x).mm(dequantize(wq, inv_w).t());
      if (has_bias) y = y + b.to(at::kFloat);
      y = y.to(out);
    } else {
      c10::optional<at::Tensor> bias;
      if (has_bias) bias = b.to(out);
      y = scaled_mm(xq, wq, inv_x, inv_w, bias, out, /*fast_accum=*/true);
    }
    ctx->save_for_backward({xq, wq});
    ctx->saved_data["scale"] = s;
    ctx->saved_data["history"] = history;
    ctx->saved_data["emulate"] = emulate;
    ctx->saved_data["x_kind"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_kind"] = static_cast<int64_t>(w.scalar_type());
    ctx->saved_data["has_bias"] = has_bias;
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    auto saved = ctx->get_saved_variables();
    const at::Tensor& xq = saved[0];
    const at::Tensor& wq = saved[1];
    const at::Tensor s = ctx->saved_data["scale"].toTensor();
    const at::Tensor history = ctx->saved_data["history"].toTensor();
    const bool emulate = ctx->saved_data["emulate"].toBool();
    const auto x_kind = static_cast<at::ScalarType>(ctx->saved_data["x_kind"].toInt());
    const auto w_kind = static_cast<at::ScalarType>(ctx->saved_data["w_kind"].toInt());
    at::Tensor g = grads[0];
    if (!g.defined()) g = at::zeros({xq.size(0), wq.size(0)}, xq.options().dtype(at::kFloat));
    {
      at::NoGradGuard no_grad;
      record_amax(g, history, kGrad);
    }
    const at::Tensor inv_x = inverse(s, kInput), inv_w = inverse(s, kWeight),
                     inv_g = inverse(s, kGrad);
    const at::Tensor gq = quantize(g, s.select(0, kGrad), 1);
    at::Tensor dx, dw, db;
    if (emulate) {
      const at::Tensor gd = dequantize(gq, inv_g);
      if (ctx->needs_input_grad(0)) dx = gd.mm(dequantize(wq, inv_w));
      if (ctx->needs_input_grad(1)) dw = gd.t().mm(dequantize(xq, inv_x));
    } else {
      // the token dimension M is dW's reduction: zero rows up to a multiple of 16 add nothing
      const int64_t m = gq.size(0), pad = (16 - m % 16) % 16;
      auto rows = [&](const at::Tensor& q) {
        if (pad == 0) return q;
        return at::cat({q, at::zeros({pad, q.size(1)}, q.options().dtype(at::kFloat))
                               .to(q.scalar_type())},
                       0);
      };
      const at::Tensor gp = rows(gq), xp = rows(xq);
      // dx = g W: W^T [K, N] as the column-major second operand is W [N, K] row-major's t()
      if (ctx->needs_input_grad(0))
        dx = scaled_mm(gp, wq.t(), inv_g, inv_w, c10::nullopt, at::kBFloat16, false)
                 .narrow(0, 0, m);
      // dW = g^T x: [N, M] x [M, K]
      if (ctx->needs_input_grad(1))
        dw = scaled_mm(gp.t(), xp.t(), inv_g, inv_x, c10::nullopt, at::kFloat, false);
    }
    if (dx.defined()) dx = dx.to(x_kind);
    if (dw.defined()) dw = dw.to(w_kind);
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2))
      db = g.to(at::kFloat).sum(0);
    return {dx,           dw,           db,           at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

const at::Tensor& need(const at::Tensor* t, const char* name) {
  TORCH_CHECK(t != nullptr && t->defined(), "fp8 linear: ", name, " is undefined");
  return *t;
}

at::Tensor run_op(const at::Tensor& x, const at::Tensor& w, const at::Tensor* b,
                  const at::Tensor& scale, const at::Tensor& history, const at::Tensor* xq,
                  const at::Tensor* x_amax, int mode) {
  TORCH_CHECK(mode == 0 || mode == 1, "fp8 linear: mode must be 0 (kernel) or 1 (emulated)");
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
              "fp8 linear: want x [M, K] and W [N, K]; got x ", x.sizes(), ", W ", w.sizes());
  TORCH_CHECK(scale.numel() == 3 && scale.scalar_type() == at::kFloat,
              "fp8 linear: scale must be [3] fp32, got ", scale.sizes(), " ", scale.scalar_type());
  TORCH_CHECK(history.dim() == 2 && history.size(1) == 3 && history.scalar_type() == at::kFloat,
              "fp8 linear: history must be [len, 3] fp32, got ", history.sizes());
  const bool pre = xq != nullptr && xq->defined();
  TORCH_CHECK(!pre || (xq->scalar_type() == at::kFloat8_e4m3fn && xq->sizes() == x.sizes() &&
                       xq->device() == x.device()),
              "fp8 linear: the cast input must be E4M3 shaped like x ", x.sizes(), " on ",
              x.device(), "; got ", xq->scalar_type(), " ", xq->sizes(), " on ", xq->device());
  TORCH_CHECK(!pre || (x_amax != nullptr && x_amax->defined() && x_amax->numel() == 1 &&
                       x_amax->scalar_type() == at::kFloat),
              "fp8 linear: a cast input needs its amax (one fp32 value)");
  const bool emulate = mode == 1;
  const auto dev = x.device().type();
  // the kernel path's output is bf16; the emulated one's as linear's would be
  at::ScalarType out = at::kBFloat16;
  if (emulate) {
    out = at::autocast::is_autocast_enabled(dev) ? at::autocast::get_autocast_dtype(dev)
                                                 : x.scalar_type();
  }
  const bool has_bias = b != nullptr && b->defined();
  const at::Tensor bias = has_bias ? *b : at::empty({0}, x.options());
  std::optional<at::Tensor> pre_q, pre_amax;
  if (pre) {
    pre_q = xq->contiguous();
    pre_amax = *x_amax;
  }
  return Fp8Linear::apply(x, w, bias, has_bias, scale, history, emulate,
                          static_cast<int64_t>(out), pre_q, pre_amax)[0];
}

}  // namespace

extern "C" {

// y = x W^T + b through FP8 with delayed scaling (see the top of this file); b may be null;
// xq and x_amax: x already cast to E4M3 and its amax, or both null. mode: 0 the _scaled_mm
// kernel, 1 emulated.
int mr_fp8_linear(const at::Tensor* x, const at::Tensor* w, const at::Tensor* b,
                  const at::Tensor* scale, const at::Tensor* history, const at::Tensor* xq,
                  const at::Tensor* x_amax, int mode, at::Tensor** out, char** err) {
  return mr::catching(err, kWhat, [&] {
    *out = new at::Tensor(run_op(need(x, "x"), need(w, "W"), b, need(scale, "scale"),
                                 need(history, "history"), xq, x_amax, mode));
  });
}

// t quantised with `scale` (0-d or [1] fp32) to E4M3 (format 0) or E5M2 (format 1) and
// dequantised in fp32: the casts the op makes, for tests.
int mr_fp8_quantize_dequantize(const at::Tensor* t, const at::Tensor* scale, int format,
                               at::Tensor** out, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(format == 0 || format == 1, "fp8: format must be 0 (E4M3) or 1 (E5M2)");
    const at::Tensor s = need(scale, "scale").to(at::kFloat).reshape({});
    *out = new at::Tensor(dequantize(quantize(need(t, "t"), s, format), s.reciprocal()));
  });
}

}  // extern "C"
