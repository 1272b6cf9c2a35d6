// The CPU emulator of CUDA's execution model (see cuda_emu.hpp): one fiber per CUDA thread,
// blocks one after another, a barrier switches fibers.
#include "cuda_emu.hpp"

#include <c10/util/Exception.h>

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

namespace mr::cuda_emu {
namespace {

// per fiber; only the touched pages are committed, and a c10::Error thrown inside a kernel
// (a bad shuffle mask) builds its message there
constexpr std::size_t kStackBytes = 256 * 1024;

// The fibers' stacks: one mapping, each stack with an inaccessible guard page below it (stacks
// grow down), so an overflow ends the process with a segmentation fault instead of silently
// overwriting the next fiber's frames. Kept and grown across launches (under g_launch_mu).
class Stacks {
 public:
  Stacks() = default;
  Stacks(const Stacks&) = delete;
  Stacks& operator=(const Stacks&) = delete;
  ~Stacks() { unmap(); }

  // Room for n fibers.
  void reserve(unsigned n) {
    if (n <= count_) return;
    unmap();
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    stride_ = page + kStackBytes;  // kStackBytes is a multiple of any page size in use
    const std::size_t bytes = stride_ * n;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    TORCH_CHECK(p != MAP_FAILED, "cuda emulator: cannot map ", bytes, " bytes of fiber stacks");
    base_ = static_cast<char*>(p);
    bytes_ = bytes;
    count_ = n;
    for (unsigned i = 0; i < n; ++i) {
      TORCH_CHECK(mprotect(base_ + i * stride_, page, PROT_NONE) == 0,
                  "cuda emulator: cannot protect a fiber stack's guard page");
    }
  }
  // The usable stack of fiber i: the top kStackBytes of its stride, above its guard page.
  char* stack(unsigned i) const { return base_ + (i + 1) * stride_ - kStackBytes; }

