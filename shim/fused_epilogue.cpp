// mlperf-run's fused epilogue shim: BERT's "bias + dropout + residual + LayerNorm" as ONE autograd
// op (src/fused/epilogue.rs), i.e.
//
//   s = residual + dropout(h + bias, p)        y = LayerNorm(s) * gamma + beta
//
// Two implementations behind one torch::autograd::Function:
// - the composite path (every device; the CPU path and the GPU fallback): ATen ops with an
//   explicit backward. It draws the dropout mask exactly as at::dropout does (CPU:
//   empty_like(x).bernoulli_(1-p).div_(1-p) then a multiply; CUDA: at::native_dropout), so it
//   consumes the global RNG like the unfused ops and, in fp32 on the CPU, gives bit-identical
//   outputs and gradients (tests/numerics/fused_epilogue.rs).
// - the CUDA kernel path (cargo feature `cuda`, MLPERF_RUN_CUDA): one row-per-block forward
//   kernel (bias, mask, residual, LayerNorm statistics, output) and one row-per-block backward
//   kernel (LayerNorm backward fused with the mask and the residual gradient), plus column-sum
//   kernels for d gamma, d beta and the dense bias's gradient (partial sums per chunk of rows,
//   then one pass over the partials). Rows of a multiple of 4 elements up to 1,024 (BERT's)
//   take vectorised variants of the row kernels: a warp per row, the row kept in registers; the
//   vectorised backward also takes the column sums' partials itself (no second pass over the
//   rows). Also here: the intermediate dense's bias + GELU (mr_fe_dense_bias_gelu), one
//   elementwise kernel forward and one backward that also sums the bias's gradient.
//   The kernels are compiled at run time with NVRTC (torch's wheel ships libnvrtc; no nvcc
//   needed) on first use and launched through the driver API, both dlopen'ed: no link-time
//   dependency on libcuda or libnvrtc. The dropout mask: the vectorised forward draws it itself
//   (Philox from the device generator's Philox state, reserved through ATen; under CUDA graph
//   capture read from the graph's seed / offset pointers, so each replay draws a new mask) and
//   writes it for the backward; the other rows get it from ATen's bernoulli_ on the device. The
//   kernels' source is shim/fused_epilogue.cu.
// - the same kernels on the CPU (mode 3, tests): CPU tensors go through the same host code, and
//   the launches run on the emulator of CUDA's execution model (fused_epilogue_emu.cpp), so the
//   kernels' math and the host code's launch arguments are checked without a GPU.
//
// Conventions as in foreach.cpp: tensors cross as tch's C_tensor (at::Tensor*), new tensors come
// back as `new at::Tensor`, and no C++ exception crosses the boundary (error.hpp).
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>

#include "error.hpp"
#include "loaders.hpp"
#include "path_report.hpp"
#include "cuda_emu_entry.hpp"
#include "fused_epilogue_kernels.hpp"
#include "fp8_cast.hpp"

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace fe = mr::fused_epilogue;

namespace {

constexpr const char* kWhat = "fused epilogue shim";

// ---- the CUDA source: shim/fused_epilogue.cu, as a string ----------------------------------
const char* kKernelSource =
#include "fused_epilogue_cu.inc"
    ;

// The kernels' names in the source, indexed by fe::Kernel.
constexpr int kKernelCount = 12;
constexpr const char* kKernelNames[kKernelCount] = {
    "mr_fe_forward",           "mr_fe_backward",           "mr_fe_colsum",
    "mr_fe_forward_v4",        "mr_fe_backward_v4",        "mr_fe_colsum_final",
    "mr_fe_bias_gelu_forward", "mr_fe_bias_gelu_backward", "mr_fe_qkv_grad",
    "mr_fe_fp8_cast",          "mr_fe_amax_record",        "mr_fe_fp8_cast_transpose"};

// dtype codes shared with Rust (src/fused/epilogue.rs): 0 fp32, 1 bf16, 2 fp16
const char* type_name(int code) {
  switch (code) {
    case 0: return "F32";
    case 1: return "BF16";
    case 2: return "F16";
    default: return nullptr;
  }
}

int type_code(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return 0;
    case at::kBFloat16: return 1;
    case at::kHalf: return 2;
    default: return -1;
  }
}

// type_code's inverse (0 fp32, 1 bf16, 2 fp16)
at::ScalarType type_of_code(int code) {
  switch (code) {
    case 0: return at::kFloat;
    case 1: return at::kBFloat16;
    case 2: return at::kHalf;
    default: TORCH_CHECK(false, "fused epilogue: unknown output dtype code ", code);
  }
}

std::string source_for(int ht, int rt, int ot) {
  TORCH_CHECK(type_name(ht) && type_name(rt) && type_name(ot), "fused epilogue: bad dtype code");
  // `#line`: NVRTC's messages name the lines of shim/fused_epilogue.cu
  return std::string("#define MR_KERNEL extern \"C\" __global__\n#define HT ") + type_name(ht) +
         "\n#define RT " + type_name(rt) + "\n#define OT " + type_name(ot) +
         "\n#line 1 \"shim/fused_epilogue.cu\"\n" + kKernelSource;
}

// Compiles the kernels for (ht, rt, ot) for `arch` (e.g. "sm_90": a CUBIN; "compute_90": PTX).
std::string nvrtc_compile(const mr::Nvrtc& n, const std::string& arch, int ht, int rt, int ot) {
  return mr::nvrtc_compile(n, arch, source_for(ht, rt, ot), "mlperf_run_fused_epilogue.cu",
                           "the fused epilogue kernels");
}

// ---- kernel path (CUDA builds) --------------------------------------------------------------
// Kernel-path status for Rust: 0 not tried yet, 1 compiled and loaded at least once, -1 failed
// (then every call uses the composite path; the reason is g_report's fallback reason).
std::atomic<int> g_status{0};
mr::PathReport g_report;

[[maybe_unused]] void set_failed(const std::string& msg) {
  g_report.note_fallback(msg);
  g_status.store(-1);
}

bool kernel_usable(const at::Tensor& h, const at::Tensor& bias, const at::Tensor& residual,
                   const at::Tensor& gamma, const at::Tensor& beta, at::ScalarType out_type,
                   int mode);

// Path modes: 0 auto, 1 composite, 2 kernel or an error, 3 the emulated kernels or an error.
// The mode's range, and mode 3's emulator: linked into the test programs only
// (cuda_emu_entry.hpp). `op` names the op in the error.
void check_mode(const char* op, int mode) {
  TORCH_CHECK(mode >= 0 && mode <= 3, op, ": unknown path mode ", mode);
  TORCH_CHECK(mode != 3 || mr::cuda_emu::linked(), op, ": ", mr::cuda_emu::kNotLinked);
}

// Whether `mode` sends tensors on `dev` to the kernels: CUDA tensors in modes 0 and 2, CPU
// tensors (the emulator) in mode 3 only.
bool mode_takes(const at::Device& dev, int mode) {
  return dev.is_cuda() ? mode == 0 || mode == 2 : dev.is_cpu() && mode == 3;
}

// ... and whether the kernels are still a candidate there: on CUDA only while NVRTC and the
// driver have not failed (the final say is the op's own usability check).
bool kernel_candidate(const at::Device& dev, int mode) {
  return mode_takes(dev, mode) && (dev.is_cpu() || g_status.load() >= 0);
}

// "CUDA" or "emulated", for the kernel paths' errors (mode 2 or 3)
const char* kernel_path_name(int mode) { return mode == 3 ? "emulated" : "CUDA"; }

// Where the _v4 forward's own dropout mask draws its Philox numbers: seed and offset as values,
// or (CUDA graph capture) read at run time from the graph's device pointers.
struct RngState {
  uint64_t seed = 0, offset = 0, offset_intragraph = 0;
  int64_t* seed_ptr = nullptr;
  int64_t* offset_ptr = nullptr;
};
// kernel_forward's outputs: y, s, mean, rstd, the dropout mask applied (undefined without
// dropout), and with an FP8 scale given and the _v4 kernel running: y as E4M3 bytes and the rows'
// amaxes (else undefined).
struct ForwardOut {
  at::Tensor y, s, mean, rstd, mask, fp8_bytes, row_amax;
};
ForwardOut kernel_forward(const at::Tensor& h, const at::Tensor& bias, const at::Tensor& residual,
                          const at::Tensor& gamma, const at::Tensor& beta, const at::Tensor& mask,
                          double draw_p, double scale, double eps, at::ScalarType out_type,
                          const at::Tensor& fp8_scale);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> kernel_backward(
    const at::Tensor& dy, const at::Tensor& s, const at::Tensor& mean, const at::Tensor& rstd,
    const at::Tensor& gamma, const at::Tensor& mask, double scale, at::ScalarType h_type,
    at::ScalarType res_type, bool need_res, bool need_bias);

// ---- the autograd op ------------------------------------------------------------------------
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// An FP8 output's scale, where given: one fp32 value on the op's device.
void check_fp8_scale(const char* op, const at::Tensor& scale, const at::Device& device) {
  TORCH_CHECK(!scale.defined() || (scale.numel() == 1 && scale.scalar_type() == at::kFloat &&
                                   scale.device() == device),
              op, ": the FP8 scale must be one fp32 value on the input's device (", device,
              "), got ", scale.sizes(), " ", scale.scalar_type(), " on ", scale.device());
}

