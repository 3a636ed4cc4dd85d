// The proxy path as a kernel sees it, on one GPU: two ranks of this process (two emulated nodes),
// each with its ring in host-mapped memory, its heap in GPU memory (rt::CudaHeap, as rt::LocalJob
// gives it) with the proxy's counters and tail at its end, and its proxy thread over the tcp
// transport on loopback. A one-CTA kernel per rank claims and publishes the ring entries itself
// (templates/mkc/sync.cuh: proxy_claim, proxy_publish) and waits on its proxy counter, so every
// figure includes the PCIe writes and the copies of the real path. Beside it, in the same run,
// what the path cannot beat:
//
// floor:  GPU -> host -> GPU through two host-mapped words: the kernel stores a value with a
//         release at system scope, a host thread that spins on it stores it back, the kernel
//         sees it. Half the round trip is the one-way floor of any host proxy.
// wire:   two host threads, 8 bytes back and forth over a TCP connection on loopback (TCP_NODELAY,
//         non-blocking, spinning as the proxy does): half the round trip is the wire one way;
//         and one thread streaming to the other, for the wire's bandwidth.
// proxy:  rank 0's kernel sends a request of B bytes raising rank 1's counter; rank 1's kernel,
//         waiting on it, answers with a 0-byte signal; half the round trip is the proxy path's
//         one-way latency (B = 0: a signal, B = 8: an 8-byte put and its signal). Bandwidth:
//         back-to-back requests of each size, from the first claim to the answer.
//
// added = proxy (0 B) - floor - wire, one way: what the proxy costs beyond the GPU's reach of the
// host and the wire itself (the issue's goal: at most 5 us). Timed with %globaltimer on the GPU
// (floor, proxy) and steady_clock on the host (wire).
// --pollers N runs N more CTAs through every measurement, each polling a host-mapped word with
// 1 us sleeps: the load a job's waiting CTAs put on PCIe when they polled host memory.
// Usage:
//   proxy_gpu_bench [--iters 2000] [--sizes 4K,64K,1M,16M,64M] [--total 256M] [--timeout-s 20]
//                   [--pollers 0] [--csv FILE] [--compile-only (NVRTC only, no GPU)]
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/csv.h"
#include "bench/main.h"
#include "bench/sizes.h"
#include "bench/stats.h"
#include "jit/jit.h"
#include "runtime/cuda_driver.h"
#include "runtime/cuda_heap.h"
#include "runtime/net/all_gather.h"
#include "runtime/net/proxy.h"
#include "runtime/net/tcp.h"
#include "support/error.h"
#include "templates/mkc/abi.h"

