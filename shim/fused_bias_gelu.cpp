// mlperf-run's fused dense + bias + GELU for BERT's open-division method `methods.fused_bias_gelu`
// (src/models/fused_bias_gelu.rs): the feed-forward block's first half,
//
//   y = gelu_tanh(x W^T + b)       x [M, K], W [N, K], b [N], y [M, N]
//
// as ONE autograd op. GELU is the tanh approximation because that is the GELU cuBLASLt's
// epilogue computes (PyTorch's own _addmm_activation(use_gelu=True) falls back to
// gelu(approximate="tanh") where it cannot use cuBLASLt); BERT's reference GELU is the erf form,
// which is why the method is open-division only.
//
// Two paths behind one torch::autograd::Function:
// - composite (every device; the CPU path and the GPU fallback): at::addmm then at::gelu(tanh),
//   and a backward that makes the very calls the autograd formulas of the unfused
//   `linear(x, W, b).gelu("tanh")` make (gelu_backward; addmm's mat1/mat2/self gradients as
//   mm_mat1_backward / mm_mat2_backward / sum_to compute them for a row-major x and a
//   transposed contiguous W), so in fp32 on the CPU it is bit-identical to them
//   (tests/fused_bias_gelu.rs).
// - cuBLASLt (cargo feature `cuda`, MLPERF_RUN_CUDA): ONE cublasLtMatmul with the epilogue
//   CUBLASLT_EPILOGUE_GELU_AUX_BIAS writes y and, as the aux output, the pre-activation h that
//   GELU's backward needs; the separate GELU pass over [M, N] (read h, write y) disappears. bf16 /
//   fp16 operands, fp32 accumulation; K and N multiples of 8 (the aux leading dimension rule),
//   16-byte aligned pointers. The backward is the composite one on the saved aux (gelu_backward,
//   two mm, a column sum). cuBLASLt is not linked: its functions are looked up once in the
//   libcublasLt that libtorch_cuda already loaded; the handle is ATen's, the workspace comes from
//   the caching allocator (no cudaMalloc, no host sync: the op can be captured in a CUDA graph).
//   If cuBLASLt finds no algorithm for a shape (NOT_SUPPORTED, or no heuristic result), that call
//   takes the composite path and the first reason is kept for mr_fbg_fallback_reason (Rust
//   prints it once). Other cuBLASLt errors end the run with cuBLASLt's status text.
//
// Autocast: the op is not an ATen op, so autocast cannot see it. The entry point casts x, W and b
// the way autocast casts linear's arguments (at::autocast::cached_cast, recorded by autograd
// like autocast's own casts), and the Function runs with autocast excluded.
//
// Conventions as the other shims: tensors cross as at::Tensor* (tch's C_tensor), new results come
// back as `new at::Tensor`, and no C++ exception crosses the boundary (error.hpp).
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "error.hpp"

#include <atomic>
#include <mutex>
#include <string>
#include <tuple>

