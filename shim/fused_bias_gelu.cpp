// mlperf-run's fused feed-forward matmuls with bias + GELU in cuBLASLt's epilogues, for BERT's
// open-division method `methods.fused_bias_gelu` (src/fused/bias_gelu.rs):
//
//   y = gelu_tanh(x W1^T + b1)    z = y W2^T
//   x [M, H], W1 [I, H], b1 [I], W2 [H2, I], z [M, H2]
//
// as ONE autograd op (the output dense's bias, dropout, residual and LayerNorm stay with the
// caller: the fused epilogue op or the plain ops). GELU is the tanh approximation because that
// is the GELU cuBLASLt's epilogues compute (PyTorch's own _addmm_activation(use_gelu=True) falls
// back to gelu(approximate="tanh") where it cannot use cuBLASLt); BERT's reference GELU is the
// erf form, which is why the method is open-division only.
//
// Two paths behind one torch::autograd::Function:
// - composite (every device; the CPU path and the GPU fallback): at::addmm, at::gelu(tanh),
//   at::mm, and a backward that makes the very calls the autograd formulas of the unfused
//   `linear(linear(x, W1, b1).gelu("tanh"), W2)` make (mm_mat1_backward / mm_mat2_backward for a
//   row-major input and a transposed contiguous weight, gelu_backward, sum_to for the bias), so
//   in fp32 and under bf16 autocast on the CPU it is bit-identical to them
//   (tests/numerics/fused_bias_gelu.rs).
// - cuBLASLt (cargo feature `cuda`, MLPERF_RUN_CUDA), bf16 / fp16 operands, fp32 accumulation,
//   H, I and H2 multiples of 8, 16-byte aligned pointers:
//   forward: ONE cublasLtMatmul with CUBLASLT_EPILOGUE_GELU_AUX_BIAS writes y and, as its aux
//   output, the pre-activation h that GELU's backward needs (no separate GELU pass over
//   [M, I]); then z = y W2^T (at::mm).
//   backward: dW2 = dz^T y (at::mm); ONE cublasLtMatmul dz W2 with CUBLASLT_EPILOGUE_DGELU_BGRAD
//   writes dh = (dz W2) * gelu'(h) and db1 = the column sum of dh (no separate GELU-backward
//   and bias-sum passes); then dW1 = dh^T x and dx = dh W1 (at::mm).
//   cuBLASLt is not linked: its functions are looked up once in the libcublasLt that
//   libtorch_cuda already loaded; the handle is ATen's, workspaces come from the caching
//   allocator (no cudaMalloc, no host sync: the op can be captured in a CUDA graph). The
//   heuristics assume 16-byte aligned operands (not cuBLASLt's default 256) and plans are cached
//   per shape and bias/aux alignment. If cuBLASLt has no algorithm for a shape (NOT_SUPPORTED
//   from the heuristics or the matmul, or no heuristic result; remembered like a plan, so the
//   heuristics are asked once), that call (or that backward) takes the composite path and the
//   first reason is kept for mr_fbg_fallback_reason (Rust prints it once). Other cuBLASLt
//   errors end the run with cuBLASLt's status text.
//
// Autocast: the op is not an ATen op, so autocast cannot see it. The entry point casts x, W1, b1
// and W2 the way autocast casts linear's arguments (at::autocast::cached_cast, recorded by
// autograd like autocast's own casts), and the Function runs with autocast excluded.
//
// Conventions as the other shims: tensors cross as at::Tensor* (tch's C_tensor), new results come
// back as `new at::Tensor`, and no C++ exception crosses the boundary (error.hpp).
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "error.hpp"
#include "path_report.hpp"
#include "loaded_lib.hpp"

#include <atomic>
#include <mutex>
#include <string>
#include <tuple>

