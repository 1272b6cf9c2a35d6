// mlperf-run's gradient reducer: every gradient bucket is all-reduced asynchronously as soon as
// the backward pass has produced all of its gradients, in the order of PyTorch DDP's reducer
// (buckets launched strictly in bucket order, so every rank issues the same collectives in the
// same order), and the optimizer waits on the work handles (src/dist/reducer.rs).
//
// tch has no autograd hooks, so they are registered here, once per parameter, and stay until
// the reducer is freed; they act only while the reducer is armed (the backward of a step's last
// micro-batch):
// - `loss.backward()` into .grad buffers: a post-accumulate-grad hook (the parameter's .grad is
//   final once AccumulateGrad has added the last micro-batch into it);
// - `torch.autograd.grad` (fresh gradient tensors): a tensor hook on the parameter, which
//   autograd runs on the captured gradient; it adds the gradient into the step's accumulator
//   (the earlier micro-batches' sum, as the caller would have) and returns the sum.
// Either hook copies the final gradient into its slot of the bucket's flat buffer. The
// arithmetic is exactly that of the blocking path (copy in, sum all-reduce, divide by the world
// size, copy out), so results are bit-identical to it.
//
// No C++ exception crosses the C boundary; an error inside a hook is kept and reported by
// mr_reducer_finish (a hook must not throw into the autograd engine).
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "dist_group.hpp"
#include "error.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

enum Mode : int { kOff = 0, kGradBuffers = 1, kReturned = 2 };

// Runs f; keeps the message of its exception (the first one) in `error`.
template <typename F>
void keep_first_error(std::string& error, F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    if (error.empty()) error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    if (error.empty()) error = e.what();
  } catch (...) {
    if (error.empty()) error = "unknown C++ exception";
  }
}

struct Slot {
  int64_t bucket;
  int64_t offset;
  int64_t numel;
};

struct Bucket {
  at::Tensor flat;
  int members = 0;
  int filled = 0;
  c10::intrusive_ptr<c10d::Work> work;
  // completes after the done time is recorded (timing only)
  c10::intrusive_ptr<c10::ivalue::Future> timed;
  double t_ready = -1, t_launch = -1;
  std::shared_ptr<std::atomic<double>> t_done = std::make_shared<std::atomic<double>>(-1);
};

struct Reducer;

struct PostAccumulateHook : torch::autograd::PostAccumulateGradHook {
  Reducer* r;
  size_t index;
  PostAccumulateHook(Reducer* r, size_t index) : r(r), index(index) {}
  void operator()(const torch::autograd::Variable& param) override;
};

struct Reducer {
  mr::Group* g;
  std::vector<at::Tensor> params;
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  std::vector<std::vector<size_t>> members;  // per bucket: its parameters
  std::vector<unsigned> tensor_hooks;

  std::mutex mu;
  std::atomic<int> mode{kOff};
  std::vector<at::Tensor> accum;
  std::vector<char> filled;
  size_t next_launch = 0;
  double clip = 0;  // > 0: bucket-wise clipping before the all-reduce
  bool timing = false;
  Clock::time_point t0;
  std::vector<int64_t> order;  // parameters in the order their gradients became final
  std::string error;           // first error inside a hook
  // timings of the last finished step (seconds from arming)
  std::vector<double> last_timings;
  uint64_t launches = 0, bytes = 0;

  double since_arm() const {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void launch(size_t b) {
    auto& bk = buckets[b];
    if (clip > 0) {
      // g_b *= c / max(|g_b|, c), on this rank's gradients, before they are summed
      auto scale = bk.flat.norm().clamp_min(clip).reciprocal().mul(clip);
      bk.flat.mul_(scale);
    }
    std::vector<at::Tensor> one{bk.flat};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = g->timeout;
    bk.t_launch = since_arm();
    bk.work = g->backend->allreduce(one, o);
    launches += 1;
    bytes += static_cast<uint64_t>(bk.flat.numel()) * bk.flat.element_size();
    if (timing) {
      auto done = bk.t_done;
      auto start = t0;
      bk.timed = bk.work->getFuture()->then(
          [done, start](c10::ivalue::Future&) {
            done->store(std::chrono::duration<double>(Clock::now() - start).count());
            return c10::IValue();
          },
          c10::NoneType::get());
    }
  }

  // Launches every complete bucket that is next in order.
  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].filled == buckets[next_launch].members) {
      launch(next_launch++);
    }
  }

  // Copies parameter i's final gradient into its bucket slot (lock held).
  void fill(size_t i, const at::Tensor& grad) {
    if (filled[i]) return;
    TORCH_CHECK(grad.defined(), "parameter #", i, " has no gradient");
    const auto& s = slots[i];
    auto& bk = buckets[s.bucket];
    TORCH_CHECK(grad.numel() == s.numel, "parameter #", i, "'s gradient has ", grad.numel(),
                " elements, its bucket slot ", s.numel);
    bk.flat.narrow(0, s.offset, s.numel).view(grad.sizes()).copy_(grad);
    filled[i] = 1;
    order.push_back(static_cast<int64_t>(i));
    if (++bk.filled == bk.members) bk.t_ready = since_arm();
  }

  void on_final_grad(size_t i, const at::Tensor& grad) {
    fill(i, grad);
    launch_ready();
  }

  // The post-accumulate-grad hook: param.grad() is final.
  void on_grad_buffer(size_t i, const at::Tensor& param) {
    if (mode.load() != kGradBuffers) return;
    std::lock_guard<std::mutex> lk(mu);
    if (!error.empty()) return;
    keep_first_error(error, [&] {
      at::NoGradGuard no_grad;
      on_final_grad(i, param.grad());
    });
  }

  // The tensor hook: `grad` is this micro-batch's gradient of parameter i. Returns the final
  // gradient (accumulator + grad) or an undefined tensor for "unchanged".
  at::Tensor on_returned_grad(size_t i, const at::Tensor& grad) {
    if (mode.load() != kReturned) return at::Tensor();
    std::lock_guard<std::mutex> lk(mu);
    if (!error.empty()) return at::Tensor();
    at::Tensor out;
    keep_first_error(error, [&] {
      at::NoGradGuard no_grad;
      if (!accum.empty() && accum[i].defined()) {
        accum[i].add_(grad);
        out = accum[i];
      } else {
        out = grad;
      }
      on_final_grad(i, out);
    });
    return out;
  }
};