namespace {

constexpr const char* kWhat = "fused bias+GELU shim";
constexpr const char* kApprox = "tanh";

// The first reason a cuBLASLt-eligible call took the composite path (empty: none yet).
std::mutex g_reason_mu;
std::string g_reason;

void note_fallback(const std::string& why) {
  std::lock_guard<std::mutex> lock(g_reason_mu);
  if (g_reason.empty()) g_reason = why;
}

// The cuBLASLt path (defined in the CUDA section). lt_eligible: dtypes, devices, layouts and
// sizes allow it. lt_plan: cuBLASLt has an algorithm for the shape (the answer is cached), or
// false with the reason in *why (the call then takes the composite path). lt_forward: y and the
// pre-activation h, through the cached plan.
bool lt_eligible(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
bool lt_plan(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, std::string* why);
std::tuple<at::Tensor, at::Tensor> lt_forward(const at::Tensor& x, const at::Tensor& w,
                                              const at::Tensor& b);

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct DenseBiasGelu : public torch::autograd::Function<DenseBiasGelu> {
  // x [M, K], w [N, K], b [N], one dtype; use_lt: the cuBLASLt path (planned by the caller).
  static variable_list forward(AutogradContext* ctx, at::Tensor x, at::Tensor w, at::Tensor b,
                               bool use_lt) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    at::Tensor y, h;
    if (use_lt) {
      std::tie(y, h) = lt_forward(x, w, b);
    } else {
      // at::linear's own call for a 2-D input with a bias, then the GELU
      h = at::addmm(b, x, w.t());
      y = at::gelu(h, kApprox);
    }
    ctx->save_for_backward({x, w, h});
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const at::Tensor& h = saved[2];
    at::Tensor dy = grads[0];
    if (!dy.defined()) dy = at::zeros_like(h);
    const at::Tensor dh = at::gelu_backward(dy, h, kApprox);
    at::Tensor dx, dw, db;
    // addmm(b, x, W^T)'s gradients as autograd computes them: mat1 (x, row-major): dh W;
    // mat2 (W^T, column-major): (dh^T x)^T, whose transpose is W's gradient dh^T x; self (b,
    // broadcast over the rows): the column sum.
    if (ctx->needs_input_grad(0)) dx = dh.mm(w);
    if (ctx->needs_input_grad(1)) dw = dh.t().mm(x);
    if (ctx->needs_input_grad(2)) db = dh.sum(0);
    return {dx, dw, db, at::Tensor()};
  }
};

// mode: 0 auto (cuBLASLt where it plans), 1 composite, 2 cuBLASLt or an error.
at::Tensor run_op(const at::Tensor& x_in, const at::Tensor& w_in, const at::Tensor& b_in,
                  int mode, int* used_lt) {
  TORCH_CHECK(x_in.dim() >= 1 && w_in.dim() == 2 && b_in.dim() == 1,
              "fused bias+GELU: want x [..., K], W [N, K], b [N]; got x ", x_in.sizes(), ", W ",
              w_in.sizes(), ", b ", b_in.sizes());
  const int64_t k = w_in.size(1), n = w_in.size(0);
  TORCH_CHECK(x_in.size(-1) == k && b_in.size(0) == n, "fused bias+GELU: x ", x_in.sizes(),
              ", W ", w_in.sizes(), " and b ", b_in.sizes(), " do not fit x W^T + b");
  TORCH_CHECK(mode >= 0 && mode <= 2, "fused bias+GELU: mode must be 0, 1 or 2, got ", mode);
  // autocast's casts for linear (recorded by autograd, cached for weights as autocast does)
  at::Tensor x = x_in, w = w_in, b = b_in;
  const auto dev = x.device().type();
  if (at::autocast::is_autocast_enabled(dev)) {
    const at::ScalarType dt = at::autocast::get_autocast_dtype(dev);
    x = at::autocast::cached_cast(dt, x, dev);
    w = at::autocast::cached_cast(dt, w, dev);
    b = at::autocast::cached_cast(dt, b, dev);
  }
  TORCH_CHECK(x.scalar_type() == w.scalar_type() && w.scalar_type() == b.scalar_type(),
              "fused bias+GELU: x, W and b must have one dtype (or run under autocast); got ",
              x.scalar_type(), ", ", w.scalar_type(), ", ", b.scalar_type());
  // linear folds leading dimensions the same way (reshape, addmm, view back)
  const auto out_sizes = [&] {
    std::vector<int64_t> s(x.sizes().begin(), x.sizes().end());
    s.back() = n;
    return s;
  }();
  const at::Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, k});
  bool planned = false;
  if (mode != 1) {
    std::string why;
    const bool eligible = lt_eligible(x2, w, b);
    planned = eligible && lt_plan(x2, w, b, &why);
    if (eligible && !planned) note_fallback(why);
    TORCH_CHECK(planned || mode != 2,
                "fused bias+GELU: the cuBLASLt path cannot run these tensors (x ", x2.sizes(),
                " ", x2.scalar_type(), " on ", x2.device(), ", W ", w.sizes(), "; it needs CUDA ",
                "bf16/fp16 tensors, K and N multiples of 8, a build with the `cuda` feature)",
                why.empty() ? std::string() : ": " + why);
  }
  if (used_lt != nullptr) *used_lt = planned ? 1 : 0;
  at::Tensor y = DenseBiasGelu::apply(x2, w, b, planned)[0];
  return x.dim() == 2 ? y : y.view(out_sizes);
}

