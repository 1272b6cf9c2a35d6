// The runtime loaders (loaders.hpp): NVRTC and the CUDA driver API, dlopen'ed.
#include "loaders.hpp"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <dirent.h>
#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace mr {

namespace {

template <typename F>
void sym(void* lib, const char* name, F& f, const std::string& path) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  TORCH_CHECK(f != nullptr, "NVRTC library ", path, " lacks ", name);
}

// The folder of the loaded libtorch_cpu (torch/lib), for the wheel's nvidia/cu13/lib beside it.
std::string torch_lib_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&at::globalContext), &info) == 0 || !info.dli_fname) return {};
  std::string p(info.dli_fname);
  auto slash = p.rfind('/');
  return slash == std::string::npos ? std::string() : p.substr(0, slash);
}

// NVRTC dlopens its companion libnvrtc-builtins.so.X.Y by name, which the dynamic linker only
// finds on the system path; the torch wheel keeps it beside libnvrtc. Loading it first from that
// folder (by full path, RTLD_GLOBAL) makes NVRTC's own dlopen find it already loaded.
void preload_builtins(void* nvrtc_lib) {
  void* fn = dlsym(nvrtc_lib, "nvrtcCreateProgram");
  Dl_info info{};
  if (fn == nullptr || dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return;
  std::string p(info.dli_fname);
  auto slash = p.rfind('/');
  if (slash == std::string::npos) return;
  const std::string dir = p.substr(0, slash);
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("libnvrtc-builtins.so.", 0) == 0) {
      dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_GLOBAL);
    }
  }
  closedir(d);
}

}  // namespace

