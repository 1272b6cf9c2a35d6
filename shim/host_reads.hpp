// The ops that read a tensor's value back to the host: item(), double_value(), int64_value(),
// bool conversions, equal. On a GPU each one makes the host wait for the device.
// Two users share the list: the host-read counter of the tests (tensor.cpp) and the CUDA graph
// capture check (graph.cpp).
#pragma once

#include <cstring>

namespace mr {

// The primitives that every value read goes through. Counting them at any depth counts each
// read once. `aten::item` is the public op around `_local_scalar_dense`; count it only at the
// top level, where the caller's own code should be named.
inline bool is_host_value_read(const char* op_name) {
  return std::strcmp(op_name, "aten::_local_scalar_dense") == 0 ||
         std::strcmp(op_name, "aten::is_nonzero") == 0 ||
         std::strcmp(op_name, "aten::equal") == 0;
}

}  // namespace mr
