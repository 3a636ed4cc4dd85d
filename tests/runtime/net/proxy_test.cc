// The proxy's ring protocol, against a scripted transport (no network): entries taken in order and
// only once published (seq last), tail advancing over done entries in order (the kernel's credit),
// a full ring, wrap-around past kProxySlots, a broken ring and bad requests named as errors, a
// transport failure naming the request in flight, the receiving side (heap bytes, then the
// counter), the counters and tail published into the heap, requests to the rank itself, stop.
#include "runtime/net/proxy.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <numeric>
#include <optional>

#include "tests/runtime/net/ring_writer.h"

namespace mkc::rt::net {
namespace {

using testing::load_acquire;
using testing::make_ring;
using testing::request;
using testing::RingWriter;
using testing::wait_until;

// A transport that records what it is asked to send, reports it sent when the test says so (or at
// once), delivers the messages the test injects, and fails when told to. Its state is shared with
// the test (Script), since the proxy destroys a transport that failed.
struct Script {
  struct Sent {
    int peer;
    MessageHeader header;
    int64_t src_offset;
    uint64_t cookie;
  };

  // The entry sent with `cookie` no longer needs its source.
  void complete(uint64_t cookie) {
    std::lock_guard lock(mutex);
    pending.push_back(cookie);
  }
  void inject(const Completion& c) {
    std::lock_guard lock(mutex);
    inbound.push_back(c);
  }
  void fail_next_poll(int peer, const std::string& text) {
    std::lock_guard lock(mutex);
    error = std::make_pair(peer, text);
  }
  void set_auto_complete(bool on) {
    std::lock_guard lock(mutex);
    auto_complete = on;
  }
  // send() takes this many more messages (-1: any number).
  void set_room(int r) {
    std::lock_guard lock(mutex);
    room = r;
  }
  std::vector<Sent> sent_list() {
    std::lock_guard lock(mutex);
    return sent;
  }
  size_t sent_count() {
    std::lock_guard lock(mutex);
    return sent.size();
  }
  long poll_count() {
    std::lock_guard lock(mutex);
    return polls;
  }
  int close_count() {
    std::lock_guard lock(mutex);
    return closes;
  }
  // Waits until the proxy has polled `n` more times: it has looked at the ring that often since.
  void wait_polls(long n) {
    const long start = poll_count();
    REQUIRE(wait_until([&] { return poll_count() >= start + n; }));
  }

  std::mutex mutex;
  std::vector<Sent> sent;
  std::deque<uint64_t> pending;
  std::deque<Completion> inbound;
  std::optional<std::pair<int, std::string>> error;
  bool auto_complete = true;
  int room = -1;
  long polls = 0;
  int closes = 0;
  bool destroyed = false;
};

class ScriptedTransport : public Transport {
 public:
  explicit ScriptedTransport(std::shared_ptr<Script> script) : s_(std::move(script)) {}
  ~ScriptedTransport() override {
    std::lock_guard lock(s_->mutex);
    s_->destroyed = true;
  }

  const char* name() const override { return "scripted"; }
  void connect(const ConnectParams&, MemoryAccess&) override {}
  bool send(int peer, const MessageHeader& header, int64_t src_offset, uint64_t cookie) override {
    std::lock_guard lock(s_->mutex);
    if (s_->room == 0) return false;
    if (s_->room > 0) --s_->room;
    s_->sent.push_back({peer, header, src_offset, cookie});
    if (s_->auto_complete) s_->pending.push_back(cookie);
    return true;
  }
  size_t poll(Completion* out, size_t max) override {
    std::lock_guard lock(s_->mutex);
    ++s_->polls;
    if (s_->error) {
      const auto [peer, text] = *s_->error;
      s_->error.reset();
      throw TransportError(peer, text);
    }
    size_t n = 0;
    while (n < max && !s_->pending.empty()) {
      Completion& c = out[n++];
      c = Completion{};
      c.kind = Completion::kSent;
      c.cookie = s_->pending.front();
      s_->pending.pop_front();
    }
    while (n < max && !s_->inbound.empty()) {
      out[n++] = s_->inbound.front();
      s_->inbound.pop_front();
    }
    return n;
  }
  std::string peer_address(int peer) const override { return fmt::format("scripted:{}", peer); }
  void close() override {
    std::lock_guard lock(s_->mutex);
    ++s_->closes;
  }