namespace {

constexpr const char* kWhat = "fused bias+GELU shim";
constexpr const char* kApprox = "tanh";

// The first reason a cuBLASLt-eligible call took the composite path (empty: none yet).
mr::PathReport g_report;

// Whether this thread's last forward ran cuBLASLt (Function::apply runs forward in the caller's
// thread, so run_op reads its own call's answer).
thread_local bool t_forward_lt = false;

// The cuBLASLt path (defined in the CUDA section).
// lt_eligible: dtypes, devices, layouts and sizes allow it for x, W1, b1, W2.
// lt_forward: y and the pre-activation h (GELU_AUX_BIAS), or false + *why when cuBLASLt has no
//   algorithm for the shape (plans are cached per shape).
// lt_backward: dh and db1 from dz, W2 and h (DGELU_BGRAD), or false + *why likewise.
bool lt_eligible(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1,
                 const at::Tensor& w2);
bool lt_forward(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1, at::Tensor* y,
                at::Tensor* h, std::string* why);
bool lt_backward(const at::Tensor& dz, const at::Tensor& w2, const at::Tensor& h,
                 at::Tensor* dh, at::Tensor* db1, std::string* why);
std::string lt_missing();

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct DenseGeluDense : public torch::autograd::Function<DenseGeluDense> {
  // x [M, H], w1 [I, H], b1 [I], w2 [H2, I], one dtype; use_lt: try cuBLASLt; strict: the
  // backward too must run on cuBLASLt (mode 2), else it is an error, not a fallback.
  static variable_list forward(AutogradContext* ctx, at::Tensor x, at::Tensor w1, at::Tensor b1,
                               at::Tensor w2, bool use_lt, bool strict) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    at::Tensor y, h;
    std::string why;
    const bool lt = use_lt && lt_forward(x, w1, b1, &y, &h, &why);
    if (use_lt && !lt) g_report.note_fallback(why);
    t_forward_lt = lt;
    if (!lt) {
      // at::linear's own call for a 2-D input with a bias, then the GELU
      h = at::addmm(b1, x, w1.t());
      y = at::gelu(h, kApprox);
    }
    // at::linear without a bias: matmul, i.e. mm for 2-D operands
    at::Tensor z = y.mm(w2.t());
    ctx->saved_data["lt"] = lt;
    ctx->saved_data["strict"] = strict;
    ctx->save_for_backward({x, w1, w2, h, y});
    return {z};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w1 = saved[1];
    const at::Tensor& w2 = saved[2];
    const at::Tensor& h = saved[3];
    const at::Tensor& y = saved[4];
    at::Tensor dz = grads[0];
    if (!dz.defined()) dz = at::zeros({x.size(0), w2.size(0)}, y.options());
    // Each product's gradients as autograd's mm formulas compute them: for a row-major input A
    // and a transposed contiguous weight W (A W^T), d A = dC W and d W = dC^T A.
    at::Tensor dx, dw1, db1, dw2, dh;
    if (ctx->needs_input_grad(3)) dw2 = dz.t().mm(y);
    std::string why;
    bool lt = false;
    if (ctx->saved_data["lt"].toBool()) {
      lt = lt_backward(dz, w2, h, &dh, &db1, &why);
      if (!lt) {
        g_report.note_fallback(why);
        TORCH_CHECK(!ctx->saved_data["strict"].toBool(),
                    "fused bias+GELU: cuBLASLt's DGELU_BGRAD epilogue did not run in the "
                    "backward: ",
                    why);
      }
    }
    if (!lt) {
      dh = at::gelu_backward(dz.mm(w2), h, kApprox);
      db1 = dh.sum(0);  // addmm's bias gradient: sum_to over the rows
    }
    if (ctx->needs_input_grad(0)) dx = dh.mm(w1);
    if (ctx->needs_input_grad(1)) dw1 = dh.t().mm(x);
    if (!ctx->needs_input_grad(2)) db1 = at::Tensor();
    return {dx, dw1, db1, dw2, at::Tensor(), at::Tensor()};
  }
};

at::Tensor cast_for_autocast(const at::Tensor& t) {
  const auto dev = t.device().type();
  if (!at::autocast::is_autocast_enabled(dev)) return t;
  return at::autocast::cached_cast(at::autocast::get_autocast_dtype(dev), t, dev);
}

