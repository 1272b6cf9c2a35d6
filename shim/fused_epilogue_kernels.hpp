// The fused epilogue's CUDA kernels (shim/fused_epilogue.cu) as the host code names them,
// for both of their launch paths: on a GPU (NVRTC and cuLaunchKernel, fused_epilogue.cpp) and on
// the CPU emulator (cuda_emu_entry.hpp).
#pragma once

namespace mr::fused_epilogue {

// _V4: the vectorised row kernels (rows of a multiple of 4 elements, aligned vectors);
// kColsumFinal: the column sums' second stage; kBiasGelu*: the intermediate dense's bias + GELU;
// kQkvGrad: fused QKV's backward (the gradients stacked, the bias's column sums); kFp8Cast and
// kAmaxRecord: methods.fp8's one-pass cast and its amax, kFp8CastTranspose the cast in both
// layouts (or the transpose of a cast tensor) (fp8_cast.hpp).
enum Kernel : int {
  kForward = 0,
  kBackward = 1,
  kColsum = 2,
  kForwardV4 = 3,
  kBackwardV4 = 4,
  kColsumFinal = 5,
  kBiasGeluForward = 6,
  kBiasGeluBackward = 7,
  kQkvGrad = 8,
  kFp8Cast = 9,
  kAmaxRecord = 10,
  kFp8CastTranspose = 11
};

}  // namespace mr::fused_epilogue