const at::Tensor& need(const at::Tensor* t, const char* name) {
  TORCH_CHECK(t != nullptr && t->defined(), "fused bias+GELU: ", name, " is undefined");
  return *t;
}

}  // namespace

// ---- the cuBLASLt path -----------------------------------------------------------------------
#ifdef MLPERF_RUN_CUDA

#include <ATen/cuda/CUDAContextLight.h>
#include <c10/core/DeviceGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>
#include <dlfcn.h>

#include <map>

namespace {

// cuBLASLt entry points, resolved once from the already loaded libcublasLt (RTLD_NOLOAD:
// libtorch_cuda links it; we never load a second copy).
struct Lt {
  decltype(&cublasLtGetStatusString) status_string = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  std::string missing;  // why the table is unusable; empty when complete
};

template <typename F>
void resolve(void* lib, const char* name, F* slot, std::string* missing) {
  *slot = reinterpret_cast<F>(dlsym(lib, name));
  if (*slot == nullptr && missing->empty()) missing->append("libcublasLt lacks ").append(name);
}

const Lt& lt() {
  static const Lt table = [] {
    Lt t;
    void* lib = nullptr;
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12"}) {
      lib = dlopen(name, RTLD_NOLOAD | RTLD_LAZY);
      if (lib != nullptr) break;
    }
    if (lib == nullptr) {
      t.missing = "libcublasLt.so.13 (or .12) is not loaded in this process";
      return t;
    }
    resolve(lib, "cublasLtGetStatusString", &t.status_string, &t.missing);
    resolve(lib, "cublasLtMatmulDescCreate", &t.desc_create, &t.missing);
    resolve(lib, "cublasLtMatmulDescDestroy", &t.desc_destroy, &t.missing);
    resolve(lib, "cublasLtMatmulDescSetAttribute", &t.desc_set, &t.missing);
    resolve(lib, "cublasLtMatrixLayoutCreate", &t.layout_create, &t.missing);
    resolve(lib, "cublasLtMatrixLayoutDestroy", &t.layout_destroy, &t.missing);
    resolve(lib, "cublasLtMatmulPreferenceCreate", &t.pref_create, &t.missing);
    resolve(lib, "cublasLtMatmulPreferenceDestroy", &t.pref_destroy, &t.missing);
    resolve(lib, "cublasLtMatmulPreferenceSetAttribute", &t.pref_set, &t.missing);
    resolve(lib, "cublasLtMatmulAlgoGetHeuristic", &t.heuristic, &t.missing);
    resolve(lib, "cublasLtMatmul", &t.matmul, &t.missing);
    return t;
  }();
  return table;
}

std::string status_text(cublasStatus_t s) {
  const Lt& l = lt();
  return l.status_string != nullptr ? l.status_string(s) : std::to_string(static_cast<int>(s));
}

void check(cublasStatus_t s, const char* call) {
  TORCH_CHECK(s == CUBLAS_STATUS_SUCCESS, "fused bias+GELU: ", call, " failed: ", status_text(s));
}