// y cast to E4M3 with `scale` (0-d fp32) and y's amax (0-d fp32), as shim/fp8.cpp's linear
// casts its input and records its amax: the FP8 output where the _v4 kernel did not write it.
std::pair<at::Tensor, at::Tensor> fp8_of(const at::Tensor& y, const at::Tensor& scale) {
  at::NoGradGuard no_grad;
  return {(y.to(at::kFloat) * scale).clamp(-448.0, 448.0).to(at::kFloat8_e4m3fn),
          y.abs().max().to(at::kFloat)};
}

// The dropout "noise" the composite path saves: CPU: the scaled noise tensor (x's dtype);
// CUDA (at::native_dropout): the bool mask. `kind` tells which.
enum NoiseKind : int64_t { kNoNoise = 0, kScaledNoise = 1, kBoolMask = 2 };

struct BiasDropoutAddLayerNorm : public torch::autograd::Function<BiasDropoutAddLayerNorm> {
  // h [N, H] (any leading shape: LayerNorm is over the last dim), bias [H] or undefined,
  // residual like h, gamma/beta [H], mask: undefined (draw one) or a 0/1 tensor like h (tests
  // and the GPU check: the same mask for both paths). fp8_scale (0-d fp32, on h's device):
  // the output is also returned cast to E4M3 with it, with its amax (outputs 1 and 2, not
  // differentiable), for the FP8 linear that reads it (methods.fp8).
  // (bias, mask and fp8_scale as optionals: custom Functions take no undefined at::Tensor
  // inputs)
  static variable_list forward(AutogradContext* ctx, at::Tensor h,
                               std::optional<at::Tensor> bias_opt, at::Tensor residual,
                               at::Tensor gamma, at::Tensor beta,
                               std::optional<at::Tensor> mask_opt, double p, bool train,
                               double eps, bool use_kernel, bool ln_fp32,
                               int64_t out_scalar_type,
                               std::optional<at::Tensor> fp8_scale_opt) {
    const at::Tensor fp8_scale = fp8_scale_opt.value_or(at::Tensor());
    const at::Tensor bias = bias_opt.value_or(at::Tensor());
    const at::Tensor mask = mask_opt.value_or(at::Tensor());
    // The op's dtypes are decided by the caller (ln_fp32: the composite path's LayerNorm runs
    // in fp32, as layer_norm's autocast policy casts to fp32; out_scalar_type: the output's
    // at::ScalarType); nothing inside is re-cast by autocast.
    const auto out_type = static_cast<at::ScalarType>(out_scalar_type);
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const bool drop = train && p > 0 && h.numel() > 0;
    const int64_t cols = h.size(-1);
    ctx->saved_data["p"] = p;
    ctx->saved_data["has_bias"] = bias.defined();
    ctx->saved_data["drop"] = drop;
    ctx->saved_data["use_kernel"] = use_kernel;
    ctx->saved_data["cols"] = cols;
    ctx->saved_data["h_type"] = static_cast<int64_t>(h.scalar_type());
    ctx->saved_data["res_type"] = static_cast<int64_t>(residual.scalar_type());
    ctx->saved_data["bias_type"] =
        static_cast<int64_t>(bias.defined() ? bias.scalar_type() : h.scalar_type());
    if (use_kernel) {
      // a given mask as bytes; else (dropout on) the kernels draw one (draw_p = p)
      const at::Tensor given = drop && mask.defined() ? mask.to(at::kByte).contiguous()
                                                      : at::Tensor();
      ForwardOut f =
          kernel_forward(h, bias, residual, gamma, beta, given, drop && !mask.defined() ? p : 0.0,
                         drop ? 1.0 / (1.0 - p) : 1.0, eps, out_type, fp8_scale);
      ctx->save_for_backward({f.s, f.mean, f.rstd, gamma, f.mask});
      if (!fp8_scale.defined()) return {f.y};
      if (!f.fp8_bytes.defined()) return with_fp8(ctx, f.y, fp8_scale);
      at::Tensor q = f.fp8_bytes.view(at::kFloat8_e4m3fn), amax = f.row_amax.max();
      ctx->mark_non_differentiable({q, amax});
      return {f.y, q, amax};
    }
    // Composite: the unfused ops' sequence (linear's bias cast to h's dtype, then at::dropout's
    // own mask draw), so the RNG and the rounding match them.
    at::Tensor x = bias.defined() ? h + bias.to(h.scalar_type()) : h;
    at::Tensor noise;
    int64_t kind = kNoNoise;
    if (drop) {
      if (mask.defined()) {
        noise = mask.to(x.scalar_type(), false, /*copy=*/true).div_(1 - p);
        kind = kScaledNoise;
        x = x * noise;
      } else if (x.is_cuda()) {
        auto [out, m] = at::native_dropout(x, p, true);
        x = out;
        noise = m;
        kind = kBoolMask;
      } else {
        noise = at::empty_like(x).bernoulli_(1 - p);
        noise.div_(1 - p);
        kind = kScaledNoise;
        x = x * noise;
      }
    }
    at::Tensor s = x + residual;
    if (ln_fp32) s = s.to(at::kFloat);
    auto [y, mean, rstd] = at::native_layer_norm(s, {cols}, gamma, beta, eps);
    ctx->saved_data["noise_kind"] = kind;
    ctx->save_for_backward({s, mean, rstd, gamma, noise, beta});
    // an output dtype other than the LayerNorm's (methods.bf16_residual): one cast, whose
    // backward is the dy cast below
    if (y.scalar_type() != out_type) y = y.to(out_type);
    if (fp8_scale.defined()) return with_fp8(ctx, y, fp8_scale);
    return {y};
  }