// mode: 0 auto (cuBLASLt where eligible), 1 composite, 2 cuBLASLt or an error.
at::Tensor run_op(const at::Tensor& x_in, const at::Tensor& w1_in, const at::Tensor& b1_in,
                  const at::Tensor& w2_in, int mode, int* used_lt) {
  TORCH_CHECK(x_in.dim() >= 1 && w1_in.dim() == 2 && b1_in.dim() == 1 && w2_in.dim() == 2,
              "fused bias+GELU: want x [..., H], W1 [I, H], b1 [I], W2 [H2, I]; got x ",
              x_in.sizes(), ", W1 ", w1_in.sizes(), ", b1 ", b1_in.sizes(), ", W2 ",
              w2_in.sizes());
  const int64_t hid = w1_in.size(1), inner = w1_in.size(0), out = w2_in.size(0);
  TORCH_CHECK(x_in.size(-1) == hid && b1_in.size(0) == inner && w2_in.size(1) == inner,
              "fused bias+GELU: x ", x_in.sizes(), ", W1 ", w1_in.sizes(), ", b1 ",
              b1_in.sizes(), " and W2 ", w2_in.sizes(), " do not fit gelu(x W1^T + b1) W2^T");
  TORCH_CHECK(mode >= 0 && mode <= 2, "fused bias+GELU: mode must be 0, 1 or 2, got ", mode);
  // autocast's casts for linear (recorded by autograd, cached for weights as autocast does)
  const at::Tensor x = cast_for_autocast(x_in), w1 = cast_for_autocast(w1_in),
                   b1 = cast_for_autocast(b1_in), w2 = cast_for_autocast(w2_in);
  const at::ScalarType t = x.scalar_type();
  TORCH_CHECK(w1.scalar_type() == t && b1.scalar_type() == t && w2.scalar_type() == t,
              "fused bias+GELU: x, W1, b1 and W2 must have one dtype (or run under autocast); "
              "got ", t, ", ", w1.scalar_type(), ", ", b1.scalar_type(), ", ", w2.scalar_type());
  // linear folds leading dimensions the same way (reshape, matmul, view back)
  std::vector<int64_t> out_sizes(x.sizes().begin(), x.sizes().end());
  out_sizes.back() = out;
  at::Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, hid});
  // cuBLASLt reads x as a dense matrix (a no-op for a contiguous x; the CPU path keeps x as it
  // is, so that it stays bit-identical to the unfused ops)
  if (mode != 1 && x2.is_cuda()) x2 = x2.contiguous();
  const bool eligible = mode != 1 && lt_eligible(x2, w1, b1, w2);
  if (mode == 0 && !eligible && x2.is_cuda() && (t == at::kBFloat16 || t == at::kHalf)) {
    g_report.note_fallback("the cuBLASLt path cannot run these tensors (sizes must be multiples of 8, "
                  "W1, b1 and W2 contiguous and 16-byte aligned, and the build needs the `cuda` "
                  "feature)");
  }
  TORCH_CHECK(eligible || mode != 2,
              "fused bias+GELU: the cuBLASLt path cannot run these tensors (x ", x2.sizes(), " ",
              t, " on ", x2.device(), ", W1 ", w1.sizes(), ", W2 ", w2.sizes(),
              "): it needs CUDA bf16/fp16 tensors, sizes that are multiples of 8 and a build "
              "with the `cuda` feature");
  at::Tensor z = DenseGeluDense::apply(x2, w1, b1, w2, eligible, mode == 2)[0];
  // the forward falls back (and records why) when cuBLASLt has no algorithm for the shape
  const bool ran = eligible && t_forward_lt;
  if (!ran && mode == 2) {
    TORCH_CHECK(false, "fused bias+GELU: cuBLASLt did not run: ", g_report.reason());
  }
  if (used_lt != nullptr) *used_lt = ran ? 1 : 0;
  return x.dim() == 2 ? z : z.view(out_sizes);
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

