// The fused epilogue's kernels on the CPU emulator (see cuda_emu_entry.hpp). The kernel
// source is compiled here as C++, once per dtype triple (build.rs generates the includes).
#include "cuda_emu_entry.hpp"

#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include "cuda_emu_spellings.hpp"

namespace mr::fe_emu {
namespace kernels {

// the conversions the kernel source's F16 uses off the GPU (round to nearest even, as the GPU's
// cvt.rn.f16.f32)
inline float emu_half_to_float(unsigned short v) { return c10::detail::fp16_ieee_to_fp32_value(v); }
inline unsigned short emu_float_to_half(float f) { return c10::detail::fp16_ieee_from_fp32_value(f); }

#define MR_KERNEL
#include "fused_epilogue_emu_variants.inc"
#undef MR_KERNEL

}  // namespace kernels

namespace {

template <auto Forward, auto Backward, auto Colsum, auto ForwardV4, auto BackwardV4,
          auto ColsumFinal, auto BiasGeluForward, auto BiasGeluBackward, auto QkvGrad,
          auto Fp8Cast, auto AmaxRecord, auto Fp8CastTranspose>
void launch_variant(Kernel which, unsigned gx, unsigned gy, unsigned threads, void* const* args) {
  switch (which) {
    case fused_epilogue::kForward: return cuda_emu::launch_kernel(Forward, gx, gy, threads, args);
    case fused_epilogue::kBackward: return cuda_emu::launch_kernel(Backward, gx, gy, threads, args);
    case fused_epilogue::kColsum: return cuda_emu::launch_kernel(Colsum, gx, gy, threads, args);
    case fused_epilogue::kForwardV4:
      return cuda_emu::launch_kernel(ForwardV4, gx, gy, threads, args);
    case fused_epilogue::kBackwardV4:
      return cuda_emu::launch_kernel(BackwardV4, gx, gy, threads, args);
    case fused_epilogue::kColsumFinal:
      return cuda_emu::launch_kernel(ColsumFinal, gx, gy, threads, args);
    case fused_epilogue::kBiasGeluForward:
      return cuda_emu::launch_kernel(BiasGeluForward, gx, gy, threads, args);
    case fused_epilogue::kBiasGeluBackward:
      return cuda_emu::launch_kernel(BiasGeluBackward, gx, gy, threads, args);
    case fused_epilogue::kQkvGrad: return cuda_emu::launch_kernel(QkvGrad, gx, gy, threads, args);
    case fused_epilogue::kFp8Cast: return cuda_emu::launch_kernel(Fp8Cast, gx, gy, threads, args);
    case fused_epilogue::kAmaxRecord:
      return cuda_emu::launch_kernel(AmaxRecord, gx, gy, threads, args);
    case fused_epilogue::kFp8CastTranspose:
      return cuda_emu::launch_kernel(Fp8CastTranspose, gx, gy, threads, args);
  }
  TORCH_CHECK(false, "fused epilogue emulator: no kernel ", static_cast<int>(which));
}

struct Variant {
  int ht, rt, ot;
  void (*launch)(Kernel, unsigned, unsigned, unsigned, void* const*);
};

#define MR_FE_EMU_ROW(ht, rt, ot, ns)                                                    \
  Variant{ht, rt, ot,                                                                    \
          &launch_variant<&kernels::ns::mr_fe_forward, &kernels::ns::mr_fe_backward,     \
                          &kernels::ns::mr_fe_colsum, &kernels::ns::mr_fe_forward_v4,    \
                          &kernels::ns::mr_fe_backward_v4, &kernels::ns::mr_fe_colsum_final,   \
                          &kernels::ns::mr_fe_bias_gelu_forward,                               \
                          &kernels::ns::mr_fe_bias_gelu_backward,                              \
                          &kernels::ns::mr_fe_qkv_grad, &kernels::ns::mr_fe_fp8_cast,           \
                          &kernels::ns::mr_fe_amax_record,                                     \
                          &kernels::ns::mr_fe_fp8_cast_transpose>},
const Variant kVariants[] = {MR_FE_EMU_VARIANTS(MR_FE_EMU_ROW)};
#undef MR_FE_EMU_ROW

}  // namespace

void launch(int ht, int rt, int ot, Kernel which, unsigned gx, unsigned gy, unsigned threads,
            void* const* args) {
  for (const Variant& v : kVariants) {
    if (v.ht == ht && v.rt == rt && v.ot == ot) return v.launch(which, gx, gy, threads, args);
  }
  TORCH_CHECK(false, "fused epilogue emulator: no kernels for dtype codes (", ht, ", ", rt, ", ",
              ot, ")");
}

}  // namespace mr::fe_emu
