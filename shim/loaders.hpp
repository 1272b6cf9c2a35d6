// The runtime loaders of the fused ops' fast paths: NVRTC (compiles CUDA C++ at run time) and
// the CUDA driver API (loads and launches the compiled modules), both dlopen'ed so that no
// binary links them; cuDNN's and cuBLASLt's entry points are looked up in the copies libtorch
// already loaded (loaded_lib.hpp). Used by fused_epilogue.cpp; defined in loaders.cpp.
#pragma once

#include <cstddef>
#include <string>

namespace mr {

// ---- NVRTC ----------------------------------------------------------------------------------
// Only the entry points used, declared by hand (nvrtc.h is not on this machine's include path).
using nvrtcProgram = void*;
struct Nvrtc {
  void* lib = nullptr;
  int (*createProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                       const char* const*) = nullptr;
  int (*compileProgram)(nvrtcProgram, int, const char* const*) = nullptr;
  int (*getProgramLogSize)(nvrtcProgram, size_t*) = nullptr;
  int (*getProgramLog)(nvrtcProgram, char*) = nullptr;
  int (*getPTXSize)(nvrtcProgram, size_t*) = nullptr;
  int (*getPTX)(nvrtcProgram, char*) = nullptr;
  int (*getCUBINSize)(nvrtcProgram, size_t*) = nullptr;
  int (*getCUBIN)(nvrtcProgram, char*) = nullptr;
  int (*destroyProgram)(nvrtcProgram*) = nullptr;
  const char* (*getErrorString)(int) = nullptr;
};

// Opens NVRTC at `path`, or (empty path) from MLPERF_RUN_NVRTC, then CUDA 13's (the already
// loaded or system-visible libnvrtc.so.13, the torch wheel's nvidia/cu13/lib), then CUDA 12's.
// Throws (c10::Error) naming every place it tried.
Nvrtc open_nvrtc(const std::string& path);

// Compiles `source` (named `file_name` in messages) for `arch` (e.g. "sm_90": a CUBIN;
// "compute_90": PTX); `what` names the kernels in errors.
std::string nvrtc_compile(const Nvrtc& n, const std::string& arch, const std::string& source,
                          const char* file_name, const char* what);

// ---- the CUDA driver API --------------------------------------------------------------------
// Types are the driver's opaque handles.
using CUresult = int;
using CUmodule = void*;
using CUfunction = void*;
using CUcontext = void*;
using CUstream = void*;
struct Driver {
  CUresult (*ctxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*ctxSetCurrent)(CUcontext) = nullptr;
  CUresult (*deviceGet)(int*, int) = nullptr;
  CUresult (*deviceGetAttribute)(int*, int, int) = nullptr;
  CUresult (*primaryCtxRetain)(CUcontext*, int) = nullptr;
  CUresult (*moduleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*moduleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*getErrorString)(CUresult, const char**) = nullptr;
  // CUstreamCaptureStatus as int: 0 none, 1 active, 2 invalidated
  CUresult (*streamIsCapturing)(CUstream, int*) = nullptr;
};

// The driver API, dlopen'ed on first use (libcuda.so.1 is already loaded by the CUDA runtime on
// a GPU machine); throws when it cannot be loaded.
const Driver& driver();

// Throws a c10::Error naming `what` and the driver's message unless `rc` is 0.
void cu_check(CUresult rc, const char* what);

}  // namespace mr

namespace mr {

// Compiles `source` with NVRTC for CUDA device `device`'s architecture (a CUBIN), loads it into
// the device's primary context (the one the CUDA runtime and libtorch use) and looks up the
// `count` kernels `names` into `out`. Throws (c10::Error) naming `what` on any failure. Not while
// a stream of this thread is being captured (loading a module is not allowed then).
void load_kernels(int device, const std::string& source, const char* file_name, const char* what,
                  const char* const* names, int count, CUfunction* out);

// Launches `f` on `stream` with a grid of gx x gy blocks of `threads`, device `device` current
// and its primary context bound on this thread (a driver-API launch needs a current context; the
// autograd engine's device threads normally have it already, so this only binds it where none
// is, with no host sync); throws naming `what` on failure.
void launch_kernel(int device, CUfunction f, unsigned gx, unsigned gy, unsigned threads,
                   CUstream stream, void** args, const char* what);

}  // namespace mr
