// The c10d process group shared by mlperf-run's distributed shims: dist.cpp (rendezvous,
// blocking collectives) and reducer.cpp (gradient buckets all-reduced during backward).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "error.hpp"

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mr {

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
  std::chrono::milliseconds timeout;
  int rank;
  int size;
  bool failed = false;
  // NCCL: waits are stream-ordered (see wait_one)
  bool stream_ordered_waits = false;
  // the rendezvous port (rank 0 serves the store there)
  uint16_t port = 0;
  // rounds of mr_dist_agree so far (the same on every rank)
  unsigned long long agreements = 0;
  // rounds of mr_dist_gather_notes so far (the same on every rank)
  unsigned long long gathers = 0;
};

// A group formed without a backend (the store only) takes no collective.
inline void require_backend(const Group* g) {
  if (!g->backend) {
    throw std::runtime_error("this process group has no communication backend (store only)");
  }
}

// Runs f; on an exception stores its message in *err, marks the group failed, returns -1.
template <typename F>
int guarded(Group* g, char** err, F&& f) {
  int rc = catching(err, "c10d shim", std::forward<F>(f));
  if (rc != 0 && g) g->failed = true;
  return rc;
}

// Waits for one collective.
// Gloo: the calling thread blocks at most the group's timeout, then throws.
// NCCL: the wait is stream-ordered: the current CUDA stream waits for the collective's end
// event, the host does not block. A timed wait would spin the host on the event until the
// collective completes, which (1) stalls the host's launches of the work queued after it (the
// optimizer kernels wait for the host, not for the GPU) and (2) cannot be captured in a CUDA
// graph (querying an event recorded during a capture is illegal). Anything that reads a
// result on the host goes through a copy on the current stream, which orders after the wait.
// A dead or stuck peer in an eager collective is caught by ProcessGroupNCCL's watchdog with the
// same timeout (the group's options), which ends the process with its own message. Collectives
// replayed from a CUDA graph are not watched (ProcessGroupNCCL registers work with its watchdog
// only outside a capture): for them the trainer bounds its wait for the GPU before each loss
// read by the same timeout and then aborts the group (src/train/engine.rs wait_for_peers).
inline void wait_one(Group* g, const c10::intrusive_ptr<c10d::Work>& w) {
  if (g->stream_ordered_waits) {
    w->wait();
    return;
  }
  if (!w->wait(g->timeout)) {
    throw std::runtime_error("collective did not complete within " +
                             std::to_string(g->timeout.count()) + " ms");
  }
}

}  // namespace mr
