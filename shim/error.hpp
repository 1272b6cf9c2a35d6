// Error passing shared by mlperf-run's C++ shims (dist.cpp, tensor.cpp): no C++ exception may
// cross the C boundary, so entry points run their body through mr::catching, which returns -1
// and hands the message back through `err` as a malloc'd C string. Rust takes it with
// src/shim/error.rs, which frees it with mr_free_str (tensor.cpp).
#pragma once

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

namespace mr {

inline void set_err(char** err, const std::string& msg) {
  if (err == nullptr) return;
  char* s = static_cast<char*>(std::malloc(msg.size() + 1));
  if (s == nullptr) return;
  std::memcpy(s, msg.c_str(), msg.size() + 1);
  *err = s;
}

// Runs f; 0 on success, -1 with the exception's message in *err otherwise.
template <typename F>
int catching(char** err, const char* what, F&& f) {
  try {
    f();
    return 0;
  } catch (const c10::Error& e) {
    set_err(err, e.what_without_backtrace());
  } catch (const std::exception& e) {
    set_err(err, e.what());
  } catch (...) {
    set_err(err, std::string("unknown C++ exception in the ") + what);
  }
  return -1;
}

}  // namespace mr