 private:
  std::shared_ptr<Script> s_;
};

// A heap that counts flush_inbound() calls, and logs every publish() with the number of write()s
// before it (the proxy's thread writes, the test reads: under a lock).
class CountingMemory : public HostMemory {
 public:
  using HostMemory::HostMemory;
  void flush_inbound() override { ++flushes; }
  void write(int64_t offset, const void* src, int64_t bytes) override {
    HostMemory::write(offset, src, bytes);
    std::lock_guard lock(mutex);
    ++writes;
  }
  void publish(int64_t offset, uint64_t value) override {
    HostMemory::publish(offset, value);
    std::lock_guard lock(mutex);
    published.push_back({offset, value, writes});
  }
  struct Published {
    int64_t offset;
    uint64_t value;
    int writes_before;
  };
  std::vector<Published> published_list() {
    std::lock_guard lock(mutex);
    return published;
  }
  uint64_t word(int64_t offset) {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(data() + offset))
        .load(std::memory_order_acquire);
  }
  int flushes = 0;

 private:
  std::mutex mutex;
  int writes = 0;
  std::vector<Published> published;
};

// One rank's proxy over a ScriptedTransport; the other ranks exist only in the all_gather, which
// answers with copies of this rank's sizes.
struct Rig {
  explicit Rig(
      int world = 2, std::vector<int> peers = {1}, int num_events = 8, int64_t heap_bytes = 1 << 20,
      const std::function<void(ProxySetup&)>& tweak = [](ProxySetup&) {})
      : ring(make_ring()), events(static_cast<size_t>(num_events), 0), heap(heap_bytes) {
    transport = std::make_shared<Script>();
    auto t = std::make_unique<ScriptedTransport>(transport);
    ProxySetup s;
    s.rank = 0;
    s.world = world;
    s.peers = std::move(peers);
    s.ring = ring.get();
    s.events = events.data();
    s.num_events = num_events;
    s.heap = &heap;
    s.all_gather = [world](const std::string& mine) {
      return std::vector<std::string>(static_cast<size_t>(world), mine);
    };
    s.options.timeout = std::chrono::milliseconds(2000);
    tweak(s);
    proxy = std::make_unique<Proxy>(std::move(s), std::move(t));
    writer = std::make_unique<RingWriter>(ring.get());
  }
  abi::u64 tail() { return load_acquire(ring->tail); }
  abi::u64 counter(int e) { return load_acquire(events[static_cast<size_t>(e)]); }
  std::string wait_error() {
    REQUIRE(wait_until([&] { return proxy->failed(); }));
    return proxy->status().error;
  }

  std::unique_ptr<abi::ProxyRing> ring;
  std::vector<abi::u64> events;
  CountingMemory heap;
  std::shared_ptr<Script> transport;
  std::unique_ptr<Proxy> proxy;
  std::unique_ptr<RingWriter> writer;
};

TEST_CASE("proxy: entries are taken in order, once each, with their fields") {
  Rig rig;
  rig.proxy->start();
  for (int i = 0; i < 10; ++i) rig.writer->post(request(1, 64 * i, 128 * i, 8 * i, i % 8));
  REQUIRE(wait_until([&] { return rig.tail() == 10; }));
  const auto sent = rig.transport->sent_list();
  REQUIRE(sent.size() == 10);
  for (int i = 0; i < 10; ++i) {
    CAPTURE(i);
    CHECK(sent[i].peer == 1);
    CHECK(sent[i].cookie == static_cast<uint64_t>(i));
    CHECK(sent[i].src_offset == 64 * i);
    CHECK(sent[i].header.dst_offset == 128 * i);
    CHECK(sent[i].header.bytes == 8 * i);
    CHECK(sent[i].header.event == i % 8);
  }
  CHECK(rig.proxy->status().stats.requests == 10);
  CHECK(rig.proxy->status().state == ProxyState::kRunning);
  rig.proxy->stop();
  CHECK(rig.proxy->status().state == ProxyState::kStopped);
}

TEST_CASE("proxy: an entry is taken only once its seq is published, and only after those before") {
  Rig rig;
  rig.proxy->start();
  const abi::u64 a = rig.writer->claim(), b = rig.writer->claim();
  rig.writer->write(a, request(1, 0, 0, 8, 1));
  rig.writer->write(b, request(1, 8, 8, 8, 2));
  // Fields written, seq not yet: nothing to take.
  rig.transport->wait_polls(200);
  CHECK(rig.transport->sent_count() == 0);
  // The later entry published first (another CTA was faster): still nothing, order holds.
  rig.writer->publish(b);
  rig.transport->wait_polls(200);
  CHECK(rig.transport->sent_count() == 0);
  CHECK(rig.tail() == 0);
  rig.writer->publish(a);
  REQUIRE(wait_until([&] { return rig.tail() == 2; }));
  const auto sent = rig.transport->sent_list();
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].header.event == 1);
  CHECK(sent[1].header.event == 2);
}