// Descriptors of one matmul, destroyed on scope exit (also when a check throws). Row-major
// torch tensors read as column-major cuBLAS matrices: y [M, N] is D = [N, M] (ld N),
// x [M, K] is B = [K, M] (ld K), W [N, K] is A = [K, N] (ld K) taken transposed, so
// D = op(A) B = W x^T, i.e. y = x W^T; the bias has D's row count N.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Descs(cudaDataType_t dt, int64_t m, int64_t n, int64_t k, size_t workspace) {
    const Lt& l = lt();
    check(l.desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const int32_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    check(l.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)), "TRANSA");
    check(l.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)), "TRANSB");
    const uint32_t epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    check(l.desc_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
          "EPILOGUE");
    const int64_t aux_ld = n;
    check(l.desc_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)),
          "EPILOGUE_AUX_LD");
    check(l.layout_create(&a, dt, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k),
          "cublasLtMatrixLayoutCreate(A)");
    check(l.layout_create(&b, dt, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k),
          "cublasLtMatrixLayoutCreate(B)");
    check(l.layout_create(&d, dt, static_cast<uint64_t>(n), static_cast<uint64_t>(m), n),
          "cublasLtMatrixLayoutCreate(D)");
    check(l.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t ws = workspace;
    check(l.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
          "MAX_WORKSPACE_BYTES");
  }
  // The pointers the heuristics and the matmul see (their alignment matters to both).
  void set_pointers(const void* bias, void* aux) {
    const Lt& l = lt();
    check(l.desc_set(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), "BIAS_POINTER");
    check(l.desc_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)),
          "EPILOGUE_AUX_POINTER");
  }
  ~Descs() {
    const Lt& l = lt();
    if (pref != nullptr) l.pref_destroy(pref);
    if (d != nullptr) l.layout_destroy(d);
    if (b != nullptr) l.layout_destroy(b);
    if (a != nullptr) l.layout_destroy(a);
    if (op != nullptr) l.desc_destroy(op);
  }
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
};

cudaDataType_t data_type(at::ScalarType t) {
  return t == at::kHalf ? CUDA_R_16F : CUDA_R_16BF;
}

// The workspace cuBLASLt may use: ATen's own Lt workspace size (CUBLASLT_WORKSPACE_SIZE).
size_t workspace_bytes() { return at::cuda::getCUDABlasLtWorkspaceSize(); }

// One heuristic answer per (device, dtype, M, N, K): the algorithm and its workspace.
struct LtPlan {
  cublasLtMatmulAlgo_t algo;
  size_t workspace = 0;
};

using PlanKey = std::tuple<int, int, int64_t, int64_t, int64_t>;
std::mutex g_plans_mu;
std::map<PlanKey, LtPlan> g_plans;  // read and written under g_plans_mu, copied out
constexpr size_t kMaxPlans = 4096;   // unpadded BERT has one M per token count

bool aligned16(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// The cached plan for x W^T, or a new one from cuBLASLt's heuristics (false + *why when it has
// none for this shape).
bool find_plan(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, LtPlan* plan,
               std::string* why);

bool lt_eligible(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const at::ScalarType t = x.scalar_type();
  return x.is_cuda() && (t == at::kBFloat16 || t == at::kHalf) && w.device() == x.device() &&
         b.device() == x.device() && x.dim() == 2 && x.is_contiguous() && w.is_contiguous() &&
         b.is_contiguous() && x.size(0) > 0 && x.size(1) % 8 == 0 && w.size(0) % 8 == 0 &&
         aligned16(x) && aligned16(w) && aligned16(b);
}

bool lt_plan(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, std::string* why) {
  LtPlan unused;
  return find_plan(x, w, b, &unused, why);
}

bool find_plan(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, LtPlan* plan,
               std::string* why) {
  const Lt& l = lt();
  if (!l.missing.empty()) {
    *why = l.missing;
    return false;
  }
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  const PlanKey key{x.get_device(), static_cast<int>(x.scalar_type()), m, n, k};
  {
    std::lock_guard<std::mutex> lock(g_plans_mu);
    auto it = g_plans.find(key);
    if (it != g_plans.end()) {
      *plan = it->second;
      return true;
    }
  }
  const c10::DeviceGuard on_device(x.device());
  const size_t ws = workspace_bytes();
  Descs descs(data_type(x.scalar_type()), m, n, k, ws);
  // allocator pointers are at least 256-byte aligned, as the real call's will be
  descs.set_pointers(b.data_ptr(), x.data_ptr());
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s =
      l.heuristic(at::cuda::getCurrentCUDABlasLtHandle(), descs.op, descs.a, descs.b, descs.d,
                  descs.d, descs.pref, 1, &result, &found);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && found == 0)) {
    *why = "cuBLASLt has no GELU_AUX_BIAS algorithm for M " + std::to_string(m) + ", N " +
           std::to_string(n) + ", K " + std::to_string(k) + " (" + status_text(s) + ")";
    return false;
  }
  check(s, "cublasLtMatmulAlgoGetHeuristic");
  std::lock_guard<std::mutex> lock(g_plans_mu);
  // plans are copied out and only used on the host while launching: starting over is safe
  if (g_plans.size() >= kMaxPlans) g_plans.clear();
  plan->algo = result.algo;
  plan->workspace = result.workspaceSize;
  g_plans[key] = *plan;
  return true;
}