 private:
  void unmap() {
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = nullptr;
    bytes_ = count_ = 0;
  }
  char* base_ = nullptr;
  std::size_t bytes_ = 0, stride_ = 0;
  unsigned count_ = 0;
};

constexpr unsigned kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Threads wait at a barrier until `arrived` reaches `expected` (the threads of its scope that
// have not returned).
struct Barrier {
  unsigned expected = 0;
  unsigned arrived = 0;
  std::vector<unsigned> waiters;
};

struct Fiber {
  ucontext_t ctx{};
  Dim3 tid;
  bool done = false;
};

// The block being run on this OS thread.
struct Block {
  Dim3 grid, dim, idx;
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;
  Barrier block;
  std::vector<Barrier> warps;
  std::vector<float> lanes;  // __shfl_xor_sync's exchange slots, one per thread
  std::deque<unsigned> ready;
  unsigned current = 0;
  ucontext_t scheduler{};
  std::uint64_t rng = 0;
  std::exception_ptr error;  // the first exception a thread threw
};

thread_local Block* t_block = nullptr;
std::mutex g_launch_mu;  // one launch at a time: __shared__ is a function-local static
std::uint64_t g_launches = 0;
Stacks g_stacks;  // under g_launch_mu

Block& block() {
  TORCH_CHECK(t_block != nullptr, "cuda emulator: a CUDA built-in used outside a kernel launch");
  return *t_block;
}

std::uint64_t next_random(Block& k) {  // xorshift64
  k.rng ^= k.rng << 13;
  k.rng ^= k.rng >> 7;
  k.rng ^= k.rng << 17;
  return k.rng;
}

// The barrier's waiters become ready, in a shuffled order.
void release(Block& k, Barrier& b) {
  for (std::size_t i = b.waiters.size(); i > 1; --i) {
    std::swap(b.waiters[i - 1], b.waiters[next_random(k) % i]);
  }
  k.ready.insert(k.ready.end(), b.waiters.begin(), b.waiters.end());
  b.waiters.clear();
  b.arrived = 0;
}

void yield(Block& k) {
  // resumed by the scheduler once released
  TORCH_CHECK(swapcontext(&k.fibers[k.current].ctx, &k.scheduler) == 0,
              "cuda emulator: swapcontext failed");
}

void wait(Block& k, Barrier& b) {
  b.waiters.push_back(k.current);
  if (++b.arrived == b.expected) release(k, b);
  yield(k);
}

// A returned thread is no longer counted by its barriers (which may complete because of it).
// At a warp's shuffle that is an error: the lanes waiting there would read the slot of a lane
// that never wrote it (CUDA leaves a full-mask shuffle with an exited lane undefined). The
// launch fails with it; the waiters are still released so that the block can end.
void leave(Block& k, Barrier& b, bool warp) {
  if (warp && b.arrived > 0 && !k.error) {
    try {
      TORCH_CHECK(false, "cuda emulator: __shfl_xor_sync: a lane of the warp returned while ",
                  b.arrived, " other(s) waited in a shuffle (the full mask needs all 32)");
    } catch (...) {
      k.error = std::current_exception();
    }
  }
  --b.expected;
  if (b.arrived > 0 && b.arrived == b.expected) release(k, b);
}

void fiber_main() {
  Block& k = *t_block;
  const unsigned me = k.current;
  try {
    (*k.body)();
  } catch (...) {
    if (!k.error) k.error = std::current_exception();
  }
  k.fibers[me].done = true;
  leave(k, k.block, false);
  leave(k, k.warps[me / kWarp], true);
  // returning resumes uc_link: the scheduler
}

void run_block(Block& k) {
  const unsigned n = k.dim.x;
  k.block = Barrier{};
  k.block.expected = n;
  for (unsigned w = 0; w < k.warps.size(); ++w) {
    k.warps[w] = Barrier{};
    k.warps[w].expected = std::min(kWarp, n - w * kWarp);
  }
  k.ready.clear();
  std::vector<unsigned> order(n);
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = k.fibers[i];
    f.done = false;
    f.tid = Dim3{i, 0, 0};
    TORCH_CHECK(getcontext(&f.ctx) == 0, "cuda emulator: getcontext failed");
    f.ctx.uc_stack.ss_sp = g_stacks.stack(i);
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = &k.scheduler;
    makecontext(&f.ctx, fiber_main, 0);
    k.block.waiters.push_back(i);  // a shuffled start order, as a release gives
  }
  release(k, k.block);
  while (!k.ready.empty()) {
    k.current = k.ready.front();
    k.ready.pop_front();
    TORCH_CHECK(swapcontext(&k.scheduler, &k.fibers[k.current].ctx) == 0,
                "cuda emulator: swapcontext failed");
  }
  if (k.error) std::rethrow_exception(k.error);
  unsigned stuck = 0;
  for (const Fiber& f : k.fibers) stuck += f.done ? 0 : 1;
  TORCH_CHECK(stuck == 0, "cuda emulator: block (", k.idx.x, ", ", k.idx.y, "): ", stuck,
              " of ", n,
              " threads wait at a barrier the others never reach (__syncthreads or a warp "
              "shuffle in divergent code)");
}

}  // namespace

const Dim3& thread_idx() {
  Block& k = block();
  return k.fibers[k.current].tid;
}
const Dim3& block_idx() { return block().idx; }
const Dim3& block_dim() { return block().dim; }
const Dim3& grid_dim() { return block().grid; }

void sync_threads() {
  Block& k = block();
  wait(k, k.block);
}

float shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  Block& k = block();
  TORCH_CHECK(mask == kFullMask, "cuda emulator: __shfl_xor_sync with mask ", mask,
              ": only the full warp (0xffffffff) is modelled");
  const unsigned me = k.current, warp = me / kWarp, lane = me % kWarp;
  Barrier& b = k.warps[warp];
  TORCH_CHECK(b.expected == kWarp, "cuda emulator: __shfl_xor_sync with ", b.expected,
              " live lanes: the full mask needs all 32");
  k.lanes[me] = v;
  wait(k, b);  // every lane has written (a lane that returns meanwhile is an error: leave)
  const unsigned src = lane ^ static_cast<unsigned>(lane_mask);
  const float r = src < kWarp ? k.lanes[warp * kWarp + src] : v;
  wait(k, b);  // every lane has read before any writes again
  return r;
}

void launch(unsigned gx, unsigned gy, unsigned threads, const std::function<void()>& body) {
  // CUDA's limits: at most 1024 threads per block, gridDim.x < 2^31, gridDim.y <= 65535
  TORCH_CHECK(threads >= 1 && threads <= 1024, "cuda emulator: ", threads,
              " threads per block (CUDA allows 1 to 1024)");
  TORCH_CHECK(gx >= 1 && gx <= 0x7fffffffu && gy >= 1 && gy <= 65535,
              "cuda emulator: grid (", gx, ", ", gy, ") outside CUDA's limits");
  // before the lock, which this thread would hold already
  TORCH_CHECK(t_block == nullptr, "cuda emulator: a launch from inside a kernel");
  std::lock_guard<std::mutex> lock(g_launch_mu);
  Block k;
  k.grid = Dim3{gx, gy, 1};
  k.dim = Dim3{threads, 1, 1};
  k.body = &body;
  k.fibers.resize(threads);
  g_stacks.reserve(threads);
  k.warps.resize((threads + kWarp - 1) / kWarp);
  k.lanes.assign(threads, 0.f);
  k.rng = 0x9e3779b97f4a7c15ull ^ (++g_launches * 0xbf58476d1ce4e5b9ull);
  if (k.rng == 0) k.rng = 1;
  struct Reset {
    ~Reset() { t_block = nullptr; }
  } reset;
  t_block = &k;
  for (unsigned y = 0; y < gy; ++y) {
    for (unsigned x = 0; x < gx; ++x) {
      k.idx = Dim3{x, y, 0};
      run_block(k);
    }
  }
}

}  // namespace mr::cuda_emu