namespace {

using mkc::EnvironmentError;
using mkc::UserError;
using mkc::abi::u64;
using mkc::bench::Summary;
using mkc::rt::Driver;
using Clock = std::chrono::steady_clock;

// The device side. One thread per kernel; the task's deadline (begin_task) bounds every wait.
constexpr const char* kSource = R"(
#define MKC_HAS_PROXY 1
#define MKC_RANKS_PER_NODE 1
#include "mkc/sync.cuh"
using namespace mkc;

// Waits until *c >= target (relaxed polls, an acquire at the end); false on the deadline.
__device__ bool wait_count(const KernelArgs& a, u64* c, u64 target) {
  cuda::atomic_ref<u64, cuda::thread_scope_system> r(*c);
  for (u64 seen = r.load(cuda::memory_order_relaxed); seen < target;
       seen = r.load(cuda::memory_order_relaxed)) {
    if (globaltimer() > task_state().deadline) {
      report_failure(a, abi::kWaitTimeout, 0, target, seen);
      return false;
    }
  }
  cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
  return true;
}

// The floor: a value to the host and back, `rounds` times; stamps[i] = round i's nanoseconds.
extern "C" __global__ void floor_pingpong(KernelArgs a, u64* to_host, u64* from_host, int rounds,
                                          u64* stamps) {
  begin_task(a, 0);
  if (threadIdx.x != 0) return;
  for (int i = 1; i <= rounds; ++i) {
    const u64 t0 = globaltimer();
    cuda::atomic_ref<u64, cuda::thread_scope_system>(*to_host).store(i, cuda::memory_order_release);
    if (!wait_count(a, from_host, i)) return;
    stamps[i - 1] = globaltimer() - t0;
  }
}

// The proxy path. The initiator sends `per_round` requests of `bytes` (heap offset 0 to the
// peer's offset 0) raising the peer's proxy counter 0, then waits for the answer on its own; the
// responder waits for the requests and answers with one 0-byte signal. `base`: the counter's
// value at launch (counters only grow). stamps[i] = round i's nanoseconds (the initiator's).
extern "C" __global__ void proxy_pingpong(KernelArgs a, int peer, int initiator, int rounds,
                                          int per_round, long long bytes, u64 base, u64* stamps) {
  begin_task(a, 0);
  if (threadIdx.x != 0) return;
  for (int i = 1; i <= rounds; ++i) {
    const u64 t0 = globaltimer();
    if (initiator) {
      for (int k = 0; k < per_round; ++k) {
        const u64 e = proxy_claim(a, 1);
        if (e == ~0ull) return;
        proxy_publish(a, e, 0, 0, bytes, peer, 0);
      }
      if (!wait_count(a, a.proxy_events, base + i)) return;
    } else {
      if (!wait_count(a, a.proxy_events, base + u64(i) * per_round)) return;
      const u64 e = proxy_claim(a, 1);
      if (e == ~0ull) return;
      proxy_publish(a, e, 0, 0, 0, peer, 0);
    }
    stamps[i - 1] = globaltimer() - t0;
  }
}

// Load: thread 0 of every CTA polls a host-mapped word (1 us sleeps) until it is non-zero.
extern "C" __global__ void host_poller(KernelArgs a, u64* stop) {
  begin_task(a, 0);
  if (threadIdx.x != 0) return;
  cuda::atomic_ref<u64, cuda::thread_scope_system> r(*stop);
  while (r.load(cuda::memory_order_relaxed) == 0 && globaltimer() < task_state().deadline)
    __nanosleep(1024);
}
)";

// The kernels, through NVRTC and the JIT cache (no GPU needed).
mkc::jit::JitOutput compile_kernels() {
  return mkc::jit::jit_compile(kSource, "proxy_gpu_bench.cu", "proxy_pingpong", {});
}