const Lt& lt() {
  static const Lt table = [] {
    Lt t;
    mr::LoadedLib lib({"libcublasLt.so.13", "libcublasLt.so.12"}, "libcublasLt.so.13 (or .12)");
    lib.resolve("cublasLtGetStatusString", &t.status_string);
    lib.resolve("cublasLtMatmulDescCreate", &t.desc_create);
    lib.resolve("cublasLtMatmulDescDestroy", &t.desc_destroy);
    lib.resolve("cublasLtMatmulDescSetAttribute", &t.desc_set);
    lib.resolve("cublasLtMatrixLayoutCreate", &t.layout_create);
    lib.resolve("cublasLtMatrixLayoutDestroy", &t.layout_destroy);
    lib.resolve("cublasLtMatmulPreferenceCreate", &t.pref_create);
    lib.resolve("cublasLtMatmulPreferenceDestroy", &t.pref_destroy);
    lib.resolve("cublasLtMatmulPreferenceSetAttribute", &t.pref_set);
    lib.resolve("cublasLtMatmulAlgoGetHeuristic", &t.heuristic);
    lib.resolve("cublasLtMatmul", &t.matmul);
    t.missing = lib.missing;
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

// One of the op's two cuBLASLt products, in cuBLAS's column-major terms: D [m, n] = op(A) B with
// B [k, n] and the epilogue's bias and aux vectors/matrices sized by D (bias m, aux [m, n] with
// leading dimension m). Row-major torch tensors read as their transposes:
// - forward (GELU_AUX_BIAS): h^T [I, M] = W1 x^T: A = W1 stored [H, I] (ld H) taken transposed,
//   B = x stored [H, M]; m = I, n = M, k = H.
// - backward (DGELU_BGRAD): (dz W2)^T [I, M] = W2^T dz^T: A = W2 stored [I, H2] (ld I) as is,
//   B = dz stored [H2, M]; m = I, n = M, k = H2.
struct Gemm {
  cublasLtEpilogue_t epilogue;
  bool trans_a;
  int64_t m, n, k;
};

// The operand alignment the heuristics may assume. cuBLASLt's default is 256 bytes; x, W1, W2
// and dz are only known to be 16-byte aligned (lt_eligible), e.g. weights inside a flat
// parameter buffer, and a kernel picked for 256 would answer NOT_SUPPORTED for them.
constexpr uint32_t kMinAlignment = 16;

// Descriptors of one product, destroyed on scope exit (also when a check throws, in the
// constructor too).
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Descs(const Gemm& g, cudaDataType_t dt, size_t workspace) {
    try {
      init(g, dt, workspace);
    } catch (...) {
      release();
      throw;
    }
  }
  void init(const Gemm& g, cudaDataType_t dt, size_t workspace) {
    const Lt& l = lt();
    check(l.desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const int32_t trans_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
    check(l.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)), "TRANSA");
    check(l.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)), "TRANSB");
    const uint32_t epilogue = g.epilogue;
    check(l.desc_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
          "EPILOGUE");
    const int64_t aux_ld = g.m;
    check(l.desc_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)),
          "EPILOGUE_AUX_LD");
    const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    // A as stored: op(A) is [m, k]
    check(g.trans_a ? l.layout_create(&a, dt, u(g.k), u(g.m), g.k)
                    : l.layout_create(&a, dt, u(g.m), u(g.k), g.m),
          "cublasLtMatrixLayoutCreate(A)");
    check(l.layout_create(&b, dt, u(g.k), u(g.n), g.k), "cublasLtMatrixLayoutCreate(B)");
    check(l.layout_create(&d, dt, u(g.m), u(g.n), g.m), "cublasLtMatrixLayoutCreate(D)");
    check(l.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t ws = workspace;
    check(l.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
          "MAX_WORKSPACE_BYTES");
    for (const auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      check(l.pref_set(pref, attr, &kMinAlignment, sizeof(kMinAlignment)), "MIN_ALIGNMENT");
    }
  }
  // The epilogue's bias (or bias-gradient) vector and aux matrix; their alignment matters to the
  // heuristics as to the matmul.
  void set_pointers(const void* bias, const void* aux) {
    const Lt& l = lt();
    check(l.desc_set(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), "BIAS_POINTER");
    check(l.desc_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)),
          "EPILOGUE_AUX_POINTER");
  }
  void release() {
    const Lt& l = lt();
    if (pref != nullptr) l.pref_destroy(pref);
    if (d != nullptr) l.layout_destroy(d);
    if (b != nullptr) l.layout_destroy(b);
    if (a != nullptr) l.layout_destroy(a);
    if (op != nullptr) l.desc_destroy(op);
    pref = nullptr;
    d = b = a = nullptr;
    op = nullptr;
  }
  ~Descs() { release(); }
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
};

cudaDataType_t data_type(at::ScalarType t) { return t == at::kHalf ? CUDA_R_16F : CUDA_R_16BF; }

bool aligned16(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// The alignment class of a pointer as the heuristics see it: its largest power-of-two divisor,
// capped at 256.
int alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 1;
  while (a < 256 && v % (2 * a) == 0) a *= 2;
  return a;
}

