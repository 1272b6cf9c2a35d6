// One report per fused op of which path ran and why a fast path fell back: the op's fast kernel
// (cuDNN, cuBLASLt, the NVRTC kernels) or its reference path (plain ATen ops), the first
// fallback reason kept for the one warning Rust prints. Used by fused_bn.cpp,
// fused_bias_gelu.cpp and fused_epilogue.cpp; each exposes it through its own entry points
// (`*_counts`, `*_fallback_reason`), which src/fused/ reads.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "error.hpp"

namespace mr {

class PathReport {
 public:
  std::atomic<long long> fast{0};       // calls that ran the fast kernel
  std::atomic<long long> reference{0};  // calls that ran the reference path

  // Keeps `why` if it is the first fallback of the process.
  void note_fallback(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (reason_.empty()) reason_ = why;
  }

  // The first fallback reason ("" when nothing fell back).
  std::string reason() {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

  // The C convention of the `*_fallback_reason` entry points: 1 with the reason in *out
  // (malloc'd; free with mr_free_str), 0 when nothing fell back.
  int reason_to(char** out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (reason_.empty()) return 0;
    set_err(out, reason_);
    return 1;
  }

 private:
  std::mutex mu_;
  std::string reason_;
};

}  // namespace mr
