// A job's exchange through proxies, for the transport tests: every rank's proxy started on its
// transport, a writer thread per rank posting messages of 0 B to 1 MB to every other rank (the
// counter raised is the sender's rank), then every rank's counters, tail and heap bytes checked.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <vector>

#include "runtime/net/all_gather.h"
#include "runtime/net/proxy.h"
#include "tests/runtime/net/net_test_util.h"
#include "tests/runtime/net/ring_writer.h"

namespace mkc::rt::net::testing {

using namespace std::chrono_literals;

inline std::vector<int> others(int rank, int world) {
  std::vector<int> v;
  for (int r = 0; r < world; ++r) {
    if (r != rank) v.push_back(r);
  }
  return v;
}

// Each rank's proxy over the transport make(rank) gives, its heap from make_heap; a writer thread
// per rank posts to every other rank `sizes`, the counter raised being the sender's rank. Then
// every rank checks its counters and its heap.
inline void all_to_all_through_proxies(
    int world, const std::function<std::unique_ptr<Transport>(int)>& make,
    const std::function<std::unique_ptr<HostMemory>(int, int64_t)>& make_heap =
        [](int, int64_t bytes) { return std::make_unique<HostMemory>(bytes); }) {
  const std::vector<int64_t> sizes = {0, 8, 4096, 1 << 20};
  const int64_t slot = (1 << 20) + 4096;
  const int64_t src_bytes = slot * static_cast<int64_t>(sizes.size());
  const int64_t heap_bytes = src_bytes + slot * static_cast<int64_t>(sizes.size()) * world;
  std::vector<std::unique_ptr<HostMemory>> heaps;
  std::vector<std::unique_ptr<abi::ProxyRing>> rings;
  std::vector<std::vector<abi::u64>> events(static_cast<size_t>(world),
                                            std::vector<abi::u64>(static_cast<size_t>(world), 0));
  for (int r = 0; r < world; ++r) {
    heaps.push_back(make_heap(r, heap_bytes));
    fill_pattern(*heaps.back(), r, 0, src_bytes);
    rings.push_back(make_ring());
  }
  LocalAllGather ag(world, 20s);
  std::vector<ProxyStatus> final_status(static_cast<size_t>(world));
  const auto errors = run_ranks(world, [&](int rank) {
    ProxySetup s;
    s.rank = rank;
    s.world = world;
    s.peers = others(rank, world);
    s.ring = rings[rank].get();
    s.events = events[rank].data();
    s.num_events = world;
    s.heap = heaps[rank].get();
    s.all_gather = ag.for_rank(rank);
    s.options.timeout = 20s;
    Proxy proxy(std::move(s), make(rank));
    proxy.start();
    RingWriter writer(rings[rank].get());
    abi::u64 posted = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (int d : others(rank, world)) {
        const int64_t dst =
            src_bytes + (static_cast<int64_t>(rank) * static_cast<int64_t>(sizes.size()) +
                         static_cast<int64_t>(i)) *
                            slot;
        writer.post(request(d, static_cast<int64_t>(i) * slot, dst, sizes[i], rank));
        ++posted;
      }
    }
    // Every peer's messages are here when each of its counters reached the message count.
    const bool all_in = wait_until(
        [&] {
          if (proxy.failed()) return true;
          for (int s2 : others(rank, world)) {
            if (load_acquire(events[rank][s2]) < sizes.size()) return false;
          }
          return load_acquire(rings[rank]->tail) == posted;
        },
        60s);
    proxy.check();
    REQUIRE(all_in);
    ag.gather(rank, "");
    proxy.stop();
    final_status[rank] = proxy.status();
  });
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(final_status[r].state == ProxyState::kStopped);
    CHECK(final_status[r].stats.requests == sizes.size() * (world - 1));
    CHECK(final_status[r].stats.messages_received == sizes.size() * (world - 1));
    for (int s2 : others(r, world)) {
      CHECK(events[r][s2] == sizes.size());
      for (size_t i = 0; i < sizes.size(); ++i) {
        const int64_t dst =
            src_bytes + (static_cast<int64_t>(s2) * static_cast<int64_t>(sizes.size()) +
                         static_cast<int64_t>(i)) *
                            slot;
        CHECK(first_difference(*heaps[r], dst, s2, static_cast<int64_t>(i) * slot, sizes[i]) == -1);
      }
    }
    CHECK(events[r][r] == 0);
  }
}

}  // namespace mkc::rt::net::testing
