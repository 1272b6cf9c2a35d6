// The CUDA spellings a kernel source uses, mapped onto the CPU emulator (shim/cuda_emu.hpp).
// Include it only in a translation unit that includes a kernel source right after (as
// shim/fused_epilogue_emu.cpp does): these macros would clash with CUDA's and libtorch's headers.
#pragma once

#include "cuda_emu.hpp"

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define threadIdx (::mr::cuda_emu::thread_idx())
#define blockIdx (::mr::cuda_emu::block_idx())
#define blockDim (::mr::cuda_emu::block_dim())
#define gridDim (::mr::cuda_emu::grid_dim())
#define __syncthreads ::mr::cuda_emu::sync_threads
#define __shfl_xor_sync ::mr::cuda_emu::shfl_xor_sync
#define __uint_as_float ::mr::cuda_emu::uint_as_float
#define __float_as_uint ::mr::cuda_emu::float_as_uint
#define rsqrtf ::mr::cuda_emu::rsqrtf
