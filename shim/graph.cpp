// mlperf-run's CUDA graph shim: capture a whole training step into a CUDA graph and replay it
// (at::cuda::CUDAGraph, the class behind torch.cuda.CUDAGraph), for src/gpu/cuda_graph.rs.
//
// Compiled with the CUDA headers only (cargo feature `cuda`; build.rs finds them as for NCCL).
// Without the feature the same C entry points exist but refuse with a message that says how to
// get them, so the Rust side has one code path.
//
// The protocol is torch.cuda.graph's: the caller runs warm-up steps eagerly first (cuDNN
// benchmark choices, allocator state, lazily created optimizer buffers), then
// mr_graph_capture_begin makes a side stream current (captures must not run on the legacy default
// stream), waits for the current stream's work and begins the capture into the graph's own
// memory pool; the step's kernels are recorded, not run; mr_graph_capture_end ends the capture,
// restores the caller's stream and instantiates the graph. mr_graph_replay launches it on the
// current stream. Autocast's weight cast cache is off during the capture (a cached cast would
// outlive the graph's pool). The capture is thread-local (cudaStreamCaptureModeThreadLocal): the
// batch hand-off thread keeps allocating pinned memory and copying on its own stream meanwhile.
#include "error.hpp"
#include "host_reads.hpp"

#include <ATen/record_function.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

namespace {
constexpr const char* kWhat = "CUDA graph shim";

// ---- the capture check (every build; the CPU twin's capture step) --------------------------
// Ops that cannot be part of a captured step, because they make the host wait for the device:
// - value reads (item(), bool conversions, equal), counted where the step's own code makes them
//   (not nested in another op: a CPU kernel may read a scalar that its CUDA twin reads on the
//   device, e.g. a learning-rate tensor);
// - ops that size their output from the data (nonzero, masked_select, boolean-mask indexing,
//   unique, bincount: they read a count back on every device), counted at any depth.
// On a GPU either ends the capture with an error (or bakes one step's sizes into the graph).
// A global RecordFunction callback, registered while a check runs, counts them on the threads
// that armed the check (thread-local: data threads are not counted). The CPU autograd engine
// runs the backward on the calling thread, so the CPU twin sees the whole step; on a GPU the
// backward runs on autograd's device threads, so a real capture's check sees the forward and
// the step's own host code, and names the op when the capture fails. It sees ops by name, so a
// copy from pageable host memory (also illegal in a capture, on the CPU a plain copy) is not
// caught here.
const char* const kDataSized[] = {"aten::nonzero",     "aten::argwhere",
                                  "aten::masked_select", "aten::unique",
                                  "aten::_unique",     "aten::_unique2",
                                  "aten::unique_dim",  "aten::unique_consecutive",
                                  "aten::unique_dim_consecutive", "aten::bincount"};

template <size_t N>
bool one_of(const char* name, const char* const (&names)[N]) {
  for (const char* n : names)
    if (std::strcmp(name, n) == 0) return true;
  return false;
}

thread_local int t_depth = 0;  // ops running on this thread (FUNCTION scope)
thread_local bool t_checking = false;
thread_local long long t_hits = 0;
thread_local std::string t_first;

// The callback is registered while at least one thread checks (so a run pays nothing for it
// outside its capture steps).
std::mutex g_check_mu;
int g_checkers = 0;
at::CallbackHandle g_check_handle = 0;

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  if (t_checking) {
    const char* name = fn.name();
    const bool value_read =
        std::strcmp(name, "aten::item") == 0 || mr::is_host_value_read(name);
    if ((t_depth == 0 && value_read) || one_of(name, kDataSized)) {
      if (t_hits++ == 0) t_first = name;
    }
  }
  ++t_depth;
  return nullptr;
}

void on_op_end(const at::RecordFunction&, at::ObserverContext*) {
  if (t_depth > 0) --t_depth;
}
}  // namespace

extern "C" {

// Starts counting uncapturable ops on this thread (the count and the first op's name reset).
// Called outside any op; ends with mr_capture_check_end on the same thread.
int mr_capture_check_begin(char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(!t_checking, "CUDA graph: a capture check is already running on this thread");
    {
      std::lock_guard<std::mutex> lock(g_check_mu);
      if (g_checkers == 0) {
        g_check_handle = at::addGlobalCallback(
            at::RecordFunctionCallback(on_op_start, on_op_end).scopes({at::RecordScope::FUNCTION}));
      }
      ++g_checkers;
    }
    t_depth = 0;  // this thread is at the top level here (a stale count from a removal mid-op)
    t_hits = 0;
    t_first.clear();
    t_checking = true;
  });
}

// Stops counting on this thread; returns how many uncapturable ops ran since begin and, when
// any did, the first one's name in *first (malloc'd; free with mr_free_str).
long long mr_capture_check_end(char** first) {
  if (!t_checking) return 0;
  t_checking = false;
  {
    std::lock_guard<std::mutex> lock(g_check_mu);
    if (--g_checkers == 0) at::removeCallback(g_check_handle);
  }
  if (t_hits > 0) mr::set_err(first, t_first);
  return t_hits;
}

}  // extern "C"