Nvrtc open_nvrtc(const std::string& path) {
  std::vector<std::string> tries;
  if (!path.empty()) {
    tries.push_back(path);
  } else {
    if (const char* env = std::getenv("MLPERF_RUN_NVRTC")) tries.emplace_back(env);
    // CUDA 13 first (the torch wheel's own before an older system one), then 12
    const std::string dir = torch_lib_dir();
    tries.emplace_back("libnvrtc.so.13");
    if (!dir.empty()) tries.push_back(dir + "/../../nvidia/cu13/lib/libnvrtc.so.13");
    tries.emplace_back("libnvrtc.so.12");
    if (!dir.empty()) tries.push_back(dir + "/../../nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
  }
  Nvrtc n;
  std::string errors;
  std::string used;
  for (const auto& t : tries) {
    n.lib = dlopen(t.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (n.lib) {
      used = t;
      break;
    }
    const char* e = dlerror();
    errors += "\n  " + t + ": " + (e ? e : "not found");
  }
  TORCH_CHECK(n.lib != nullptr, "cannot load NVRTC (libnvrtc); tried:", errors);
  preload_builtins(n.lib);
  sym(n.lib, "nvrtcCreateProgram", n.createProgram, used);
  sym(n.lib, "nvrtcCompileProgram", n.compileProgram, used);
  sym(n.lib, "nvrtcGetProgramLogSize", n.getProgramLogSize, used);
  sym(n.lib, "nvrtcGetProgramLog", n.getProgramLog, used);
  sym(n.lib, "nvrtcGetPTXSize", n.getPTXSize, used);
  sym(n.lib, "nvrtcGetPTX", n.getPTX, used);
  sym(n.lib, "nvrtcGetCUBINSize", n.getCUBINSize, used);
  sym(n.lib, "nvrtcGetCUBIN", n.getCUBIN, used);
  sym(n.lib, "nvrtcDestroyProgram", n.destroyProgram, used);
  sym(n.lib, "nvrtcGetErrorString", n.getErrorString, used);
  return n;
}


std::string nvrtc_compile(const Nvrtc& n, const std::string& arch, const std::string& src,
                          const char* file_name, const char* what) {
  nvrtcProgram prog = nullptr;
  int rc = n.createProgram(&prog, src.c_str(), file_name, 0, nullptr, nullptr);
  TORCH_CHECK(rc == 0, "nvrtcCreateProgram: ", n.getErrorString(rc));
  struct Destroy {
    const Nvrtc& n;
    nvrtcProgram* p;
    ~Destroy() { n.destroyProgram(p); }
  } destroy{n, &prog};
  const std::string arch_opt = "--gpu-architecture=" + arch;
  const char* opts[] = {arch_opt.c_str(), "--std=c++17"};
  rc = n.compileProgram(prog, 2, opts);
  if (rc != 0) {
    size_t log_size = 0;
    n.getProgramLogSize(prog, &log_size);
    std::string log(log_size, '\0');
    if (log_size > 0) n.getProgramLog(prog, log.data());
    TORCH_CHECK(false, "NVRTC could not compile ", what, " for ", arch, ": ",
                n.getErrorString(rc), "\n", log);
  }
  const bool cubin = arch.rfind("sm_", 0) == 0;
  size_t size = 0;
  rc = cubin ? n.getCUBINSize(prog, &size) : n.getPTXSize(prog, &size);
  TORCH_CHECK(rc == 0 && size > 0, "NVRTC returned no ", cubin ? "CUBIN" : "PTX", ": ",
              n.getErrorString(rc));
  std::string out(size, '\0');
  rc = cubin ? n.getCUBIN(prog, out.data()) : n.getPTX(prog, out.data());
  TORCH_CHECK(rc == 0, "NVRTC: ", n.getErrorString(rc));
  return out;
}

const Driver& driver() {
  static Driver d = [] {
    Driver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    TORCH_CHECK(lib != nullptr, "cannot load the CUDA driver (libcuda.so.1): ", dlerror());
    const std::string name = "libcuda.so.1";
    sym(lib, "cuCtxGetCurrent", d.ctxGetCurrent, name);
    sym(lib, "cuCtxSetCurrent", d.ctxSetCurrent, name);
    sym(lib, "cuDeviceGet", d.deviceGet, name);
    sym(lib, "cuDeviceGetAttribute", d.deviceGetAttribute, name);
    sym(lib, "cuDevicePrimaryCtxRetain", d.primaryCtxRetain, name);
    sym(lib, "cuModuleLoadData", d.moduleLoadData, name);
    sym(lib, "cuModuleGetFunction", d.moduleGetFunction, name);
    sym(lib, "cuLaunchKernel", d.launchKernel, name);
    sym(lib, "cuGetErrorString", d.getErrorString, name);
    sym(lib, "cuStreamIsCapturing", d.streamIsCapturing, name);
    return d;
  }();
  return d;
}

void cu_check(CUresult rc, const char* what) {
  if (rc == 0) return;
  const char* msg = nullptr;
  driver().getErrorString(rc, &msg);
  TORCH_CHECK(false, what, ": CUDA driver error ", rc, " (", msg ? msg : "?", ")");
}

namespace {

// Binds device `device`'s primary context on this thread where no context is current (the
// driver API needs one; threads that ran ATen CUDA work already have it).
void bind_primary_context(int device) {
  const Driver& d = driver();
  CUcontext ctx = nullptr;
  cu_check(d.ctxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx != nullptr) return;
  int dev = 0;
  cu_check(d.deviceGet(&dev, device), "cuDeviceGet");
  cu_check(d.primaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  cu_check(d.ctxSetCurrent(ctx), "cuCtxSetCurrent");
}

}  // namespace

void load_kernels(int device, const std::string& source, const char* file_name, const char* what,
                  const char* const* names, int count, CUfunction* out) {
  static Nvrtc nvrtc = open_nvrtc("");
  const Driver& d = driver();
  // c10's device-generic guard (exported code): no CUDA runtime call at link time
  c10::DeviceGuard guard(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device)));
  bind_primary_context(device);
  int dev = 0;
  cu_check(d.deviceGet(&dev, device), "cuDeviceGet");
  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR: a CUBIN for exactly this GPU
  int major = 0, minor = 0;
  cu_check(d.deviceGetAttribute(&major, 75, dev), "cuDeviceGetAttribute");
  cu_check(d.deviceGetAttribute(&minor, 76, dev), "cuDeviceGetAttribute");
  const std::string arch = "sm_" + std::to_string(major) + std::to_string(minor);
  const std::string cubin = nvrtc_compile(nvrtc, arch, source, file_name, what);
  CUmodule module = nullptr;
  cu_check(d.moduleLoadData(&module, cubin.data()), "cuModuleLoadData");
  for (int i = 0; i < count; ++i) {
    cu_check(d.moduleGetFunction(&out[i], module, names[i]), "cuModuleGetFunction");
  }
}

void launch_kernel(int device, CUfunction f, unsigned gx, unsigned gy, unsigned threads,
                   CUstream stream, void** args, const char* what) {
  c10::DeviceGuard guard(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device)));
  bind_primary_context(device);
  cu_check(driver().launchKernel(f, gx, gy, 1, threads, 1, 1, 0, stream, args, nullptr), what);
}

}  // namespace mr
