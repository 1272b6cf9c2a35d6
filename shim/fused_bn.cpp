// mlperf-run's fused batch norm + (residual add) + ReLU, y = relu(bn(x) + z), as one autograd
// op for ResNet's method `methods.fused_bn_relu` (both divisions) (src/fused/bn_relu.rs).
//
// Two paths behind one pair of torch::autograd::Functions (BnRelu, BnAddRelu):
//
// - Composite (CPU always; CUDA whenever the cuDNN path is not eligible or not compiled): the
//   very ATen calls the unfused module chain makes, so the result is bit-identical to it.
//   tch's nn::BatchNorm calls at::batch_norm, which is at::_batch_norm_impl_index (it picks
//   native_batch_norm on the CPU, cudnn_batch_norm on CUDA where cuDNN takes it); ResNet then
//   adds the residual in place and runs relu_ in place. We call _batch_norm_impl_index, add_ and
//   relu_ in the same order, and the backward is the unfused chain's backward step by step:
//   relu's own backward threshold_backward(grad, y, 0) (relu saves its output, so we save y and
//   not the pre-ReLU tensor), the residual's gradient is that same tensor, and the BN backward
//   is what the autograd formula of the backend that ran would call (native_batch_norm_backward
//   with the incoming gradient as is, or cudnn_batch_norm_backward with it made contiguous in
//   the input's memory format), both through _batch_norm_impl_index_backward.
//   It saves what the unfused chain saves (x and y) and launches the same kernels: it exists
//   for exactness and as the fallback, not for speed.
//
// - cuDNN (compiled with the cargo feature `cuda`, MLPERF_RUN_CUDA): one kernel for BN + add +
//   ReLU forward and one for the backward (cudnnBatchNormalizationForwardTrainingEx /
//   BackwardEx, SPATIAL_PERSISTENT, BN_ACTIVATION or BN_ADD_ACTIVATION), for NHWC Half/BFloat16
//   activations with fp32 parameters and statistics, C % 4 == 0. Workspace and reserve space are
//   ATen byte tensors from the caching allocator (no cudaMalloc, no host sync: the op stays
//   CUDA-graph capturable). cuDNN is not linked: its functions are looked up once in the
//   libcudnn.so.9 that libtorch_cuda already loaded. If cuDNN refuses a dtype before launching
//   anything (any failure of the three size queries, or a NOT_SUPPORTED / BAD_PARAM category
//   status from the forward; its docs list HALF for these fused ops), that dtype takes the
//   composite path for the rest of the process and the reason is kept for
//   mr_fused_bn_fallback_reason (Rust prints it once). Workspace and reserve buffers have at
//   least one byte (a null workspace would make cuDNN run the non-fused call); inputs cuDNN's
//   batch norm cannot index (PyTorch's limits: numel < 2^31, N <= 880801) stay composite.
//   The backward always takes the path its forward took (the choice is saved with the graph).
//
// Eval (training = false) is the composite inference path only: at::batch_norm + add_ + relu_,
// plain autograd ops, no custom Function needed.
//
// Conventions as the other shims: tensors cross as at::Tensor* (tch's C_tensor), new results
// come back as `new at::Tensor`, and no C++ exception crosses the boundary (error.hpp).
#include <ATen/ATen.h>
#include <ATen/ops/_batch_norm_impl_index.h>
#include <ATen/ops/_batch_norm_impl_index_backward.h>
#include <ATen/ops/threshold_backward.h>
#include <torch/csrc/autograd/custom_function.h>

#include "error.hpp"
#include "loaded_lib.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <mutex>
#include <string>

namespace {

constexpr const char* kWhat = "fused BN+ReLU shim";

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Non-tensor state of one call. A plain struct is invisible to autograd (it gets no edge), so
// the running statistics travel here: they are buffers updated in place, never differentiated.
struct BnArgs {
  at::Tensor running_mean;
  at::Tensor running_var;
  double momentum;
  double eps;
};

// Counters for the GPU check (which path ran) and the process-wide fallback reason.
std::atomic<long long> g_cudnn_calls{0};
std::atomic<long long> g_composite_calls{0};
std::mutex g_reason_mu;
std::string g_reason;  // empty: no fallback happened

// (unused without the cuDNN path)
[[maybe_unused]] void note_fallback(const std::string& why) {
  std::lock_guard<std::mutex> lock(g_reason_mu);
  if (g_reason.empty()) g_reason = why;
}

}  // namespace

