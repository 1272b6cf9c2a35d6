// The ragged crop + resize + flip + normalise of device-augmented ResNet batches
// (src/data/imagenet/device_augment.rs): the kernels of shim/ragged_resize.cu on a GPU (NVRTC,
// driver-API launches on the current stream), and the same per-pixel functions in loops on the
// CPU (the twin of CPU runs and tests).
//
// No C++ exception crosses the C boundary: errors come back through `err` (error.hpp).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "error.hpp"
#include "loaders.hpp"

namespace mr::ragged {

// ---- the kernel source, compiled as host C++ for the CPU twin --------------------------------
namespace host {
#define __device__
#define __forceinline__ inline
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// round to nearest even, as the GPU's cvt.rn.f16.f32
inline unsigned short rr_float_to_half(float f) { return c10::detail::fp16_ieee_from_fp32_value(f); }
#include "ragged_resize.cu"
#undef __device__
#undef __forceinline__
}  // namespace host

}  // namespace mr::ragged

// after the host twin: the CUDA headers define __device__ and __forceinline__ their own way
#ifdef MLPERF_RUN_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace mr::ragged {

// The text for NVRTC (build.rs: OUT_DIR/ragged_resize_cu.inc, a raw string literal).
const char* const kKernelSource =
#include "ragged_resize_cu.inc"
    ;

constexpr int kParams = MR_RR_PARAMS;

// Output dtype codes, as the Rust side sends them: 0 fp32, 1 bf16, 2 fp16.
at::ScalarType type_of_code(int code) {
  switch (code) {
    case 0: return at::kFloat;
    case 1: return at::kBFloat16;
    case 2: return at::kHalf;
    default: TORCH_CHECK(false, "ragged resize: unknown output dtype code ", code);
  }
}

void run_cpu(const at::Tensor& arena, const at::Tensor& params, int64_t n, int64_t rows,
             int64_t size, const float* mean, const float* std_, at::Tensor& out) {
  const unsigned char* a = arena.data_ptr<unsigned char>();
  const double* p = params.data_ptr<double>();
  at::Tensor scratch = at::empty({rows * size * 3}, arena.options().dtype(at::kFloat));
  float* s = scratch.data_ptr<float>();
  const int ni = static_cast<int>(n), si = static_cast<int>(size);
  at::parallel_for(0, rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int i = host::rr_image_of(p, ni, r);
      const int y = static_cast<int>(r - static_cast<int64_t>(p[i * kParams + 8]));
      for (int x = 0; x < si; ++x) host::rr_row_px(a, p, i, y, x, si, s);
    }
  });
  const float inv_std[3] = {1.0f / std_[0], 1.0f / std_[1], 1.0f / std_[2]};
  auto cols = [&](auto* o) {
    at::parallel_for(0, n * size, 16, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int i = static_cast<int>(k / size), y = static_cast<int>(k % size);
        for (int x = 0; x < si; ++x) {
          float v[3];
          host::rr_col_px(s, p, i, y, x, si, mean, inv_std, v);
          auto* px = o + (k * size + x) * 3;
          for (int c = 0; c < 3; ++c) host::rr_store(px + c, v[c]);
        }
      }
    });
  };
  switch (out.scalar_type()) {
    case at::kFloat: cols(out.data_ptr<float>()); break;
    case at::kBFloat16: cols(reinterpret_cast<host::RrBf16*>(out.data_ptr())); break;
    case at::kHalf: cols(reinterpret_cast<host::RrF16*>(out.data_ptr())); break;
    default: TORCH_CHECK(false, "ragged resize: output dtype ", out.scalar_type());
  }
}

const char* const kNames[] = {"rr_rows", "rr_cols_f32", "rr_cols_bf16", "rr_cols_f16"};
constexpr int kKernels = 4;

// The text NVRTC compiles: the prelude, then the file (messages name its lines).
std::string source() {
  return std::string("#define MR_KERNEL extern \"C\" __global__\n") +
         "#line 1 \"shim/ragged_resize.cu\"\n" + kKernelSource;
}

#ifdef MLPERF_RUN_CUDA
struct Module {
  mr::CUfunction f[kKernels] = {};
};

// One module per device, compiled on first use (on the hand-off thread, never under a capture).
const Module& module_for(int device) {
  static std::mutex mu;
  static std::map<int, Module> modules;
  std::lock_guard<std::mutex> lock(mu);
  auto it = modules.find(device);
  if (it != modules.end()) return it->second;
  Module m;
  mr::load_kernels(device, source(), "mlperf_run_ragged_resize.cu", "the ragged resize kernels",
                   kNames, kKernels, m.f);
  return modules.emplace(device, m).first->second;
}

