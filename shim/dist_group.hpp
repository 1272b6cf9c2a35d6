// The c10d process group shared by mlperf-run's distributed shims: dist.cpp (rendezvous,
// blocking collectives) and reducer.cpp (gradient buckets all-reduced during backward).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "error.hpp"

#include <chrono>
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
};

// Runs f; on an exception stores its message in *err, marks the group failed, returns -1.
template <typename F>
int guarded(Group* g, char** err, F&& f) {
  int rc = catching(err, "c10d shim", std::forward<F>(f));
  if (rc != 0 && g) g->failed = true;
  return rc;
}

// Waits for one collective at most the group's timeout.
inline void wait_one(Group* g, const c10::intrusive_ptr<c10d::Work>& w) {
  if (!w->wait(g->timeout)) {
    throw std::runtime_error("collective did not complete within " +
                             std::to_string(g->timeout.count()) + " ms");
  }
}

}  // namespace mr