// ---- cuDNN path ------------------------------------------------------------------------------
#ifdef MLPERF_RUN_CUDA

#include <ATen/cudnn/Handle.h>
#include <c10/core/DeviceGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cudnn.h>

namespace {

// cuDNN entry points, resolved once from the already loaded libcudnn.so.9 (RTLD_NOLOAD: we
// never load a second copy; libtorch_cuda links it, so it is there once CUDA is in use).
struct Cudnn {
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnCreateTensorDescriptor) create_tensor = nullptr;
  decltype(&cudnnSetTensor4dDescriptor) set_tensor_4d = nullptr;
  decltype(&cudnnDestroyTensorDescriptor) destroy_tensor = nullptr;
  decltype(&cudnnCreateActivationDescriptor) create_activation = nullptr;
  decltype(&cudnnSetActivationDescriptor) set_activation = nullptr;
  decltype(&cudnnDestroyActivationDescriptor) destroy_activation = nullptr;
  decltype(&cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize) fwd_workspace = nullptr;
  decltype(&cudnnGetBatchNormalizationBackwardExWorkspaceSize) bwd_workspace = nullptr;
  decltype(&cudnnGetBatchNormalizationTrainingExReserveSpaceSize) reserve_size = nullptr;
  decltype(&cudnnBatchNormalizationForwardTrainingEx) forward = nullptr;
  decltype(&cudnnBatchNormalizationBackwardEx) backward = nullptr;
  std::string missing;  // why the table is unusable; empty when complete
};

const Cudnn& cudnn() {
  static const Cudnn table = [] {
    Cudnn t;
    mr::LoadedLib lib({"libcudnn.so.9"}, "libcudnn.so.9");
    lib.resolve("cudnnGetErrorString", &t.error_string);
    lib.resolve("cudnnSetStream", &t.set_stream);
    lib.resolve("cudnnCreateTensorDescriptor", &t.create_tensor);
    lib.resolve("cudnnSetTensor4dDescriptor", &t.set_tensor_4d);
    lib.resolve("cudnnDestroyTensorDescriptor", &t.destroy_tensor);
    lib.resolve("cudnnCreateActivationDescriptor", &t.create_activation);
    lib.resolve("cudnnSetActivationDescriptor", &t.set_activation);
    lib.resolve("cudnnDestroyActivationDescriptor", &t.destroy_activation);
    lib.resolve("cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize", &t.fwd_workspace);
    lib.resolve("cudnnGetBatchNormalizationBackwardExWorkspaceSize", &t.bwd_workspace);
    lib.resolve("cudnnGetBatchNormalizationTrainingExReserveSpaceSize", &t.reserve_size);
    lib.resolve("cudnnBatchNormalizationForwardTrainingEx", &t.forward);
    lib.resolve("cudnnBatchNormalizationBackwardEx", &t.backward);
    t.missing = lib.missing;
    return t;
  }();
  return table;
}

std::string status_text(cudnnStatus_t s) {
  const Cudnn& c = cudnn();
  return c.error_string != nullptr ? c.error_string(s) : std::to_string(static_cast<int>(s));
}

void check(cudnnStatus_t s, const char* call) {
  TORCH_CHECK(s == CUDNN_STATUS_SUCCESS, "fused BN+ReLU: ", call, " failed: ", status_text(s));
}