  // {y, y as E4M3, its amax} (fp8_of), the last two marked not differentiable
  static variable_list with_fp8(AutogradContext* ctx, const at::Tensor& y,
                                const at::Tensor& fp8_scale) {
    auto [q, amax] = fp8_of(y, fp8_scale);
    ctx->mark_non_differentiable({q, amax});
    return {y, q, amax};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    auto saved = ctx->get_saved_variables();
    const double p = ctx->saved_data["p"].toDouble();
    const bool drop = ctx->saved_data["drop"].toBool();
    const int64_t cols = ctx->saved_data["cols"].toInt();
    const auto h_type = static_cast<at::ScalarType>(ctx->saved_data["h_type"].toInt());
    const auto res_type = static_cast<at::ScalarType>(ctx->saved_data["res_type"].toInt());
    const auto bias_type = static_cast<at::ScalarType>(ctx->saved_data["bias_type"].toInt());
    const at::Tensor& s = saved[0];
    const at::Tensor& mean = saved[1];
    const at::Tensor& rstd = saved[2];
    const at::Tensor& gamma = saved[3];
    at::Tensor dy = grads[0];
    if (!dy.defined()) dy = at::zeros_like(s);
    // needs_input_grad counts the node's edges, i.e. only the tensors given: h, bias (if any),
    // residual, gamma, beta
    const int64_t nb = ctx->saved_data["has_bias"].toBool() ? 1 : 0;
    const bool need_h = ctx->needs_input_grad(0), need_bias = nb && ctx->needs_input_grad(1);
    const bool need_res = ctx->needs_input_grad(1 + nb);
    const bool need_gamma = ctx->needs_input_grad(2 + nb),
               need_beta = ctx->needs_input_grad(3 + nb);
    at::Tensor dh, dbias, dres, dgamma, dbeta;
    if (ctx->saved_data["use_kernel"].toBool()) {
      const at::Tensor& m = saved[4];
      std::tie(dh, dres, dgamma, dbeta, dbias) =
          kernel_backward(dy, s, mean, rstd, gamma, m, drop ? 1.0 / (1.0 - p) : 1.0, h_type,
                          res_type, need_res, need_bias);
    } else {
      const at::Tensor& noise = saved[4];
      const at::Tensor& beta = saved[5];
      at::Tensor ds;
      if (dy.scalar_type() != s.scalar_type()) dy = dy.to(s.scalar_type());
      std::tie(ds, dgamma, dbeta) = at::native_layer_norm_backward(
          dy, s, {cols}, mean, rstd, gamma, beta,
          {true, need_gamma && gamma.defined(), need_beta && beta.defined()});
      // the engine casts each input's gradient to its dtype: the residual's, and x's before
      // the dropout multiply (as AddBackward then MulBackward do for the unfused ops)
      dres = ds.to(res_type);
      at::Tensor dx = ds.to(h_type);
      switch (ctx->saved_data["noise_kind"].toInt()) {
        case kScaledNoise: dx = dx * noise; break;
        case kBoolMask: dx = at::native_dropout_backward(dx, noise, 1.0 / (1.0 - p)); break;
        default: break;
      }
      dh = dx;
    }
    if (need_bias && dh.defined() && !dbias.defined()) {
      // linear's bias gradient: the column sum of d h
      // (a 1-d h: d h itself; an empty dim list would make sum() add up everything)
      std::vector<int64_t> dims;
      for (int64_t d = 0; d + 1 < dh.dim(); ++d) dims.push_back(d);
      dbias = (dims.empty() ? dh : dh.sum(dims)).to(bias_type);
    }
    if (!need_h) dh = at::Tensor();
    if (!need_res) dres = at::Tensor();
    // one gradient per forward argument (the non-tensor ones get undefined)
    return {dh,           dbias,        dres,         dgamma,       dbeta,
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

const at::Tensor& need(const at::Tensor* t, const char* name) {
  TORCH_CHECK(t != nullptr && t->defined(), "fused epilogue: ", name, " is undefined");
  return *t;
}

at::Tensor opt(const at::Tensor* t) { return t != nullptr ? *t : at::Tensor(); }

// mode: 0 auto (the GPU kernels where usable), 1 composite, 2 the GPU kernels or an error,
// 3 the kernels on the CPU emulator or an error (tests).
// fp8_scale given: also the output as E4M3 and its amax (the op's outputs 1 and 2).
variable_list run_op(const at::Tensor& h, const at::Tensor& bias, const at::Tensor& residual,
                     const at::Tensor& gamma, const at::Tensor& beta, const at::Tensor& mask,
                     double p, bool train, double eps, int mode, int out_code,
                     const at::Tensor& fp8_scale, int* used_kernel) {
  TORCH_CHECK(h.dim() >= 1 && h.sizes() == residual.sizes(), "fused epilogue: h ", h.sizes(),
              " and residual ", residual.sizes(), " must have the same shape");
  TORCH_CHECK(p >= 0 && p < 1, "fused epilogue: dropout p must be in [0, 1), got ", p);
  TORCH_CHECK(!mask.defined() || mask.sizes() == h.sizes(), "fused epilogue: mask ",
              mask.sizes(), " must have h's shape ", h.sizes());
  TORCH_CHECK(!mask.defined() || mask.device() == h.device(), "fused epilogue: mask on ",
              mask.device(), ", h on ", h.device(), ": put them on one device");
  check_fp8_scale("fused epilogue", fp8_scale, h.device());
  // as layer_norm under autocast: the LayerNorm runs (and returns) fp32; out_code >= 0 asks for
  // another output dtype (the LayerNorm still computes in fp32 inside)
  const bool autocast_on = at::autocast::is_autocast_enabled(h.device().type());
  const at::ScalarType out_type =
      out_code >= 0 ? type_of_code(out_code)
      : autocast_on ? at::kFloat
                    : at::promote_types(h.scalar_type(), residual.scalar_type());
  const bool ln_fp32 = autocast_on || out_type == at::kFloat;
  check_mode("fused epilogue", mode);
  bool use_kernel = false;
  if (mode != 1) {
    use_kernel = kernel_usable(h, bias, residual, gamma, beta, out_type, mode);
    TORCH_CHECK(use_kernel || mode != 2,
                "fused epilogue: the CUDA kernel path is not usable for these tensors (h ",
                h.scalar_type(), " on ", h.device(), ", residual ", residual.scalar_type(),
                ", gamma ", gamma.scalar_type(), ")",
                g_status.load() < 0 ? ": " + g_report.reason() : std::string());
    TORCH_CHECK(use_kernel || mode != 3,
                "fused epilogue: the emulated kernel path is not usable for these tensors (h ",
                h.scalar_type(), " on ", h.device(), ", residual ", residual.scalar_type(),
                ", gamma ", gamma.scalar_type(),
                "): it takes CPU tensors, fp32, bf16 or fp16, with fp32 LayerNorm parameters");
  }
  if (used_kernel) *used_kernel = use_kernel ? 1 : 0;
  auto some = [](const at::Tensor& t) {
    return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
  };
  return BiasDropoutAddLayerNorm::apply(
      h, some(bias), residual, gamma, beta, some(mask), p, train, eps, use_kernel, ln_fp32,
      static_cast<int64_t>(out_type),
      fp8_scale.defined() ? std::optional<at::Tensor>(fp8_scale.reshape({})) : std::nullopt);
}

}  // namespace

// ---- the GPU side of the kernel path: NVRTC module, driver-API launch ------------------------
#ifdef MLPERF_RUN_CUDA

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/core/DeviceGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace {

using mr::CUcontext;
using mr::Driver;
using mr::CUfunction;
using mr::CUmodule;
using mr::CUresult;
using mr::CUstream;
using mr::cu_check;
using mr::driver;

// indexed by fe::Kernel
struct Kernels {
  CUfunction f[kKernelCount] = {};
};

// One compiled module per (device, ht, rt, ot), built on first use: in the eager warm-up steps,
// before any CUDA graph capture (compiling or loading a module is not allowed while capturing).
std::mutex g_kernels_mu;
std::map<std::tuple<int, int, int, int>, Kernels> g_kernels;

const Kernels* kernels_for(int device, int ht, int rt, int ot) {
  std::lock_guard<std::mutex> lock(g_kernels_mu);
  auto key = std::make_tuple(device, ht, rt, ot);
  auto it = g_kernels.find(key);
  if (it != g_kernels.end()) return &it->second;
  if (g_status.load() < 0) return nullptr;
  try {
    const Driver& d = driver();
    // c10's device-generic guard (exported code), not CUDAGuard, whose inline CUDA runtime calls
    // would need libcudart at link time (see graph.cpp)
    c10::DeviceGuard guard(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device)));
    // Compiling and loading a module is not allowed while the stream is being captured (the
    // eager warm-up steps normally load it first). Then this call takes the composite path
    // and a later eager call loads the module; nothing is marked as failed.
    int capturing = 0;
    cu_check(d.streamIsCapturing(
                 static_cast<CUstream>(
                     c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device))
                         .stream()),
                 &capturing),
             "cuStreamIsCapturing");
    if (capturing != 0) return nullptr;
    Kernels k;
    mr::load_kernels(device, source_for(ht, rt, ot), "mlperf_run_fused_epilogue.cu",
                     "the fused epilogue kernels", kKernelNames, kKernelCount, k.f);
    g_status.store(1);
    return &g_kernels.emplace(key, k).first->second;
  } catch (const c10::Error& e) {
    set_failed(e.what_without_backtrace());
  } catch (const std::exception& e) {
    set_failed(e.what());
  }
  return nullptr;
}


void launch_function(CUfunction f, unsigned gx, unsigned gy, unsigned threads, void** args,
                     int device) {
  CUstream stream = static_cast<CUstream>(
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream());
  mr::launch_kernel(device, f, gx, gy, threads, stream, args, "cuLaunchKernel (fused epilogue)");
}

bool cuda_kernels_ready(int device, int ht, int rt, int ot) {
  return g_status.load() >= 0 && kernels_for(device, ht, rt, ot) != nullptr;
}

// The device's default generator's Philox state for one draw of the _v4 forward's mask, with
// the generator's offset advanced past it (by 4, its granularity): values, or under CUDA graph
// capture the graph's seed / offset pointers plus this draw's offset inside the graph.
RngState cuda_rng_state(int device) {
  auto gen = at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(device));
  at::PhiloxCudaState st;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    st = at::check_generator<at::CUDAGeneratorImpl>(gen)->philox_cuda_state(4);
  }
  RngState r;
  if (st.captured_) {
    r.seed_ptr = st.seed_.ptr;
    r.offset_ptr = st.offset_.ptr;
    r.offset_intragraph = st.offset_intragraph_;
  } else {
    r.seed = st.seed_.val;
    r.offset = st.offset_.val;
  }
  return r;
}

void cuda_launch(int device, int ht, int rt, int ot, fe::Kernel which, unsigned gx, unsigned gy,
                 unsigned threads, void** args) {
  const Kernels* k = kernels_for(device, ht, rt, ot);
  TORCH_CHECK(k != nullptr, "fused epilogue: the CUDA kernels are not loaded (dtype codes ", ht,
              ", ", rt, ", ", ot, ")");
  TORCH_CHECK(which >= 0 && which < kKernelCount, "fused epilogue: no kernel ",
              static_cast<int>(which));
  launch_function(k->f[which], gx, gy, threads, args, device);
}

}  // namespace

#else  // no CUDA headers at build time: no GPU kernel path

namespace {
bool cuda_kernels_ready(int, int, int, int) { return false; }
RngState cuda_rng_state(int) {
  TORCH_CHECK(false, "fused epilogue: built without the `cuda` feature (no kernel path)");
}
void cuda_launch(int, int, int, int, fe::Kernel, unsigned, unsigned, unsigned, void**) {
  TORCH_CHECK(false, "fused epilogue: built without the `cuda` feature (no kernel path)");
}
}  // namespace

#endif

// ---- the kernel path, on a GPU or on the CPU emulator ---------------------------------------
namespace {

constexpr unsigned kThreads = 256;

// Whether the kernels for (ht, rt, ot) can run on `device`: on a GPU once NVRTC compiled them
// and the driver loaded them (the first call does it), on the CPU where the emulator is linked
// (the test programs).
bool kernels_ready(const at::Device& device, int ht, int rt, int ot) {
  if (device.is_cpu()) return mr::cuda_emu::linked();
  return device.is_cuda() && cuda_kernels_ready(device.index(), ht, rt, ot);
}

// Launches kernel `which` on a (gx, gy) grid of `threads`-thread blocks: on the GPU on the
// device's current stream, on the CPU by the emulator. args: the driver API's argument array.
void launch(const at::Device& device, int ht, int rt, int ot, fe::Kernel which, unsigned gx,
            unsigned gy, void** args, unsigned threads = kThreads) {
  if (device.is_cpu()) {
    mr::fe_emu::launch(ht, rt, ot, which, gx, gy, threads, args);
  } else {
    cuda_launch(device.index(), ht, rt, ot, which, gx, gy, threads, args);
  }
}

// (also for output pointers: the launch copies each argument's bytes, whatever the slot's type)
const void* ptr_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// The vectorised row kernels (mr_fe_*_v4: a warp per row, kThreads / 32 rows per block) take
// rows of a multiple of 4 elements, at most 4 * 32 * MR_FE_GROUPS (8) of them, and every
// tensor's data aligned to 4 of its elements (4 bytes for the mask); an undefined tensor is no
// obstacle.
constexpr int64_t kV4MaxCols = 4 * 32 * 8;
constexpr unsigned kV4RowsPerBlock = kThreads / 32;
// mr_fe_backward_v4, which also takes the column sums: blocks of kV4BackwardWarps warps
// (MR_FE_BWD_WARPS in the source) of kV4RowsPerWarp rows each
constexpr unsigned kV4BackwardWarps = 4;
constexpr unsigned kV4RowsPerWarp = 8;

unsigned v4_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kV4RowsPerBlock - 1) / kV4RowsPerBlock);
}

