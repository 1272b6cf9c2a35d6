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
// - emulated with the cast kernels (mode 2, CPU tensors, tests): mode 1 with every cast made by
//   the kernel path's cast kernels run on the CPU emulator of CUDA (below), so the tests check
//   that the kernel path's casts and amaxes are mode 1's, bit for bit, through the whole op.
// Both compute the bias's gradient from the unquantised output gradient, in fp32.
//
// The casts: on the kernel path each cast, with its amax, is one pass over the tensor
// (mr::fused_epilogue::fp8_cast, shim/fp8_cast.hpp: reads t once, writes the FP8 bytes and
// per-warp amax partials, then one small kernel records their max into the history); where
// those kernels do not take a tensor (not a multiple of 4 elements, fp64, NVRTC unavailable) and
// on the emulated path, ATen's ops (quantize, record_into below), which the kernels match bit
// for bit.
// The backward's GEMMs read g^T, x^T and W^T row-major (cuBLASLt's FP8 GEMM takes the second
// operand column-major only): on the kernel path x, W and g are cast in both layouts in one pass
// (mr::fused_epilogue::fp8_cast_transpose, the token rows padded to a multiple of 16 in both),
// the forward keeps x^T and W^T for the backward, and a fused epilogue's cast of x is transposed
// by the same kernel; elsewhere scaled_mm's `.contiguous()` makes the transposes.
//
// x may come already cast (`xq`, E4M3 with the input scale, and its amax `x_amax`): a fused
// epilogue that wrote x also wrote those in the same kernel (methods.fp8 with fused epilogues,
// shim/fused_epilogue.cpp). The op then records that amax and multiplies xq instead of casting
// x again; x still receives the input's gradient.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "error.hpp"
#include "fp8_cast.hpp"

#include <tuple>

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
at::Tensor cell_of(const at::Tensor& history, int64_t role) {
  return history.select(0, 0).select(0, role);
}
void record_into(const at::Tensor& amax, const at::Tensor& cell) {
  at::Tensor c = cell;
  at::maximum_out(c, c, amax.reshape({}).to(at::kFloat));  // in place: one kernel
}
void record(const at::Tensor& amax, const at::Tensor& history, int64_t role) {
  record_into(amax, cell_of(history, role));
}

// How the op's casts run: 0 the kernels where they take the tensor (CUDA), else ATen's ops;
// 1 ATen's ops; 3 the kernels on the CPU emulator, or an error (fp8_cast.hpp's modes).
enum CastMode : int64_t { kCastAuto = 0, kCastAten = 1, kCastEmulatedKernels = 3 };

// "emulated" or "CUDA": the kernel path a mode (2 or 3) asks for, for refusals
const char* kernel_name(int64_t mode) {
  return mode == kCastEmulatedKernels ? "emulated" : "CUDA";
}

// t cast to `format` with `scale` (one fp32 value) and |t|'s largest value (NaN if t has one)
// recorded into `cell` as above: the one-pass kernels where `mode` (CastMode, or 2: the CUDA
// kernels or an error) takes t, else ATen's ops (quantize, record_into), which the kernels match
// bit for bit; a kernel mode that does not take t is an error. max_blocks: fp8_cast.hpp's.
// *used_kernel: whether the kernels ran.
at::Tensor cast_into(const at::Tensor& t, const at::Tensor& scale, int format,
                     const at::Tensor& cell, int64_t mode, int64_t max_blocks = 0,
                     bool* used_kernel = nullptr) {
  at::Tensor q;
  if (mode != kCastAten) {
    const at::Tensor tc = t.is_contiguous() ? t : t.contiguous();
    q = mr::fused_epilogue::fp8_cast(tc, scale, format, cell, static_cast<int>(mode), max_blocks);
  }
  if (used_kernel) *used_kernel = q.defined();
  if (q.defined()) return q;
  TORCH_CHECK(mode == kCastAuto || mode == kCastAten, "fp8 cast: the ", kernel_name(mode),
              " cast kernels do not take ",
              t.scalar_type(), " ", t.sizes(), " on ", t.device(),
              " (they take fp32, bf16 or fp16 tensors of a multiple of 4 elements; the emulated "
              "ones CPU tensors in a test program)");
  record_into(t.abs().max(), cell);
  return quantize(t, scale, format);
}

// cast_into with scale s[role] into history[0][role]
at::Tensor cast_recording(const at::Tensor& t, const at::Tensor& s, int64_t role, int format,
                          const at::Tensor& history, int64_t mode) {
  return cast_into(t, s.select(0, role), format, cell_of(history, role), mode);
}

// rows rounded up to the FP8 GEMM's multiple of 16
int64_t padded_rows(int64_t m) { return m + (16 - m % 16) % 16; }