// Host-mapped memory of `bytes`, zeroed, and its device address.
template <typename T>
T* host_mapped(const Driver& d, size_t bytes, CUdeviceptr* dev) {
  void* p = nullptr;
  MKC_CU(d, cuMemHostAlloc, &p, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
  std::memset(p, 0, bytes);
  MKC_CU(d, cuMemHostGetDevicePointer, dev, p, 0);
  return static_cast<T*>(p);
}

u64 load_acquire(u64& w) {
  return std::atomic_ref<u64>(w).load(std::memory_order_acquire);
}

// The proxy's words at the end of a heap of `bytes`: its counter, then (a line further) its tail.
constexpr int64_t kWordsBytes = 4096;
constexpr int64_t kTailAfter = 64;

// One emulated node's rank: heap (with the proxy's words), ring, host copy of the counter, error
// record, stream, proxy.
struct GpuRank {
  CUdeviceptr heap = 0, head = 0, stamps = 0;
  int64_t words = 0;  // heap offset of the proxy's published counter
  mkc::abi::ProxyRing* ring = nullptr;
  CUdeviceptr ring_dev = 0;
  u64 events[1] = {0};
  mkc::abi::ErrorRecord* error = nullptr;
  CUdeviceptr error_dev = 0;
  CUstream stream = nullptr;
  std::unique_ptr<mkc::rt::CudaHeap> memory;
  std::unique_ptr<mkc::rt::net::Proxy> proxy;

  mkc::abi::KernelArgs args(int rank, u64 timeout_ns) const {
    mkc::abi::KernelArgs a{};
    a.rank = rank;
    a.epoch = 1;
    a.timeout_ns = timeout_ns;
    a.error = reinterpret_cast<mkc::abi::ErrorRecord*>(error_dev);
    a.proxy = reinterpret_cast<mkc::abi::ProxyRing*>(ring_dev);
    a.proxy_events = reinterpret_cast<u64*>(heap + words);
    a.proxy_head = reinterpret_cast<u64*>(head);
    a.proxy_tail = reinterpret_cast<u64*>(heap + words + kTailAfter);
    a.heap = reinterpret_cast<const char*>(heap);
    return a;
  }
};

class Bench {
 public:
  Bench(int64_t heap_bytes, int max_rounds, std::chrono::seconds timeout)
      : d_(Driver::get()), timeout_(timeout), max_rounds_(max_rounds) {
    MKC_CU(d_, cuInit, 0);
    MKC_CU(d_, cuDeviceGet, &dev_, 0);
    char name[256] = {};
    MKC_CU(d_, cuDeviceGetName, name, sizeof(name), dev_);
    device_name_ = name;
    MKC_CU(d_, cuDevicePrimaryCtxRetain, &ctx_, dev_);
    MKC_CU(d_, cuCtxSetCurrent, ctx_);
    compile();
    for (int r = 0; r < 2; ++r) {
      GpuRank& g = ranks_[r];
      g.words = heap_bytes;
      MKC_CU(d_, cuMemAlloc, &g.heap, static_cast<size_t>(heap_bytes + kWordsBytes));
      MKC_CU(d_, cuMemsetD8, g.heap, static_cast<unsigned char>(r + 1),
             static_cast<size_t>(heap_bytes));
      MKC_CU(d_, cuMemsetD8, g.heap + heap_bytes, 0, static_cast<size_t>(kWordsBytes));
      MKC_CU(d_, cuMemAlloc, &g.head, sizeof(u64));
      MKC_CU(d_, cuMemsetD8, g.head, 0, sizeof(u64));
      MKC_CU(d_, cuMemAlloc, &g.stamps, sizeof(u64) * static_cast<size_t>(max_rounds));
      g.ring = host_mapped<mkc::abi::ProxyRing>(d_, sizeof(mkc::abi::ProxyRing), &g.ring_dev);
      g.error = host_mapped<mkc::abi::ErrorRecord>(d_, sizeof(mkc::abi::ErrorRecord), &g.error_dev);
      MKC_CU(d_, cuStreamCreate, &g.stream, CU_STREAM_NON_BLOCKING);
      g.memory = std::make_unique<mkc::rt::CudaHeap>(ctx_, g.heap, heap_bytes + kWordsBytes);
    }
    flags_ = host_mapped<u64>(d_, 192, &flags_dev_);
    connect();
  }
  ~Bench() {
    stop_pollers();
    for (GpuRank& g : ranks_) {
      if (g.proxy) g.proxy->stop();
    }
    d_.cuCtxSetCurrent(ctx_);
    for (GpuRank& g : ranks_) {
      g.proxy.reset();
      g.memory.reset();
      if (g.stream) d_.cuStreamDestroy(g.stream);
      for (CUdeviceptr p : {g.heap, g.head, g.stamps})
        if (p) d_.cuMemFree(p);
      for (void* p : {static_cast<void*>(g.ring), static_cast<void*>(g.error)})
        if (p) d_.cuMemFreeHost(p);
    }
    if (poll_stream_) d_.cuStreamDestroy(poll_stream_);
    if (flags_) d_.cuMemFreeHost(flags_);
    if (module_) d_.cuModuleUnload(module_);
    d_.cuDevicePrimaryCtxRelease(dev_);
  }

  const std::string& device_name() const { return device_name_; }

  // Starts `ctas` pollers of host memory (one thread each polling), running until stop_pollers().
  void start_pollers(int ctas) {
    if (ctas <= 0) return;
    flags_[16] = 0;
    CUdeviceptr stop = flags_dev_ + 128;
    // They outlive every measurement (each bounded by the timeout), so their own deadline is
    // far longer: only a bench that never reaches stop_pollers() meets it.
    mkc::abi::KernelArgs a = ranks_[0].args(0, timeout_ns() * 1000);
    void* params[] = {&a, &stop};
    MKC_CU(d_, cuStreamCreate, &poll_stream_, CU_STREAM_NON_BLOCKING);
    MKC_CU(d_, cuLaunchKernel, poller_fn_, static_cast<unsigned>(ctas), 1, 1, 32, 1, 1, 0,
           poll_stream_, params, nullptr);
  }

  // Ends the pollers (their stop word) and waits for them. Never throws.
  void stop_pollers() {
    if (poll_stream_ == nullptr) return;
    std::atomic_ref<u64>(flags_[16]).store(1, std::memory_order_release);
    d_.cuStreamSynchronize(poll_stream_);
  }

  // One-way floor samples (us): half of each GPU -> host -> GPU round.
  std::vector<double> floor(int rounds) {
    fits(rounds);
    flags_[0] = flags_[8] = 0;
    u64* to_host = flags_;
    u64* from_host = flags_ + 8;
    CUdeviceptr to_dev = flags_dev_, from_dev = flags_dev_ + 64;
    mkc::abi::KernelArgs a = ranks_[0].args(0, timeout_ns());
    void* params[] = {&a, &to_dev, &from_dev, &rounds, &ranks_[0].stamps};
    MKC_CU(d_, cuLaunchKernel, floor_fn_, 1, 1, 1, 32, 1, 1, 0, ranks_[0].stream, params, nullptr);
    const auto deadline = Clock::now() + timeout_;
    for (u64 i = 1; i <= static_cast<u64>(rounds); ++i) {
      while (load_acquire(*to_host) < i) {
        if (Clock::now() > deadline) break;
      }
      std::atomic_ref<u64>(*from_host).store(i, std::memory_order_release);
    }
    return finish(0, rounds, 0.5);
  }

  // One-way proxy samples (us): rank 0 sends `per_round` requests of `bytes`, rank 1 answers
  // with a signal; half of each round (per_round 1), or the whole round (bandwidth).
  std::vector<double> proxy(int rounds, int per_round, int64_t bytes, double scale) {
    fits(rounds);
    // The host's copies of the counters (the proxies publish the same values to the heaps).
    u64 base[2] = {load_acquire(ranks_[0].events[0]), load_acquire(ranks_[1].events[0])};
    for (int r : {1, 0}) {
      GpuRank& g = ranks_[r];
      mkc::abi::KernelArgs a = g.args(r, timeout_ns());
      int peer = 1 - r, initiator = r == 0 ? 1 : 0;
      long long b = bytes;
      void* params[] = {&a, &peer, &initiator, &rounds, &per_round, &b, &base[r], &g.stamps};
      MKC_CU(d_, cuLaunchKernel, proxy_fn_, 1, 1, 1, 32, 1, 1, 0, g.stream, params, nullptr);
    }
    MKC_CU(d_, cuStreamSynchronize, ranks_[1].stream);
    check(1);
    return finish(0, rounds, scale);
  }

 private:
  // The kernels write a stamp per round into a buffer of max_rounds_.
  void fits(int rounds) const {
    if (rounds < 1 || rounds > max_rounds_)
      throw mkc::InternalError(
          fmt::format("proxy_gpu_bench: {} rounds, stamps for {}", rounds, max_rounds_));
  }

  u64 timeout_ns() const { return static_cast<u64>(std::chrono::nanoseconds(timeout_).count()); }

  void compile() {
    const mkc::jit::JitOutput out = compile_kernels();
    MKC_CU(d_, cuModuleLoadData, &module_, out.cubin.data());
    MKC_CU(d_, cuModuleGetFunction, &floor_fn_, module_, "floor_pingpong");
    MKC_CU(d_, cuModuleGetFunction, &proxy_fn_, module_, "proxy_pingpong");
    MKC_CU(d_, cuModuleGetFunction, &poller_fn_, module_, "host_poller");
  }

  // The two proxies, connected to each other (collective: one thread each).
  void connect() {
    mkc::rt::net::LocalAllGather ag(2, timeout_);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        try {
          mkc::rt::net::ProxySetup s;
          s.rank = r;
          s.world = 2;
          s.peers = {1 - r};
          s.ring = ranks_[r].ring;
          s.events = ranks_[r].events;
          s.num_events = 1;
          s.heap = ranks_[r].memory.get();
          s.heap_events_offset = ranks_[r].words;
          s.heap_tail_offset = ranks_[r].words + kTailAfter;
          s.all_gather = ag.for_rank(r);
          s.options.timeout = timeout_;
          ranks_[r].proxy = std::make_unique<mkc::rt::net::Proxy>(
              std::move(s), mkc::rt::net::make_tcp_transport());
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const std::string& e : errors)
      if (!e.empty()) throw EnvironmentError(e);
    for (GpuRank& g : ranks_) g.proxy->start();
  }

  // Waits for rank r's kernel and reports its error record and both proxies' errors.
  void check(int r) {
    MKC_CU(d_, cuStreamSynchronize, ranks_[r].stream);
    for (int k = 0; k < 2; ++k) {
      const mkc::abi::ErrorRecord& e = *ranks_[k].error;
      if (e.flag != 0) {
        std::string why;
        for (GpuRank& g : ranks_)
          if (g.proxy->failed()) why += "; " + g.proxy->status().error;
        throw EnvironmentError(fmt::format(
            "rank {}'s kernel failed (error kind {}): waited for {} and saw {} within {} s{}", k,
            e.flag, e.expected, e.seen, timeout_.count(), why));
      }
    }
    for (GpuRank& g : ranks_) g.proxy->check();
  }

  // Rank r's stamps (ns) as microseconds times `scale`.
  std::vector<double> finish(int r, int rounds, double scale) {
    check(r);
    std::vector<u64> ns(static_cast<size_t>(rounds));
    MKC_CU(d_, cuMemcpyDtoH, ns.data(), ranks_[r].stamps, ns.size() * sizeof(u64));
    std::vector<double> us;
    for (u64 v : ns) us.push_back(static_cast<double>(v) * 1e-3 * scale);
    return us;
  }

  const Driver& d_;
  std::chrono::seconds timeout_;
  int max_rounds_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  std::string device_name_;
  CUmodule module_ = nullptr;
  CUfunction floor_fn_ = nullptr, proxy_fn_ = nullptr, poller_fn_ = nullptr;
  CUstream poll_stream_ = nullptr;
  GpuRank ranks_[2];
  u64* flags_ = nullptr;
  CUdeviceptr flags_dev_ = 0;
};

// ---- the wire: TCP on loopback between two threads of this process ----------------------------

int checked(int rc, const char* call) {
  if (rc < 0) throw EnvironmentError(fmt::format("{} failed: {}", call, std::strerror(errno)));
  return rc;
}

// A connected pair of loopback sockets, non-blocking, TCP_NODELAY.
struct SocketPair {
  SocketPair() {
    const int listener = checked(::socket(AF_INET, SOCK_STREAM, 0), "socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    checked(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), "bind");
    checked(::listen(listener, 1), "listen");
    socklen_t len = sizeof(addr);
    checked(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), "getsockname");
    a = checked(::socket(AF_INET, SOCK_STREAM, 0), "socket");
    checked(::connect(a, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), "connect");
    b = checked(::accept(listener, nullptr, nullptr), "accept");
    ::close(listener);
    const int one = 1;
    for (int fd : {a, b}) {
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      checked(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK), "fcntl");
    }
  }
  ~SocketPair() {
    ::close(a);
    ::close(b);
  }
  int a = -1, b = -1;
};

