// Self-checks of the CPU emulator of CUDA's execution model (cuda_emu.hpp), for
// tests/numerics/cuda_emu.rs: the block and warp semantics the fused epilogue's kernels rely
// on, and the errors it promises instead of a hang or a silent wrong answer.
#include "cuda_emu_entry.hpp"

#include <c10/util/Exception.h>

#include "cuda_emu_spellings.hpp"

namespace {

// out[b] = the sum over block b's threads of (threadIdx.x + 1024 b), b = the block's linear
// index, by warp shuffles, then __shared__ memory across the warps (blockDim.x a multiple of
// 32). Each block sums other values, so a block that read a partial sum left in __shared__ by
// the block before it (a missing __syncthreads) gets a wrong total.
__global__ void block_index_sum(float* out) {
  __shared__ float part[32];
  const unsigned b = blockIdx.y * gridDim.x + blockIdx.x;
  float v = static_cast<float>(threadIdx.x + 1024u * b);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += part[w];
    out[b] = total;
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

// Lane 0 of each warp returns while the other lanes shuffle: their shuffle cannot complete.
__global__ void lane_returns_early(float* out) {
  if ((threadIdx.x & 31) == 0) return;
  out[0] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
}

// A warp reduction after which every lane but 0 returns at once, no barrier after the
// shuffles (legal: the shuffles completed): out[block] = 0 + 1 + ... + 31, from warp 0.
__global__ void warp_sum_then_return(float* out) {
  float v = static_cast<float>(threadIdx.x & 31);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x != 0) return;
  out[blockIdx.y * gridDim.x + blockIdx.x] = v;
}

}  // namespace

namespace mr::cuda_emu {

// which: 0 block_index_sum, 1 divergent_barriers, 2 partial_mask, 3 lane_returns_early,
// 4 warp_sum_then_return; `out` has gx * gy floats.
void selftest(int which, unsigned gx, unsigned gy, unsigned threads, float* out) {
  void* args[] = {&out};
  switch (which) {
    case 0: return launch_kernel(block_index_sum, gx, gy, threads, args);
    case 1: return launch_kernel(divergent_barriers, gx, gy, threads, args);
    case 2: return launch_kernel(partial_mask, gx, gy, threads, args);
    case 3: return launch_kernel(lane_returns_early, gx, gy, threads, args);
    case 4: return launch_kernel(warp_sum_then_return, gx, gy, threads, args);
  }
  TORCH_CHECK(false, "cuda emulator self-test: no case ", which);
}

}  // namespace mr::cuda_emu