bool v4_aligned(const at::Tensor& t) {
  if (!t.defined()) return true;
  const auto addr = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  return addr % (4 * t.element_size()) == 0;
}

// This thread's launches of the vectorised forward [0] and backward [1] kernels (tests: which
// row kernels ran; the CPU's autograd runs a backward in the thread that called it).
thread_local int64_t t_v4_launches[2] = {0, 0};

// Whether a forward on this thread that needs a dropout mask lets the _v4 kernel draw it (the
// default) or draws it with ATen's bernoulli_, as the composite path does (tests that compare
// the two paths step for step turn it off on their thread).
thread_local bool t_draw_in_kernel = true;

bool v4_usable(int64_t cols, std::initializer_list<const at::Tensor*> tensors) {
  if (cols % 4 != 0 || cols > kV4MaxCols) return false;
  for (const at::Tensor* t : tensors) {
    if (!v4_aligned(*t)) return false;
  }
  return true;
}

// mode as run_op's (mode_takes)
bool kernel_usable(const at::Tensor& h, const at::Tensor& bias, const at::Tensor& residual,
                   const at::Tensor& gamma, const at::Tensor& beta, at::ScalarType out_type,
                   int mode) {
  const auto dev = h.device();
  if (!mode_takes(dev, mode) || h.numel() == 0) return false;
  if (residual.device() != dev || !gamma.defined() || !beta.defined() ||
      gamma.device() != dev || beta.device() != dev || gamma.scalar_type() != at::kFloat ||
      beta.scalar_type() != at::kFloat || gamma.numel() != h.size(-1) ||
      beta.numel() != h.size(-1))
    return false;
  if (bias.defined() &&
      (bias.device() != dev || bias.scalar_type() != at::kFloat || bias.numel() != h.size(-1)))
    return false;
  const int ht = type_code(h.scalar_type()), rt = type_code(residual.scalar_type()),
            ot = type_code(out_type);
  if (ht < 0 || rt < 0 || ot < 0) return false;
  if (h.size(-1) > INT32_MAX || h.numel() / h.size(-1) > INT32_MAX) return false;
  return kernels_ready(dev, ht, rt, ot);
}

// y, s, mean, rstd and the dropout mask applied (undefined without dropout). `mask`: a given
// mask (bytes), or undefined; draw_p > 0 (no mask given): draw one with keep probability
// 1 - draw_p, in the _v4 kernel itself where it runs, else with ATen's bernoulli_ on the device.
ForwardOut kernel_forward(const at::Tensor& h_in, const at::Tensor& bias_in,
                          const at::Tensor& res_in, const at::Tensor& gamma_in,
                          const at::Tensor& beta_in, const at::Tensor& mask_in, double draw_p,
                          double scale, double eps, at::ScalarType out_type,
                          const at::Tensor& fp8_scale) {
  const int64_t cols = h_in.size(-1);
  const int64_t rows = h_in.numel() / cols;
  const int ht = type_code(h_in.scalar_type()), rt = type_code(res_in.scalar_type()),
            ot = type_code(out_type);
  at::Tensor h = h_in.contiguous(), res = res_in.contiguous(), gamma = gamma_in.contiguous(),
             beta = beta_in.contiguous();
  at::Tensor bias = bias_in.defined() ? bias_in.contiguous() : at::Tensor();
  at::Tensor y = at::empty(h.sizes(), h.options().dtype(out_type));
  at::Tensor s = at::empty(h.sizes(), h.options().dtype(at::kFloat));
  // shaped like native_layer_norm's on CUDA: [rows..., 1]
  std::vector<int64_t> stat_shape(h.sizes().begin(), h.sizes().end() - 1);
  stat_shape.push_back(1);
  at::Tensor mean = at::empty(stat_shape, h.options().dtype(at::kFloat));
  at::Tensor rstd = at::empty(stat_shape, h.options().dtype(at::kFloat));
  at::Tensor mask = mask_in;
  at::Tensor mask_out;  // drawn by the _v4 kernel
  const bool v4 = v4_usable(cols, {&h, &bias, &mask, &res, &gamma, &beta, &y, &s});
  RngState rng;
  if (draw_p > 0) {
    if (v4 && t_draw_in_kernel) {
      mask_out = at::empty(h.sizes(), h.options().dtype(at::kByte));
      if (h.is_cuda()) {
        rng = cuda_rng_state(h.device().index());
      } else {
        // the emulator: a seed from the CPU generator (manual_seed makes it repeat)
        rng.seed = static_cast<uint64_t>(
            at::randint(std::numeric_limits<int64_t>::max(), {1}, at::kLong).item<int64_t>());
      }
    } else {
      mask = at::empty(h.sizes(), h.options().dtype(at::kByte)).bernoulli_(1 - draw_p);
    }
  }
  const void* hp = h.data_ptr();
  const void* bp = ptr_or_null(bias);
  const void* mp = ptr_or_null(mask);
  float sc = static_cast<float>(scale), ep = static_cast<float>(eps);
  const void* rp = res.data_ptr();
  const void* gp = gamma.data_ptr();
  const void* bep = beta.data_ptr();
  int c = static_cast<int>(cols);
  void* yp = y.data_ptr();
  void* sp = s.data_ptr();
  void* meanp = mean.data_ptr();
  void* rstdp = rstd.data_ptr();
  void* mop = mask_out.defined() ? mask_out.data_ptr() : nullptr;
  float keep = static_cast<float>(1.0 - draw_p);
  unsigned long long seed = rng.seed, offset = rng.offset, intra = rng.offset_intragraph;
  const long long* seedp = reinterpret_cast<const long long*>(rng.seed_ptr);
  const long long* offp = reinterpret_cast<const long long*>(rng.offset_ptr);
  int nrows = static_cast<int>(rows);
  // the FP8 output (the _v4 kernel only): E4M3 bytes and one amax per row
  at::Tensor fp8_bytes, row_amax;
  if (v4 && fp8_scale.defined()) {
    fp8_bytes = at::empty(h.sizes(), h.options().dtype(at::kByte));
    row_amax = at::empty({rows}, h.options().dtype(at::kFloat));
  }
  const void* f8sp = fp8_bytes.defined() ? fp8_scale.data_ptr() : nullptr;
  const void* f8p = ptr_or_null(fp8_bytes);
  const void* amaxp = ptr_or_null(row_amax);
  // the vectorised kernel's arguments; the scalar one (a block per row) takes the first 13
  // (cuLaunchKernel and the emulator read as many as the kernel has parameters)
  void* args[] = {&hp,    &bp,   &mp,   &sc,   &rp,     &gp,   &bep,   &ep,
                  &c,     &yp,   &sp,   &meanp, &rstdp, &mop,  &keep,  &seed,
                  &seedp, &offset, &offp, &intra, &nrows, &f8sp, &f8p,  &amaxp};
  if (v4) {
    launch(h.device(), ht, rt, ot, fe::kForwardV4, v4_blocks(rows), 1, args);
    ++t_v4_launches[0];
  } else {
    launch(h.device(), ht, rt, ot, fe::kForward, static_cast<unsigned>(rows), 1, args);
  }
  return {y, s, mean, rstd, mask_out.defined() ? mask_out : mask, fp8_bytes, row_amax};
}

