// mlperf-run's c10d shim: a process group (TCPStore rendezvous + Gloo or NCCL backend) with
// allreduce, broadcast and barrier, behind a small C API for Rust (src/shim/dist.rs).
//
// Rules of this file: no C++ exception crosses the C boundary (every entry point catches and
// returns the message through `err`, see error.hpp); every collective waits
// with the group's timeout, so a dead or stuck peer ends the call with an error.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef MLPERF_RUN_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "dist_group.hpp"
#include "error.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

using mr::Group;
using mr::guarded;

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// Whether every IPv4/IPv6 address this host's name resolves to is a loopback one (so Gloo's
// default device would bind, and advertise, 127.x: the containers' and VMs' /etc/hosts).
bool hostname_is_loopback(std::string* name) {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return false;
  *name = buf;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  if (getaddrinfo(buf, nullptr, &hints, &res) != 0 || res == nullptr) return false;
  bool all = true;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char ip[INET6_ADDRSTRLEN] = {};
    const void* src = a->ai_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (inet_ntop(a->ai_family, src, ip, sizeof(ip)) == nullptr || !is_loopback(ip)) all = false;
  }
  freeaddrinfo(res);
  return all;
}

// The local address this host sends from to reach `host` (a UDP socket's connect picks the
// route; no packet is sent), or "" when there is none.
std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return {};
  std::string out;
  int fd = socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char ip[INET_ADDRSTRLEN] = {};
      if (inet_ntop(AF_INET, &local.sin_addr, ip, sizeof(ip)) != nullptr) out = ip;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& master) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
    if (*ifname) return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  // All ranks on this host talking to a loopback master: bind gloo to loopback too.
  if (is_loopback(master)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  // A remote master: bind to the address this host reaches it from (the peers reach us on that
  // network too). Gloo's default device binds whatever this host's name resolves to, which in
  // many containers and VMs is 127.x: it would advertise loopback and the group would never form
  // (each collective waiting out the timeout).
  const std::string local = local_address_towards(master);
  if (!local.empty() && !is_loopback(local)) {
    return c10d::ProcessGroupGloo::createDeviceForHostname(local);
  }
  std::string name;
  TORCH_CHECK(!hostname_is_loopback(&name), "this host's name (", name,
              ") resolves to a loopback address and no route to MASTER_ADDR ", master,
              " was found: set GLOO_SOCKET_IFNAME to the network interface that reaches it");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

void wait_all(Group* g, std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
  for (auto& w : works) mr::wait_one(g, w);
}

// Groups this process has formed, per rendezvous port and rank: every rank of a run set forms
// one per run, in step, so the n-th group of each rank is the same group. Its keys carry n: a
// rank that finished run n-1 early and connects while rank 0 still serves run n-1's store (the
// port is the same) sees no key of group n there, drops that connection and connects again.
// Counted per (port, rank), not per process, so that two ranks in one process (a unit test's
// threads) each count their own groups.
std::mutex formed_mutex;
std::map<std::pair<uint16_t, int>, unsigned long long> groups_formed;

unsigned long long next_generation(uint16_t port, int rank) {
  std::lock_guard<std::mutex> lock(formed_mutex);
  return ++groups_formed[{port, rank}];
}

std::string joined_key(unsigned long long generation, int rank) {
  return "mlperf-run/" + std::to_string(generation) + "/joined/" + std::to_string(rank);
}

// What a rank writes under its joined key: "<world size> <host name>".
std::vector<uint8_t> joined_value(int size) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string v = std::to_string(size) + " " + host;
  return std::vector<uint8_t>(v.begin(), v.end());
}

// The world size and host a joined key names; size -1 where it names none (an older build's).
std::pair<long, std::string> parse_joined(const std::vector<uint8_t>& value) {
  const std::string v(value.begin(), value.end());
  const auto space = v.find(' ');
  if (v.empty() || space == std::string::npos || v.find_first_not_of("0123456789") != space) {
    return {-1, ""};
  }
  try {
    return {std::stol(v.substr(0, space)), v.substr(space + 1)};
  } catch (const std::exception&) {
    return {-1, ""};
  }
}

const char* const kSameWorld =
    ": start every rank with the same world size (WORLD_SIZE, or Slurm's SLURM_NTASKS; with "
    "`mlperf-run launch`, the same --nnodes and --nproc-per-node on every node)";

