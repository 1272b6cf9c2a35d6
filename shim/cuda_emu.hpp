// A CPU emulator of CUDA's execution model, for the shim's hand-written kernels
// (shim/fused_epilogue.cu): tests run the kernels' own source, launched with the host code's own
// arguments, on a machine without a GPU. It is slow (one fiber per CUDA thread) and meant for
// small tensors.
//
// What it models: a grid of (gx, gy) blocks of `threads` threads (1-d blocks), threadIdx,
// blockIdx, blockDim and gridDim, __syncthreads, full-warp __shfl_xor_sync (32 lanes), static
// __shared__ memory, and the driver API's argument passing (args[i] points at the value of the
// kernel's i-th parameter, read as that parameter's type, as cuLaunchKernel does).
// How: the blocks run one after another; the threads of a block are fibers (ucontext) on the
// calling thread, switched at every barrier. The order in which waiting threads resume is
// shuffled (seeded per launch), so a kernel that relies on an order the GPU does not promise
// (a missing __syncthreads) can show it. A thread that returns leaves every barrier it would
// have been counted in. A barrier that can never complete (threads waiting while the others
// have finished) is an error, not a hang.
// Launches are serialized (one at a time per process): __shared__ variables are emulated as
// function-local statics.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <type_traits>
#include <utility>

namespace mr::cuda_emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// The calling fiber's indices and the launch's shape (valid inside a kernel body only).
const Dim3& thread_idx();
const Dim3& block_idx();
const Dim3& block_dim();
const Dim3& grid_dim();

// __syncthreads: waits until every (not yet returned) thread of the block has arrived.
void sync_threads();
// __shfl_xor_sync(0xffffffff, v, lane_mask): lane i gets lane (i ^ lane_mask)'s v; every lane
// of the warp must call it. Only the full mask is modelled (any other is an error).
float shfl_xor_sync(unsigned mask, float v, int lane_mask);

inline float uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline unsigned float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// The GPU's rsqrtf is approximate (2 ulp); this one rounds twice (the division and the square
// root), so it is within 1 ulp. NVRTC also contracts a * b + c into FMAs by default, which this
// C++ does not: the kernels' results on a GPU differ from the emulator's in the last bits, and
// the GPU check (scripts/bench_gpu.sh part g, examples/fused_epilogue_check) compares them with
// its own tolerances.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

// Runs `body` once per thread of a (gx, gy) grid of 1-d blocks of `threads` threads.
// Throws c10::Error on a bad shape or a barrier that cannot complete.
void launch(unsigned gx, unsigned gy, unsigned threads, const std::function<void()>& body);

// Parameter i's value, copied byte for byte from where args[i] points, as cuLaunchKernel copies
// it: the host code may keep it as another type of the same size (a `const void*` slot for a
// `const float*` parameter), which reading through a typed pointer would make an aliasing
// violation.
template <typename T>
T arg_value(const void* slot) {
  static_assert(std::is_trivially_copyable_v<T>, "kernel parameters are copied as bytes");
  T v;
  std::memcpy(&v, slot, sizeof v);
  return v;
}

// Calls kernel f with the driver API's argument array: args[i] points at parameter i's value.
template <typename... A, std::size_t... I>
void call_with_args(void (*f)(A...), void* const* args, std::index_sequence<I...>) {
  f(arg_value<std::remove_cv_t<A>>(args[I])...);
}
template <typename... A>
void call_with_args(void (*f)(A...), void* const* args) {
  call_with_args(f, args, std::index_sequence_for<A...>{});
}

// The launch of kernel f as cuLaunchKernel(f, gx, gy, 1, threads, 1, 1, 0, stream, args, 0).
template <typename... A>
void launch_kernel(void (*f)(A...), unsigned gx, unsigned gy, unsigned threads,
                   void* const* args) {
  launch(gx, gy, threads, [&] { call_with_args(f, args); });
}

}  // namespace mr::cuda_emu
