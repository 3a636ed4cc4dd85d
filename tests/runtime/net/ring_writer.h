// What the kernel does to a proxy ring, done by a host thread (templates/mkc and abi::ProxyRing
// describe the device side): claim an entry (atomic add on head), wait for its credit
// (n - tail < kProxySlots), write the request, publish seq = n + 1 last with a release. Also a
// deadline-bounded wait_until for tests that wait on another thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>

#include "templates/mkc/abi.h"

namespace mkc::rt::net::testing {

using Word = abi::u64;

inline Word load_acquire(Word& w) {
  return std::atomic_ref<Word>(w).load(std::memory_order_acquire);
}

// A zeroed ring, as the runtime hands it out.
inline std::unique_ptr<abi::ProxyRing> make_ring() {
  return std::make_unique<abi::ProxyRing>();
}

// Polls `done` until it holds or `limit` passes (a guard against a hang, not a measured time).
inline bool wait_until(const std::function<bool()>& done,
                       std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

inline abi::ProxyRequest request(int dst_rank, int64_t src_offset, int64_t dst_offset,
                                 int64_t bytes, int event) {
  abi::ProxyRequest r{};
  r.src_offset = src_offset;
  r.dst_offset = dst_offset;
  r.bytes = bytes;
  r.dst_rank = dst_rank;
  r.event = event;
  return r;
}

class RingWriter {
 public:
  explicit RingWriter(abi::ProxyRing* ring) : ring_(ring) {}

  // Claims the next entry (the kernel's atomicAdd on head).
  Word claim() { return std::atomic_ref<Word>(ring_->head).fetch_add(1); }

  // Whether entry n may be written: the proxy's tail has credited it.
  bool has_credit(Word n) const { return n - load_acquire(ring_->tail) < abi::kProxySlots; }

  // Writes the request's fields of entry n, not its seq.
  void write(Word n, const abi::ProxyRequest& r) {
    abi::ProxyRequest& e = ring_->entries[n % abi::kProxySlots];
    e.src_offset = r.src_offset;
    e.dst_offset = r.dst_offset;
    e.bytes = r.bytes;
    e.dst_rank = r.dst_rank;
    e.event = r.event;
  }

  // Publishes entry n: seq last, with a release.
  void publish(Word n) {
    std::atomic_ref<Word>(ring_->entries[n % abi::kProxySlots].seq)
        .store(n + 1, std::memory_order_release);
  }

  // All of it, waiting for credit at most `limit`; throws when the credit never comes.
  Word post(const abi::ProxyRequest& r,
            std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    const Word n = claim();
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!has_credit(n)) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("ring writer: no credit for entry " + std::to_string(n));
      }
      std::this_thread::yield();
    }
    write(n, r);
    publish(n);
    return n;
  }

 private:
  abi::ProxyRing* ring_;
};

}  // namespace mkc::rt::net::testing