#ifdef MLPERF_RUN_CUDA

// Only exported functions of libtorch_cuda / libc10_cuda are called (no header-inline CUDA
// runtime calls such as at::cuda::CUDAEvent's): the binary does not link libcudart itself.
// Events and the stream guard are c10's device-generic ones, as in cuda.cpp.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <optional>

struct MrGraph {
  at::cuda::CUDAGraph graph;
  c10::DeviceIndex device = 0;
  std::optional<c10::Stream> caller;  // the stream current before the capture
  std::optional<c10::StreamGuard> guard;
  bool prev_cache = true;
  bool captured = false;
};

extern "C" {

int mr_graph_supported() { return 1; }

int mr_graph_new(MrGraph** out, char** err) {
  return mr::catching(err, kWhat, [&] { *out = new MrGraph(); });
}

void mr_graph_free(MrGraph* g) { delete g; }

int mr_graph_capture_begin(MrGraph* g, int device, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(!g->captured && !g->guard, "CUDA graph: this graph was already captured");
    g->device = static_cast<c10::DeviceIndex>(device);
    {
      // As torch.cuda.graph does: wait for the warm-up steps and hand the blocks they cached
      // back to the driver. During a capture the allocator frees only the graph's own pool, so
      // the warm-up's cached activations would otherwise stay reserved beside the capture's
      // second full set (out of memory for a step using more than half of the GPU).
      const c10::DeviceGuard on_device(c10::Device(c10::kCUDA, g->device));
      c10::cuda::device_synchronize();
      c10::cuda::CUDACachingAllocator::emptyCache();
    }
    c10::Stream caller = c10::cuda::getCurrentCUDAStream(g->device).unwrap();
    // A pool stream drawn now, not one kept for the process as torch.cuda.graph keeps its
    // default_capture_stream: the pool hands its 32 streams out round-robin, and the batch
    // hand-off draws a copy stream from it for every epoch, so a kept stream would sooner or
    // later also be a copy stream, whose copies (from another thread) cannot go on a stream
    // being captured. Drawn a few draws after the current epoch's copy stream (one per epoch
    // and eval), this one differs from it. The cost: libtorch keeps a cuBLAS workspace per
    // (handle, stream), at most one per pool stream.
    c10::Stream side = c10::cuda::getStreamFromPool(false, g->device).unwrap();
    // the side stream starts after everything queued so far (the warm-up steps, the inputs)
    c10::Event ready(c10::DeviceType::CUDA);
    ready.record(caller);
    ready.block(side);
    g->caller = caller;
    g->guard.emplace(side);
    g->prev_cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    try {
      g->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    } catch (...) {
      at::autocast::set_autocast_cache_enabled(g->prev_cache);
      g->guard.reset();
      throw;
    }
  });
}

int mr_graph_capture_end(MrGraph* g, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(g->guard.has_value(), "CUDA graph: capture_end without capture_begin");
    c10::Stream side = c10::cuda::getCurrentCUDAStream(g->device).unwrap();
    // restore the caller's state whatever capture_end says
    struct Restore {
      MrGraph* g;
      c10::Stream side;
      ~Restore() {
        at::autocast::set_autocast_cache_enabled(g->prev_cache);
        g->guard.reset();
        // the caller's stream continues after the side stream's work (a failure here is
        // secondary to the capture's own)
        try {
          c10::Event done(c10::DeviceType::CUDA);
          done.record(side);
          done.block(*g->caller);
        } catch (...) {
        }
      }
    } restore{g, side};
    g->graph.capture_end();
    g->captured = true;
  });
}

int mr_graph_replay(MrGraph* g, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(g->captured, "CUDA graph: replay before a successful capture");
    g->graph.replay();
  });
}

}  // extern "C"

#else  // no CUDA headers at build time

struct MrGraph {};

namespace {
int refuse(char** err) {
  mr::set_err(err,
              "this mlperf-run was built without CUDA graph support: rebuild it with the default "
              "features (`scripts/mlperf-run`, or `cargo build --release` after `source "
              "scripts/setup.sh`; docs/gpu.md), "
              "or set methods.cuda_graph = false");
  return -1;
}
}  // namespace

extern "C" {
int mr_graph_supported() { return 0; }
int mr_graph_new(MrGraph** out, char** err) {
  *out = nullptr;
  return refuse(err);
}
void mr_graph_free(MrGraph* g) { delete g; }
int mr_graph_capture_begin(MrGraph*, int, char** err) { return refuse(err); }
int mr_graph_capture_end(MrGraph*, char** err) { return refuse(err); }
int mr_graph_replay(MrGraph*, char** err) { return refuse(err); }
}  // extern "C"

#endif
