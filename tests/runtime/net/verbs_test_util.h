// What the verbs transport's tests share (tests/runtime/net/verbs_test.cc for RC queue pairs,
// srd_test.cc for EFA's SRD): ranks as threads on fake devices, heaps that offer a dma-buf, two
// ranks exchanging messages checked byte for byte, a connected pair.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/net/all_gather.h"
#include "runtime/net/verbs.h"
#include "tests/runtime/net/exchange.h"
#include "tests/runtime/net/fake_verbs.h"
#include "tests/runtime/net/net_test_util.h"

namespace mkc::rt::net::testing {

using namespace std::chrono_literals;

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline ConnectParams params(int rank, int world, LocalAllGather& ag,
                            std::chrono::milliseconds timeout = 10s) {
  ConnectParams p;
  p.rank = rank;
  p.world = world;
  p.peers = others(rank, world);
  p.all_gather = ag.for_rank(rank);
  p.timeout = timeout;
  return p;
}

// Ranks as threads on one fake device each (one NIC per rank, as on a GPU node).
inline std::vector<FakeDevice> devices(int n, uint8_t link_layer = IBV_LINK_LAYER_INFINIBAND) {
  std::vector<FakeDevice> v;
  for (int i = 0; i < n; ++i)
    v.push_back({fmt::format("mlx5_{}", i), {IBV_PORT_ACTIVE}, link_layer});
  return v;
}

inline VerbsOptions on_device(int rank, VerbsOptions o = {}, const char* prefix = "mlx5_") {
  o.hca = fmt::format("{}{}", prefix, rank);
  return o;
}

// A heap in host memory that offers RDMA a dma-buf (as GPU memory would), not its address.
class DmabufMemory : public HostMemory {
 public:
  DmabufMemory(int64_t bytes, int fd, FakeVerbs& fake) : HostMemory(bytes), fd_(fd) {
    fake.add_dmabuf(fd, data(), static_cast<size_t>(bytes));
  }
  HeapRegistration registration() const override {
    HeapRegistration r;
    r.dmabuf_fd = fd_;
    r.device_address = 0x7f0000000000ull + (static_cast<uint64_t>(fd_) << 32);
    return r;
  }
  void flush_inbound() override { ++flushes; }
  int flushes = 0;