// Descriptors for one call, destroyed on scope exit (also when a check throws).
struct Descs {
  cudnnTensorDescriptor_t x = nullptr;      // x, y, z, dy, dx, dz: same shape, dtype, NHWC
  cudnnTensorDescriptor_t param = nullptr;  // 1 x C x 1 x 1 fp32: scale, bias, mean, var
  cudnnActivationDescriptor_t act = nullptr;
  Descs(const at::Tensor& x_) {
    const Cudnn& c = cudnn();
    check(c.create_tensor(&x), "cudnnCreateTensorDescriptor");
    check(c.create_tensor(&param), "cudnnCreateTensorDescriptor");
    check(c.create_activation(&act), "cudnnCreateActivationDescriptor");
    cudnnDataType_t dt = x_.scalar_type() == at::kHalf ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    check(c.set_tensor_4d(x, CUDNN_TENSOR_NHWC, dt, static_cast<int>(x_.size(0)),
                          static_cast<int>(x_.size(1)), static_cast<int>(x_.size(2)),
                          static_cast<int>(x_.size(3))),
          "cudnnSetTensor4dDescriptor");
    check(c.set_tensor_4d(param, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                          static_cast<int>(x_.size(1)), 1, 1),
          "cudnnSetTensor4dDescriptor");
    check(c.set_activation(act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
          "cudnnSetActivationDescriptor");
  }
  ~Descs() {
    const Cudnn& c = cudnn();
    if (x != nullptr) c.destroy_tensor(x);
    if (param != nullptr) c.destroy_tensor(param);
    if (act != nullptr) c.destroy_activation(act);
  }
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
};

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

cudnnBatchNormOps_t ops_for(bool has_z) {
  return has_z ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
}

// The cuDNN handle of the current device, bound to the current stream (getCudnnHandle sets the
// stream too in libtorch 2.11; binding it again costs nothing and does not depend on that).
cudnnHandle_t handle_on_current_stream() {
  cudnnHandle_t h = at::native::getCudnnHandle();
  check(cudnn().set_stream(h, c10::cuda::getCurrentCUDAStream().stream()), "cudnnSetStream");
  return h;
}

// Dtypes that cuDNN refused (NOT_SUPPORTED) in this process: bit 0 Half, bit 1 BFloat16.
std::atomic<int> g_refused{0};

int dtype_bit(at::ScalarType t) { return t == at::kHalf ? 1 : 2; }

// Why the cuDNN path does not take this call; empty when it does.
std::string ineligible(const at::Tensor& x, const at::Tensor& z, const at::Tensor& weight,
                       const at::Tensor& bias, const BnArgs& a, bool training) {
  if (!x.is_cuda()) return "the input is not on a CUDA device";
  if (!training) return "eval mode (the composite inference path)";
  if (x.dim() != 4) return "the input is not 4-d";
  if (x.scalar_type() != at::kHalf && x.scalar_type() != at::kBFloat16)
    return "the input is neither float16 nor bfloat16";
  if (!x.is_contiguous(at::MemoryFormat::ChannelsLast)) return "the input is not channels-last";
  if (x.size(1) % 4 != 0) return "the channel count is not a multiple of 4";
  // PyTorch's own limits for cuDNN batch norm (32-bit indexing in some kernels, the batch size)
  if (x.numel() == 0 || x.numel() >= std::numeric_limits<int32_t>::max() || x.size(0) > 880801)
    return "the input is empty or too large for cuDNN's batch norm kernels";
  for (const at::Tensor* p : {&weight, &bias, &a.running_mean, &a.running_var}) {
    if (!p->defined() || p->scalar_type() != at::kFloat || !p->is_contiguous() ||
        p->device() != x.device())
      return "weight, bias and running statistics are not fp32 on the input's device";
  }
  if (z.defined() && (z.sizes() != x.sizes() || z.scalar_type() != x.scalar_type() ||
                      !z.is_contiguous(at::MemoryFormat::ChannelsLast) ||
                      z.device() != x.device()))
    return "the residual differs from the input in shape, dtype or layout";
  if (g_refused.load() & dtype_bit(x.scalar_type()))
    return std::string("cuDNN refused ") + c10::toString(x.scalar_type()) +
           " earlier in this process";
  const Cudnn& c = cudnn();
  if (!c.missing.empty()) return c.missing;
  return "";
}

// Whether a refusal by cuDNN before it launched anything means "not for these tensors": the
// NOT_SUPPORTED category (cuDNN 9 reports sub-codes such as NOT_SUPPORTED_DATA_TYPE 3003 or
// NOT_SUPPORTED_SHAPE 3002), and BAD_PARAM for dtypes other than fp16 (an unsupported dtype may
// come back as BAD_PARAM). fp16 NHWC with C % 4 == 0 is the documented case of these fused
// kernels, so a BAD_PARAM there means a wrong call: it ends the run with cuDNN's message, as
// INTERNAL_ERROR, EXECUTION_FAILED and the like do, instead of hiding behind the composite path.
bool refused(cudnnStatus_t s, at::ScalarType t) {
  const int category = static_cast<int>(s) / 1000 * 1000;  // CUDNN_STATUS_CATEGORY
  return category == CUDNN_STATUS_NOT_SUPPORTED ||
         (category == CUDNN_STATUS_BAD_PARAM && t != at::kHalf);
}

// A byte buffer of at least one byte: cuDNN reads a null workspace with size 0 as "the
// non-extended call", which would drop the fused add and ReLU.
at::Tensor byte_buffer(size_t bytes, const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))},
                   like.options().dtype(at::kByte));
}