void PostAccumulateHook::operator()(const torch::autograd::Variable& param) {
  r->on_grad_buffer(index, param);
}

void remove_hooks(Reducer* r) {
  for (size_t i = 0; i < r->params.size(); ++i) {
    try {
      if (i < r->tensor_hooks.size()) r->params[i].remove_hook(r->tensor_hooks[i]);
      torch::autograd::impl::set_post_acc_grad_hooks(r->params[i], nullptr);
    } catch (...) {
    }
  }
}

std::vector<at::Tensor> collect(at::Tensor** tensors, size_t n, const char* what) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    TORCH_CHECK(tensors[i] != nullptr && tensors[i]->defined(), what, " #", i, " is undefined");
    out.push_back(*tensors[i]);
  }
  return out;
}

}  // namespace

extern "C" {

// A reducer over `params` (trainable, in the gradient list's order) for `group`: parameter i's
// gradient goes to bucket bucket_of[i] at element offset_of[i] of flats[bucket_of[i]] (flat,
// contiguous, on the backend's device). Installs the hooks (inactive until armed).
void* mr_reducer_new(void* group, at::Tensor** params, size_t n, const int64_t* bucket_of,
                     const int64_t* offset_of, at::Tensor** flats, size_t n_buckets, char** err) {
  Reducer* r = nullptr;
  int rc = mr::catching(err, "gradient reducer", [&] {
    TORCH_CHECK(group != nullptr, "reducer: no process group");
    auto ps = collect(params, n, "parameter");
    auto fs = collect(flats, n_buckets, "bucket buffer");
    auto out = std::make_unique<Reducer>();
    out->g = static_cast<mr::Group*>(group);
    out->buckets.resize(n_buckets);
    for (size_t b = 0; b < n_buckets; ++b) {
      TORCH_CHECK(fs[b].dim() == 1 && fs[b].is_contiguous(), "bucket #", b, " is not flat");
      out->buckets[b].flat = fs[b];
    }
    for (size_t i = 0; i < n; ++i) {
      TORCH_CHECK(ps[i].requires_grad(), "parameter #", i, " does not require a gradient");
      int64_t b = bucket_of[i];
      TORCH_CHECK(b >= 0 && static_cast<size_t>(b) < n_buckets, "parameter #", i,
                  " is in bucket ", b, " of ", n_buckets);
      int64_t numel = ps[i].numel();
      TORCH_CHECK(offset_of[i] >= 0 && offset_of[i] + numel <= fs[b].numel(), "parameter #", i,
                  " does not fit its bucket");
      out->slots.push_back(Slot{b, offset_of[i], numel});
      out->buckets[b].members += 1;
    }
    out->members.resize(n_buckets);
    for (size_t i = 0; i < n; ++i) out->members[out->slots[i].bucket].push_back(i);
    out->params = ps;
    out->filled.assign(n, 0);
    Reducer* raw = out.get();
    for (size_t i = 0; i < n; ++i) {
      torch::autograd::impl::set_post_acc_grad_hooks(
          ps[i], std::make_unique<PostAccumulateHook>(raw, i));
      raw->tensor_hooks.push_back(ps[i].register_hook(
          [raw, i](const at::Tensor& grad) { return raw->on_returned_grad(i, grad); }));
    }
    r = out.release();
  });
  return rc == 0 ? r : nullptr;
}

// Removes the hooks and frees the reducer. With the group failed, collectives may still be in
// flight on a dead connection: the hooks go, the rest is leaked (the run is ending).
void mr_reducer_free(void* handle) {
  auto* r = static_cast<Reducer*>(handle);
  if (r == nullptr) return;
  r->mode.store(kOff);
  remove_hooks(r);
  if (r->g->failed) return;
  try {
    delete r;
  } catch (...) {
  }
}

// Arms the hooks for the next backward: mode 1 = .grad buffers, 2 = returned gradients (with
// `accum`, n_accum == number of parameters, the earlier micro-batches' sums, or n_accum == 0).
// clip > 0: bucket-wise clipping. timing != 0: record per-bucket times.
int mr_reducer_arm(void* handle, int mode, at::Tensor** accum, size_t n_accum, double clip,
                   int timing, char** err) {
  auto* r = static_cast<Reducer*>(handle);
  return mr::catching(err, "gradient reducer", [&] {
    std::lock_guard<std::mutex> lk(r->mu);
    TORCH_CHECK(mode == kGradBuffers || mode == kReturned, "reducer: unknown mode ", mode);
    TORCH_CHECK(n_accum == 0 || n_accum == r->params.size(), "reducer: ", n_accum,
                " accumulators for ", r->params.size(), " parameters");
    TORCH_CHECK(r->mode.load() == kOff && r->next_launch == 0,
                "reducer: armed again before the previous step finished");
    r->order.clear();
    r->accum.clear();
    for (size_t i = 0; i < n_accum; ++i) {
      r->accum.push_back(accum[i] ? *accum[i] : at::Tensor());
    }
    r->clip = clip;
    r->timing = timing != 0;
    r->error.clear();
    r->t0 = Clock::now();
    r->mode.store(mode);
  });
}

// After the backward: fills the slots of parameters whose hooks did not fire from `grads`
// (same order as the parameters), launches the remaining buckets in order, waits on every
// bucket's work (at most the group's timeout each), divides by the world size and copies the
// averages into `grads`. Disarms the hooks.
int mr_reducer_finish(void* handle, at::Tensor** grads, size_t n, char** err) {
  auto* r = static_cast<Reducer*>(handle);
  return mr::guarded(r->g, err, [&] {
    r->mode.store(kOff);
    std::lock_guard<std::mutex> lk(r->mu);
    double t_backward_end = r->since_arm();
    if (!r->error.empty()) {
      throw std::runtime_error("in a gradient hook during backward: " + r->error);
    }
    TORCH_CHECK(n == r->params.size(), "reducer: ", n, " gradients for ", r->params.size(),
                " parameters");
    auto gs = collect(grads, n, "gradient");
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < n; ++i) r->fill(i, gs[i]);
    r->launch_ready();
    // bucket by bucket, in launch order: the averaging and copy-out of one bucket overlap the
    // all-reduces still in flight
    for (size_t b = 0; b < r->buckets.size(); ++b) {
      auto& bk = r->buckets[b];
      mr::wait_one(r->g, bk.work);
      if (r->timing && bk.timed) bk.timed->wait();
      if (r->g->size > 1) bk.flat.div_(r->g->size);
      for (size_t i : r->members[b]) {
        const auto& s = r->slots[i];
        gs[i].copy_(bk.flat.narrow(0, s.offset, s.numel).view(gs[i].sizes()));
      }
    }
    r->last_timings.clear();
    r->last_timings.push_back(t_backward_end);
    r->last_timings.push_back(r->since_arm());
    for (auto& bk : r->buckets) {
      r->last_timings.push_back(bk.t_ready);
      r->last_timings.push_back(bk.t_launch);
      r->last_timings.push_back(bk.t_done->load());
      bk.filled = 0;
      bk.work.reset();
      bk.timed.reset();
      bk.t_ready = bk.t_launch = -1;
      bk.t_done->store(-1);
    }
    std::fill(r->filled.begin(), r->filled.end(), 0);
    r->next_launch = 0;
    r->accum.clear();
  });
}