// Rank 0: the ranks among `ranks` (all joined) that were started with another world size than
// `size`, as "rank 3 (host h, 16 ranks)", comma-separated; "" when none.
std::string other_worlds(c10d::Store& store, const std::vector<int>& ranks, int size,
                         unsigned long long generation) {
  std::vector<std::string> keys;
  for (int r : ranks) keys.push_back(joined_key(generation, r));
  if (keys.empty()) return {};
  const auto values = store.multiGet(keys);
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    const auto [world, host] = parse_joined(values[i]);
    if (world < 0 || world == size) continue;
    out += (out.empty() ? "" : ", ") + std::string("rank ") + std::to_string(ranks[i]) +
           " (host " + host + ", " + std::to_string(world) + " ranks)";
  }
  return out;
}

// Rank 0's store of the last group without a backend (the ranks' check of their job before the
// first run), when it ended well: kept serving, so that the next group on its port (the first
// run's) takes it over, and the other ranks, which left the check at once, find a store that
// answers rather than a closed port and the connection's back-off (half a second or more).
c10::intrusive_ptr<c10d::Store> kept_store;
uint16_t kept_port = 0;
// guards kept_store and kept_port (groups may form and end in several threads: tests)
std::mutex kept_mutex;

// Rank 0's kept store on `port`, taken (null when none is kept there); any other kept store is
// dropped.
c10::intrusive_ptr<c10d::Store> take_kept_store(uint16_t port) {
  std::lock_guard<std::mutex> lock(kept_mutex);
  c10::intrusive_ptr<c10d::Store> store;
  if (kept_store && kept_port == port) store = std::move(kept_store);
  kept_store.reset();
  return store;
}

// Rank 0's store for group `generation`, or (other ranks) a connection to it: a store without
// rank 0's key of this generation is the previous group's, still being torn down; it is left
// and the connection tried again until `deadline`.
c10::intrusive_ptr<c10d::Store> connect_store(const std::string& master, c10d::TCPStoreOptions so,
                                              int rank, int size, unsigned long long generation,
                                              std::chrono::steady_clock::time_point deadline) {
  using namespace std::chrono;
  const std::string rank0 = joined_key(generation, 0);
  for (;;) {
    auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
    so.timeout = std::max(left, milliseconds(1000));
    if (rank == 0) {
      c10::intrusive_ptr<c10d::Store> store = take_kept_store(so.port);
      if (store) {
        store->setTimeout(so.timeout);
      } else {
        store = c10::make_intrusive<c10d::TCPStore>(master, so);
      }
      store->set(rank0, joined_value(size));
      return store;
    }
    try {
      auto store = c10::make_intrusive<c10d::TCPStore>(master, so);
      // rank 0 writes its key right after it starts serving: give it a moment
      const auto until = steady_clock::now() + milliseconds(2000);
      while (steady_clock::now() < until) {
        if (store->check({rank0})) return store;
        std::this_thread::sleep_for(milliseconds(20));
      }
    } catch (const std::exception&) {
      // the previous group's store closed under us, or nothing listens yet: try again below
      if (steady_clock::now() >= deadline) throw;
    }
    if (steady_clock::now() >= deadline) {
      throw std::runtime_error("rendezvous timed out: the store at " + master +
                               " never served group " + std::to_string(generation) +
                               " of this run set (is rank 0 on the same run?)");
    }
    std::this_thread::sleep_for(milliseconds(200));
  }
}