// cuDNN refused dtype `t` (`detail`: where and its status): that dtype takes the composite path
// for the rest of the process, and the reason is kept for the one warning.
void refuse_dtype(at::ScalarType t, const std::string& detail) {
  g_refused.fetch_or(dtype_bit(t));
  note_fallback(std::string("cuDNN does not support the fused BN+add+ReLU for ") +
                c10::toString(t) + " (" + detail + "); that dtype uses the composite path");
}

struct CudnnForward {
  bool ok = false;  // false: cuDNN refused this dtype (recorded), take the composite path
  at::Tensor y, save_mean, save_invstd, reserve;
  size_t reserve_bytes = 0;  // what cuDNN asked for (the buffer has at least one byte)
};

CudnnForward cudnn_forward(const at::Tensor& x, const at::Tensor& z, const at::Tensor& weight,
                           const at::Tensor& bias, BnArgs& a) {
  const c10::DeviceGuard on_device(x.device());  // the handle and stream are per device
  const Cudnn& c = cudnn();
  cudnnHandle_t h = handle_on_current_stream();
  Descs d(x);
  cudnnBatchNormOps_t ops = ops_for(z.defined());
  cudnnTensorDescriptor_t zd = z.defined() ? d.x : nullptr;
  size_t fwd_ws = 0, bwd_ws = 0, reserve = 0;
  // All three size queries up front: a refusal by them (the backward's too) sends this dtype
  // to the composite path before anything ran, so a backward never finds its path unsupported
  // after the forward took it. (The inputs were validated already: a failing size query means
  // cuDNN does not do this configuration.)
  cudnnStatus_t s = c.fwd_workspace(h, kMode, ops, d.x, zd, d.x, d.param, d.act, &fwd_ws);
  if (s == CUDNN_STATUS_SUCCESS)
    s = c.bwd_workspace(h, kMode, ops, d.x, d.x, d.x, zd, d.x, d.param, d.act, &bwd_ws);
  if (s == CUDNN_STATUS_SUCCESS) s = c.reserve_size(h, kMode, ops, d.act, d.x, &reserve);
  CudnnForward out;
  if (s != CUDNN_STATUS_SUCCESS) {
    if (!refused(s, x.scalar_type())) check(s, "the cuDNN batch norm workspace size queries");
    refuse_dtype(x.scalar_type(), "workspace query: " + status_text(s));
    return out;
  }
  auto stats = weight.options();
  at::Tensor ws = byte_buffer(fwd_ws, x);
  out.reserve = byte_buffer(reserve, x);
  out.reserve_bytes = reserve;
  out.y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  out.save_mean = at::empty({x.size(1)}, stats);
  out.save_invstd = at::empty({x.size(1)}, stats);
  const float one = 1.f, zero = 0.f;
  s = c.forward(h, kMode, ops, &one, &zero, d.x, x.data_ptr(), zd,
                z.defined() ? z.data_ptr() : nullptr, d.x, out.y.data_ptr(), d.param,
                weight.data_ptr(), bias.data_ptr(), a.momentum, a.running_mean.data_ptr(),
                a.running_var.data_ptr(), a.eps, out.save_mean.data_ptr(),
                out.save_invstd.data_ptr(), d.act, ws.data_ptr(), fwd_ws,
                out.reserve.data_ptr(), reserve);
  if (refused(s, x.scalar_type())) {
    // nothing was written (cuDNN checks support before launching): the composite path redoes
    // the whole call, running statistics included
    refuse_dtype(x.scalar_type(), status_text(s));
    return out;
  }
  check(s, "cudnnBatchNormalizationForwardTrainingEx");
  out.ok = true;
  return out;
}

