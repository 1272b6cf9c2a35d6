// The fused epilogue's CUDA kernels (shim/fused_epilogue.cu) run by the CPU emulator of CUDA's
// execution model (shim/cuda_emu.hpp): the `FusedPath::Emulated` path of
// src/fused/epilogue.rs, for tests of the kernels without a GPU.
#pragma once

#include "fused_epilogue_kernels.hpp"

namespace mr::fe_emu {

using fused_epilogue::Kernel;

// Launches kernel `which` of the (ht, rt, ot) variant (dtype codes 0 fp32, 1 bf16, 2 fp16) on a
// (gx, gy) grid of `threads`-thread blocks, with the driver API's argument array. Throws
// c10::Error for an unknown variant or kernel.
void launch(int ht, int rt, int ot, Kernel which, unsigned gx, unsigned gy, unsigned threads,
            void* const* args);

}  // namespace mr::fe_emu