TEST_CASE("proxy: tail advances over done entries only, in order") {
  Rig rig;
  rig.transport->set_auto_complete(false);
  rig.proxy->start();
  for (int i = 0; i < 3; ++i) rig.writer->post(request(1, 0, 0, 8, -1));
  REQUIRE(wait_until([&] { return rig.transport->sent_count() == 3; }));
  rig.transport->wait_polls(100);
  CHECK(rig.tail() == 0);
  // Entry 1 done before entry 0: the credit cannot pass entry 0.
  rig.transport->complete(1);
  rig.transport->wait_polls(100);
  CHECK(rig.tail() == 0);
  rig.transport->complete(0);
  REQUIRE(wait_until([&] { return rig.tail() == 2; }));
  rig.transport->wait_polls(100);
  CHECK(rig.tail() == 2);
  rig.transport->complete(2);
  REQUIRE(wait_until([&] { return rig.tail() == 3; }));
}

TEST_CASE("proxy: a full ring holds the writer until credits come; wrap-around past kProxySlots") {
  Rig rig;
  rig.transport->set_auto_complete(false);
  rig.proxy->start();
  const int slots = abi::kProxySlots;
  for (int i = 0; i < slots; ++i) rig.writer->post(request(1, i % 4096, 0, 1, -1));
  REQUIRE(wait_until([&] { return rig.transport->sent_count() == static_cast<size_t>(slots); }));
  // The ring is full: the next entry has no credit, and nothing moves on its own.
  const abi::u64 next = rig.writer->claim();
  rig.transport->wait_polls(100);
  CHECK_FALSE(rig.writer->has_credit(next));
  CHECK(rig.tail() == 0);
  rig.transport->complete(0);
  REQUIRE(wait_until([&] { return rig.writer->has_credit(next); }));
  CHECK(rig.tail() == 1);
  rig.writer->write(next, request(1, next % 4096, 0, 1, -1));
  rig.writer->publish(next);
  for (int i = 1; i <= slots; ++i) rig.transport->complete(static_cast<uint64_t>(i));
  REQUIRE(wait_until([&] { return rig.tail() == static_cast<abi::u64>(slots) + 1; }));

  // Then three more laps, completed as they go: every entry once, in order, fields intact.
  rig.transport->set_auto_complete(true);
  const int total = 4 * slots + 7;
  for (int i = slots + 1; i < total; ++i) rig.writer->post(request(1, i % 4096, i, 1, -1));
  REQUIRE(wait_until([&] { return rig.tail() == static_cast<abi::u64>(total); }));
  const auto sent = rig.transport->sent_list();
  REQUIRE(sent.size() == static_cast<size_t>(total));
  bool in_order = true;
  for (int i = 0; i < total; ++i) {
    in_order = in_order && sent[i].cookie == static_cast<uint64_t>(i) &&
               sent[i].src_offset == i % 4096 && (i <= slots || sent[i].header.dst_offset == i);
  }
  CHECK(in_order);
}

TEST_CASE("proxy: a transport without room now gets the entry again later") {
  Rig rig;
  rig.transport->set_room(0);
  rig.proxy->start();
  rig.writer->post(request(1, 0, 0, 8, 3));
  rig.transport->wait_polls(100);
  CHECK(rig.transport->sent_count() == 0);
  rig.transport->set_room(-1);
  REQUIRE(wait_until([&] { return rig.tail() == 1; }));
  CHECK(rig.transport->sent_count() == 1);
}