// dx, dz (undefined without a residual), dweight, dbias.
std::vector<at::Tensor> cudnn_backward(const at::Tensor& grad_y, const at::Tensor& x,
                                       const at::Tensor& y, bool has_z, const at::Tensor& weight,
                                       const at::Tensor& bias, const at::Tensor& save_mean,
                                       const at::Tensor& save_invstd, at::Tensor& reserve,
                                       size_t reserved_bytes, double eps) {
  const c10::DeviceGuard on_device(x.device());
  const Cudnn& c = cudnn();
  cudnnHandle_t h = handle_on_current_stream();
  Descs d(x);
  cudnnBatchNormOps_t ops = ops_for(has_z);
  cudnnTensorDescriptor_t zd = has_z ? d.x : nullptr;
  at::Tensor dy = grad_y.contiguous(at::MemoryFormat::ChannelsLast);
  size_t ws_size = 0;
  check(c.bwd_workspace(h, kMode, ops, d.x, d.x, d.x, zd, d.x, d.param, d.act, &ws_size),
        "cudnnGetBatchNormalizationBackwardExWorkspaceSize");
  at::Tensor ws = byte_buffer(ws_size, x);
  at::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  at::Tensor dz = has_z ? at::empty_like(x, at::MemoryFormat::ChannelsLast) : at::Tensor();
  at::Tensor dw = at::empty_like(weight);
  at::Tensor db = at::empty_like(bias);
  const float one = 1.f, zero = 0.f;
  check(c.backward(h, kMode, ops, &one, &zero, &one, &zero, d.x, x.data_ptr(), d.x, y.data_ptr(),
                   d.x, dy.data_ptr(), zd, has_z ? dz.data_ptr() : nullptr, d.x, dx.data_ptr(),
                   d.param, weight.data_ptr(), bias.data_ptr(), dw.data_ptr(), db.data_ptr(), eps,
                   save_mean.data_ptr(), save_invstd.data_ptr(), d.act, ws.data_ptr(), ws_size,
                   reserve.data_ptr(), reserved_bytes),
        "cudnnBatchNormalizationBackwardEx");
  return {dx, dz, dw, db};
}

}  // namespace

#endif  // MLPERF_RUN_CUDA

// ---- the autograd Functions ------------------------------------------------------------------
namespace {

// Composite forward: the unfused chain's own calls (see the top of the file). Returns y and
// saves what the backward needs.
at::Tensor composite_forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& z,
                             const at::Tensor& weight, const at::Tensor& bias, BnArgs& a) {
  g_composite_calls.fetch_add(1);
  // cudnn_enabled = true, as tch's BatchNormConfig default (libtorch 2.11 decides with the
  // global cuDNN switch anyway)
  auto r = at::_batch_norm_impl_index(x, weight, bias, a.running_mean, a.running_var, true,
                                      a.momentum, a.eps, true);
  at::Tensor y = std::get<0>(r);
  int64_t impl = std::get<4>(r);
  if (z.defined()) y.add_(z);
  y.relu_();
  // the cuDNN backend of _batch_norm_impl_index ran on x made contiguous in its own format, and
  // its backward expects that tensor (a no-op copy when x is already)
  at::Tensor x_saved = impl == 1 ? x.contiguous(x.suggest_memory_format()) : x;
  ctx->save_for_backward({x_saved, weight, y});
  ctx->saved_data["cudnn_fused"] = false;
  ctx->saved_data["impl"] = impl;
  ctx->saved_data["save_mean"] = std::get<1>(r);
  ctx->saved_data["save_invstd"] = std::get<2>(r);
  ctx->saved_data["reserve"] = std::get<3>(r);
  ctx->saved_data["running_mean"] = a.running_mean;
  ctx->saved_data["running_var"] = a.running_var;
  return y;
}