// Rank 0 waits until every rank has written its "joined" key into the store, at most `timeout`;
// then throws naming the ranks that never came. A rank that joined with another world size
// than rank 0's (a node started with another WORLD_SIZE) is named at once, or with the missing
// ranks at the timeout (a smaller world: its ranks above it never come).
void wait_for_every_rank(c10d::Store& store, int size, unsigned long long generation,
                         std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  std::vector<int> all;
  for (int r = 0; r < size; ++r) {
    keys.push_back(joined_key(generation, r));
    all.push_back(r);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!store.check(keys)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      std::vector<int> joined;
      for (int r = 0; r < size; ++r) {
        if (store.check({keys[r]})) {
          joined.push_back(r);
        } else {
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
      }
      const std::string others = other_worlds(store, joined, size, generation);
      throw std::runtime_error(
          "rendezvous timed out after " + std::to_string(timeout.count() / 1000) + " s: " +
          std::to_string(joined.size()) + " of " + std::to_string(size) +
          " ranks joined; missing ranks: " + missing +
          (others.empty() ? std::string()
                          : "; joined with another world size than rank 0's " +
                                std::to_string(size) + ": " + others + kSameWorld));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string others = other_worlds(store, all, size, generation);
  if (!others.empty()) {
    throw std::runtime_error("ranks joined with another world size than rank 0's " +
                             std::to_string(size) + ": " + others + kSameWorld);
  }
}

std::vector<at::Tensor> collect(at::Tensor** tensors, size_t n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (tensors[i] == nullptr || !tensors[i]->defined()) {
      throw std::runtime_error("tensor #" + std::to_string(i) + " is undefined");
    }
    out.push_back(*tensors[i]);
  }
  return out;
}

}  // namespace