// Sends or receives exactly n bytes on a non-blocking socket, spinning; false past the deadline.
bool spin_io(int fd, char* p, size_t n, bool out, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t k = out ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
    } else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      throw EnvironmentError(fmt::format("loopback {} failed: {}", out ? "send" : "recv",
                                         k == 0 ? "closed" : std::strerror(errno)));
    } else if (Clock::now() > deadline) {
      return false;
    }
  }
  return true;
}

// One-way samples (us): half of each 8-byte round trip.
std::vector<double> wire_latency(int rounds, std::chrono::seconds timeout) {
  SocketPair s;
  const auto deadline = Clock::now() + timeout;
  std::thread echo([&] {
    char buf[8];
    for (int i = 0; i < rounds; ++i) {
      if (!spin_io(s.b, buf, 8, false, deadline) || !spin_io(s.b, buf, 8, true, deadline)) return;
    }
  });
  std::vector<double> us;
  char buf[8] = {};
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = Clock::now();
    if (!spin_io(s.a, buf, 8, true, deadline) || !spin_io(s.a, buf, 8, false, deadline)) break;
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
  }
  echo.join();
  if (static_cast<int>(us.size()) < rounds)
    throw EnvironmentError("loopback ping-pong did not finish within the timeout");
  return us;
}

// GB/s of `total` bytes streamed in writes of min(bytes, 1 MB), until the receiver's 1-byte ack.
double wire_bandwidth(int64_t bytes, int64_t total, std::chrono::seconds timeout) {
  SocketPair s;
  const size_t chunk = static_cast<size_t>(std::min<int64_t>(bytes, 1 << 20));
  const auto deadline = Clock::now() + timeout;
  std::thread sink([&] {
    std::vector<char> buf(1 << 20);
    int64_t got = 0;
    while (got < total) {
      const size_t n = static_cast<size_t>(std::min<int64_t>(total - got, 1 << 20));
      if (!spin_io(s.b, buf.data(), n, false, deadline)) return;
      got += static_cast<int64_t>(n);
    }
    char ack = 1;
    spin_io(s.b, &ack, 1, true, deadline);
  });
  std::vector<char> buf(chunk, 7);
  const auto t0 = Clock::now();
  bool ok = true;
  for (int64_t sent = 0; ok && sent < total; sent += static_cast<int64_t>(chunk))
    ok = spin_io(s.a, buf.data(), std::min<size_t>(chunk, static_cast<size_t>(total - sent)), true,
                 deadline);
  char ack = 0;
  ok = ok && spin_io(s.a, &ack, 1, false, deadline);
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  sink.join();
  if (!ok) throw EnvironmentError("loopback stream did not finish within the timeout");
  return static_cast<double>(total) / sec / 1e9;
}