// Forward of both Functions below; z undefined: no residual. Training mode only: eval never
// comes here.
at::Tensor fused_forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& z,
                         const at::Tensor& weight, const at::Tensor& bias, BnArgs& a) {
  ctx->saved_data["has_z"] = z.defined();
  ctx->saved_data["eps"] = a.eps;
#ifdef MLPERF_RUN_CUDA
  if (ineligible(x, z, weight, bias, a, true).empty()) {
    CudnnForward f = cudnn_forward(x, z, weight, bias, a);
    if (f.ok) {
      g_cudnn_calls.fetch_add(1);
      // bias too (cuDNN's backward recomputes the ReLU gate from it): saved, so that an
      // in-place change before the backward is caught by autograd's version check
      ctx->save_for_backward({x, weight, f.y, bias});
      ctx->saved_data["cudnn_fused"] = true;
      ctx->saved_data["save_mean"] = f.save_mean;
      ctx->saved_data["save_invstd"] = f.save_invstd;
      ctx->saved_data["reserve"] = f.reserve;
      ctx->saved_data["reserve_bytes"] = static_cast<int64_t>(f.reserve_bytes);
      return f.y;
    }
  }
#endif
  return composite_forward(ctx, x, z, weight, bias, a);
}

// dx, dz (undefined without a residual), dweight, dbias; `mask`: which of x, weight, bias
// need a gradient.
std::array<at::Tensor, 4> fused_backward(AutogradContext* ctx, const variable_list& grads,
                                         std::array<bool, 3> mask) {
  auto saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& weight = saved[1];
  const at::Tensor& y = saved[2];
  bool has_z = ctx->saved_data["has_z"].toBool();
  double eps = ctx->saved_data["eps"].toDouble();
  at::Tensor save_mean = ctx->saved_data["save_mean"].toTensor();
  at::Tensor save_invstd = ctx->saved_data["save_invstd"].toTensor();
  at::Tensor reserve = ctx->saved_data["reserve"].toTensor();
#ifdef MLPERF_RUN_CUDA
  if (ctx->saved_data["cudnn_fused"].toBool()) {
    const at::Tensor& bias = saved[3];
    auto g = cudnn_backward(grads[0], x, y, has_z, weight, bias, save_mean, save_invstd, reserve,
                            static_cast<size_t>(ctx->saved_data["reserve_bytes"].toInt()), eps);
    return {g[0], g[1], g[2], g[3]};
  }
#endif
  // relu's backward exactly as autograd runs it for relu_ (on the saved output)
  at::Tensor g = at::threshold_backward(grads[0], y, 0);
  int64_t impl = ctx->saved_data["impl"].toInt();
  // the autograd formula of cudnn_batch_norm hands the gradient over in the input's memory
  // format; native_batch_norm's hands it over as is
  at::Tensor g_bn = impl == 1 ? g.contiguous(x.suggest_memory_format()) : g;
  auto r = at::_batch_norm_impl_index_backward(
      impl, x, g_bn, weight, ctx->saved_data["running_mean"].toTensor(),
      ctx->saved_data["running_var"].toTensor(), save_mean, save_invstd, true, eps, mask,
      reserve);
  // the residual's gradient is relu's gradient itself (add's backward passes it on as is)
  return {std::get<0>(r), has_z ? g : at::Tensor(), std::get<1>(r), std::get<2>(r)};
}

// Two Functions because autograd wants every tensor argument of a Function defined: one
// without and one with the residual. The last argument (BnArgs) gets no gradient.
struct BnRelu : public torch::autograd::Function<BnRelu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, BnArgs a) {
    return fused_forward(ctx, x, at::Tensor(), weight, bias, a);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = fused_backward(
        ctx, grads,
        {ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2)});
    return {g[0], g[2], g[3], at::Tensor()};
  }
};

struct BnAddRelu : public torch::autograd::Function<BnAddRelu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& z,
                            const at::Tensor& weight, const at::Tensor& bias, BnArgs a) {
    return fused_forward(ctx, x, z, weight, bias, a);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = fused_backward(
        ctx, grads,
        {ctx->needs_input_grad(0), ctx->needs_input_grad(2), ctx->needs_input_grad(3)});
    return {g[0], g[1], g[2], g[3], at::Tensor()};
  }
};

const at::Tensor& need(const at::Tensor* t, const char* what) {
  TORCH_CHECK(t != nullptr && t->defined(), "fused BN+ReLU: ", what, " is undefined");
  return *t;
}

at::Tensor maybe(const at::Tensor* t) { return t != nullptr ? *t : at::Tensor(); }

}  // namespace

