// The entry points of the CPU emulator of CUDA's execution model (cuda_emu.hpp), for the rest
// of the shim.
//
// The emulator (cuda_emu.cpp, fused_epilogue_emu.cpp, cuda_emu_selftest.cpp) is an archive of
// its own that build.rs links into the test programs only (`cargo:rustc-link-arg-tests`): the
// mlperf-run binary carries none of it. These declarations are weak, so where the archive is
// not linked they are null, `linked()` is false, and the emulated path (`fused::Path::Emulated`)
// ends with kNotLinked instead of a link error. (The definitions are weak too, being declared
// here; they are the only ones, so the test programs use them.)
#pragma once

#include "fused_epilogue_kernels.hpp"

namespace mr::cuda_emu {

// The emulator's self-checks (cuda_emu_selftest.cpp; tests/numerics/cuda_emu.rs): kernel
// `which` on a (gx, gy) grid of `threads`-thread blocks, one float per block into `out`.
// Throws c10::Error for a bad case or the emulator's own errors.
__attribute__((weak)) void selftest(int which, unsigned gx, unsigned gy, unsigned threads,
                                    float* out);

// Whether this program has the emulator linked in.
inline bool linked() { return &selftest != nullptr; }

inline constexpr const char* kNotLinked =
    "the emulated kernel path runs in the test programs only: the CUDA emulator "
    "(shim/cuda_emu.cpp) is linked into tests/, not into mlperf-run (fused::Path::Emulated is "
    "for tests of the kernels without a GPU)";

}  // namespace mr::cuda_emu

namespace mr::fe_emu {

using fused_epilogue::Kernel;

// The fused epilogue's CUDA kernels (fused_epilogue.cu) run by the emulator: kernel `which` of
// the (ht, rt, ot) variant (dtype codes 0 fp32, 1 bf16, 2 fp16) on a (gx, gy) grid of
// `threads`-thread blocks, with the driver API's argument array. Throws c10::Error for an
// unknown variant or kernel.
__attribute__((weak)) void launch(int ht, int rt, int ot, Kernel which, unsigned gx, unsigned gy,
                                  unsigned threads, void* const* args);

}  // namespace mr::fe_emu