 private:
  int fd_;
};

// Two ranks send each other `sizes` at once; returns what each received, checked byte for byte.
inline void exchange_two(FakeVerbs& fake, std::vector<std::unique_ptr<HostMemory>>& heaps,
                         const std::vector<int64_t>& sizes, int64_t half, VerbsOptions options,
                         bool expect_placed, long* fragments = nullptr,
                         const char* prefix = "mlx5_") {
  std::vector<int64_t> at;
  int64_t used = 0;
  for (int64_t n : sizes) {
    at.push_back(used);
    used += (n + 4095) / 4096 * 4096 + 4096;
  }
  REQUIRE(used <= half);
  for (int r = 0; r < 2; ++r) fill_pattern(*heaps[r], r, 0, half);
  LocalAllGather ag(2, 10s);
  std::vector<std::vector<Received>> got(2);
  std::vector<long> frags(2);
  const auto errors = run_ranks(2, [&](int rank) {
    auto t = make_verbs_transport(fake.api(), on_device(rank, options, prefix));
    t->connect(params(rank, 2, ag), *heaps[rank]);
    for (size_t i = 0; i < sizes.size(); ++i) {
      REQUIRE(t->send(1 - rank, {half + at[i], sizes[i], static_cast<int32_t>(i % 4)}, at[i], i));
    }
    Receiver rx(*t, *heaps[rank], 2);
    poll_until(
        rx, [&] { return rx.sent.size() == sizes.size() && rx.received.size() == sizes.size(); });
    ag.gather(rank, "");
    t->close();
    for (size_t i = 0; i < sizes.size(); ++i) CHECK(rx.sent[i] == i);
    got[rank] = rx.received;
    frags[rank] = rx.fragments;
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  for (int r = 0; r < 2; ++r) {
    REQUIRE(got[r].size() == sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      CAPTURE(r);
      CAPTURE(i);
      const Received& m = got[r][i];
      CHECK(m.peer == 1 - r);
      CHECK(m.dst_offset == half + at[i]);
      CHECK(m.bytes == sizes[i]);
      CHECK(m.event == static_cast<int>(i % 4));
      CHECK(m.placed == (expect_placed && sizes[i] > 0));
      CHECK(first_difference(*heaps[r], half + at[i], 1 - r, at[i], sizes[i]) == -1);
    }
  }
  if (fragments != nullptr) *fragments = frags[0];
  CHECK(fake.live_objects() == 0);
}

// Two connected transports, used from this thread afterwards.
struct Pair {
  Pair(FakeVerbs& fake, std::chrono::milliseconds timeout = 10s, VerbsOptions o = {},
       const char* prefix = "mlx5_") {
    for (int r = 0; r < 2; ++r) heaps.push_back(std::make_unique<HostMemory>(4 << 20));
    LocalAllGather ag(2, 10s);
    t.resize(2);
    const auto errors = run_ranks(2, [&](int rank) {
      t[rank] = make_verbs_transport(fake.api(), on_device(rank, o, prefix));
      t[rank]->connect(params(rank, 2, ag, timeout), *heaps[rank]);
    });
    REQUIRE(errors[0] == "");
    REQUIRE(errors[1] == "");
  }
  std::vector<std::unique_ptr<HostMemory>> heaps;
  std::vector<std::unique_ptr<Transport>> t;
};

// Connects rank 0 of 2 alone on `fake` (its all_gather answers for rank 1 with rank 0's own
// blob): far enough for every check before the peers meet. What it threw, or "".
inline std::string connect_alone(FakeVerbs& fake, const VerbsOptions& o) {
  HostMemory heap(4096);
  ConnectParams p;
  p.world = 2;
  p.peers = {1};
  p.all_gather = [](const std::string& m) { return std::vector<std::string>{m, m}; };
  return error_of([&] { make_verbs_transport(fake.api(), o)->connect(p, heap); });
}

// A verbs call made to fail while connecting, and what the error must say.
struct FailingCall {
  const char* call;
  int err;
  const char* says;
};

// Each call of `calls` failing in turn while rank 0 connects alone on a fake of `devices`: the
// error says what it must, and nothing made before it is left.
inline void check_failing_calls(const std::vector<FakeDevice>& devices, const VerbsOptions& o,
                                const std::vector<FailingCall>& calls) {
  for (const FailingCall& c : calls) {
    const std::string name = c.call;
    CAPTURE(name);
    FakeVerbs fake(devices);
    fake.fail_call(c.call, c.err);
    CHECK(contains(connect_alone(fake, o), c.says));
    CHECK(fake.live_objects() == 0);
  }
}

// Rank 0's heap registered, rank 1's staged: 3 MB each way, placed by the NIC at rank 0 only.
inline void one_registered_one_staged(FakeVerbs& fake, const char* prefix) {
  constexpr int64_t kAt = 24 << 20;
  std::vector<std::unique_ptr<HostMemory>> heaps;
  for (int r = 0; r < 2; ++r) {
    heaps.push_back(std::make_unique<HostMemory>(2 * kAt));
    heaps.back()->set_registrable(r == 0);
  }
  std::vector<std::vector<Received>> got(2);
  LocalAllGather ag(2, 10s);
  const int64_t bytes = 3 << 20;
  for (int r = 0; r < 2; ++r) fill_pattern(*heaps[r], r, 0, bytes);
  const auto errors = run_ranks(2, [&](int rank) {
    auto t = make_verbs_transport(fake.api(), on_device(rank, {}, prefix));
    t->connect(params(rank, 2, ag), *heaps[rank]);
    REQUIRE(t->send(1 - rank, {kAt, bytes, 2}, 0, 9));
    Receiver rx(*t, *heaps[rank], 2);
    poll_until(rx, [&] { return rx.sent.size() == 1 && rx.received.size() == 1; });
    ag.gather(rank, "");
    t->close();
    got[rank] = rx.received;
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  for (int r = 0; r < 2; ++r) {
    REQUIRE(!got[r].empty());
    CHECK(got[r].back().placed == (r == 0));
    CHECK(first_difference(*heaps[r], kAt, 1 - r, 0, bytes) == -1);
  }
}

// What polling `t` until its deadline fires says (the test's guard: `limit`); the messages it
// reported sent by then in `sent`.
inline std::string poll_error(Transport& t, HostMemory& heap, std::chrono::milliseconds limit,
                              size_t* sent = nullptr) {
  Receiver rx(t, heap, 2);
  const std::string e = error_of([&] {
    poll_until(
        rx, [] { return false; }, limit);
  });
  if (sent != nullptr) *sent = rx.sent.size();
  return e;
}

// 3 and 4 ranks, all to all through their proxies, heaps registered and staged, on fake devices
// `devices(world)`, named `prefix`0, 1, ...
inline void all_to_all_three_and_four(
    const std::function<std::vector<FakeDevice>(int)>& devices_for, const char* prefix) {
  for (int world : {3, 4}) {
    for (bool registrable : {true, false}) {
      CAPTURE(world);
      CAPTURE(registrable);
      FakeVerbs fake(devices_for(world));
      all_to_all_through_proxies(
          world,
          [&](int rank) { return make_verbs_transport(fake.api(), on_device(rank, {}, prefix)); },
          [&](int, int64_t bytes) {
            auto h = std::make_unique<HostMemory>(bytes);
            h->set_registrable(registrable);
            return h;
          });
      CHECK(fake.live_objects() == 0);
    }
  }
}

}  // namespace mkc::rt::net::testing
