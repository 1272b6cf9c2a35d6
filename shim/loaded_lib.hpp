// A library that libtorch already loaded (libcudnn, libcublasLt), opened by name without loading
// a second copy (RTLD_NOLOAD) and its entry points looked up with dlsym: the shims that use it
// have no link-time dependency on it. Used by fused_bn.cpp and fused_bias_gelu.cpp.
#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <string>

namespace mr {

struct LoadedLib {
  void* handle = nullptr;
  std::string name;     // the file name that was found loaded
  std::string missing;  // why the library is unusable (not loaded, a symbol it lacks); empty: fine

  // The first of `names` loaded in this process; `what` names them in the message otherwise.
  LoadedLib(std::initializer_list<const char*> names, const char* what) {
    for (const char* n : names) {
      handle = dlopen(n, RTLD_NOLOAD | RTLD_LAZY);
      if (handle != nullptr) {
        name = n;
        return;
      }
    }
    missing = std::string(what) + " is not loaded in this process";
  }

  // *slot = the entry point `symbol`, or null; the first symbol lacking is kept in `missing`.
  template <typename F>
  void resolve(const char* symbol, F* slot) {
    *slot = handle != nullptr ? reinterpret_cast<F>(dlsym(handle, symbol)) : nullptr;
    if (*slot == nullptr && missing.empty()) missing = name + " lacks " + symbol;
  }
};

}  // namespace mr
