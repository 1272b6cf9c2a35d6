// The C entry of the CUDA emulator's self-checks (cuda_emu_entry.hpp): in the main shim, so
// mlperf-run links without the emulator and says why it is absent; the test programs, which
// link the emulator, run the checks.
#include "cuda_emu_entry.hpp"

#include "error.hpp"

extern "C" {

// The self-check `which` (see mr::cuda_emu::selftest); `out` has gx * gy floats.
int mr_cuda_emu_selftest(int which, unsigned gx, unsigned gy, unsigned threads, float* out,
                         char** err) {
  return mr::catching(err, "cuda emulator self-test", [&] {
    TORCH_CHECK(mr::cuda_emu::linked(), mr::cuda_emu::kNotLinked);
    mr::cuda_emu::selftest(which, gx, gy, threads, out);
  });
}

}  // extern "C"
