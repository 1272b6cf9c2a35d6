// mlperf-run's device shim: CUDA streams, events, pinned host memory and the math-mode switches
// that tch 0.24 lacks, behind a C API for Rust (src/train/handoff.rs, src/train/device.rs).
//
// It uses only c10's device-generic interfaces (c10::Stream, c10::Event, the registered CUDA
// guard implementation), so it compiles without the CUDA headers; the CUDA implementation comes
// from libtorch_cuda at run time. Nothing here is called for CPU training.
//
// Conventions as in tensor.cpp: at::Tensor* for tensors, opaque heap objects for streams and
// events (freed with their mr_*_free), errors as -1 plus a message (error.hpp).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "error.hpp"

#include <cstdint>
#include <cstring>

namespace {

constexpr const char* kWhat = "device shim";

c10::impl::VirtualGuardImpl& cuda() {
  static c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  return impl;
}

c10::Device cuda_device(int index) {
  TORCH_CHECK(index >= 0, "device shim: bad CUDA device index ", index);
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace

struct MrStream {
  c10::Stream stream;
};

struct MrEvent {
  c10::Event event;
};

extern "C" {

// Make CUDA device `index` this thread's current device (where its context, pinned host
// allocations and default streams belong): each process of a multi-GPU run uses only its GPU.
int mr_set_device(int index, char** err) {
  return mr::catching(err, kWhat, [&] { cuda().setDevice(cuda_device(index)); });
}

// A stream from libtorch's pool for CUDA device `index` (not the default stream).
int mr_stream_from_pool(int index, MrStream** out, char** err) {
  return mr::catching(err, kWhat, [&] {
    *out = new MrStream{cuda().getStreamFromGlobalPool(cuda_device(index), false)};
  });
}

// This thread's current stream on CUDA device `index`.
int mr_stream_current(int index, MrStream** out, char** err) {
  return mr::catching(err, kWhat,
                      [&] { *out = new MrStream{cuda().getStream(cuda_device(index))}; });
}

// Make `s` this thread's current stream on its device; the previous one goes to *prev.
int mr_stream_exchange(const MrStream* s, MrStream** prev, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(s != nullptr, "device shim: null stream");
    *prev = new MrStream{cuda().exchangeStream(s->stream)};
  });
}

// Blocks the host until all work queued on `s` has finished.
int mr_stream_synchronize(const MrStream* s, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(s != nullptr, "device shim: null stream");
    s->stream.synchronize();
  });
}

// The stream's native handle (a cudaStream_t), for libraries that queue work on it (nvJPEG).
int mr_stream_native(const MrStream* s, void** out, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(s != nullptr, "device shim: null stream");
    *out = s->stream.native_handle();
  });
}

void mr_stream_free(MrStream* s) { delete s; }

int mr_event_new(MrEvent** out, char** err) {
  return mr::catching(err, kWhat, [&] {
    *out = new MrEvent{c10::Event(c10::DeviceType::CUDA, c10::EventFlag::PYTORCH_DEFAULT)};
  });
}

// Marks the point after the work queued on `s` so far.
int mr_event_record(MrEvent* e, const MrStream* s, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(e != nullptr && s != nullptr, "device shim: null event or stream");
    e->event.record(s->stream);
  });
}

// Work queued on `s` from now on waits for the event (the host does not wait).
int mr_event_block(const MrEvent* e, const MrStream* s, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(e != nullptr && s != nullptr, "device shim: null event or stream");
    e->event.block(s->stream);
  });
}

// *done = 1 when the work before the event's record has finished (or it was never recorded),
// else 0; the host does not wait.
int mr_event_query(const MrEvent* e, int* done, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(e != nullptr && done != nullptr, "device shim: null event");
    *done = e->event.query() ? 1 : 0;
  });
}

void mr_event_free(MrEvent* e) { delete e; }

// Tells the caching allocator that `t`'s memory is used on `s` too: it is not reused until the
// work queued on `s` at the time the tensor is freed has finished (Tensor.record_stream).
int mr_tensor_record_stream(const at::Tensor* t, const MrStream* s, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(t != nullptr && t->defined() && s != nullptr,
                "device shim: record_stream of an undefined tensor or null stream");
    cuda().recordDataPtrOnStream(t->storage().data_ptr(), s->stream);
  });
}

// dst.copy_(src, non_blocking=true): from pinned host memory, queued on the current stream
// without waiting for it (tch's copy_ blocks).
int mr_copy_nonblocking(const at::Tensor* dst, const at::Tensor* src, char** err) {
  return mr::catching(err, kWhat, [&] {
    TORCH_CHECK(dst != nullptr && src != nullptr && dst->defined() && src->defined(),
                "device shim: copy between undefined tensors");
    dst->copy_(*src, /*non_blocking=*/true);
  });
}

// An uninitialised 1-d host tensor of `numel` elements in page-locked (pinned) memory from
// libtorch's caching host allocator. dtype: 0 = uint8, 1 = int64, 2 = float32, 3 = int32,
// 4 = float64.
int mr_empty_pinned(int64_t numel, int dtype, at::Tensor** out, char** err) {
  return mr::catching(err, kWhat, [&] {
    at::ScalarType st;
    switch (dtype) {
      case 0: st = at::kByte; break;
      case 1: st = at::kLong; break;
      case 2: st = at::kFloat; break;
      case 3: st = at::kInt; break;
      case 4: st = at::kDouble; break;
      default: TORCH_CHECK(false, "device shim: unknown dtype code ", dtype);
    }
    *out = new at::Tensor(
        at::empty({numel}, at::TensorOptions().dtype(st).pinned_memory(true)));
  });
}

// TF32 for fp32 matmuls (cuBLAS) and convolutions (cuDNN), as torch.backends.cuda.matmul.
// allow_tf32 and torch.backends.cudnn.allow_tf32.
int mr_set_tf32(int matmul, int cudnn, char** err) {
  return mr::catching(err, kWhat, [&] {
    at::globalContext().setFloat32Precision(
        at::Float32Backend::CUDA, at::Float32Op::MATMUL,
        matmul != 0 ? at::Float32Precision::TF32 : at::Float32Precision::IEEE);
    at::globalContext().setFloat32Precision(
        at::Float32Backend::CUDA, at::Float32Op::CONV,
        cudnn != 0 ? at::Float32Precision::TF32 : at::Float32Precision::IEEE);
  });
}

// cuDNN benchmark mode (torch.backends.cudnn.benchmark): set, and read back as 1/0.
int mr_set_cudnn_benchmark(int on, char** err) {
  return mr::catching(err, kWhat, [&] { at::globalContext().setBenchmarkCuDNN(on != 0); });
}

int mr_get_cudnn_benchmark(int* on, char** err) {
  return mr::catching(err, kWhat, [&] { *on = at::globalContext().benchmarkCuDNN() ? 1 : 0; });
}

// 1/0 for the current TF32 settings of matmuls and convolutions.
int mr_get_tf32(int* matmul, int* cudnn, char** err) {
  return mr::catching(err, kWhat, [&] {
    *matmul = at::globalContext().float32Precision(at::Float32Backend::CUDA,
                                                   at::Float32Op::MATMUL) ==
                      at::Float32Precision::TF32
                  ? 1
                  : 0;
    *cudnn = at::globalContext().float32Precision(at::Float32Backend::CUDA,
                                                  at::Float32Op::CONV) ==
                     at::Float32Precision::TF32
                 ? 1
                 : 0;
  });
}

}  // extern "C"