// _scaled_mm of a [M, K] row-major and b^T for b [N, K] (b made column-major as the kernel
// wants it), rows of a padded to a multiple of 16. `fast_accum`: cuBLASLt's fast FP8
// accumulation (no split accumulator), which Transformer Engine (its forward GEMM's
// use_split_accumulator is false, the gradients' true) and torchao (use_fast_accum for the
// output, not for the gradients) both take for the forward GEMM only.
at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& inv_a,
                     const at::Tensor& inv_b, const c10::optional<at::Tensor>& bias,
                     at::ScalarType out, bool fast_accum) {
  const int64_t m = a.size(0), pad = padded_rows(m) - m;
  at::Tensor a2 = a.contiguous();
  if (pad != 0) a2 = at::cat({a2, at::zeros({pad, a.size(1)}, a2.options())}, 0);
  at::Tensor y =
      at::_scaled_mm(a2, b.contiguous().t(), inv_a, inv_b, bias, c10::nullopt, out, fast_accum);
  return pad != 0 ? y.narrow(0, 0, m) : y;
}

// One operand of the FP8 GEMMs as cast: `q` row-major as the forward GEMM reads it (x: maybe
// with zero rows up to a multiple of 16), and where the cast-transpose kernels made it, its
// transpose `qt` as the backward's GEMMs read it (x^T [K, Mp], W^T [K, N], g^T [N, Mp]).
struct Cast {
  at::Tensor q, qt;
};

// t [rows, cols] cast (format, scale s[role], amax into history[0][role]) in both layouts where
// the kernels take it (rows_out rows: zero rows up to it), else one layout (cast_recording:
// the one-pass kernels or ATen's ops; qt undefined, the GEMM wrapper transposes).
Cast cast_both(const at::Tensor& t, const at::Tensor& s, int64_t role, int format,
               const at::Tensor& history, int64_t mode, int64_t rows_out) {
  // a strided t (a gradient from a view, say) is made contiguous once, for the kernels (ATen's
  // ops take it as it is)
  const at::Tensor tc = mode == kCastAten || t.is_contiguous() ? t : t.contiguous();
  if (mode != kCastAten) {
    auto [q, qt] = mr::fused_epilogue::fp8_cast_transpose(
        tc, s.select(0, role), format, cell_of(history, role), static_cast<int>(mode), rows_out);
    if (q.defined()) return {q, qt};
  }
  return {cast_recording(tc, s, role, format, history, mode), at::Tensor()};
}

// The first `m` rows of an operand in its row-major layout, as a contiguous tensor: from qt
// where there is one (so the emulated paths multiply what the kernel path's GEMMs read), else q.
at::Tensor rows_of(const Cast& c, int64_t m) {
  if (c.qt.defined()) return c.qt.narrow(1, 0, m).t().contiguous();
  return c.q.narrow(0, 0, m);
}