// One heuristic answer per (device, dtype, epilogue, m, n, k, bias and aux pointer alignment):
// the algorithm and its workspace. The heuristics read the bias and aux pointers' values for
// their alignment (cublasLt.h), so a plan chosen for a 256-byte aligned bias is not reused for
// a 16-byte aligned one.
struct Plan {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  // false: cuBLASLt has no algorithm for this key (the heuristics found none, or the matmul
  // refused the one they chose, with status `refusal`); later calls take the composite path
  // without asking the heuristics again
  bool supported = true;
  cublasStatus_t refusal = CUBLAS_STATUS_SUCCESS;
};
using PlanKey = std::tuple<int, int, int, int64_t, int64_t, int64_t, int, int>;
std::mutex g_plans_mu;
std::map<PlanKey, Plan> g_plans;   // read and written under g_plans_mu, copied out
constexpr size_t kMaxPlans = 4096;  // unpadded BERT has one M per token count

std::string no_algorithm(const Gemm& g, cublasStatus_t s) {
  return std::string("cuBLASLt has no ") +
         (g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? "GELU_AUX_BIAS" : "DGELU_BGRAD") +
         " algorithm for m " + std::to_string(g.m) + ", n " + std::to_string(g.n) + ", k " +
         std::to_string(g.k) + " (" + status_text(s) + ")";
}

// Runs g through cuBLASLt on the current stream: A, B, D, the epilogue's bias and aux pointers.
// false + *why when cuBLASLt has no algorithm for it (nothing was launched).
bool run_gemm(const Gemm& g, const at::Tensor& like, const void* a, const void* b, void* d,
              const void* bias, const void* aux, std::string* why) {
  const Lt& l = lt();
  if (!l.missing.empty()) {
    *why = l.missing;
    return false;
  }
  const c10::DeviceGuard on_device(like.device());
  const cudaDataType_t dt = data_type(like.scalar_type());
  cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  const PlanKey key{like.get_device(), static_cast<int>(like.scalar_type()),
                    static_cast<int>(g.epilogue), g.m, g.n, g.k, alignment(bias), alignment(aux)};
  Plan plan;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(g_plans_mu);
    auto it = g_plans.find(key);
    if (it != g_plans.end()) {
      plan = it->second;
      cached = true;
    }
  }
  if (!cached) {
    Descs q(g, dt, at::cuda::getCUDABlasLtWorkspaceSize());
    q.set_pointers(bias, aux);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t s =
        l.heuristic(handle, q.op, q.a, q.b, q.d, q.d, q.pref, 1, &result, &found);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && found == 0)) {
      plan.supported = false;
      plan.refusal = s;
    } else {
      check(s, "cublasLtMatmulAlgoGetHeuristic");
      plan.algo = result.algo;
      plan.workspace = result.workspaceSize;
    }
    std::lock_guard<std::mutex> lock(g_plans_mu);
    // plans are copied out and only used on the host while launching: starting over is safe
    if (g_plans.size() >= kMaxPlans) g_plans.clear();
    g_plans[key] = plan;
  }
  if (!plan.supported) {
    *why = no_algorithm(g, plan.refusal);
    return false;
  }
  Descs descs(g, dt, plan.workspace);
  descs.set_pointers(bias, aux);
  // from the caching allocator: graph-capturable, released when this call returns (stream-ordered)
  at::Tensor workspace = at::empty({static_cast<int64_t>(std::max<size_t>(plan.workspace, 1))},
                                   like.options().dtype(at::kByte));
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t s =
      l.matmul(handle, descs.op, &alpha, a, descs.a, b, descs.b, &beta, d, descs.d, d, descs.d,
               &plan.algo, workspace.data_ptr(), plan.workspace,
               c10::cuda::getCurrentCUDAStream().stream());
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) {
    // nothing was launched: this call and later ones with this key take the composite path
    std::lock_guard<std::mutex> lock(g_plans_mu);
    Plan& refused = g_plans[key];
    refused.supported = false;
    refused.refusal = s;
    *why = no_algorithm(g, s);
    return false;
  }
  check(s, "cublasLtMatmul");
  return true;
}