TEST_CASE("proxy: a broken ring is an error naming the entry") {
  Rig rig;
  rig.proxy->start();
  rig.writer->write(0, request(1, 0, 0, 8, 1));
  std::atomic_ref<abi::u64>(rig.ring->entries[0].seq).store(5, std::memory_order_release);
  const std::string e = rig.wait_error();
  CHECK(e.find("proxy of rank 0") != std::string::npos);
  CHECK(e.find("ring entry 0 holds seq 5") != std::string::npos);
  CHECK(rig.proxy->status().state == ProxyState::kFailed);
  CHECK_THROWS_AS(rig.proxy->check(), EnvironmentError);
  CHECK(rig.transport->sent_count() == 0);
}

TEST_CASE(
    "proxy: a request it cannot carry is an error naming it (rank, destination, bytes, event)") {
  struct Case {
    const char* name;
    abi::ProxyRequest r;
    const char* says;
  };
  const Case cases[] = {
      {"no such rank", request(7, 0, 0, 8, 1), "no rank 7 in a world of 3"},
      {"negative rank", request(-1, 0, 0, 8, 1), "no rank -1"},
      {"not a peer", request(2, 0, 0, 8, 1), "rank 2 is not one of this rank's peers"},
      {"event too large", request(1, 0, 0, 8, 8), "rank 1 has 8 proxy counters"},
      {"event below -1", request(1, 0, 0, 8, -2), "rank 1 has 8 proxy counters"},
      {"source outside", request(1, (1 << 20) - 4, 0, 8, 1), "source lies outside"},
      {"negative bytes", request(1, 0, 0, -8, 1), "source lies outside"},
      {"destination outside", request(1, 0, 1 << 20, 8, 1), "destination lies outside rank 1's"},
      {"huge bytes", request(1, 0, 0, int64_t{1} << 62, 1), "source lies outside"},
  };
  for (const Case& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    Rig rig(3, {1});
    rig.proxy->start();
    rig.writer->post(c.r);
    const std::string e = rig.wait_error();
    CHECK(e.find(c.says) != std::string::npos);
    CHECK(e.find(fmt::format("ring entry 0 (rank 0 -> rank {}: {} bytes from heap offset {} to {}, "
                             "event {})",
                             c.r.dst_rank, c.r.bytes, c.r.src_offset, c.r.dst_offset, c.r.event)) !=
          std::string::npos);
    CHECK(rig.transport->sent_count() == 0);
    CHECK(rig.tail() == 0);
  }
}

TEST_CASE("proxy: a transport failure names the request in flight to that peer") {
  Rig rig(3, {1, 2});
  rig.transport->set_auto_complete(false);
  rig.proxy->start();
  rig.writer->post(request(2, 0, 64, 4096, 5));
  rig.writer->post(request(1, 0, 0, 8, 1));
  REQUIRE(wait_until([&] { return rig.transport->sent_count() == 2; }));
  rig.transport->fail_next_poll(1, "tcp: rank 0: rank 1 at 10.0.0.2:4000: closed the connection");
  const std::string e = rig.wait_error();
  CHECK(e.find("rank 1 at 10.0.0.2:4000: closed the connection") != std::string::npos);
  CHECK(e.find("in flight to rank 1: ring entry 1 (rank 0 -> rank 1: 8 bytes from heap offset 0 "
               "to 0, event 1)") != std::string::npos);
}