// d h, d residual (need_res), d gamma, d beta and (need_bias) the dense bias's gradient, fp32.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> kernel_backward(
    const at::Tensor& dy_in, const at::Tensor& s, const at::Tensor& mean, const at::Tensor& rstd,
    const at::Tensor& gamma, const at::Tensor& mask, double scale, at::ScalarType h_type,
    at::ScalarType res_type, bool need_res, bool need_bias) {
  const int64_t cols = s.size(-1);
  const int64_t rows = s.numel() / cols;
  const int ht = type_code(h_type), rt = type_code(res_type), ot = type_code(dy_in.scalar_type());
  TORCH_CHECK(ot >= 0, "fused epilogue: no kernels for the output gradient's dtype ",
              dy_in.scalar_type());
  at::Tensor dy = dy_in.contiguous();
  const at::Tensor g = gamma.contiguous();  // the saved parameter, as given to the forward
  at::Tensor dh = at::empty(s.sizes(), s.options().dtype(h_type));
  at::Tensor dres = need_res ? at::empty(s.sizes(), s.options().dtype(res_type)) : at::Tensor();
  const bool v4 = v4_usable(cols, {&dy, &s, &g, &mask, &dh, &dres});
  // d gamma, d beta (and d bias) as partial sums over chunks of rows, then mr_fe_colsum_final
  // over the partials. The vectorised backward takes them itself (a chunk is one block's
  // kV4BackwardWarps warps times kV4RowsPerWarp rows); otherwise mr_fe_colsum does, over chunks
  // of (at least) 64 rows, their count within its gridDim.y's 65,535.
  const int rows_per_chunk =
      v4 ? static_cast<int>(kV4BackwardWarps * kV4RowsPerWarp)
         : static_cast<int>(std::max<int64_t>(64, (rows + 65534) / 65535));
  const int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  const auto f32 = s.options().dtype(at::kFloat);
  at::Tensor part_g = at::empty({chunks, cols}, f32);
  at::Tensor part_b = at::empty({chunks, cols}, f32);
  at::Tensor part_bias = need_bias ? at::empty({chunks, cols}, f32) : at::Tensor();
  {
    const void* dyp = dy.data_ptr();
    const void* sp = s.data_ptr();
    const void* mp = mean.data_ptr();
    const void* rp = rstd.data_ptr();
    const void* gp = g.data_ptr();
    const void* maskp = ptr_or_null(mask);
    float sc = static_cast<float>(scale);
    int c = static_cast<int>(cols);
    void* dhp = dh.data_ptr();
    void* drp = need_res ? dres.data_ptr() : nullptr;
    int nrows = static_cast<int>(rows);
    int rpw = static_cast<int>(kV4RowsPerWarp);
    void* pgp = part_g.data_ptr();
    void* pbp = part_b.data_ptr();
    void* pbiasp = need_bias ? part_bias.data_ptr() : nullptr;
    // the scalar kernel takes the first 10
    void* args[] = {&dyp, &sp, &mp, &rp, &gp, &maskp, &sc, &c, &dhp, &drp, &nrows, &rpw,
                    &pgp, &pbp, &pbiasp};
    if (v4) {
      launch(s.device(), ht, rt, ot, fe::kBackwardV4, static_cast<unsigned>(chunks), 1, args,
             32 * kV4BackwardWarps);
      ++t_v4_launches[1];
    } else {
      launch(s.device(), ht, rt, ot, fe::kBackward, static_cast<unsigned>(rows), 1, args);
    }
  }
  if (!v4) {
    const unsigned gx = static_cast<unsigned>((cols + kThreads - 1) / kThreads);
    const void* dyp = dy.data_ptr();
    const void* sp = s.data_ptr();
    const void* mp = mean.data_ptr();
    const void* rp = rstd.data_ptr();
    const void* dhp = dh.data_ptr();
    int r = static_cast<int>(rows), c = static_cast<int>(cols), rpc = rows_per_chunk;
    void* pgp = part_g.data_ptr();
    void* pbp = part_b.data_ptr();
    void* pbiasp = need_bias ? part_bias.data_ptr() : nullptr;
    void* args[] = {&dyp, &sp, &mp, &rp, &dhp, &r, &c, &rpc, &pgp, &pbp, &pbiasp};
    launch(s.device(), ht, rt, ot, fe::kColsum, gx, static_cast<unsigned>(chunks), args);
  }
  at::Tensor dgamma = at::empty({cols}, f32), dbeta = at::empty({cols}, f32);
  at::Tensor dbias = need_bias ? at::empty({cols}, f32) : at::Tensor();
  {
    const void* pgp = part_g.data_ptr();
    const void* pbp = part_b.data_ptr();
    const void* pbiasp = ptr_or_null(part_bias);
    int n = static_cast<int>(chunks), c = static_cast<int>(cols);
    void* dgp = dgamma.data_ptr();
    void* dbp = dbeta.data_ptr();
    void* dbiasp = need_bias ? dbias.data_ptr() : nullptr;
    int first = 0;
    void* args[] = {&pgp, &pbp, &pbiasp, &n, &c, &dgp, &dbp, &dbiasp, &first};
    // 32 columns of one of d gamma, d beta, d bias per block
    launch(s.device(), ht, rt, ot, fe::kColsumFinal, static_cast<unsigned>((cols + 31) / 32),
           need_bias ? 3 : 2, args);
  }
  return {dh, dres, dgamma, dbeta, dbias};
}

// ---- bias + GELU: the intermediate dense's epilogue -----------------------------------------
// Whether the bias + GELU kernels take z (the matmul's output, [..., cols]) and bias ([cols],
// fp32) in this mode (mode_takes):
// fp32 / bf16 / fp16 z, cols a multiple of 4, aligned data, and the kernels for z's dtype ready.
bool gelu_kernel_usable(const at::Tensor& z, const at::Tensor& bias, int mode) {
  const auto dev = z.device();
  if (!mode_takes(dev, mode)) return false;
  if (z.dim() < 1 || z.numel() == 0 || !bias.defined() || bias.device() != dev ||
      bias.scalar_type() != at::kFloat || bias.dim() != 1 || bias.numel() != z.size(-1))
    return false;
  const int64_t cols = z.size(-1);
  if (cols % 4 != 0 || cols > INT32_MAX || z.numel() / cols > INT32_MAX) return false;
  const int ht = type_code(z.scalar_type());
  if (ht < 0 || !z.is_contiguous() || !bias.is_contiguous() || !v4_aligned(z) ||
      !v4_aligned(bias))
    return false;
  return kernels_ready(dev, ht, ht, ht);
}

// The column kernels' chunks of rows (bias + GELU, fused QKV's backward: blockIdx.y): (at
// least) `least` rows each, their count within gridDim.y's 65,535.
struct RowChunks {
  int rows_per_chunk;
  int64_t chunks;
};
RowChunks row_chunks(int64_t rows, int64_t least) {
  const int per = static_cast<int>(std::max<int64_t>(least, (rows + 65534) / 65535));
  return {per, (rows + per - 1) / per};
}

// Their grid: 4 columns per thread along x, the chunks along y.
std::pair<unsigned, unsigned> column_grid(int64_t cols, const RowChunks& rc) {
  const int64_t per_block = 4 * static_cast<int64_t>(kThreads);
  return {static_cast<unsigned>((cols + per_block - 1) / per_block),
          static_cast<unsigned>(rc.chunks)};
}

// A bias's gradient from a column kernel's [chunks, cols] partial sums (fp32): their column sums
// rounded to dtype code ht, as ATen's sum of a 16-bit tensor (mr_fe_colsum_final, first = 2).
at::Tensor bias_grad_from_partials(const at::Tensor& part, int ht) {
  const int64_t chunks = part.size(0), cols = part.size(1);
  at::Tensor dbias = at::empty({cols}, part.options());
  const void* none = nullptr;
  const void* pp = part.data_ptr();
  int n = static_cast<int>(chunks), c = static_cast<int>(cols), first = 2;
  void* null_out = nullptr;
  void* dbp = dbias.data_ptr();
  void* args[] = {&none, &none, &pp, &n, &c, &null_out, &null_out, &dbp, &first};
  launch(part.device(), ht, ht, ht, fe::kColsumFinal, static_cast<unsigned>((cols + 31) / 32), 1,
         args);
  return dbias;
}

// y = GELU(z + bias) (z contiguous, usable as above); fp8_scale given (0-d fp32): also y as
// E4M3 with it and y's amax (0-d), else those undefined.
struct GeluOut {
  at::Tensor y, fp8, amax;
};
GeluOut kernel_bias_gelu_forward(const at::Tensor& z, const at::Tensor& bias,
                                 const at::Tensor& fp8_scale) {
  const int ht = type_code(z.scalar_type());
  const int64_t cols = z.size(-1), rows = z.numel() / cols;
  at::Tensor y = at::empty_like(z, at::MemoryFormat::Contiguous);
  const void* zp = z.data_ptr();
  const void* bp = bias.data_ptr();
  const RowChunks rc = row_chunks(rows, 16);
  int r = static_cast<int>(rows), c = static_cast<int>(cols), rpc = rc.rows_per_chunk;
  void* yp = y.data_ptr();
  // the FP8 output: E4M3 bytes, and one amax per thread (4 columns of a chunk of rows)
  at::Tensor bytes, part_amax;
  if (fp8_scale.defined()) {
    bytes = at::empty(z.sizes(), z.options().dtype(at::kByte));
    part_amax = at::empty({rc.chunks, cols / 4}, z.options().dtype(at::kFloat));
  }
  const void* f8sp = ptr_or_null(fp8_scale);
  const void* f8p = ptr_or_null(bytes);
  const void* amaxp = ptr_or_null(part_amax);
  void* args[] = {&zp, &bp, &r, &c, &rpc, &yp, &f8sp, &f8p, &amaxp};
  const auto [gx, gy] = column_grid(cols, rc);
  launch(z.device(), ht, ht, ht, fe::kBiasGeluForward, gx, gy, args);
  if (!fp8_scale.defined()) return {y, at::Tensor(), at::Tensor()};
  return {y, bytes.view(at::kFloat8_e4m3fn), part_amax.max()};
}

