// methods.fp8's casts in one pass, on the fused epilogue's kernels (shim/fused_epilogue.cu:
// mr_fe_fp8_cast, mr_fe_amax_record; the host code is in shim/fused_epilogue.cpp), for the FP8
// linear (shim/fp8.cpp).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace mr::fused_epilogue {

// t (fp32, bf16 or fp16, contiguous, a multiple of 4 elements, aligned to 4 of them) cast to
// E4M3 (format 0) or E5M2 (format 1) with `scale` (one fp32 value on t's device), exactly as
// shim/fp8.cpp's quantize, and max(|t|) recorded into `amax_cell` (one fp32 value on t's
// device) as the max with what it holds (a NaN wins), in one pass over t plus one small
// reduction. mode: 0 or 2 a CUDA tensor on the GPU kernels, 3 a CPU tensor on the CPU emulator
// of them (tests). max_blocks > 0 caps the cast's grid (tests: several rounds of the grid-stride
// loop on small tensors); 0 the default.
// Returns an undefined tensor, writing nothing, where the kernels do not take these tensors in
// this mode (the caller then takes the ATen path).
at::Tensor fp8_cast(const at::Tensor& t, const at::Tensor& scale, int format,
                    const at::Tensor& amax_cell, int mode, int64_t max_blocks = 0);

}  // namespace mr::fused_epilogue