std::tuple<at::Tensor, at::Tensor> lt_forward(const at::Tensor& x, const at::Tensor& w,
                                              const at::Tensor& b) {
  const Lt& l = lt();
  LtPlan p;
  std::string why;
  TORCH_CHECK(find_plan(x, w, b, &p, &why), "fused bias+GELU: ", why);
  const LtPlan* plan = &p;
  const c10::DeviceGuard on_device(x.device());
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  at::Tensor y = at::empty({m, n}, x.options());
  at::Tensor aux = at::empty({m, n}, x.options());
  // from the caching allocator: graph-capturable, freed when this call's tensors go
  at::Tensor workspace =
      at::empty({static_cast<int64_t>(std::max<size_t>(plan->workspace, 1))},
                x.options().dtype(at::kByte));
  Descs descs(data_type(x.scalar_type()), m, n, k, plan->workspace);
  descs.set_pointers(b.data_ptr(), aux.data_ptr());
  const float alpha = 1.0f, beta = 0.0f;
  check(l.matmul(at::cuda::getCurrentCUDABlasLtHandle(), descs.op, &alpha, w.data_ptr(), descs.a,
                 x.data_ptr(), descs.b, &beta, y.data_ptr(), descs.d, y.data_ptr(), descs.d,
                 &plan->algo, workspace.data_ptr(), plan->workspace,
                 c10::cuda::getCurrentCUDAStream().stream()),
        "cublasLtMatmul");
  return {y, aux};
}

}  // namespace

#else  // built without the `cuda` feature: the composite path only

namespace {
bool lt_eligible(const at::Tensor&, const at::Tensor&, const at::Tensor&) { return false; }
bool lt_plan(const at::Tensor&, const at::Tensor&, const at::Tensor&, std::string* why) {
  *why = "built without the `cuda` feature";
  return false;
}
std::tuple<at::Tensor, at::Tensor> lt_forward(const at::Tensor&, const at::Tensor&,
                                              const at::Tensor&) {
  TORCH_CHECK(false, "fused bias+GELU: built without the `cuda` feature (no cuBLASLt path)");
}
}  // namespace

#endif

extern "C" {

// y = gelu_tanh(x W^T + b) as one autograd op. mode: 0 auto, 1 composite, 2 cuBLASLt (an error
// when it cannot run). *used_lt: which path ran.
int mr_fbg_dense_bias_gelu(const at::Tensor* x, const at::Tensor* w, const at::Tensor* b,
                           int mode, at::Tensor** out, int* used_lt, char** err) {
  return mr::catching(err, kWhat, [&] {
    *out = new at::Tensor(run_op(need(x, "x"), need(w, "weight"), need(b, "bias"), mode, used_lt));
  });
}

// 1 when a cuBLASLt-eligible call took the composite path (*msg: the first reason, malloc'd;
// free with mr_free_str), else 0.
int mr_fbg_fallback_reason(char** msg) {
  std::lock_guard<std::mutex> lock(g_reason_mu);
  if (g_reason.empty()) return 0;
  mr::set_err(msg, g_reason);
  return 1;
}

// 1 when this build has the cuBLASLt path (the `cuda` feature).
int mr_fbg_lt_built() {
#ifdef MLPERF_RUN_CUDA
  return 1;
#else
  return 0;
#endif
}

}  // extern "C"