extern "C" {

// backend: 0 = gloo (CPU tensors), 1 = nccl (CUDA tensors; needs the `nccl` build), 2 = none:
// the rendezvous and the store only, no collective (the store calls below work), for the
// ranks' agreement on their job before the first run.
// timeout_ms bounds every collective (and NCCL's watchdog); rendezvous_ms bounds forming the
// group: the store's connection and rank 0's wait for every rank to join.
void* mr_dist_new(const char* master_addr, uint16_t port, int rank, int size, int backend,
                  int64_t timeout_ms, int64_t rendezvous_ms, char** err) {
  Group* g = nullptr;
  int rc = guarded(nullptr, err, [&] {
    if (size < 1 || rank < 0 || rank >= size) {
      throw std::runtime_error("invalid rank " + std::to_string(rank) + " for world size " +
                               std::to_string(size));
    }
    auto timeout = std::chrono::milliseconds(timeout_ms);
    auto rendezvous = std::chrono::milliseconds(rendezvous_ms);
    c10d::TCPStoreOptions so;
    so.port = port;
    so.isServer = rank == 0;
    so.numWorkers = static_cast<size_t>(size);
    // rank 0 waits below, where it can name the ranks that never came
    so.waitWorkers = false;
    const unsigned long long generation = next_generation(port, rank);
    auto store = connect_store(master_addr, so, rank, size, generation,
                               std::chrono::steady_clock::now() + rendezvous);
    if (rank == 0) {
      wait_for_every_rank(*store, size, generation, rendezvous);
    } else {
      store->set(joined_key(generation, rank), joined_value(size));
      // joined first, so that rank 0 names this rank too
      const auto [world, host] = parse_joined(store->get(joined_key(generation, 0)));
      if (world >= 0 && world != size) {
        throw std::runtime_error("rank 0 (host " + host + ") was started with a world of " +
                                 std::to_string(world) + " ranks, this rank with " +
                                 std::to_string(size) + kSameWorld);
      }
    }
    c10::intrusive_ptr<c10d::Backend> be;
    if (backend == 0) {
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
      opts->devices.push_back(gloo_device(master_addr));
      be = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
    } else if (backend == 1) {
#ifdef MLPERF_RUN_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      be = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
#else
      throw std::runtime_error(
          "this mlperf-run was built without NCCL (`--no-default-features`): rebuild it with the "
          "default features (scripts/mlperf-run), or use the gloo backend");
#endif
    } else if (backend != 2) {
      throw std::runtime_error("unknown backend id " + std::to_string(backend));
    }
    // the group formed: from now on a store call waits no longer than a collective
    store->setTimeout(timeout);
    g = new Group{store, be, timeout, rank, size};
    g->port = port;
    g->stream_ordered_waits = backend == 1;
  });
  return rc == 0 ? g : nullptr;
}

// Destroys the group as torch.distributed.destroy_process_group() does: a healthy group is
// shut down (ProcessGroupNCCL flushes and destroys its communicators; without it NCCL warns
// "destroy_process_group() was not called" at exit) and freed. A group that saw an error may
// have a worker thread stuck in a dead connection: it is aborted (NCCL: ncclCommAbort; a no-op
// for Gloo) and leaked on purpose, since joining its threads could hang (the process is about
// to end anyway).
void mr_dist_free(void* handle) {
  auto* g = static_cast<Group*>(handle);
  if (g == nullptr) return;
  if (g->failed) {
    try {
      if (g->backend) g->backend->abort();
    } catch (...) {
    }
    g->backend.release();
    g->store.release();
    return;
  }
  try {
    if (g->backend) g->backend->shutdown();
  } catch (...) {
  }
  if (!g->backend && g->rank == 0 && g->size > 1) {
    std::lock_guard<std::mutex> lock(kept_mutex);
    kept_store = g->store;
    kept_port = g->port;
  }
  try {
    delete g;
  } catch (...) {
  }
}

// Marks the group failed, as an error in one of its calls does: mr_dist_free (and the
// reducer's free) will abort it instead of shutting it down, and nothing waits for its
// collectives (which a dead peer may hold forever).
void mr_dist_mark_failed(void* handle) {
  if (handle != nullptr) static_cast<Group*>(handle)->failed = true;
}

// Whether the group is marked failed (1) or not (0).
int mr_dist_is_failed(const void* handle) {
  return handle != nullptr && static_cast<const Group*>(handle)->failed ? 1 : 0;
}

// op: 0 = sum, 1 = average, 2 = max, 3 = min. In place on every tensor.
int mr_dist_allreduce(void* handle, at::Tensor** tensors, size_t n, int op, char** err) {
  auto* g = static_cast<Group*>(handle);
  return guarded(g, err, [&] {
    mr::require_backend(g);
    auto ts = collect(tensors, n);
    c10d::AllreduceOptions o;
    o.timeout = g->timeout;
    switch (op) {
      case 0: case 1: o.reduceOp = c10d::ReduceOp::SUM; break;
      case 2: o.reduceOp = c10d::ReduceOp::MAX; break;
      case 3: o.reduceOp = c10d::ReduceOp::MIN; break;
      default: throw std::runtime_error("unknown reduce op id " + std::to_string(op));
    }
    // c10d treats a multi-tensor list as one tensor per device; reduce each on its own.
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (auto& t : ts) {
      std::vector<at::Tensor> one{t};
      works.push_back(g->backend->allreduce(one, o));
    }
    wait_all(g, works);
    if (op == 1 && g->size > 1) {
      for (auto& t : ts) t.div_(g->size);
    }
  });
}

int mr_dist_broadcast(void* handle, at::Tensor** tensors, size_t n, int root, char** err) {
  auto* g = static_cast<Group*>(handle);
  return guarded(g, err, [&] {
    mr::require_backend(g);
    auto ts = collect(tensors, n);
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = g->timeout;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (auto& t : ts) {
      std::vector<at::Tensor> one{t};
      works.push_back(g->backend->broadcast(one, o));
    }
    wait_all(g, works);
  });
}

int mr_dist_barrier(void* handle, char** err) {
  auto* g = static_cast<Group*>(handle);
  return guarded(g, err, [&] {
    mr::require_backend(g);
    c10d::BarrierOptions o;
    o.timeout = g->timeout;
    std::vector<c10::intrusive_ptr<c10d::Work>> works{g->backend->barrier(o)};
    wait_all(g, works);
  });
}

// Every rank's outcome at one point of the run, exchanged through the group's TCPStore (host
// only: it works when the device, or the backend's communicator, cannot). `failure` is this
// rank's error message, or null when it did its part. Waits at most the group's timeout for
// every rank's outcome. On return *report is null when no rank failed; else it lists the
// failures (malloc'd; free with mr_free_str) as "<rank>\x1f<message>" records separated by
// "\x1e". The ranks must call this at the same points: a counter numbers the rounds.
int mr_dist_agree(void* handle, const char* failure, char** report, char** err) {
  auto* g = static_cast<Group*>(handle);
  *report = nullptr;
  return guarded(g, err, [&] {
    const std::string round = "mlperf-run/agree/" + std::to_string(g->agreements++) + "/";
    // '0': done; '1' + the message: failed
    std::string mine = failure == nullptr ? std::string("0") : std::string("1") + failure;
    g->store->set(round + std::to_string(g->rank),
                  std::vector<uint8_t>(mine.begin(), mine.end()));
    std::vector<std::string> keys;
    for (int r = 0; r < g->size; ++r) keys.push_back(round + std::to_string(r));
    g->store->wait(keys, g->timeout);
    std::string out;
    for (int r = 0; r < g->size; ++r) {
      const std::vector<uint8_t> v = g->store->get(keys[r]);
      if (v.empty() || v[0] == '0') continue;
      if (!out.empty()) out += '\x1e';
      out += std::to_string(r) + '\x1f' + std::string(v.begin() + 1, v.end());
    }
    if (!out.empty()) mr::set_err(report, out);
  });
}

// Sets `key` in the group's store to `value` (a C string).
int mr_dist_store_set(void* handle, const char* key, const char* value, char** err) {
  auto* g = static_cast<Group*>(handle);
  return guarded(g, err, [&] {
    const std::string v(value);
    g->store->set(key, std::vector<uint8_t>(v.begin(), v.end()));
  });
}

// Adds `delta` to the counter `key` in the group's store (created at 0) and sets *out to its
// new value: one round trip, atomic across the ranks (a rank that finds 1 after adding 1 was
// the first).
int mr_dist_store_add(void* handle, const char* key, int64_t delta, int64_t* out, char** err) {
  auto* g = static_cast<Group*>(handle);
  *out = 0;
  return guarded(g, err, [&] { *out = g->store->add(key, delta); });
}

// The value of `key` in the group's store, once some rank has set it (waiting at most the
// group's timeout), in *out (malloc'd; free with mr_free_str).
int mr_dist_store_get(void* handle, const char* key, char** out, char** err) {
  auto* g = static_cast<Group*>(handle);
  *out = nullptr;
  return guarded(g, err, [&] {
    g->store->wait({key}, g->timeout);
    const std::vector<uint8_t> v = g->store->get(key);
    mr::set_err(out, std::string(v.begin(), v.end()));
  });
}

// The notes of the ranks that have one at this point, on every rank: `note` is this rank's (null:
// none). Unlike mr_dist_agree, each rank makes a constant number of store calls plus one per
// note (counters, not a key per rank), so a world of thousands of ranks that all agree costs
// each rank a few round trips. Waits at most the group's timeout for every rank. On return
// *report is null when no rank has a note, else "<rank>\x1f<note>" records separated by
// "\x1e" (malloc'd; free with mr_free_str), in no particular order. The ranks must call this at
// the same points: a counter numbers the rounds.
int mr_dist_gather_notes(void* handle, const char* note, char** report, char** err) {
  auto* g = static_cast<Group*>(handle);
  *report = nullptr;
  return guarded(g, err, [&] {
    const std::string round = "mlperf-run/notes/" + std::to_string(g->gathers++) + "/";
    if (note != nullptr) {
      const int64_t slot = g->store->add(round + "noted", 1);
      const std::string rec = std::to_string(g->rank) + '\x1f' + note;
      g->store->set(round + "note/" + std::to_string(slot),
                    std::vector<uint8_t>(rec.begin(), rec.end()));
    }
    // counted in after its note is set: once every rank is, every note is there
    if (g->store->add(round + "counted", 1) == g->size) {
      g->store->set(round + "all", std::vector<uint8_t>{1});
    }
    g->store->wait({round + "all"}, g->timeout);
    const int64_t notes = g->store->add(round + "noted", 0);
    std::string out;
    for (int64_t i = 1; i <= notes; ++i) {
      const std::vector<uint8_t> v = g->store->get(round + "note/" + std::to_string(i));
      if (!out.empty()) out += '\x1e';
      out += std::string(v.begin(), v.end());
    }
    if (!out.empty()) mr::set_err(report, out);
  });
}

// The end of a group used only through its store: rank 0 hosts the store, so it must not close
// it while another rank still reads its last answers. Every other rank counts itself out and
// returns; rank 0 waits (at most the group's timeout) until every rank has.
int mr_dist_leave(void* handle, char** err) {
  auto* g = static_cast<Group*>(handle);
  return guarded(g, err, [&] {
    if (g->size == 1) return;
    const std::string left = "mlperf-run/left";
    if (g->rank != 0) {
      if (g->store->add(left, 1) == g->size - 1) {
        g->store->set(left + "/all", std::vector<uint8_t>{1});
      }
      return;
    }
    g->store->wait({left + "/all"}, g->timeout);
  });
}

}  // extern "C"
