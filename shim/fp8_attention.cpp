// A probe, not a method: does any attention op of libtorch run with FP8 (E4M3) q, k, v? For
// examples/fp8_check (methods.fp8_attention's question; docs/gpu.md has the answer read from
// libtorch 2.11 and what it would take). Each `op` calls one candidate on q, k, v ([B, heads,
// S, head_dim]) and hands back its output; a refusal comes back as the error, on one line, with
// the reasons the SDPA dispatcher gave as warnings (it explains a refusal only that way).
//
// Not probed: _scaled_dot_product_cudnn_attention / _cudnn_attention_forward called directly.
// They check no dtype, and MHA.cpp's setMHAParams / build_graph set the cuDNN graph's I/O type
// to BFLOAT16 for a bf16 q and HALF for anything else, so FP8 q/k/v would be read (and the
// output written) as 2-byte elements over 1-byte buffers. Op 3 asks for the cuDNN backend
// through the dispatcher instead, whose dtype check refuses FP8 first.
//
// No C++ exception crosses the C boundary: errors come back through `err` (error.hpp).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "error.hpp"

namespace {

// The global context's SDPA backend switches and FA3 flag, put back on scope exit. They are the
// process's, as c10's warning handler is: the probe is for a single-threaded check program.
struct SdpFlags {
  at::Context& ctx = at::globalContext();
  const bool flash = ctx.userEnabledFlashSDP();
  const bool fa3 = ctx.userEnabledFA3SDP();
  const bool mem = ctx.userEnabledMemEfficientSDP();
  const bool math = ctx.userEnabledMathSDP();
  const bool cudnn = ctx.userEnabledCuDNNSDP();

  // Only flash (f) and / or cuDNN (c) enabled.
  void only(bool f, bool c) {
    ctx.setSDPUseFlash(f);
    ctx.setSDPUseCuDNN(c);
    ctx.setSDPUseMemEfficient(false);
    ctx.setSDPUseMath(false);
  }

  ~SdpFlags() {
    ctx.setSDPUseFlash(flash);
    ctx.setSDPUseFA3(fa3);
    ctx.setSDPUseMemEfficient(mem);
    ctx.setSDPUseMath(math);
    ctx.setSDPUseCuDNN(cudnn);
  }
};

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// The warnings raised meanwhile, each message's first line.
class Warnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning& w) override { lines.push_back(first_line(w.msg())); }
  std::vector<std::string> lines;
};

// 0 FA3's entry point (the .quantized overload, per-head fp32 descales of 1); 1 the flash
// kernel (FlashAttention-2); 2 the memory-efficient kernel; 3-5 scaled_dot_product_attention
// with only the cuDNN backend, with only flash and the FA3 flag set, and as it is (all
// backends, the math one last).
at::Tensor run(int op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  SdpFlags flags;
  switch (op) {
    case 0: {
      const std::optional<at::Tensor> d =
          at::ones({q.size(0), k.size(1)}, q.options().dtype(at::kFloat));
      return std::get<0>(at::_scaled_dot_product_flash_attention(q, k, v, d, d, d));
    }
    case 1:
      return std::get<0>(at::_scaled_dot_product_flash_attention(q, k, v));
    case 2:
      return std::get<0>(
          at::_scaled_dot_product_efficient_attention(q, k, v, std::nullopt, /*lse=*/false));
    case 3:
      flags.only(false, true);
      return at::scaled_dot_product_attention(q, k, v);
    case 4:
      flags.only(true, false);
      flags.ctx.setSDPUseFA3(true);
      return at::scaled_dot_product_attention(q, k, v);
    case 5:
      return at::scaled_dot_product_attention(q, k, v);
    default:
      TORCH_CHECK(false, "fp8 attention probe: no op ", op);
  }
}

}  // namespace

extern "C" {

// *out = the output of candidate `op` (see run) on q, k, v; an error (one line: the op's
// message, then the dispatcher's warnings after " | ") where it refuses.
int mr_fp8_attention_probe(int op, const at::Tensor* q, const at::Tensor* k, const at::Tensor* v,
                           at::Tensor** out, char** err) {
  return mr::catching(err, "fp8 attention probe", [&] {
    TORCH_CHECK(q && k && v && q->defined() && k->defined() && v->defined(),
                "an undefined input");
    Warnings warnings;
    std::string why;
    {
      c10::WarningUtils::WarningHandlerGuard guard(&warnings);
      try {
        *out = new at::Tensor(run(op, *q, *k, *v));
        return;
      } catch (const c10::Error& e) {
        why = first_line(e.what_without_backtrace());
      }
    }
    for (const auto& w : warnings.lines) why += " | " + w;
    TORCH_CHECK(false, why);
  });
}

}  // extern "C"