int run(int argc, char** argv) {
  int iters = 2000;
  std::vector<int64_t> sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  int64_t total = 256 << 20;
  int timeout_s = 20;
  int pollers = 0;
  std::string csv_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UserError(fmt::format("{} needs a value", a));
      return argv[++i];
    };
    const auto count = [&](long lo, long hi) {
      return mkc::bench::parse_count(a, value(), lo, hi);
    };
    if (a == "--iters") {
      iters = static_cast<int>(count(10, 1'000'000));
    } else if (a == "--sizes") {
      sizes = mkc::bench::parse_sizes(a, value());
    } else if (a == "--total") {
      total = mkc::bench::parse_size(a, value());
    } else if (a == "--timeout-s") {
      timeout_s = static_cast<int>(count(1, 3600));
    } else if (a == "--pollers") {
      pollers = static_cast<int>(count(0, 1024));
    } else if (a == "--csv") {
      csv_path = value();
    } else if (a == "--compile-only") {
      const mkc::jit::JitOutput out = compile_kernels();
      fmt::print("proxy_gpu_bench: kernels compiled ({} registers, {} spill bytes)\n",
                 out.registers, out.spill_bytes);
      return 0;
    } else if (a == "--help" || a == "-h") {
      fmt::print(
          "usage: proxy_gpu_bench [--iters N] [--sizes 4K,64K,...] [--total BYTES] "
          "[--timeout-s S] [--pollers N] [--csv FILE] [--compile-only]\n"
          "The proxy path on one GPU (two emulated nodes, tcp on loopback) beside the\n"
          "GPU->host->GPU floor and the loopback wire, measured in the same run.\n"
          "--pollers N: N more CTAs poll host memory meanwhile (the PCIe load of waits on\n"
          "host-mapped words).\n");
      return 0;
    } else {
      throw UserError(fmt::format("unknown option `{}`; see --help", a));
    }
  }
  const auto timeout = std::chrono::seconds(timeout_s);
  const int64_t largest = std::max<int64_t>(64, *std::max_element(sizes.begin(), sizes.end()));
  const int max_messages = 20'000;
  Bench bench(largest, std::max(iters, 8), timeout);
  fmt::print(
      "proxy_gpu_bench: {}, 2 ranks of 1 per node in one process, proxies over tcp on loopback, "
      "{} hardware threads, {} CTAs polling host memory meanwhile\n",
      bench.device_name(), std::thread::hardware_concurrency(), pollers);
  mkc::bench::CsvWriter csv(csv_path, {"bench", "case", "pollers", "bytes", "messages", "min_us",
                                       "median_us", "p99_us", "mean_us", "gbps"});
  const std::string polled = std::to_string(pollers);
  const auto row = [&](const std::string& what, int64_t bytes, std::vector<double> us) {
    const Summary s = mkc::bench::summarize(us);
    fmt::print("{:<34} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f}\n", what, s.min, s.median, s.p99,
               s.mean);
    csv.row({{"bench", "proxy_gpu_bench"},
             {"case", what},
             {"pollers", polled},
             {"bytes", std::to_string(bytes)},
             {"messages", std::to_string(us.size())},
             {"min_us", mkc::bench::num(s.min)},
             {"median_us", mkc::bench::num(s.median)},
             {"p99_us", mkc::bench::num(s.p99)},
             {"mean_us", mkc::bench::num(s.mean)}});
    return s;
  };

  // Warm up every path once (module, proxies' connections, first copies).
  bench.start_pollers(pollers);
  bench.floor(10);
  bench.proxy(10, 1, 8, 0.5);
  fmt::print("\none-way latency, {} round trips each (us)\n", iters);
  fmt::print("{:<34} {:>9} {:>9} {:>9} {:>9}\n", "", "min", "median", "p99", "mean");
  const Summary fl = row("floor: GPU->host->GPU flag", 0, bench.floor(iters));
  const Summary wi = row("wire: tcp loopback, 8 B", 8, wire_latency(iters, timeout));
  const Summary p0 = row("proxy: signal (0 B)", 0, bench.proxy(iters, 1, 0, 0.5));
  const Summary p8 = row("proxy: 8 B put + signal", 8, bench.proxy(iters, 1, 8, 0.5));
  const double added = p0.median - fl.median - wi.median;
  fmt::print("added by the proxy, one way (median: signal - floor - wire): {:.2f} us (goal <= 5)\n",
             added);
  fmt::print("the 8-byte payload's copies (median: put - signal): {:.2f} us\n",
             p8.median - p0.median);
  csv.row({{"bench", "proxy_gpu_bench"},
           {"case", "added by the proxy, one way"},
           {"pollers", polled},
           {"median_us", mkc::bench::num(added)}});

  fmt::print("\nbandwidth, rank 0 -> rank 1, back to back (best of 3)\n");
  fmt::print("{:>10} {:>10} {:>12} {:>12} {:>12}\n", "size", "messages", "us/message", "proxy GB/s",
             "wire GB/s");
  for (const int64_t bytes : sizes) {
    const int messages = static_cast<int>(std::clamp<int64_t>(total / bytes, 4, max_messages));
    std::vector<double> rounds = bench.proxy(3, messages, bytes, 1.0);
    const double best = *std::min_element(rounds.begin(), rounds.end());
    const double gbps = static_cast<double>(bytes) * messages / (best * 1e3);
    const double wire = wire_bandwidth(bytes, bytes * messages, timeout);
    fmt::print("{:>10} {:>10} {:>12.2f} {:>12.3f} {:>12.3f}\n", mkc::bench::size_text(bytes),
               messages, best / messages, gbps, wire);
    csv.row({{"bench", "proxy_gpu_bench"},
             {"case", "bandwidth " + mkc::bench::size_text(bytes)},
             {"pollers", polled},
             {"bytes", std::to_string(bytes)},
             {"messages", std::to_string(messages)},
             {"mean_us", mkc::bench::num(best / messages)},
             {"gbps", mkc::bench::num(gbps)}});
    csv.row({{"bench", "proxy_gpu_bench"},
             {"case", "wire bandwidth " + mkc::bench::size_text(bytes)},
             {"pollers", polled},
             {"bytes", std::to_string(bytes)},
             {"gbps", mkc::bench::num(wire)}});
  }
  bench.stop_pollers();
  csv.finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return mkc::bench::guarded_main("proxy_gpu_bench", run, argc, argv);
}
