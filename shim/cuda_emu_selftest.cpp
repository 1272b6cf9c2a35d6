// Self-checks of the CPU emulator of CUDA's execution model (cuda_emu.hpp), for
// tests/cuda_emu.rs: the block and warp semantics the fused epilogue's kernels rely on, and the
// errors it promises instead of a hang or a silent wrong answer.
#include "error.hpp"

#include "cuda_emu_spellings.hpp"

namespace {

// out[block] = the sum of the block's thread indices, by warp shuffles, then __shared__ memory
// across the warps (blockDim.x a multiple of 32).
__global__ void block_index_sum(float* out) {
  __shared__ float part[32];
  float v = static_cast<float>(threadIdx.x);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += part[w];
    out[blockIdx.y * gridDim.x + blockIdx.x] = total;
  }
}

// Half of each warp shuffles while the other half waits at __syncthreads: neither can complete.
__global__ void divergent_barriers(float*) {
  if ((threadIdx.x & 31) < 16) {
    __shfl_xor_sync(0xffffffffu, 1.f, 1);
  } else {
    __syncthreads();
  }
}

// A shuffle with a partial mask (not modelled).
__global__ void partial_mask(float*) { __shfl_xor_sync(0x0000ffffu, 1.f, 1); }

}  // namespace

extern "C" {

// which: 0 block_index_sum, 1 divergent_barriers, 2 partial_mask; `out` has gx * gy floats.
int mr_cuda_emu_selftest(int which, unsigned gx, unsigned gy, unsigned threads, float* out,
                         char** err) {
  return mr::catching(err, "cuda emulator self-test", [&] {
    void* args[] = {&out};
    switch (which) {
      case 0: return mr::cuda_emu::launch_kernel(block_index_sum, gx, gy, threads, args);
      case 1: return mr::cuda_emu::launch_kernel(divergent_barriers, gx, gy, threads, args);
      case 2: return mr::cuda_emu::launch_kernel(partial_mask, gx, gy, threads, args);
    }
    TORCH_CHECK(false, "cuda emulator self-test: no case ", which);
  });
}

}  // extern "C"