TEST_CASE("proxy: received bytes go into the heap before the counter rises") {
  Rig rig;
  rig.proxy->start();
  std::vector<char> payload(3000);
  std::iota(payload.begin(), payload.end(), 0);
  Completion c;
  c.kind = Completion::kReceived;
  c.peer = 1;
  c.event = 3;
  c.dst_offset = 100;
  c.bytes = 1000;
  c.data = payload.data();
  rig.transport->inject(c);
  rig.transport->wait_polls(20);
  // Not the last fragment: bytes in place, no counter yet.
  CHECK(rig.counter(3) == 0);
  c.dst_offset = 1100;
  c.bytes = 2000;
  c.data = payload.data() + 1000;
  c.last = true;
  rig.transport->inject(c);
  REQUIRE(wait_until([&] { return rig.counter(3) == 1; }));
  CHECK(std::memcmp(rig.heap.data() + 100, payload.data(), payload.size()) == 0);
  CHECK(rig.heap.flushes == 0);
  // A message the NIC placed itself: the heap is flushed before the counter.
  Completion placed;
  placed.kind = Completion::kReceived;
  placed.peer = 1;
  placed.event = 3;
  placed.bytes = 64;
  placed.last = true;
  placed.placed = true;
  rig.transport->inject(placed);
  REQUIRE(wait_until([&] { return rig.counter(3) == 2; }));
  CHECK(rig.heap.flushes == 1);
  // A signal only, for another counter; event -1 raises none.
  Completion signal;
  signal.kind = Completion::kReceived;
  signal.peer = 1;
  signal.event = 7;
  signal.last = true;
  rig.transport->inject(signal);
  signal.event = -1;
  rig.transport->inject(signal);
  REQUIRE(wait_until([&] { return rig.counter(7) == 1; }));
  rig.transport->wait_polls(20);
  CHECK(rig.proxy->status().stats.messages_received == 4);
  CHECK(std::accumulate(rig.events.begin(), rig.events.end(), abi::u64{0}) == 3);
  CHECK_FALSE(rig.proxy->failed());
}

// The words the kernel polls: counters and tail published into the heap (device memory in a job).
constexpr int64_t kWordsAt = (1 << 20) - 4096;  // counters [8], then the tail 64 bytes on
constexpr int64_t kTailAt = kWordsAt + 64 + 8 * 8;

TEST_CASE("proxy: counters and tail are published into the heap, each counter after its bytes") {
  Rig rig(2, {1}, 8, 1 << 20, [](ProxySetup& s) {
    s.heap_events_offset = kWordsAt;
    s.heap_tail_offset = kTailAt;
  });
  // At construction: the host's values (zeros), one publish per counter and one for the tail.
  CHECK(rig.heap.published_list().size() == 9);
  rig.proxy->start();
  std::vector<char> payload(512, 5);
  Completion c;
  c.kind = Completion::kReceived;
  c.peer = 1;
  c.event = 3;
  c.dst_offset = 4096;
  c.bytes = 512;
  c.data = payload.data();
  c.last = true;
  rig.transport->inject(c);
  rig.transport->inject(c);
  REQUIRE(wait_until([&] { return rig.heap.word(kWordsAt + 3 * 8) == 2; }));
  CHECK(rig.counter(3) == 2);
  for (int i = 0; i < 5; ++i) rig.writer->post(request(1, 64 * i, 0, 64, 0));
  REQUIRE(wait_until([&] { return rig.heap.word(kTailAt) == 5; }));
  CHECK(rig.tail() == 5);
  rig.proxy->stop();
  int raised = 0;
  abi::u64 last_tail = 0;
  for (const auto& p : rig.heap.published_list()) {
    if (p.offset == kWordsAt + 3 * 8 && p.value > 0) {
      // Raise k comes after message k's write into the heap.
      CHECK(p.writes_before >= static_cast<int>(p.value));
      ++raised;
    } else if (p.offset == kTailAt) {
      CHECK(p.value >= last_tail);  // the tail never goes back
      last_tail = p.value;
    }
  }
  CHECK(raised == 2);
  CHECK(last_tail == 5);
  for (int e = 0; e < 8; ++e) CHECK(rig.heap.word(kWordsAt + 8 * e) == (e == 3 ? 2u : 0u));
}

