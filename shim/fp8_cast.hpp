// methods.fp8's casts in one pass, on the fused epilogue's kernels (shim/fused_epilogue.cu:
// mr_fe_fp8_cast, mr_fe_amax_record; the host code is in shim/fused_epilogue.cpp), for the FP8
// linear (shim/fp8.cpp).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>

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

// fp8_cast in both layouts, for the FP8 GEMMs of the backward (cuBLASLt takes the first operand
// row-major, the second column-major only): t [rows, cols] (as fp8_cast takes it, cols a
// multiple of 4) cast into q [rows_out, cols] and its transpose qt [cols, rows_out] in one pass,
// rows rows .. rows_out zero in both (rows_out >= rows, a multiple of 4: the GEMM's padding of
// the token dimension), and max(|t|) recorded into amax_cell as fp8_cast does. Returns {q, qt},
// or two undefined tensors (nothing written) where the kernels do not take t in this mode.
std::pair<at::Tensor, at::Tensor> fp8_cast_transpose(const at::Tensor& t, const at::Tensor& scale,
                                                     int format, const at::Tensor& amax_cell,
                                                     int mode, int64_t rows_out);

// The transpose of an FP8 tensor q [rows, cols] (E4M3 or E5M2, contiguous, cols a multiple of
// 4) as qt [cols, rows_out], columns rows .. rows_out zero: the fused epilogues' casts for the
// backward's dW GEMM. Undefined where the kernel does not take q in this mode.
at::Tensor fp8_transpose(const at::Tensor& q, int mode, int64_t rows_out);

}  // namespace mr::fused_epilogue