struct Fp8Linear : public torch::autograd::Function<Fp8Linear> {
  // b: the bias, or an empty tensor for none (autograd's Function wants defined inputs)
  // pre: x already cast {xq, its amax}, or nullopt (optional: custom Functions take no undefined
  // tensors)
  static variable_list forward(AutogradContext* ctx, at::Tensor x, at::Tensor w, at::Tensor b,
                               bool has_bias, at::Tensor scale, at::Tensor history, bool emulate,
                               int64_t cast_mode, int64_t out_kind, std::optional<at::Tensor> pre_q,
                               std::optional<at::Tensor> pre_amax) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    at::NoGradGuard no_grad;
    // this step's scales: the backward reads the same tensor (the recipe's update rewrites it
    // after the step's optimizer, when every micro-batch's backward has run), so no copy
    const at::Tensor s = scale.detach();
    const int64_t m = x.size(0), mp = padded_rows(m);
    Cast xc;
    if (pre_q) {
      record(*pre_amax, history, kInput);
      xc.q = *pre_q;
      if (cast_mode != kCastAten)
        xc.qt = mr::fused_epilogue::fp8_transpose(xc.q, static_cast<int>(cast_mode), mp);
    } else {
      xc = cast_both(x, s, kInput, 0, history, cast_mode, mp);
    }
    const Cast wc = cast_both(w, s, kWeight, 0, history, cast_mode, w.size(0));
    const at::Tensor inv_x = inverse(s, kInput), inv_w = inverse(s, kWeight);
    const auto out = static_cast<at::ScalarType>(out_kind);
    at::Tensor y;
    if (emulate) {
      y = dequantize(xc.q.narrow(0, 0, m), inv_x).mm(dequantize(rows_of(wc, w.size(0)), inv_w).t());
      if (has_bias) y = y + b.to(at::kFloat);
      y = y.to(out);
    } else {
      c10::optional<at::Tensor> bias;
      if (has_bias) bias = b.to(out);
      y = scaled_mm(xc.q, wc.q, inv_x, inv_w, bias, out, /*fast_accum=*/true).narrow(0, 0, m);
    }
    // the backward reads each operand in the layout its GEMMs want, where the kernels made it
    ctx->save_for_backward({xc.qt.defined() ? xc.qt : xc.q, wc.qt.defined() ? wc.qt : wc.q});
    ctx->saved_data["x_transposed"] = xc.qt.defined();
    ctx->saved_data["w_transposed"] = wc.qt.defined();
    ctx->saved_data["rows"] = m;
    ctx->saved_data["scale"] = s;
    // the dequantisation scales the forward made, for the backward's GEMMs (fewer small kernels)
    ctx->saved_data["inv_x"] = inv_x;
    ctx->saved_data["inv_w"] = inv_w;
    ctx->saved_data["history"] = history;
    ctx->saved_data["emulate"] = emulate;
    ctx->saved_data["cast_mode"] = cast_mode;
    ctx->saved_data["x_kind"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_kind"] = static_cast<int64_t>(w.scalar_type());
    ctx->saved_data["has_bias"] = has_bias;
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    auto saved = ctx->get_saved_variables();
    Cast xc, wc;
    (ctx->saved_data["x_transposed"].toBool() ? xc.qt : xc.q) = saved[0];
    (ctx->saved_data["w_transposed"].toBool() ? wc.qt : wc.q) = saved[1];
    const int64_t m = ctx->saved_data["rows"].toInt(), mp = padded_rows(m);
    const int64_t n = wc.q.defined() ? wc.q.size(0) : wc.qt.size(1);
    const at::Tensor s = ctx->saved_data["scale"].toTensor();
    const at::Tensor history = ctx->saved_data["history"].toTensor();
    const bool emulate = ctx->saved_data["emulate"].toBool();
    const auto x_kind = static_cast<at::ScalarType>(ctx->saved_data["x_kind"].toInt());
    const auto w_kind = static_cast<at::ScalarType>(ctx->saved_data["w_kind"].toInt());
    at::Tensor g = grads[0];
    if (!g.defined()) g = at::zeros({m, n}, s.options());
    Cast gc;
    {
      at::NoGradGuard no_grad;
      gc = cast_both(g, s, kGrad, 1, history, ctx->saved_data["cast_mode"].toInt(), mp);
    }
    const at::Tensor inv_x = ctx->saved_data["inv_x"].toTensor(),
                     inv_w = ctx->saved_data["inv_w"].toTensor(), inv_g = inverse(s, kGrad);
    at::Tensor dx, dw, db;
    if (emulate) {
      if (ctx->needs_input_grad(0))
        dx = dequantize(gc.q.narrow(0, 0, m), inv_g).mm(dequantize(rows_of(wc, n), inv_w));
      if (ctx->needs_input_grad(1))
        dw = dequantize(rows_of(gc, m), inv_g).t().mm(dequantize(rows_of(xc, m), inv_x));
    } else {
      // the token dimension M is dW's reduction: zero rows up to a multiple of 16 add nothing
      auto padded = [&](const at::Tensor& q) {
        if (q.size(0) == mp) return q;
        return at::cat({q, at::zeros({mp - q.size(0), q.size(1)}, q.options().dtype(at::kFloat))
                               .to(q.scalar_type())},
                       0);
      };
      // dx = g W: the second operand column-major is W^T [K, N] row-major (scaled_mm
      // transposes W [N, K] where no W^T was made)
      if (ctx->needs_input_grad(0))
        dx = scaled_mm(padded(gc.q), wc.qt.defined() ? wc.qt : wc.q.t(), inv_g, inv_w,
                       c10::nullopt, at::kBFloat16, false)
                 .narrow(0, 0, m);
      // dW = g^T x: [N, Mp] x [Mp, K], the operands g^T and x^T row-major
      if (ctx->needs_input_grad(1))
        dw = scaled_mm(gc.qt.defined() ? gc.qt : padded(gc.q).t(),
                       xc.qt.defined() ? xc.qt : padded(xc.q).t(), inv_g, inv_x, c10::nullopt,
                       at::kFloat, false);
    }
    if (dx.defined()) dx = dx.to(x_kind);
    if (dw.defined()) dw = dw.to(w_kind);
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2))
      db = at::sum(g, {0}, false, at::kFloat);  // fp32 accumulation, no fp32 copy of g
    return {dx,           dw,           db,           at::Tensor(), at::Tensor(), at::Tensor(),
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
  TORCH_CHECK(mode >= 0 && mode <= 2,
              "fp8 linear: mode must be 0 (kernel), 1 (emulated) or 2 (emulated, the casts on "
              "the emulated cast kernels)");
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
  const bool emulate = mode != 0;
  const int64_t cast_mode = mode == 0 ? kCastAuto : mode == 1 ? kCastAten : kCastEmulatedKernels;
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
  return Fp8Linear::apply(x, w, bias, has_bias, scale, history, emulate, cast_mode,
                          static_cast<int64_t>(out), pre_q, pre_amax)[0];
}

}  // namespace

