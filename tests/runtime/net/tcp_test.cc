// The tcp transport on loopback, ranks as threads of this process, the all_gather in memory:
// messages of 0 B to 64 MB both ways at once, byte exact and in order, also between staging
// buffers of 4 KB and 1 MB (the framing itself is fed every split in tcp_stream_test); 3 and 4
// ranks all to all through their proxies (ring entries in, counters and heap bytes out); a peer
// that dies, stalls or never comes is an error naming its rank and address within the deadline;
// a goodbye is not a failure, but sending to a rank that said it is; bad connection details are
// named.
#include "runtime/net/tcp.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>

#include "runtime/net/all_gather.h"
#include "runtime/net/proxy.h"
#include "tests/runtime/net/exchange.h"
#include "tests/runtime/net/net_test_util.h"
#include "tests/runtime/net/ring_writer.h"

namespace mkc::rt::net {
namespace {

using namespace std::chrono_literals;
using testing::first_difference;
using testing::poll_until;
using testing::Receiver;
using testing::run_ranks;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<int> others(int rank, int world) {
  std::vector<int> v;
  for (int r = 0; r < world; ++r) {
    if (r != rank) v.push_back(r);
  }
  return v;
}

ConnectParams params(int rank, int world, LocalAllGather& ag,
                     std::chrono::milliseconds timeout = 10s) {
  ConnectParams p;
  p.rank = rank;
  p.world = world;
  p.peers = others(rank, world);
  p.all_gather = ag.for_rank(rank);
  p.timeout = timeout;
  return p;
}

// Two ranks send each other messages of `sizes` at once, rank r's transport made with options[r];
// every message must arrive byte exact and in order.
void exchange(const std::vector<int64_t>& sizes, const std::vector<TcpOptions>& options) {
  // Sources in the lower half of each heap, destinations in the upper half, at the same places.
  std::vector<int64_t> at;
  int64_t half = 0;
  for (int64_t n : sizes) {
    at.push_back(half);
    half += (n + 4095) / 4096 * 4096 + 4096;
  }
  std::vector<std::unique_ptr<HostMemory>> heaps;
  for (int r = 0; r < 2; ++r) {
    heaps.push_back(std::make_unique<HostMemory>(2 * half));
    testing::fill_pattern(*heaps.back(), r, 0, half);
  }
  LocalAllGather ag(2, 10s);
  std::vector<std::vector<testing::Received>> got(2);
  const auto errors = run_ranks(2, [&](int rank) {
    auto t = make_tcp_transport(options[rank]);
    t->connect(params(rank, 2, ag), *heaps[rank]);
    CHECK(t->peer_address(1 - rank).rfind("127.0.0.1:", 0) == 0);
    for (size_t i = 0; i < sizes.size(); ++i) {
      REQUIRE(t->send(1 - rank, {half + at[i], sizes[i], static_cast<int32_t>(i)}, at[i], 100 + i));
    }
    Receiver rx(*t, *heaps[rank], 2);
    poll_until(
        rx, [&] { return rx.sent.size() == sizes.size() && rx.received.size() == sizes.size(); });
    // Both sides are done receiving before either says goodbye.
    ag.gather(rank, "");
    t->close();
    for (size_t i = 0; i < sizes.size(); ++i) CHECK(rx.sent[i] == 100 + i);
    got[rank] = rx.received;
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  for (int r = 0; r < 2; ++r) {
    REQUIRE(got[r].size() == sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      CAPTURE(r);
      CAPTURE(i);
      const testing::Received& m = got[r][i];
      CHECK(m.peer == 1 - r);
      CHECK(m.dst_offset == half + at[i]);
      CHECK(m.bytes == sizes[i]);
      CHECK(m.event == static_cast<int>(i));
      CHECK_FALSE(m.placed);
      CHECK(first_difference(*heaps[r], half + at[i], 1 - r, at[i], sizes[i]) == -1);
    }
  }
}

TEST_CASE("tcp: 2 ranks, 0 B to 64 MB each way at once, byte exact and in order") {
  exchange({0, 8, 4096, 1 << 20, 64 << 20, 8, 0}, {{}, {}});
}

TEST_CASE("tcp: staging buffers of 4 KB against 1 MB, sizes about both, byte exact") {
  // The small side's sends cut the stream into pieces far under the large side's fragment
  // threshold; the large side's sends overrun the small side's buffer many times.
  TcpOptions small;
  small.chunk_bytes = 4096;
  const int64_t half = 1 << 19;
  exchange({1, 31, 32, 33, 4063, 4064, 4096, 4097, half - 1, half + 1, (1 << 20) + 3, 0, 5},
           {small, {}});
}

TEST_CASE("tcp: 3 ranks all to all through their proxies") {
  testing::all_to_all_through_proxies(3, [](int) { return make_tcp_transport(); });
}

TEST_CASE("tcp: 4 ranks all to all through their proxies") {
  testing::all_to_all_through_proxies(4, [](int) { return make_tcp_transport(); });
}

// A heap whose reads fail, or hold, once `after` bytes were read.
class FaultyMemory : public HostMemory {
 public:
  enum class Mode { kThrow, kHold };
  FaultyMemory(int64_t bytes, int64_t after, Mode mode)
      : HostMemory(bytes), after_(after), mode_(mode) {}
  void read(int64_t offset, void* dst, int64_t bytes) override {
    if (read_ >= after_) {
      if (mode_ == Mode::kThrow) throw EnvironmentError("the heap went away");
      std::unique_lock lock(mutex_);
      released_.wait_for(lock, 30s, [&] { return release_; });
    }
    read_ += bytes;
    HostMemory::read(offset, dst, bytes);
  }
  void release() {
    std::lock_guard lock(mutex_);
    release_ = true;
    released_.notify_all();
  }

 private:
  int64_t after_;
  Mode mode_;
  int64_t read_ = 0;
  std::mutex mutex_;
  std::condition_variable released_;
  bool release_ = false;
};

TEST_CASE("tcp: a peer that dies mid-message is an error naming its rank and address") {
  // The sender stages 1 MB or 64 KB at a time: what is left unread at the close is then more, or
  // less, than the receiver's threshold for handing a fragment out.
  for (const size_t chunk : {size_t{1} << 20, size_t{64} << 10}) {
    CAPTURE(chunk);
    const int64_t bytes = 8 << 20;
    FaultyMemory sender(bytes, static_cast<int64_t>(chunk), FaultyMemory::Mode::kThrow);
    HostMemory receiver(bytes);
    LocalAllGather ag(2, 10s);
    std::string address_of_1;
    const auto errors = run_ranks(2, [&](int rank) {
      TcpOptions o;
      if (rank == 1) o.chunk_bytes = chunk;
      auto t = make_tcp_transport(o);
      t->connect(params(rank, 2, ag), rank == 0 ? static_cast<MemoryAccess&>(receiver) : sender);
      if (rank == 1) {
        REQUIRE(t->send(0, {0, bytes, 1}, 0, 7));
        Receiver rx(*t, sender, 2);
        // The heap fails after the first chunks; the transport is dropped as a dying process's.
        CHECK_THROWS_WITH(poll_until(rx, [] { return false; }), "the heap went away");
        t.reset();
        return;
      }
      address_of_1 = t->peer_address(1);
      Receiver rx(*t, receiver, 2);
      poll_until(rx, [] { return false; });
    });
    CHECK(errors[1] == "");
    CHECK(contains(errors[0], "tcp: rank 0: rank 1 at " + address_of_1));
    CHECK(contains(errors[0], "closed the connection in the middle of a message"));
    CHECK(contains(errors[0], "of 8388608 payload bytes"));
  }
}

TEST_CASE("tcp: a peer that stalls mid-message times out, naming its rank and address") {
  for (const size_t chunk : {size_t{1} << 20, size_t{64} << 10}) {
    CAPTURE(chunk);
    const int64_t bytes = 8 << 20;
    FaultyMemory sender(bytes, static_cast<int64_t>(chunk), FaultyMemory::Mode::kHold);
    HostMemory receiver(bytes);
    LocalAllGather ag(2, 10s);
    std::string error;
    const auto errors = run_ranks(2, [&](int rank) {
      TcpOptions o;
      if (rank == 1) o.chunk_bytes = chunk;
      auto t = make_tcp_transport(o);
      t->connect(params(rank, 2, ag, 300ms),
                 rank == 0 ? static_cast<MemoryAccess&>(receiver) : sender);
      if (rank == 1) {
        REQUIRE(t->send(0, {0, bytes, 1}, 0, 7));
        // One poll sends the first chunk, the next one holds in the heap's read until released.
        Receiver rx(*t, sender, 2);
        rx.poll();
        rx.poll();
        ag.gather(rank, "");
        return;
      }
      Receiver rx(*t, receiver, 2);
      try {
        poll_until(rx, [] { return false; });
      } catch (const TransportError& e) {
        CHECK(e.peer() == 1);
        error = e.what();
      }
      sender.release();
      ag.gather(rank, "");
    });
    CHECK(errors[0] == "");
    CHECK(errors[1] == "");
    CHECK(contains(error, "tcp: rank 0: rank 1 at 127.0.0.1:"));
    CHECK(contains(error, "sent nothing for 0.3 s in the middle of a message"));
  }
}

TEST_CASE("tcp: a proxy that fails mid-message makes its peer's proxy fail, naming it") {
  const int64_t bytes = 8 << 20;
  FaultyMemory sender(bytes, 1 << 20, FaultyMemory::Mode::kThrow);
  HostMemory receiver(bytes);
  LocalAllGather ag(2, 10s);
  std::vector<std::unique_ptr<abi::ProxyRing>> rings;
  std::vector<std::vector<abi::u64>> events(2, std::vector<abi::u64>(2, 0));
  for (int r = 0; r < 2; ++r) rings.push_back(testing::make_ring());
  std::vector<std::string> status(2);
  const auto errors = run_ranks(2, [&](int rank) {
    ProxySetup s;
    s.rank = rank;
    s.world = 2;
    s.peers = {1 - rank};
    s.ring = rings[rank].get();
    s.events = events[rank].data();
    s.num_events = 2;
    s.heap = rank == 0 ? static_cast<MemoryAccess*>(&receiver) : &sender;
    s.all_gather = ag.for_rank(rank);
    s.options.timeout = 10s;
    Proxy proxy(std::move(s), make_tcp_transport());
    proxy.start();
    if (rank == 1) testing::RingWriter(rings[1].get()).post(testing::request(0, 0, 0, bytes, 1));
    REQUIRE(testing::wait_until([&] { return proxy.failed(); }));
    CHECK_THROWS_AS(proxy.check(), EnvironmentError);
    status[rank] = proxy.status().error;
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  CHECK(contains(status[1],
                 "proxy of rank 1: the heap went away; oldest in flight: ring entry 0 "
                 "(rank 1 -> rank 0: 8388608 bytes from heap offset 0 to 0, event 1)"));
  CHECK(contains(status[0], "proxy of rank 0: tcp: rank 0: rank 1 at 127.0.0.1:"));
  CHECK(contains(status[0], "closed the connection in the middle of a message"));
  CHECK(events[0][1] == 0);
}

// Two tcp transports on loopback, rank 0 over heap a and rank 1 over b, connected.
std::vector<std::unique_ptr<Transport>> connect_pair(MemoryAccess& a, MemoryAccess& b) {
  LocalAllGather ag(2, 10s);
  std::vector<std::unique_ptr<Transport>> t(2);
  const auto errors = run_ranks(2, [&](int rank) {
    t[rank] = make_tcp_transport();
    t[rank]->connect(params(rank, 2, ag), rank == 0 ? a : b);
  });
  REQUIRE(errors[0] == "");
  REQUIRE(errors[1] == "");
  return t;
}

TEST_CASE("tcp: a goodbye is not a failure; sending to the rank that said it is one") {
  HostMemory a(4096), b(4096);
  std::vector<std::unique_ptr<Transport>> t = connect_pair(a, b);
  // A last message, then the goodbye: rank 0 gets the message, and no error.
  REQUIRE(t[1]->send(0, {64, 8, 0}, 0, 1));
  Receiver rx1(*t[1], b, 2);
  poll_until(rx1, [&] { return rx1.sent.size() == 1; });
  t[1]->close();
  t[1]->close();
  Receiver rx0(*t[0], a, 2);
  for (int i = 0; i < 50; ++i) rx0.poll();
  CHECK(rx0.received.size() == 1);
  CHECK_THROWS_WITH_AS(t[0]->send(1, {0, 8, 0}, 0, 2), doctest::Contains("rank 1 at 127.0.0.1:"),
                       TransportError);
  CHECK_THROWS_WITH_AS(t[0]->send(1, {0, 8, 0}, 0, 2), doctest::Contains("has stopped its proxy"),
                       TransportError);
  CHECK_THROWS_WITH_AS(t[0]->send(5, {0, 8, 0}, 0, 2), doctest::Contains("no connection to rank 5"),
                       TransportError);
}

// Counts the staging buffers a transport hands its heap: each begun once, ended once, before
// the transport is gone (CudaHeap page-locks them in between).
class StagingMemory : public HostMemory {
 public:
  using HostMemory::HostMemory;
  void stage_begin(void* buffer, size_t bytes) override {
    CHECK(bytes > 0);
    CHECK(live.insert(buffer).second);
    ++begun;
  }
  void stage_end(void* buffer) override { CHECK(live.erase(buffer) == 1); }
  std::set<void*> live;
  int begun = 0;
};

TEST_CASE("tcp: staging buffers are given to the heap once each, and back before they are freed") {
  StagingMemory a(4096), b(4096);
  {
    std::vector<std::unique_ptr<Transport>> t = connect_pair(a, b);
    // Per peer: the outgoing buffer and the incoming one.
    CHECK(a.begun == 2);
    CHECK(a.live.size() == 2);
    // Staged bytes still arrive exactly.
    for (int i = 0; i < 64; ++i) a.data()[i] = static_cast<std::byte>(i + 1);
    REQUIRE(t[0]->send(1, {128, 64, 0}, 0, 1));
    Receiver rx0(*t[0], a, 2), rx1(*t[1], b, 2);
    poll_until(rx1, [&] {
      rx0.poll();
      return rx1.received.size() == 1;
    });
    for (int i = 0; i < 64; ++i) CHECK(b.data()[128 + i] == static_cast<std::byte>(i + 1));
    t[0]->close();
  }
  CHECK(a.live.empty());
  CHECK(b.live.empty());
  CHECK(b.begun == 2);
}

TEST_CASE("tcp: a rank that goes away after the all_gather is named when connecting times out") {
  for (int dead : {0, 1}) {
    CAPTURE(dead);
    HostMemory heap(4096);
    LocalAllGather ag(2, 10s);
    const auto errors = run_ranks(2, [&](int rank) {
      auto t = make_tcp_transport();
      ConnectParams p = params(rank, 2, ag, 400ms);
      if (rank == dead) {
        p.all_gather = [&, rank](const std::string& mine) -> std::vector<std::string> {
          ag.gather(rank, mine);
          throw std::runtime_error("gone");
        };
      }
      t->connect(p, heap);
    });
    const std::string& e = errors[1 - dead];
    CHECK(errors[dead] == "gone");
    CHECK(contains(e, fmt::format("tcp: rank {} could not connect to its peers within 0.4 s: rank "
                                  "{} at 127.0.0.1:",
                                  1 - dead, dead)));
    // Rank 1 dials rank 0 and is refused; rank 0 waits for rank 1's call.
    CHECK(contains(e, dead == 0 ? "Connection refused (ECONNREFUSED)" : "never connected here"));
  }
}

TEST_CASE("tcp: connection details that are not a tcp transport's; bad peer lists and addresses") {
  HostMemory heap(4096);
  const auto connect_with = [&](std::vector<int> peers,
                                std::function<std::vector<std::string>(const std::string&)> ag) {
    ConnectParams p;
    p.rank = 0;
    p.world = 3;
    p.peers = std::move(peers);
    p.all_gather = std::move(ag);
    p.timeout = 1s;
    make_tcp_transport()->connect(p, heap);
  };
  CHECK_THROWS_WITH_AS(connect_with({1, 2},
                                    [](const std::string& mine) {
                                      return std::vector<std::string>{mine, mine, "x"};
                                    }),
                       doctest::Contains("rank 1's connection details"), TransportError);
  CHECK_THROWS_WITH_AS(
      connect_with({1},
                   [](const std::string& mine) {
                     return std::vector<std::string>{mine, mine.substr(0, 10), mine};
                   }),
      doctest::Contains("rank 1's connection details"), TransportError);
  CHECK_THROWS_WITH_AS(connect_with({1, 1}, nullptr), doctest::Contains("names rank 1"), UserError);
  CHECK_THROWS_WITH_AS(connect_with({0}, nullptr), doctest::Contains("names rank 0"), UserError);
  CHECK_THROWS_WITH_AS(connect_with({3}, nullptr), doctest::Contains("names rank 3"), UserError);
  ConnectParams bad;
  bad.world = 2;
  bad.peers = {1};
  bad.all_gather = [](const std::string& m) { return std::vector<std::string>{m, m}; };
  TcpOptions o;
  o.address = "not-an-address";
  CHECK_THROWS_WITH_AS(make_tcp_transport(o)->connect(bad, heap),
                       doctest::Contains("not an IPv4 address"), UserError);
  o.address = "192.0.2.1";  // TEST-NET-1: not an address of this host
  CHECK_THROWS_WITH_AS(make_tcp_transport(o)->connect(bad, heap),
                       doctest::Contains("cannot listen on 192.0.2.1"), TransportError);
}

TEST_CASE("tcp: peer lists that disagree are named on both sides") {
  HostMemory heap(4096);
  LocalAllGather ag(3, 10s);
  const auto errors = run_ranks(3, [&](int rank) {
    ConnectParams p = params(rank, 3, ag, 1s);
    // Rank 2 leaves rank 0 out; rank 0 lists rank 2.
    if (rank == 2) p.peers = {1};
    make_tcp_transport()->connect(p, heap);
  });
  CHECK(contains(errors[0], "rank 0 lists rank 2 as a peer but rank 2 does not"));
  CHECK(contains(errors[2], "rank 2 does not list rank 0 as a peer but rank 0 lists it"));
}

TEST_CASE("tcp: local_address_toward") {
  CHECK(local_address_toward("127.0.0.1") == "127.0.0.1");
  CHECK_THROWS_AS(local_address_toward("no-such-host.invalid"), EnvironmentError);
}

}  // namespace
}  // namespace mkc::rt::net