// d z and (need_bias) the bias's gradient (fp32, the column sum of d z as rounded to z's dtype,
// rounded to it again as ATen's sum of a 16-bit tensor)
std::tuple<at::Tensor, at::Tensor> kernel_bias_gelu_backward(const at::Tensor& dy_in,
                                                             const at::Tensor& z,
                                                             const at::Tensor& bias,
                                                             bool need_bias) {
  const int ht = type_code(z.scalar_type());
  const int64_t cols = z.size(-1), rows = z.numel() / cols;
  at::Tensor dy = dy_in.to(z.scalar_type()).contiguous();
  at::Tensor dz = at::empty_like(z, at::MemoryFormat::Contiguous);
  TORCH_CHECK(v4_aligned(dy), "fused bias + GELU: the output gradient is not aligned");
  // chunks of (at least) 64 rows: the bias's partial sums
  const RowChunks rc = row_chunks(rows, 64);
  at::Tensor part = at::empty({rc.chunks, cols}, z.options().dtype(at::kFloat));
  {
    const void* dyp = dy.data_ptr();
    const void* zp = z.data_ptr();
    const void* bp = bias.data_ptr();
    int r = static_cast<int>(rows), c = static_cast<int>(cols), rpc = rc.rows_per_chunk;
    void* dzp = dz.data_ptr();
    void* pp = part.data_ptr();
    void* args[] = {&dyp, &zp, &bp, &r, &c, &rpc, &dzp, &pp};
    const auto [gx, gy] = column_grid(cols, rc);
    launch(z.device(), ht, ht, ht, fe::kBiasGeluBackward, gx, gy, args);
  }
  if (!need_bias) return {dz, at::Tensor()};
  return {dz, bias_grad_from_partials(part, ht)};
}

// ---- fused QKV's backward -------------------------------------------------------------------
// [d q | d k | d v] as one [rows, 3 cols] gradient and the bias's gradient (fp32: the column sum
// of that gradient, rounded to its dtype as ATen's sum of a 16-bit tensor), from d q, d k, d v
// ([rows, cols] each, one dtype, contiguous, aligned: the caller checks).
std::tuple<at::Tensor, at::Tensor> kernel_qkv_grad(const at::Tensor& dq, const at::Tensor& dk,
                                                   const at::Tensor& dv) {
  const int ht = type_code(dq.scalar_type());
  const int64_t cols = dq.size(1), rows = dq.size(0);
  at::Tensor dqkv = at::empty({rows, 3 * cols}, dq.options());
  const RowChunks rc = row_chunks(rows, 64);
  at::Tensor part = at::empty({rc.chunks, 3 * cols}, dq.options().dtype(at::kFloat));
  const void* qp = dq.data_ptr();
  const void* kp = dk.data_ptr();
  const void* vp = dv.data_ptr();
  int r = static_cast<int>(rows), c = static_cast<int>(cols), rpc = rc.rows_per_chunk;
  void* op = dqkv.data_ptr();
  void* pp = part.data_ptr();
  void* args[] = {&qp, &kp, &vp, &r, &c, &rpc, &op, &pp};
  const auto [gx, gy] = column_grid(3 * cols, rc);
  launch(dq.device(), ht, ht, ht, fe::kQkvGrad, gx, gy, args);
  return {dqkv, bias_grad_from_partials(part, ht)};
}

// ---- methods.fp8's one-pass casts (fp8_cast.hpp) --------------------------------------------
// The cast's grid: groups of 4 elements per thread, at most kCastMaxBlocks blocks (a grid-stride
// loop beyond: about 8 blocks per SM of an H100 / H200); one amax partial per warp, reduced by
// one kAmaxRecordThreads-thread block.
constexpr int64_t kCastMaxBlocks = 1024;
constexpr unsigned kAmaxRecordThreads = 1024;

// Whether the cast kernels take t, scale and cell in `mode` (mode_takes)
bool fp8_cast_usable(const at::Tensor& t, const at::Tensor& scale, const at::Tensor& cell,
                     int mode) {
  const auto dev = t.device();
  if (!mode_takes(dev, mode) || t.numel() == 0 || t.numel() % 4 != 0 || !t.is_contiguous() ||
      !v4_aligned(t))
    return false;
  for (const at::Tensor* one : {&scale, &cell}) {
    if (!one->defined() || one->device() != dev || one->scalar_type() != at::kFloat ||
        one->numel() != 1)
      return false;
  }
  const int ht = type_code(t.scalar_type());
  return ht >= 0 && kernels_ready(dev, ht, ht, ht);
}

// *cell = max(*cell, max(part)): mr_fe_amax_record over a cast kernel's amax partials (one
// block), on the kernels of dtype variant ht
void record_partials(const at::Tensor& part, const at::Tensor& cell, int ht) {
  const void* pp = part.data_ptr();
  int n = static_cast<int>(std::min<int64_t>(part.numel(), INT32_MAX));
  void* cp = cell.data_ptr();
  void* args[] = {&pp, &n, &cp};
  launch(part.device(), ht, ht, ht, fe::kAmaxRecord, 1, 1, args, kAmaxRecordThreads);
}

}  // namespace

at::Tensor mr::fused_epilogue::fp8_cast(const at::Tensor& t, const at::Tensor& scale, int format,
                                        const at::Tensor& amax_cell, int mode,
                                        int64_t max_blocks) {
  TORCH_CHECK(format == 0 || format == 1, "fp8 cast: format must be 0 (E4M3) or 1 (E5M2)");
  if (mode == 1 || !fp8_cast_usable(t, scale, amax_cell, mode)) return at::Tensor();
  const int ht = type_code(t.scalar_type());
  const int64_t groups = t.numel() / 4;
  const int64_t cap = max_blocks > 0 ? std::min(max_blocks, kCastMaxBlocks) : kCastMaxBlocks;
  const int64_t blocks = std::min<int64_t>((groups + kThreads - 1) / kThreads, cap);
  at::Tensor bytes = at::empty(t.sizes(), t.options().dtype(at::kByte));
  at::Tensor part = at::empty({blocks * (kThreads / 32)}, t.options().dtype(at::kFloat));
  {
    const void* xp = t.data_ptr();
    long long n4 = groups;
    const void* sp = scale.data_ptr();
    int f = format;
    void* qp = bytes.data_ptr();
    void* pp = part.data_ptr();
    void* args[] = {&xp, &n4, &sp, &f, &qp, &pp};
    launch(t.device(), ht, ht, ht, fe::kFp8Cast, static_cast<unsigned>(blocks), 1, args);
  }
  record_partials(part, amax_cell, ht);
  return bytes.view(format == 0 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2);
}

namespace {

// mr_fe_fp8_cast_transpose's tile (MR_CT_ROWS x MR_CT_COLS in the source)
constexpr int64_t kCtRows = 32, kCtCols = 64;

// mr_fe_fp8_cast_transpose's grid for rows_out x cols: one block per tile (and one amax partial)
std::pair<unsigned, unsigned> cast_transpose_grid(int64_t rows_out, int64_t cols) {
  return {static_cast<unsigned>((rows_out + kCtRows - 1) / kCtRows),
          static_cast<unsigned>((cols + kCtCols - 1) / kCtCols)};
}

// Whether mr_fe_fp8_cast_transpose takes a [rows, cols] matrix t (a float type to cast, or an
// FP8 tensor to transpose) with rows_out output rows in `mode`
bool cast_transpose_usable(const at::Tensor& t, int64_t rows_out, int mode) {
  return mode_takes(t.device(), mode) && t.dim() == 2 && t.size(0) > 0 && t.size(1) > 0 &&
         t.size(1) % 4 == 0 && rows_out >= t.size(0) && rows_out % 4 == 0 &&
         rows_out <= INT32_MAX && t.size(1) <= INT32_MAX && t.is_contiguous() && v4_aligned(t);
}

// Launches mr_fe_fp8_cast_transpose for t (cast, with scale/format/part) or q_in (transposed)
void launch_cast_transpose(const at::Tensor& src, bool cast, int ht, int64_t rows_out,
                           const at::Tensor& scale, int format, const at::Tensor& q,
                           const at::Tensor& qt, const at::Tensor& part) {
  const void* xp = cast ? src.data_ptr() : nullptr;
  const void* qin = cast ? nullptr : src.data_ptr();
  int rows = static_cast<int>(src.size(0)), cols = static_cast<int>(src.size(1));
  int ro = static_cast<int>(rows_out);
  const void* sp = cast ? scale.data_ptr() : nullptr;
  int f = format;
  void* qp = q.defined() ? q.data_ptr() : nullptr;
  void* qtp = qt.data_ptr();
  void* pp = part.defined() ? part.data_ptr() : nullptr;
  void* args[] = {&xp, &qin, &rows, &cols, &ro, &sp, &f, &qp, &qtp, &pp};
  const auto [gx, gy] = cast_transpose_grid(rows_out, cols);
  launch(src.device(), ht, ht, ht, fe::kFp8CastTranspose, gx, gy, args);
}

}  // namespace