// The parameters in the order their gradients became final in the last step (hooks first, then
// those filled by mr_reducer_finish); writes at most `cap`, returns the count.
size_t mr_reducer_order(void* handle, int64_t* out, size_t cap) {
  auto* r = static_cast<Reducer*>(handle);
  std::lock_guard<std::mutex> lk(r->mu);
  size_t n = std::min(cap, r->order.size());
  for (size_t i = 0; i < n; ++i) out[i] = r->order[i];
  return r->order.size();
}

// Times of the last finished step, seconds from arming: [backward end, averages ready, then per
// bucket (ready, launched, all-reduce done; -1 when not recorded)]. Returns the count.
size_t mr_reducer_timings(void* handle, double* out, size_t cap) {
  auto* r = static_cast<Reducer*>(handle);
  std::lock_guard<std::mutex> lk(r->mu);
  size_t n = std::min(cap, r->last_timings.size());
  for (size_t i = 0; i < n; ++i) out[i] = r->last_timings[i];
  return r->last_timings.size();
}

// All-reduces launched and their bytes, since the reducer was made.
void mr_reducer_counters(void* handle, uint64_t* launches, uint64_t* bytes) {
  auto* r = static_cast<Reducer*>(handle);
  std::lock_guard<std::mutex> lk(r->mu);
  *launches = r->launches;
  *bytes = r->bytes;
}

}  // extern "C"
