// mlperf-run's tensor shim: the few libtorch calls that tch 0.24 does not expose, behind a C API
// for Rust (src/gpu/amp.rs, src/optim/mod.rs).
//
// - Autocast for any device type and dtype (tch only toggles CUDA autocast with fp16):
//   mr_autocast_enter saves the device's state, enables autocast with the dtype and bumps the
//   nesting count; mr_autocast_exit restores it (clearing the cast cache when the outermost
//   region ends), as torch.autocast's __enter__/__exit__ do.
// - Gradient reset to "none" (PyTorch's zero_grad(set_to_none=True)): the next backward then
//   hands its gradient over instead of adding it into a zeroed buffer.
//
// No C++ exception crosses the C boundary: entry points return -1 with the message in `err`
// (error.hpp); mr_free_str frees such messages for both shims.
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>

#include "error.hpp"

#include <cstdlib>

namespace {

// 0 = CPU, 1 = CUDA (the only device types mlperf-run trains on).
bool device_type(int code, at::DeviceType* out) {
  switch (code) {
    case 0: *out = at::kCPU; return true;
    case 1: *out = at::kCUDA; return true;
    default: return false;
  }
}

// 0 = bfloat16, 1 = float16, 2 = float32.
bool scalar_type(int code, at::ScalarType* out) {
  switch (code) {
    case 0: *out = at::kBFloat16; return true;
    case 1: *out = at::kHalf; return true;
    case 2: *out = at::kFloat; return true;
    default: return false;
  }
}

int scalar_code(at::ScalarType t) {
  if (t == at::kBFloat16) return 0;
  if (t == at::kHalf) return 1;
  return 2;
}

}  // namespace

extern "C" {

// Enables autocast on `device` with `dtype`. The previous state goes to *prev_enabled and
// *prev_dtype, for mr_autocast_exit.
int mr_autocast_enter(int device, int dtype, int* prev_enabled, int* prev_dtype, char** err) {
  return mr::catching(err, "tensor shim", [&] {
    at::DeviceType dev;
    at::ScalarType st;
    TORCH_CHECK(device_type(device, &dev), "autocast: unknown device code ", device);
    TORCH_CHECK(scalar_type(dtype, &st), "autocast: unknown dtype code ", dtype);
    *prev_enabled = at::autocast::is_autocast_enabled(dev) ? 1 : 0;
    *prev_dtype = scalar_code(at::autocast::get_autocast_dtype(dev));
    at::autocast::set_autocast_enabled(dev, true);
    at::autocast::set_autocast_dtype(dev, st);
    at::autocast::increment_nesting();
  });
}

int mr_autocast_exit(int device, int prev_enabled, int prev_dtype, char** err) {
  return mr::catching(err, "tensor shim", [&] {
    at::DeviceType dev;
    at::ScalarType st;
    TORCH_CHECK(device_type(device, &dev), "autocast: unknown device code ", device);
    TORCH_CHECK(scalar_type(prev_dtype, &st), "autocast: unknown dtype code ", prev_dtype);
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(dev, prev_enabled != 0);
    at::autocast::set_autocast_dtype(dev, st);
  });
}

// 1 when autocast is on for `device` in this thread, 0 when off, -1 on a bad code.
int mr_autocast_enabled(int device) {
  at::DeviceType dev;
  if (!device_type(device, &dev)) return -1;
  return at::autocast::is_autocast_enabled(dev) ? 1 : 0;
}

void mr_free_str(char* s) { std::free(s); }

// Drops the tensor's .grad (it becomes undefined).
int mr_grad_set_none(const at::Tensor* t, char** err) {
  return mr::catching(err, "tensor shim", [&] {
    TORCH_CHECK(t != nullptr, "grad_set_none: null tensor");
    t->mutable_grad().reset();
  });
}

}  // extern "C"

// ---- host-read counter (tests) ---------------------------------------------------------------
// Counts the ops that read a tensor's value back to the host (item(), double_value(),
// int64_value(), bool conversions, equal): each is a device-to-host sync on a GPU. A global
// RecordFunction callback, installed once; mr_host_reads returns the count so far.
#include <ATen/record_function.h>

#include "host_reads.hpp"

#include <atomic>

namespace {
std::atomic<long long> g_host_reads{0};
std::atomic<bool> g_counter_installed{false};

}  // namespace

extern "C" {

int mr_host_read_counter_install(char** err) {
  return mr::catching(err, "tensor shim", [&] {
    bool expected = false;
    if (!g_counter_installed.compare_exchange_strong(expected, true)) return;
    at::addGlobalCallback(at::RecordFunctionCallback(
                              [](const at::RecordFunction& fn)
                                  -> std::unique_ptr<at::ObserverContext> {
                                if (mr::is_host_value_read(fn.name())) g_host_reads.fetch_add(1);
                                return nullptr;
                              })
                              .scopes({at::RecordScope::FUNCTION}));
  });
}

long long mr_host_reads() { return g_host_reads.load(); }

}  // extern "C"

// ---- libtorch's own log lines -----------------------------------------------------------------
// c10's LOG/C10D_WARNING lines go to stderr when their severity is at least FLAGS_caffe2_log_level
// (set from TORCH_CPP_LOG_LEVEL when libc10 loads: 0 info, 1 warning (the default), 2 error,
// 3 fatal). mr_set_cpp_log_level sets it after that, for runs that chose a level themselves.
#include <c10/util/Logging.h>

extern "C" {

void mr_set_cpp_log_level(int level) { FLAGS_caffe2_log_level = level; }

int mr_cpp_log_level() { return FLAGS_caffe2_log_level; }

}  // extern "C"