std::pair<at::Tensor, at::Tensor> mr::fused_epilogue::fp8_cast_transpose(
    const at::Tensor& t, const at::Tensor& scale, int format, const at::Tensor& amax_cell,
    int mode, int64_t rows_out) {
  TORCH_CHECK(format == 0 || format == 1, "fp8 cast: format must be 0 (E4M3) or 1 (E5M2)");
  if (mode == 1 || !cast_transpose_usable(t, rows_out, mode) ||
      !fp8_cast_usable(t, scale, amax_cell, mode))
    return {};
  const int ht = type_code(t.scalar_type());
  const int64_t cols = t.size(1);
  const auto bytes = t.options().dtype(at::kByte);
  at::Tensor q = at::empty({rows_out, cols}, bytes), qt = at::empty({cols, rows_out}, bytes);
  const auto [gx, gy] = cast_transpose_grid(rows_out, cols);
  at::Tensor part = at::empty({int64_t{gx} * gy}, t.options().dtype(at::kFloat));
  launch_cast_transpose(t, true, ht, rows_out, scale, format, q, qt, part);
  record_partials(part, amax_cell, ht);
  const auto kind = format == 0 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
  return {q.view(kind), qt.view(kind)};
}

at::Tensor mr::fused_epilogue::fp8_transpose(const at::Tensor& q, int mode, int64_t rows_out) {
  const auto kind = q.scalar_type();
  if (mode == 1 || (kind != at::kFloat8_e4m3fn && kind != at::kFloat8_e5m2) ||
      !cast_transpose_usable(q, rows_out, mode) || !kernels_ready(q.device(), 1, 1, 1))
    return at::Tensor();
  at::Tensor qt = at::empty({q.size(1), rows_out}, q.options().dtype(at::kByte));
  // the kernels of the bf16 variant (any variant: nothing of HT is read)
  launch_cast_transpose(q.view(at::kByte), false, 1, rows_out, at::Tensor(), 0, at::Tensor(), qt,
                        at::Tensor());
  return qt.view(kind);
}

namespace {

// The query, key and value projections as one matmul, x [N, H] through w [3H, H] and b [3H] (the
// three weights and biases concatenated), returning q, k, v as [N, heads, H / heads] views of
// its output; the backward stacks d q, d k, d v and sums the bias's gradient in one kernel
// (kernel_qkv_grad), then takes d x and d w with two matmuls. The matmul runs in `dtype` (the
// autocast dtype under autocast, as linear would), and each gradient comes back in its input's
// dtype (as autocast's casts would carry it).
struct QkvProjection : public torch::autograd::Function<QkvProjection> {
  static variable_list forward(AutogradContext* ctx, at::Tensor x, at::Tensor w, at::Tensor b,
                               int64_t heads, int64_t dtype) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto dt = static_cast<at::ScalarType>(dtype);
    at::Tensor xc = x.to(dt), wc = w.to(dt);
    at::Tensor qkv = at::linear(xc, wc, b.to(dt));
    ctx->save_for_backward({xc, wc});
    ctx->saved_data["x_type"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_type"] = static_cast<int64_t>(w.scalar_type());
    ctx->saved_data["b_type"] = static_cast<int64_t>(b.scalar_type());
    const int64_t hidden = w.size(1);
    at::Tensor v = qkv.view({-1, 3, heads, hidden / heads});
    return {v.select(1, 0), v.select(1, 1), v.select(1, 2)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    auto saved = ctx->get_saved_variables();
    const at::Tensor& xc = saved[0];
    const at::Tensor& wc = saved[1];
    const int64_t rows = xc.size(0), hidden = wc.size(1);
    std::vector<at::Tensor> g(3);
    for (int i = 0; i < 3; ++i) {
      g[i] = grads[i].defined() ? grads[i].to(xc.scalar_type()).reshape({rows, hidden}).contiguous()
                                : at::zeros({rows, hidden}, xc.options());
      if (!v4_aligned(g[i])) g[i] = g[i].clone();  // a fresh allocation is aligned
    }
    auto [dqkv, dbias] = kernel_qkv_grad(g[0], g[1], g[2]);
    const auto type = [&](const char* k) {
      return static_cast<at::ScalarType>(ctx->saved_data[k].toInt());
    };
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) dx = at::mm(dqkv, wc).to(type("x_type"));
    if (ctx->needs_input_grad(1)) dw = at::mm(dqkv.t(), xc).to(type("w_type"));
    if (!ctx->needs_input_grad(2)) dbias = at::Tensor();
    else dbias = dbias.to(type("b_type"));
    return {dx, dw, dbias, at::Tensor(), at::Tensor()};
  }
};

// GELU(z + bias) as one autograd op on the kernels (z: the matmul's output without its bias);
// with fp8_scale (0-d fp32) also y as E4M3 and its amax (outputs 1 and 2, not differentiable).
struct BiasGelu : public torch::autograd::Function<BiasGelu> {
  static variable_list forward(AutogradContext* ctx, at::Tensor z, at::Tensor bias,
                               std::optional<at::Tensor> fp8_scale) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    GeluOut out = kernel_bias_gelu_forward(z, bias, fp8_scale.value_or(at::Tensor()));
    ctx->save_for_backward({z, bias});
    if (!fp8_scale) return {out.y};
    ctx->mark_non_differentiable({out.fp8, out.amax});
    return {out.y, out.fp8, out.amax};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    auto saved = ctx->get_saved_variables();
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    auto [dz, dbias] = kernel_bias_gelu_backward(grads[0], saved[0], saved[1],
                                                 ctx->needs_input_grad(1));
    if (!ctx->needs_input_grad(0)) dz = at::Tensor();
    return {dz, dbias, at::Tensor()};
  }
};

}  // namespace


// The epilogue's arguments, shared by both entry points (mirrored by EpilogueArgs in
// src/fused/epilogue.rs): residual, LayerNorm gamma / beta, an optional keep-mask (null:
// a fresh draw), dropout p, train (0/1), LayerNorm eps, and the path mode: 0 auto (the kernel
// where usable), 1 composite, 2 kernel (an error when unusable), 3 the kernels on the CPU
// emulator (tests; an error when unusable).
struct MrFeEpilogue {
  const at::Tensor* residual;
  const at::Tensor* gamma;
  const at::Tensor* beta;
  const at::Tensor* mask;
  double p;
  int train;
  double eps;
  int mode;
  int out_type;  // -1: the unfused ops' output dtype; else 0 fp32, 1 bf16, 2 fp16
  // null, or the input scale (one fp32 value on the device) of the FP8 linear that reads the
  // output: the output is then also returned cast to E4M3 with it, with its amax
  const at::Tensor* fp8_scale;
};

namespace {
const MrFeEpilogue& need_args(const MrFeEpilogue* e) {
  TORCH_CHECK(e != nullptr, "fused epilogue: no epilogue arguments");
  return *e;
}

// The output into *out and, with an FP8 scale, the E4M3 output and its amax into fp8_out[0..2]
// (which must then be given).
void run_epilogue(const at::Tensor& h, const at::Tensor& bias, const MrFeEpilogue& e,
                  at::Tensor** out, at::Tensor** fp8_out, int* used_kernel) {
  const at::Tensor fp8_scale = opt(e.fp8_scale);
  TORCH_CHECK(!fp8_scale.defined() || fp8_out != nullptr,
              "fused epilogue: an FP8 scale without room for the FP8 output");
  variable_list r = run_op(h, bias, need(e.residual, "residual"), need(e.gamma, "gamma"),
                           need(e.beta, "beta"), opt(e.mask), e.p, e.train != 0, e.eps, e.mode,
                           e.out_type, fp8_scale, used_kernel);
  *out = new at::Tensor(std::move(r[0]));
  if (fp8_scale.defined()) {
    fp8_out[0] = new at::Tensor(std::move(r[1]));
    fp8_out[1] = new at::Tensor(std::move(r[2]));
  }
}
}  // namespace

