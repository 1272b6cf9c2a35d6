// The fused epilogue's three CUDA kernels (shim/fused_epilogue.cu) as the host code names them,
// for both of their launch paths: on a GPU (NVRTC and cuLaunchKernel, fused_epilogue.cpp) and on
// the CPU emulator (fused_epilogue_emu.hpp).
#pragma once

namespace mr::fused_epilogue {

enum Kernel : int { kForward = 0, kBackward = 1, kColsum = 2 };

}  // namespace mr::fused_epilogue