extern "C" {

// y = x W^T + b through FP8 with delayed scaling (see the top of this file); b may be null;
// xq and x_amax: x already cast to E4M3 and its amax, or both null. mode: 0 the _scaled_mm
// kernel, 1 emulated, 2 emulated with the casts on the emulated cast kernels (tests).
int mr_fp8_linear(const at::Tensor* x, const at::Tensor* w, const at::Tensor* b,
                  const at::Tensor* scale, const at::Tensor* history, const at::Tensor* xq,
                  const at::Tensor* x_amax, int mode, at::Tensor** out, char** err) {
  return mr::catching(err, kWhat, [&] {
    *out = new at::Tensor(run_op(need(x, "x"), need(w, "W"), b, need(scale, "scale"),
                                 need(history, "history"), xq, x_amax, mode));
  });
}

// t cast to E4M3 (format 0) or E5M2 (format 1) with `scale` (one fp32 value) and max(|t|)
// recorded into `amax` (one fp32 value, updated in place as the max with what it holds): the FP8
// linear's casts alone, for tests. mode: 0 the kernels where they take t (CUDA), else ATen's
// ops; 1 ATen's ops; 2 the CUDA kernels or an error; 3 the kernels on the CPU emulator or an
// error. max_blocks > 0 caps the kernel's grid (0: the default). *used_kernel: whether the
// kernels ran.
int mr_fp8_cast(const at::Tensor* t, const at::Tensor* scale, int format, const at::Tensor* amax,
                int mode, int64_t max_blocks, at::Tensor** out, int* used_kernel, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(format == 0 || format == 1, "fp8: format must be 0 (E4M3) or 1 (E5M2)");
    TORCH_CHECK(mode >= 0 && mode <= 3, "fp8 cast: unknown path mode ", mode);
    const at::Tensor& tt = need(t, "t");
    const at::Tensor s = need(scale, "scale").reshape({});
    const at::Tensor cell = need(amax, "amax").reshape({});
    TORCH_CHECK(s.scalar_type() == at::kFloat && cell.scalar_type() == at::kFloat,
                "fp8 cast: scale and amax must be fp32");
    at::NoGradGuard no_grad;
    bool used = false;
    at::Tensor q = cast_into(tt, s, format, cell, mode, max_blocks, &used);
    if (used_kernel) *used_kernel = used ? 1 : 0;
    *out = new at::Tensor(std::move(q));
  });
}

// The cast-transpose kernel alone, for tests: t [rows, cols] (a float type) cast as mr_fp8_cast
// casts it into *q [rows_out, cols] and *qt [cols, rows_out] (zero rows past `rows`), the amax
// recorded into `amax`; or t an FP8 tensor (scale and amax may be null): only *qt, its
// transpose (*q null). mode: 2 the CUDA kernel, 3 the kernel on the CPU emulator; an error where
// the kernel does not take t.
int mr_fp8_cast_transpose(const at::Tensor* t, const at::Tensor* scale, int format,
                          const at::Tensor* amax, int mode, int64_t rows_out, at::Tensor** q,
                          at::Tensor** qt, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(mode == 2 || mode == 3, "fp8 cast-transpose: mode must be 2 (CUDA) or 3 "
                                        "(emulated), got ", mode);
    const at::Tensor& tt = need(t, "t");
    at::NoGradGuard no_grad;
    at::Tensor a, b;
    if (tt.scalar_type() == at::kFloat8_e4m3fn || tt.scalar_type() == at::kFloat8_e5m2) {
      b = mr::fused_epilogue::fp8_transpose(tt, mode, rows_out);
    } else {
      TORCH_CHECK(format == 0 || format == 1, "fp8: format must be 0 (E4M3) or 1 (E5M2)");
      const at::Tensor s = need(scale, "scale").reshape({});
      const at::Tensor cell = need(amax, "amax").reshape({});
      std::tie(a, b) = mr::fused_epilogue::fp8_cast_transpose(tt, s, format, cell, mode, rows_out);
    }
    TORCH_CHECK(b.defined(), "fp8 cast-transpose: the ", kernel_name(mode), " kernel does not take ",
                tt.scalar_type(), " ", tt.sizes(), " on ", tt.device(), " with ", rows_out,
                " output rows (it takes a contiguous 2-d tensor whose columns and output rows are "
                "multiples of 4, rows_out >= rows)");
    *q = a.defined() ? new at::Tensor(std::move(a)) : nullptr;
    *qt = new at::Tensor(std::move(b));
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