extern "C" {

// *out = relu(batch_norm(x) + z): z may be null (no residual); weight and bias may be null
// (affine = false); running_mean and running_var are updated in place when training, as
// at::batch_norm does.
int mr_bn_add_relu(const at::Tensor* x, const at::Tensor* z, const at::Tensor* weight,
                   const at::Tensor* bias, const at::Tensor* running_mean,
                   const at::Tensor* running_var, int training, double momentum, double eps,
                   at::Tensor** out, char** err) {
  return mr::catching(err, kWhat, [&] {
    const at::Tensor& xs = need(x, "the input");
    BnArgs a{need(running_mean, "running_mean"), need(running_var, "running_var"), momentum,
             eps};
    at::Tensor zs = maybe(z);
    at::Tensor w = maybe(weight);
    at::Tensor b = maybe(bias);
    if (zs.defined())
      TORCH_CHECK(zs.sizes() == xs.sizes(), "fused BN+ReLU: the residual's shape ", zs.sizes(),
                  " differs from the input's ", xs.sizes());
    at::Tensor y;
    if (training != 0) {
      TORCH_CHECK(w.defined() && b.defined(),
                  "fused BN+ReLU: training needs an affine BN (weight and bias)");
      y = zs.defined() ? BnAddRelu::apply(xs, zs, w, b, a) : BnRelu::apply(xs, w, b, a);
    } else {
      // eval: the unfused chain itself; plain autograd ops, so gradients work if asked for
      y = at::batch_norm(xs, w, b, a.running_mean, a.running_var, false, momentum, eps, true);
      if (zs.defined()) y.add_(zs);
      y.relu_();
    }
    *out = new at::Tensor(std::move(y));
  });
}

// 0 when every cuDNN entry point resolved from the libcudnn.so.9 loaded in this process (no GPU
// needed: libtorch_cuda links it), else 1 with the reason in *out (malloc'd; free with
// mr_free_str), also for a build without the `cuda` feature.
int mr_fused_bn_cudnn_probe(char** out) {
#ifdef MLPERF_RUN_CUDA
  const std::string& why = cudnn().missing;
#else
  const std::string why = "built without the `cuda` feature (no cuDNN path)";
#endif
  if (why.empty()) return 0;
  mr::set_err(out, why);
  return 1;
}

// Whether the cuDNN path was compiled in (the `cuda` feature).
int mr_fused_bn_cudnn_compiled() {
#ifdef MLPERF_RUN_CUDA
  return 1;
#else
  return 0;
#endif
}

// Training forwards so far that ran on cuDNN's fused kernels and on the composite path.
void mr_fused_bn_counts(long long* cudnn_calls, long long* composite_calls) {
  *cudnn_calls = g_cudnn_calls.load();
  *composite_calls = g_composite_calls.load();
}

// 1 with a malloc'd message in *out (free with mr_free_str) when cuDNN refused a dtype in this
// process and the composite path took over; 0 when nothing fell back.
int mr_fused_bn_fallback_reason(char** out) {
  std::lock_guard<std::mutex> lock(g_reason_mu);
  if (g_reason.empty()) return 0;
  mr::set_err(out, g_reason);
  return 1;
}

// Why the cuDNN path would not take a training call with these tensors (malloc'd message in
// *why; free with mr_free_str); returns 1 when it would, 0 when not, -1 on error.
int mr_fused_bn_cudnn_eligible(const at::Tensor* x, const at::Tensor* z, const at::Tensor* weight,
                               const at::Tensor* bias, const at::Tensor* running_mean,
                               const at::Tensor* running_var, char** why, char** err) {
  int verdict = 0;
  int rc = mr::catching(err, kWhat, [&] {
#ifdef MLPERF_RUN_CUDA
    BnArgs a{need(running_mean, "running_mean"), need(running_var, "running_var"), 0.1, 1e-5};
    std::string reason = ineligible(need(x, "the input"), maybe(z), maybe(weight), maybe(bias),
                                    a, true);
    verdict = reason.empty() ? 1 : 0;
    if (!reason.empty()) mr::set_err(why, reason);
#else
    (void)x, (void)z, (void)weight, (void)bias, (void)running_mean, (void)running_var;
    mr::set_err(why, "built without the `cuda` feature (no cuDNN path)");
#endif
  });
  return rc != 0 ? -1 : verdict;
}

}  // extern "C"