TEST_CASE("proxy: published words must be aligned and inside the heap") {
  const auto refused = [](int64_t events_at, int64_t tail_at) {
    try {
      Rig rig(2, {1}, 8, 1 << 20, [&](ProxySetup& s) {
        s.heap_events_offset = events_at;
        s.heap_tail_offset = tail_at;
      });
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refused(kWordsAt + 4, -1).find("the published counters at heap offset") !=
        std::string::npos);
  CHECK(refused((1 << 20) - 32, -1).find("inside the heap of 1048576 bytes") != std::string::npos);
  CHECK(refused(-1, 1 << 20).find("the published tail") != std::string::npos);
  CHECK(refused(-1, -8).find("the published tail") != std::string::npos);
  CHECK(refused(kWordsAt, kTailAt) == "");
}

TEST_CASE("proxy: a peer's message for a counter this rank lacks is an error naming the peer") {
  Rig rig;
  rig.proxy->start();
  Completion c;
  c.kind = Completion::kReceived;
  c.peer = 1;
  c.event = 8;
  c.last = true;
  rig.transport->inject(c);
  const std::string e = rig.wait_error();
  CHECK(e.find("rank 1 (scripted:1) sent a message for proxy counter 8") != std::string::npos);
}

TEST_CASE("proxy: a request to the rank itself is copied in its heap, overlapping or not") {
  Rig rig(2, {1});
  for (int i = 0; i < 4096; ++i) rig.heap.data()[i] = static_cast<std::byte>(i * 7);
  std::vector<std::byte> before(rig.heap.data(), rig.heap.data() + 4096);
  rig.proxy->start();
  rig.writer->post(request(0, 0, 8192, 4096, 2));
  // Overlapping, destination above the source: as memmove would.
  rig.writer->post(request(0, 0, 100, 3000, 2));
  REQUIRE(wait_until([&] { return rig.counter(2) == 2 && rig.tail() == 2; }));
  CHECK(std::memcmp(rig.heap.data() + 8192, before.data(), 4096) == 0);
  CHECK(std::memcmp(rig.heap.data() + 100, before.data(), 3000) == 0);
  CHECK(rig.transport->sent_count() == 0);
}

TEST_CASE("proxy: stop is idempotent and closes the transport once, also when never started") {
  {
    Rig rig;
    rig.proxy->start();
    rig.transport->wait_polls(10);
    rig.proxy->stop();
    rig.proxy->stop();
    CHECK(rig.proxy->status().state == ProxyState::kStopped);
    CHECK(rig.transport->close_count() == 1);
    CHECK(rig.transport->destroyed);
    CHECK_THROWS_AS(rig.proxy->start(), InternalError);
  }
  {
    Rig rig;
    rig.proxy->stop();
    CHECK(rig.proxy->status().state == ProxyState::kStopped);
    CHECK(rig.transport->close_count() == 1);
  }
}

TEST_CASE("proxy: a failed proxy drops its transport without the goodbye") {
  Rig rig;
  rig.proxy->start();
  rig.transport->fail_next_poll(1, "boom");
  rig.wait_error();
  REQUIRE(wait_until([&] {
    std::lock_guard lock(rig.transport->mutex);
    return rig.transport->destroyed;
  }));
  CHECK(rig.transport->close_count() == 0);
  rig.proxy->stop();
  CHECK(rig.proxy->status().state == ProxyState::kFailed);
}

TEST_CASE("proxy: a setup without its parts is refused") {
  auto ring = make_ring();
  HostMemory heap(1024);
  ProxySetup s;
  s.world = 2;
  s.peers = {1};
  s.ring = nullptr;
  s.heap = &heap;
  s.all_gather = [](const std::string& m) { return std::vector<std::string>{m, m}; };
  const auto script = std::make_shared<Script>();
  const auto make = [&] { return std::make_unique<ScriptedTransport>(script); };
  CHECK_THROWS_AS(Proxy(s, make()), UserError);
  s.ring = ring.get();
  s.num_events = 4;  // and no counters
  CHECK_THROWS_AS(Proxy(s, make()), UserError);
  s.num_events = 0;
  s.peers = {0};  // itself
  CHECK_THROWS_AS(Proxy(s, make()), UserError);
  s.peers = {1};
  s.all_gather = [](const std::string& m) { return std::vector<std::string>{m, "garbage"}; };
  CHECK_THROWS_WITH_AS(Proxy(s, make()), doctest::Contains("rank 1's proxy sent no sizes"),
                       EnvironmentError);
  CHECK_THROWS_AS(Proxy(s, nullptr), UserError);
}

}  // namespace
}  // namespace mkc::rt::net
