// The host proxy's own cost, without a GPU: two ranks of this process, each with its proxy thread
// (runtime/net/proxy.h) over the tcp transport on loopback, heaps in host memory, rings written by
// this thread as a kernel would (claim, wait for credit, write, publish seq last).
//
// latency:   an 8-byte put + signal, one at a time: from the ring entry's publication on rank 0 to
//            rank 1's counter seen raised by this thread (one way), min / median / p99 / mean.
// bandwidth: back-to-back messages of each size from rank 0 to rank 1 (about --total bytes, at
//            least 4 messages), from the first publication to the last counter: GB/s.
//
// What it measures is the proxy and the loopback stack on this host's cores (3 busy threads: the
// two proxies and this one), not a network. Usage:
//   proxy_bench [--iters 2000] [--sizes 4K,64K,1M,16M,64M] [--total 256M] [--spin-us 200]
//               [--sleep-us 20] [--csv FILE]
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/csv.h"
#include "bench/main.h"
#include "bench/sizes.h"
#include "bench/stats.h"
#include "runtime/net/all_gather.h"
#include "runtime/net/memory.h"
#include "runtime/net/proxy.h"
#include "runtime/net/tcp.h"
#include "support/error.h"
#include "templates/mkc/abi.h"

namespace {

using mkc::UserError;
using mkc::abi::u64;
using mkc::rt::net::HostMemory;
using mkc::rt::net::LocalAllGather;
using mkc::rt::net::Proxy;
using mkc::rt::net::ProxyOptions;
using mkc::rt::net::ProxySetup;
using Clock = std::chrono::steady_clock;
using mkc::bench::parse_size;
using mkc::bench::parse_sizes;
using mkc::bench::size_text;

u64 load_acquire(u64& w) {
  return std::atomic_ref<u64>(w).load(std::memory_order_acquire);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// The two ranks: heaps, rings, counters, proxies.
struct Pair {
  Pair(int64_t heap_bytes, const ProxyOptions& options) {
    LocalAllGather ag(2, std::chrono::seconds(30));
    for (int r = 0; r < 2; ++r) {
      heaps.push_back(std::make_unique<HostMemory>(heap_bytes));
      rings.push_back(std::make_unique<mkc::abi::ProxyRing>());
      events.push_back(std::vector<u64>(4, 0));
    }
    std::vector<std::unique_ptr<Proxy>> made(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        try {
          ProxySetup s;
          s.rank = r;
          s.world = 2;
          s.peers = {1 - r};
          s.ring = rings[r].get();
          s.events = events[r].data();
          s.num_events = 4;
          s.heap = heaps[r].get();
          s.all_gather = ag.for_rank(r);
          s.options = options;
          made[r] = std::make_unique<Proxy>(std::move(s), mkc::rt::net::make_tcp_transport());
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const std::string& e : errors) {
      if (!e.empty()) throw mkc::EnvironmentError(e);
    }
    proxies = std::move(made);
    for (auto& p : proxies) p->start();
  }
  ~Pair() {
    for (auto& p : proxies) p->stop();
  }

  // Rank 0 posts one request to rank 1 (waiting for credit, as the kernel would).
  void post(int64_t bytes, int event) {
    mkc::abi::ProxyRing& ring = *rings[0];
    const u64 n = std::atomic_ref<u64>(ring.head).fetch_add(1);
    while (n - load_acquire(ring.tail) >= mkc::abi::kProxySlots) {
      proxies[0]->check();
      std::this_thread::yield();
    }
    mkc::abi::ProxyRequest& e = ring.entries[n % mkc::abi::kProxySlots];
    e.src_offset = 0;
    e.dst_offset = 0;
    e.bytes = bytes;
    e.dst_rank = 1;
    e.event = event;
    std::atomic_ref<u64>(e.seq).store(n + 1, std::memory_order_release);
  }
  // Waits for rank 1's counter `event` to reach `value`.
  void wait(int event, u64 value) {
    u64& c = events[1][static_cast<size_t>(event)];
    for (long spins = 0; load_acquire(c) < value; ++spins) {
      // A GPU waits here in the real thing: yield, so that on a host with few cores this thread
      // does not take the proxies' time.
      std::this_thread::yield();
      if ((spins & 0xffff) == 0) {
        proxies[0]->check();
        proxies[1]->check();
      }
    }
  }

  std::vector<std::unique_ptr<HostMemory>> heaps;
  std::vector<std::unique_ptr<mkc::abi::ProxyRing>> rings;
  std::vector<std::vector<u64>> events;
  std::vector<std::unique_ptr<Proxy>> proxies;
};

int run(int argc, char** argv) {
  int iters = 2000;
  std::vector<int64_t> sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  int64_t total = 256 << 20;
  ProxyOptions options;
  std::string csv_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UserError(fmt::format("{} needs a value", a));
      return argv[++i];
    };
    const auto count = [&](const std::string& flag, long lo, long hi) {
      return mkc::bench::parse_count(flag, value(), lo, hi);
    };
    if (a == "--iters") {
      iters = static_cast<int>(count(a, 1, 10'000'000));
    } else if (a == "--sizes") {
      sizes = parse_sizes(a, value());
    } else if (a == "--total") {
      total = parse_size(a, value());
    } else if (a == "--spin-us") {
      options.spin = std::chrono::microseconds(count(a, 0, 10'000'000));
    } else if (a == "--sleep-us") {
      options.sleep = std::chrono::microseconds(count(a, 0, 1'000'000));
    } else if (a == "--csv") {
      csv_path = value();
    } else if (a == "--help" || a == "-h") {
      fmt::print(
          "usage: proxy_bench [--iters N] [--sizes 4K,64K,...] [--total BYTES] [--spin-us US] "
          "[--sleep-us US] [--csv FILE]\n");
      return 0;
    } else {
      throw UserError(fmt::format("unknown option `{}`; see --help", a));
    }
  }
  const int64_t largest = std::max<int64_t>(8, *std::max_element(sizes.begin(), sizes.end()));
  mkc::bench::CsvWriter csv(csv_path, {"bench", "case", "bytes", "messages", "min_us", "median_us",
                                       "p99_us", "mean_us", "gbps"});
  Pair pair(largest, options);
  fmt::print(
      "proxy_bench: 2 ranks in one process, tcp on loopback, {} hardware threads; proxy "
      "spin {} us, then sleeps of {} us\n",
      std::thread::hardware_concurrency(), options.spin.count(), options.sleep.count());

  // Latency: one 8-byte put + signal at a time.
  const int warmup = std::min(200, iters);
  std::vector<double> us;
  u64 seen = 0;
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = Clock::now();
    pair.post(8, 0);
    pair.wait(0, ++seen);
    const auto t1 = Clock::now();
    if (i >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  const mkc::bench::Summary st = mkc::bench::summarize(us);
  fmt::print("\nlatency, 8-byte put + signal, ring entry -> destination counter ({} times)\n",
             iters);
  fmt::print("{:>10} {:>10} {:>10} {:>10}\n", "min us", "median us", "p99 us", "mean us");
  fmt::print("{:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f}\n", st.min, st.median, st.p99, st.mean);
  csv.row({{"bench", "proxy_bench"},
           {"case", "latency 8 B"},
           {"bytes", "8"},
           {"messages", std::to_string(iters)},
           {"min_us", mkc::bench::num(st.min)},
           {"median_us", mkc::bench::num(st.median)},
           {"p99_us", mkc::bench::num(st.p99)},
           {"mean_us", mkc::bench::num(st.mean)}});

  // Bandwidth: back-to-back messages, counted on another counter.
  fmt::print("\nbandwidth, rank 0 -> rank 1, back to back\n");
  fmt::print("{:>10} {:>10} {:>12} {:>10}\n", "size", "messages", "us/message", "GB/s");
  u64 counted = 0;
  for (const int64_t bytes : sizes) {
    const int64_t messages = std::clamp<int64_t>(total / bytes, 4, 100'000);
    const auto t0 = Clock::now();
    for (int64_t k = 0; k < messages; ++k) pair.post(bytes, 1);
    counted += static_cast<u64>(messages);
    pair.wait(1, counted);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double gbps = static_cast<double>(bytes) * static_cast<double>(messages) / s / 1e9;
    const double per = s * 1e6 / static_cast<double>(messages);
    fmt::print("{:>10} {:>10} {:>12.2f} {:>10.3f}\n", size_text(bytes), messages, per, gbps);
    csv.row({{"bench", "proxy_bench"},
             {"case", "bandwidth " + size_text(bytes)},
             {"bytes", std::to_string(bytes)},
             {"messages", std::to_string(messages)},
             {"mean_us", mkc::bench::num(per)},
             {"gbps", mkc::bench::num(gbps)}});
  }
  for (auto& p : pair.proxies) p->check();
  csv.finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return mkc::bench::guarded_main("proxy_bench", run, argc, argv);
}