bool lt_eligible(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1,
                 const at::Tensor& w2) {
  const at::ScalarType t = x.scalar_type();
  const auto on = [&](const at::Tensor& u) {
    return u.device() == x.device() && u.is_contiguous() && aligned16(u);
  };
  // every size positive (cuBLASLt answers INVALID_VALUE, not NOT_SUPPORTED, for an empty one)
  const auto multiple_of_8 = [](int64_t n) { return n > 0 && n % 8 == 0; };
  return x.is_cuda() && (t == at::kBFloat16 || t == at::kHalf) && x.dim() == 2 && on(x) &&
         on(w1) && on(b1) && on(w2) && x.size(0) > 0 && multiple_of_8(x.size(1)) &&
         multiple_of_8(w1.size(0)) && multiple_of_8(w2.size(0));
}

bool lt_forward(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1, at::Tensor* y,
                at::Tensor* h, std::string* why) {
  const int64_t m = x.size(0), hid = x.size(1), inner = w1.size(0);
  at::Tensor out = at::empty({m, inner}, x.options());
  at::Tensor pre = at::empty({m, inner}, x.options());
  const Gemm g{CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true, inner, m, hid};
  if (!run_gemm(g, x, w1.data_ptr(), x.data_ptr(), out.data_ptr(), b1.data_ptr(),
                pre.data_ptr(), why)) {
    return false;
  }
  *y = out;
  *h = pre;
  return true;
}

bool lt_backward(const at::Tensor& dz_in, const at::Tensor& w2, const at::Tensor& h,
                 at::Tensor* dh, at::Tensor* db1, std::string* why) {
  at::Tensor dz = dz_in.contiguous();
  if (dz.scalar_type() != h.scalar_type()) {
    *why = std::string("the output gradient is ") + c10::toString(dz.scalar_type()) +
           ", the op ran in " + c10::toString(h.scalar_type());
    return false;
  }
  if (!aligned16(dz)) dz = dz.clone();  // a view at an odd offset: a fresh, aligned copy
  const int64_t m = dz.size(0), out = dz.size(1), inner = w2.size(1);
  at::Tensor g_h = at::empty({m, inner}, h.options());
  at::Tensor g_b = at::empty({inner}, h.options());
  const Gemm g{CUBLASLT_EPILOGUE_DGELU_BGRAD, false, inner, m, out};
  if (!run_gemm(g, h, w2.data_ptr(), dz.data_ptr(), g_h.data_ptr(), g_b.data_ptr(),
                h.data_ptr(), why)) {
    return false;
  }
  *dh = g_h;
  *db1 = g_b;
  return true;
}

// Empty when every cuBLASLt entry point resolved from the loaded library, else why not.
std::string lt_missing() { return lt().missing; }

}  // namespace

#else  // built without the `cuda` feature: the composite path only

namespace {
std::string lt_missing() { return "built without the `cuda` feature"; }
bool lt_eligible(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  return false;
}
bool lt_forward(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor*, at::Tensor*,
                std::string* why) {
  *why = "built without the `cuda` feature";
  return false;
}
bool lt_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor*,
                 at::Tensor*, std::string* why) {
  *why = "built without the `cuda` feature";
  return false;
}
}  // namespace

#endif

extern "C" {

// z = gelu_tanh(x W1^T + b1) W2^T as one autograd op. mode: 0 auto, 1 composite, 2 cuBLASLt
// (an error when it cannot run). *used_lt: whether the forward ran cuBLASLt.
int mr_fbg_dense_gelu_dense(const at::Tensor* x, const at::Tensor* w1, const at::Tensor* b1,
                            const at::Tensor* w2, int mode, at::Tensor** out, int* used_lt,
                            char** err) {
  return mr::catching(err, kWhat, [&] {
    *out = new at::Tensor(run_op(need(x, "x"), need(w1, "W1"), need(b1, "b1"), need(w2, "W2"),
                                 mode, used_lt));
  });
}

// 1 when a cuBLASLt-eligible call (forward or backward) took the composite path (*msg: the
// first reason, malloc'd; free with mr_free_str), else 0.
int mr_fbg_fallback_reason(char** msg) { return g_report.reason_to(msg); }

// 0 when every cuBLASLt entry point resolved from the libcublasLt loaded in this process (no GPU
// needed), else 1 with the reason in *msg (malloc'd; free with mr_free_str).
int mr_fbg_lt_probe(char** msg) {
  const std::string why = lt_missing();
  if (why.empty()) return 0;
  mr::set_err(msg, why);
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
