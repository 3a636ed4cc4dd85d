// Helpers of the transport tests: ranks as threads, heaps filled with a pattern that tells every
// byte's rank and place apart, and a receiver that writes what a transport delivers into its heap
// and checks the fragments of each message are whole and in order.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstring>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/net/memory.h"
#include "runtime/net/transport.h"

namespace mkc::rt::net::testing {

// Runs fn(rank) on `ranks` threads; returns each rank's exception text ("" when none).
inline std::vector<std::string> run_ranks(int ranks, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

// The pattern word holding heap offset `i` of rank `rank` (splitmix64 of both): every aligned
// 8 bytes of every rank differ.
inline uint64_t pattern_word(int rank, int64_t i) {
  uint64_t z = static_cast<uint64_t>(i / 8) * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint8_t pattern(int rank, int64_t i) {
  return static_cast<uint8_t>(pattern_word(rank, i) >> (8 * (i % 8)));
}

// Rank `rank`'s pattern at [begin, end) of `heap` (begin a multiple of 8).
inline void fill_pattern(HostMemory& heap, int rank, int64_t begin, int64_t end) {
  std::byte* p = heap.data();
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const uint64_t w = pattern_word(rank, i);
    std::memcpy(p + i, &w, 8);
  }
  for (; i < end; ++i) p[i] = static_cast<std::byte>(pattern(rank, i));
}

// The first offset in [dst, dst + n) of `heap` that differs from rank `src_rank`'s pattern at
// [src, src + n) (src a multiple of 8), or -1.
inline int64_t first_difference(HostMemory& heap, int64_t dst, int src_rank, int64_t src,
                                int64_t n) {
  const std::byte* p = heap.data() + dst;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = pattern_word(src_rank, src + i);
    if (std::memcmp(p + i, &w, 8) != 0) break;
  }
  for (; i < n; ++i) {
    if (p[i] != static_cast<std::byte>(pattern(src_rank, src + i))) return i;
  }
  return -1;
}

// A message as the receiver saw it complete.
struct Received {
  int peer;
  int64_t dst_offset;
  int64_t bytes;
  int event;
  bool placed;
};

// Polls a transport as the proxy would: fragments into the heap, messages recorded when their
// last fragment comes, sends counted. Checks each message's fragments are contiguous.
class Receiver {
 public:
  Receiver(Transport& t, MemoryAccess& heap, int world)
      : t_(t), heap_(heap), open_(static_cast<size_t>(world)) {}

  // One poll; returns how many completions it gave.
  size_t poll() {
    Completion out[64];
    const size_t n = t_.poll(out, 64);
    for (size_t i = 0; i < n; ++i) {
      const Completion& c = out[i];
      if (c.kind == Completion::kSent) {
        sent.push_back(c.cookie);
        continue;
      }
      Open& o = open_[static_cast<size_t>(c.peer)];
      if (!o.active) {
        o = Open{true, c.dst_offset, 0};
      }
      if (c.dst_offset != o.start + o.bytes) {
        throw std::runtime_error(fmt::format("fragment from rank {} at {} where {} was due", c.peer,
                                             c.dst_offset, o.start + o.bytes));
      }
      if (c.data != nullptr && c.bytes > 0) heap_.write(c.dst_offset, c.data, c.bytes);
      o.bytes += c.bytes;
      ++fragments;
      if (c.last) {
        received.push_back({c.peer, o.start, o.bytes, c.event, c.placed});
        o.active = false;
      }
    }
    return n;
  }

  std::vector<uint64_t> sent;
  std::vector<Received> received;
  long fragments = 0;

 private:
  struct Open {
    bool active = false;
    int64_t start = 0;
    int64_t bytes = 0;
  };
  Transport& t_;
  MemoryAccess& heap_;
  std::vector<Open> open_;
};

// Polls until `done`, or throws after `limit` (a guard against hangs; the transport's own
// deadlines are what a test checks).
inline void poll_until(Receiver& r, const std::function<bool()>& done,
                       std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (r.poll() == 0) std::this_thread::yield();
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("poll_until: the test's guard ran out");
    }
  }
}

}  // namespace mkc::rt::net::testing