void run_cuda(const at::Tensor& arena, const at::Tensor& params, int64_t n, int64_t rows,
              int64_t size, const float* mean, const float* std_, at::Tensor& out) {
  const int device = arena.get_device();
  const Module& m = module_for(device);
  auto stream = static_cast<mr::CUstream>(
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream());
  at::Tensor scratch = at::empty({rows * size * 3}, arena.options().dtype(at::kFloat));
  const unsigned char* a = arena.data_ptr<unsigned char>();
  const double* p = params.data_ptr<double>();
  float* s = scratch.data_ptr<float>();
  int ni = static_cast<int>(n), si = static_cast<int>(size);
  const unsigned threads = size >= 256 ? 256 : (size >= 128 ? 128 : 64);
  void* row_args[] = {&a, &p, &ni, &si, &s};
  mr::launch_kernel(device, m.f[0], static_cast<unsigned>(rows), 1, threads, stream, row_args,
                    "cuLaunchKernel (ragged resize, rows)");
  float m0 = mean[0], m1 = mean[1], m2 = mean[2], s0 = std_[0], s1 = std_[1], s2 = std_[2];
  void* o = out.data_ptr();
  void* col_args[] = {&s, &p, &si, &m0, &m1, &m2, &s0, &s1, &s2, &o};
  const int which = out.scalar_type() == at::kFloat ? 1 : (out.scalar_type() == at::kBFloat16 ? 2 : 3);
  mr::launch_kernel(device, m.f[which], static_cast<unsigned>(n * size), 1, threads, stream,
                    col_args, "cuLaunchKernel (ragged resize, columns)");
  // the scratch is freed to the caching allocator at once; its reuse is ordered on this stream
}
#endif

}  // namespace mr::ragged

extern "C" {

// *out = the [n, size, size, 3] batch (dtype `out_type`: 0 fp32, 1 bf16, 2 fp16) of the regions
// in `arena` (1-d u8) that `params` ([n, MR_RR_PARAMS] f64, on the arena's device) describe;
// `rows` is the regions' total height. The caller guarantees that every region lies inside the
// arena and that the first-row column is the running sum of the heights (device_augment.rs
// checks both on the host before uploading). Runs on the current stream; no host sync.
int mr_ragged_resize(const at::Tensor* arena, const at::Tensor* params, int64_t rows,
                     int64_t size, const float* mean, const float* std_, int out_type,
                     at::Tensor** out, char** err) {
  return mr::catching(err, "ragged resize", [&] {
    TORCH_CHECK(arena && params && arena->defined() && params->defined(), "an undefined input");
    TORCH_CHECK(arena->scalar_type() == at::kByte && arena->dim() == 1 && arena->is_contiguous(),
                "the arena must be a contiguous 1-d u8 tensor, got ", arena->scalar_type(), " ",
                arena->sizes());
    TORCH_CHECK(params->scalar_type() == at::kDouble && params->dim() == 2 &&
                    params->size(1) == mr::ragged::kParams && params->is_contiguous() &&
                    params->device() == arena->device(),
                "the parameters must be a contiguous [n, ", mr::ragged::kParams,
                "] f64 tensor on ", arena->device(), ", got ", params->scalar_type(), " ",
                params->sizes(), " on ", params->device());
    TORCH_CHECK(size >= 1 && size <= 65535 && rows >= 0 && rows < (int64_t{1} << 31),
                "ragged resize: size ", size, " and rows ", rows, " out of range");
    const int64_t n = params->size(0);
    at::Tensor o = at::empty({n, size, size, 3},
                             arena->options().dtype(mr::ragged::type_of_code(out_type)));
    if (n > 0 && rows > 0) {
      if (arena->is_cuda()) {
#ifdef MLPERF_RUN_CUDA
        mr::ragged::run_cuda(*arena, *params, n, rows, size, mean, std_, o);
#else
        TORCH_CHECK(false, "ragged resize: built without the `cuda` feature (no kernel path)");
#endif
      } else {
        mr::ragged::run_cpu(*arena, *params, n, rows, size, mean, std_, o);
      }
    }
    *out = new at::Tensor(o);
  });
}

// Compiles the kernels with NVRTC from `nvrtc_path` (null or empty: the search of the GPU path)
// for `arch` ("sm_XY": CUBIN, "compute_XY": PTX) and checks that every kernel the host launches
// is in the output; *size: the binary's bytes. Needs no GPU: CI catches kernel-source errors.
int mr_ragged_nvrtc_compile(const char* nvrtc_path, const char* arch, size_t* size, char** err) {
  return mr::catching(err, "ragged resize", [&] {
    mr::Nvrtc n = mr::open_nvrtc(nvrtc_path ? nvrtc_path : "");
    std::string bin = mr::nvrtc_compile(n, arch, mr::ragged::source(), "mlperf_run_ragged_resize.cu",
                                        "the ragged resize kernels");
    for (const char* name : mr::ragged::kNames) {
      TORCH_CHECK(bin.find(name) != std::string::npos, "NVRTC's ", arch,
                  " output has no kernel ", name);
    }
    *size = bin.size();
  });
}

}  // extern "C"