extern "C" {

// y = LayerNorm(residual + dropout(h + bias)) as one autograd op (bias may be null).
// *used_kernel: which path ran. fp8_out: room for two tensors (E4M3 y, its amax) when e has an
// FP8 scale (may be null otherwise).
int mr_fe_bias_dropout_add_ln(const at::Tensor* h, const at::Tensor* bias,
                              const MrFeEpilogue* e, at::Tensor** out, at::Tensor** fp8_out,
                              int* used_kernel, char** err) {
  return mr::catching(err, kWhat, [&] {
    run_epilogue(need(h, "h"), opt(bias), need_args(e), out, fp8_out, used_kernel);
  });
}

// The same with the dense layer in front: y = LN(residual + dropout(x W^T + b)). With the
// kernel path the matmul runs without its bias and the kernel adds it; otherwise the bias goes
// into the matmul (addmm), exactly as the unfused linear.
int mr_fe_dense_dropout_add_ln(const at::Tensor* x, const at::Tensor* w, const at::Tensor* b,
                               const MrFeEpilogue* e, at::Tensor** out, at::Tensor** fp8_out,
                               int* used_kernel, char** err) {
  return mr::catching(err, kWhat, [&] {
    const MrFeEpilogue& args = need_args(e);
    const at::Tensor& xx = need(x, "x");
    const at::Tensor& ww = need(w, "weight");
    const at::Tensor bb = opt(b);
    // run_op decides whether the kernels run
    const bool candidate = bb.defined() && kernel_candidate(xx.device(), args.mode);
    at::Tensor h = candidate ? at::linear(xx, ww) : at::linear(xx, ww, bb);
    run_epilogue(h, candidate ? bb : at::Tensor(), args, out, fp8_out, used_kernel);
  });
}

// y = GELU(x W^T + b), the exact (erf) GELU: the intermediate dense and its epilogue. mode as
// the epilogues' (0 auto, 1 composite, 2 kernel or an error, 3 the emulated kernels or an
// error). With the kernels the matmul runs without its bias and one kernel adds it and applies
// the GELU (its backward also sums the bias's gradient); otherwise exactly the unfused
// gelu(linear(x, w, b)).
int mr_fe_dense_bias_gelu(const at::Tensor* x, const at::Tensor* w, const at::Tensor* b,
                          int mode, at::Tensor** out, int* used_kernel, char** err) {
  return mr::catching(err, kWhat, [&] {
    check_mode("fused bias + GELU", mode);
    const at::Tensor& xx = need(x, "x");
    const at::Tensor& ww = need(w, "weight");
    const at::Tensor& bb = need(b, "bias");
    const bool candidate = kernel_candidate(xx.device(), mode);
    at::Tensor y;
    bool used = false;
    if (candidate) {
      at::Tensor z = at::linear(xx, ww);
      if (gelu_kernel_usable(z, bb, mode)) {
        y = BiasGelu::apply(z, bb, std::nullopt)[0];
        used = true;
      } else {
        TORCH_CHECK(mode == 0, "fused bias + GELU: the ", kernel_path_name(mode),
                    " kernel path is not usable for these tensors (", z.scalar_type(), " on ",
                    z.device(), ", ", z.size(-1), " columns, bias ", bb.scalar_type(),
                    "): it takes fp32, bf16 or fp16 rows of a multiple of 4 with an fp32 bias",
                    g_status.load() < 0 ? ": " + g_report.reason() : std::string());
        y = at::gelu(z + bb.to(z.scalar_type()));
      }
    } else {
      TORCH_CHECK(mode <= 1, "fused bias + GELU: the ", kernel_path_name(mode),
                  " kernel path takes ", mode == 3 ? "CPU" : "CUDA", " tensors, not ",
                  xx.device(), g_status.load() < 0 ? ": " + g_report.reason() : std::string());
      y = at::gelu(at::linear(xx, ww, bb));
    }
    if (used_kernel) *used_kernel = used ? 1 : 0;
    *out = new at::Tensor(std::move(y));
  });
}

// y = GELU(z + b), the exact (erf) GELU, for z a matmul's output without its bias (the FP8
// linear's: methods.fp8). fp8_scale (null, or one fp32 value on z's device): y also cast to E4M3
// with it and its amax, into fp8_out[0..2] (the output dense's FP8 input). mode as the
// epilogues'. With the kernels one pass adds the bias, applies the GELU and (fp8_scale) writes
// the cast and the amax partials; otherwise at::gelu(z + b) and fp8_of's casts.
int mr_fe_bias_gelu(const at::Tensor* z, const at::Tensor* b, const at::Tensor* fp8_scale,
                    int mode, at::Tensor** out, at::Tensor** fp8_out, int* used_kernel,
                    char** err) {
  return mr::catching(err, kWhat, [&] {
    check_mode("fused bias + GELU", mode);
    const at::Tensor& zz = need(z, "z");
    const at::Tensor& bb = need(b, "bias");
    const at::Tensor scale = opt(fp8_scale);
    check_fp8_scale("fused bias + GELU", scale, zz.device());
    TORCH_CHECK(!scale.defined() || fp8_out != nullptr,
                "fused bias + GELU: an FP8 scale without room for the FP8 output");
    const at::Tensor zc = zz.contiguous();
    const bool usable = gelu_kernel_usable(zc, bb, mode);
    TORCH_CHECK(usable || mode <= 1, "fused bias + GELU: the ", kernel_path_name(mode),
                " kernel path is not usable for these tensors (", zz.scalar_type(), " on ",
                zz.device(), ", ", zz.size(-1), " columns, bias ", bb.scalar_type(),
                "): it takes fp32, bf16 or fp16 rows of a multiple of 4 with an fp32 bias",
                g_status.load() < 0 ? ": " + g_report.reason() : std::string());
    const std::optional<at::Tensor> s =
        scale.defined() ? std::optional<at::Tensor>(scale.reshape({})) : std::nullopt;
    variable_list r;
    if (usable) {
      r = BiasGelu::apply(zc, bb, s);
    } else {
      r = {at::gelu(zz + bb.to(zz.scalar_type()))};
      if (s) {
        auto [q, amax] = fp8_of(r[0], *s);
        r.push_back(q);
        r.push_back(amax);
      }
    }
    *out = new at::Tensor(std::move(r[0]));
    if (s) {
      fp8_out[0] = new at::Tensor(std::move(r[1]));
      fp8_out[1] = new at::Tensor(std::move(r[2]));
    }
    if (used_kernel) *used_kernel = usable ? 1 : 0;
  });
}

// Fused QKV: q, k, v ([N, heads, H / heads] each) = the query, key and value projections of x
// ([N, H]) as one matmul through w ([3H, H]) and b ([3H]), the three weights and biases
// concatenated. mode as the epilogues'. With the kernel path the backward stacks the three
// gradients and sums the bias's gradient in one kernel (QkvProjection); otherwise exactly
// linear(x, w, b).view({-1, 3, heads, H / heads}).unbind(1).
int mr_fe_qkv_projection(const at::Tensor* x, const at::Tensor* w, const at::Tensor* b,
                         int64_t heads, int mode, at::Tensor** out, int* used_kernel,
                         char** err) {
  return mr::catching(err, kWhat, [&] {
    check_mode("fused QKV", mode);
    const at::Tensor& xx = need(x, "x");
    const at::Tensor& ww = need(w, "weight");
    const at::Tensor& bb = need(b, "bias");
    TORCH_CHECK(ww.dim() == 2 && ww.size(0) % 3 == 0 && heads > 0 &&
                    ww.size(1) % heads == 0 && bb.numel() == ww.size(0),
                "fused QKV: weight ", ww.sizes(), " and bias ", bb.sizes(),
                " are not three [H, H] / [H] stacked with H a multiple of ", heads, " heads");
    const auto dev = xx.device().type();
    const bool autocast_on = at::autocast::is_autocast_enabled(dev);
    const at::ScalarType dt =
        autocast_on ? at::autocast::get_autocast_dtype(dev) : xx.scalar_type();
    const int64_t hidden = ww.size(1);
    const bool usable = mode_takes(xx.device(), mode) && xx.dim() == 2 && xx.size(1) == hidden &&
                        ww.size(0) == 3 * hidden && hidden % 4 == 0 && xx.size(0) > 0 &&
                        xx.size(0) <= INT32_MAX && type_code(dt) >= 0 &&
                        kernels_ready(xx.device(), type_code(dt), type_code(dt), type_code(dt));
    TORCH_CHECK(usable || mode <= 1, "fused QKV: the ", kernel_path_name(mode),
                " kernel path is not usable for these tensors (x ", xx.sizes(), " ",
                xx.scalar_type(), " on ", xx.device(), ", computing in ", dt,
                "): it takes ", mode == 3 ? "CPU" : "CUDA",
                " tensors, [N, H] with H a multiple of 4, fp32, bf16 or fp16",
                g_status.load() < 0 ? ": " + g_report.reason() : std::string());
    std::vector<at::Tensor> qkv;
    if (usable) {
      qkv = QkvProjection::apply(xx, ww, bb, heads, static_cast<int64_t>(dt));
    } else {
      qkv = at::linear(xx, ww, bb).view({-1, 3, heads, hidden / heads}).unbind(1);
    }
    for (int i = 0; i < 3; ++i) out[i] = new at::Tensor(std::move(qkv[i]));
    if (used_kernel) *used_kernel = usable ? 1 : 0;
  });
}

// in_kernel != 0: the _v4 forward draws the dropout masks of this thread's calls (the default);
// 0: ATen's bernoulli_ draws them, as on the composite path.
void mr_fe_set_thread_mask_draw(int in_kernel) { t_draw_in_kernel = in_kernel != 0; }

// How many times this thread launched the vectorised forward (which 0) or backward (1) row
// kernel.
int64_t mr_fe_v4_launches(int which) {
  return which == 0 || which == 1 ? t_v4_launches[which] : -1;
}

// Kernel-path status: 0 not tried, 1 loaded, -1 failed (*msg: why, malloc'd; free with
// mr_free_str).
int mr_fe_kernel_status(char** msg) {
  int s = g_status.load();
  if (s < 0 && msg != nullptr) mr::set_err(msg, g_report.reason());
  return s;
}

// 1 when this build has the kernel path (the `cuda` feature).
int mr_fe_kernel_built() {
#ifdef MLPERF_RUN_CUDA
  return 1;
#else
  return 0;
#endif
}

// Compiles the kernels with NVRTC from `nvrtc_path` (null or empty: the search of the GPU path)
// for `arch` ("sm_XY": CUBIN, "compute_XY": PTX); *size: the binary's bytes. Needs no GPU.
int mr_fe_nvrtc_compile(const char* nvrtc_path, const char* arch, int ht, int rt, int ot,
                        size_t* size, char** err) {
  return mr::catching(err, kWhat, [&] {
    mr::Nvrtc n = mr::open_nvrtc(nvrtc_path ? nvrtc_path : "");
    std::string bin = nvrtc_compile(n, arch, ht, rt, ot);
    // every kernel the host launches is in the module (its name is in the PTX or CUBIN)
    for (const char* name : kKernelNames) {
      TORCH_CHECK(bin.find(name) != std::string::npos, "NVRTC's ", arch,
                  " output has no kernel ", name);
    }
    *size = bin.size();
  });
}

}  // extern "C"
