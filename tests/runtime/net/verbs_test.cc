// The verbs transport's logic against the fake verbs table (tests/runtime/net/fake_verbs.h; no NIC
// here): device and port choice (MKC_IB_HCA), connecting 2 to 4 ranks (InfiniBand LIDs and RoCE
// GIDs), messages of 0 B to 16 MB with the heap registered as host memory, as a dma-buf, or not
// at all (staged, with credits wrapping), through proxies; completion errors, a peer that
// disappears, writes that never complete and a peer that takes nothing named within the deadline;
// failing verbs calls named with their errno; loading libibverbs.
#include "runtime/net/verbs.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/runtime/net/exchange.h"
#include "tests/runtime/net/verbs_test_util.h"

namespace mkc::rt::net {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using testing::devices;
using testing::DmabufMemory;
using testing::error_of;
using testing::exchange_two;
using testing::FakeDevice;
using testing::FakeVerbs;
using testing::first_difference;
using testing::on_device;
using testing::others;
using testing::Pair;
using testing::params;
using testing::poll_until;
using testing::Receiver;
using testing::run_ranks;

TEST_CASE("verbs: the port MKC_IB_HCA names, else the first active one; named errors otherwise") {
  FakeVerbs fake({{"mlx5_0", {IBV_PORT_DOWN}}, {"mlx5_1", {IBV_PORT_INIT, IBV_PORT_ACTIVE}}});
  const VerbsApi& api = fake.api();
  VerbsPort p = choose_port(api, "");
  CHECK(p.device == "mlx5_1");
  CHECK(p.port == 2);
  CHECK(p.attr.state == IBV_PORT_ACTIVE);
  p = choose_port(api, "mlx5_1:2");
  CHECK(p.device == "mlx5_1");
  CHECK(p.port == 2);
  p = choose_port(api, " mlx5_0 , mlx5_1 ");
  CHECK(p.device == "mlx5_1");
  CHECK(error_of([&] { choose_port(api, "mlx5_0"); }) ==
        "verbs: no active RDMA port among MKC_IB_HCA=mlx5_0: mlx5_0 port 1: down");
  CHECK(error_of([&] { choose_port(api, "mlx5_1:1"); }) ==
        "verbs: no active RDMA port among MKC_IB_HCA=mlx5_1:1: mlx5_1 port 1: init");
  CHECK(contains(error_of([&] { choose_port(api, "mlx5_1:3"); }), "mlx5_1 has no port 3"));
  CHECK(error_of([&] { choose_port(api, "mlx5_9"); }) ==
        "verbs: MKC_IB_HCA=mlx5_9 names `mlx5_9`, which is not an RDMA device here; found: "
        "mlx5_0, mlx5_1");
  CHECK_THROWS_AS(choose_port(api, "mlx5_1:x"), UserError);
  CHECK_THROWS_AS(choose_port(api, "mlx5_1:0"), UserError);
  CHECK_THROWS_AS(choose_port(api, ","), UserError);
  fake.fail_call("open_device", ENODEV);
  CHECK(contains(error_of([&] { choose_port(api, "mlx5_1"); }),
                 "mlx5_1: cannot open (No such device (ENODEV))"));
}

TEST_CASE("verbs: no device, or no device list, is a clear error") {
  FakeVerbs fake({});
  CHECK(contains(error_of([&] { choose_port(fake.api(), ""); }),
                 "verbs: no RDMA device: libibverbs found none"));
  fake.fail_call("get_device_list", ENOSYS);
  CHECK(contains(error_of([&] { choose_port(fake.api(), ""); }),
                 "ibv_get_device_list failed: Function not implemented (ENOSYS)"));
  HostMemory heap(4096);
  ConnectParams p;
  p.world = 2;
  p.peers = {1};
  p.all_gather = [](const std::string& m) { return std::vector<std::string>{m, m}; };
  CHECK_THROWS_WITH_AS(make_verbs_transport(fake.api(), {})->connect(p, heap),
                       doctest::Contains("no RDMA device"), EnvironmentError);
}

const std::vector<int64_t> kSizes = {0, 8, 4096, 1 << 20, 16 << 20, 8, 0};
constexpr int64_t kHalf = 24 << 20;

std::vector<std::unique_ptr<HostMemory>> host_heaps(bool registrable) {
  std::vector<std::unique_ptr<HostMemory>> v;
  for (int r = 0; r < 2; ++r) {
    v.push_back(std::make_unique<HostMemory>(2 * kHalf));
    v.back()->set_registrable(registrable);
  }
  return v;
}

TEST_CASE("verbs: 2 ranks, 0 B to 16 MB each way, heaps registered as host memory (direct)") {
  FakeVerbs fake(devices(2));
  auto heaps = host_heaps(true);
  long fragments = 0;
  exchange_two(fake, heaps, kSizes, kHalf, {}, true, &fragments);
  // One fragment per message: the NIC writes each whole, straight into the heap.
  CHECK(fragments == static_cast<long>(kSizes.size()));
  CHECK(fake.host_registrations() == 2 * 2);  // heap and control region, per rank
}

TEST_CASE("verbs: heaps staged through host buffers, mailbox and staging credits wrapping") {
  FakeVerbs fake(devices(2));
  auto heaps = host_heaps(false);
  VerbsOptions o;
  o.mailbox_slots = 4;
  o.staging_slots = 2;
  o.chunk_bytes = 256 << 10;
  std::vector<int64_t> sizes = kSizes;
  for (int i = 0; i < 20; ++i) sizes.push_back(i % 3 == 0 ? 300 << 10 : 8);
  long fragments = 0;
  exchange_two(fake, heaps, sizes, kHalf, o, false, &fragments);
  // Cut into chunks: 16 MB alone is 64 of them.
  CHECK(fragments > 64);
  CHECK(fake.host_registrations() == 2 * 2);  // control and staging regions, per rank
}

TEST_CASE("verbs: one rank's heap registered, the other's staged, both ways") {
  FakeVerbs fake(devices(2));
  testing::one_registered_one_staged(fake, "mlx5_");
}

TEST_CASE("verbs: heaps as dma-bufs (GPU memory), or staged when the library has no dma-buf call") {
  for (bool dmabuf : {true, false}) {
    CAPTURE(dmabuf);
    FakeVerbs fake(devices(2));
    if (!dmabuf) fake.drop_dmabuf();
    std::vector<std::unique_ptr<HostMemory>> heaps;
    for (int r = 0; r < 2; ++r)
      heaps.push_back(std::make_unique<DmabufMemory>(2 * kHalf, 40 + r, fake));
    exchange_two(fake, heaps, kSizes, kHalf, {}, dmabuf);
    CHECK(fake.dmabuf_registrations() == (dmabuf ? 2 : 0));
  }
}

TEST_CASE("verbs: the dma-buf registration failing falls back to staging") {
  FakeVerbs fake(devices(2));
  std::vector<std::unique_ptr<HostMemory>> heaps;
  for (int r = 0; r < 2; ++r)
    heaps.push_back(std::make_unique<DmabufMemory>(2 * kHalf, 50 + r, fake));
  // The first rank to register is refused (no peer-memory support, say) and stages; the other
  // registers. The bytes arrive both ways.
  fake.fail_call("reg_dmabuf_mr", EOPNOTSUPP);
  std::vector<int64_t> sizes = {8, 1 << 20};
  LocalAllGather ag(2, 10s);
  for (int r = 0; r < 2; ++r) testing::fill_pattern(*heaps[r], r, 0, 2 << 20);
  const auto errors = run_ranks(2, [&](int rank) {
    auto t = make_verbs_transport(fake.api(), on_device(rank));
    t->connect(params(rank, 2, ag), *heaps[rank]);
    for (size_t i = 0; i < sizes.size(); ++i)
      REQUIRE(t->send(1 - rank, {kHalf + static_cast<int64_t>(i) * 4096, sizes[i], -1},
                      static_cast<int64_t>(i) * 4096, i));
    Receiver rx(*t, *heaps[rank], 2);
    poll_until(rx, [&] { return rx.sent.size() == 2 && rx.received.size() == 2; });
    ag.gather(rank, "");
    t->close();
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  CHECK(fake.dmabuf_registrations() == 1);
  CHECK(first_difference(*heaps[0], kHalf + 4096, 1, 4096, 1 << 20) == -1);
  CHECK(first_difference(*heaps[1], kHalf + 4096, 0, 4096, 1 << 20) == -1);
}

TEST_CASE("verbs: RoCE ports, addressed by GID") {
  FakeVerbs fake(devices(2, IBV_LINK_LAYER_ETHERNET));
  auto heaps = host_heaps(true);
  exchange_two(fake, heaps, {8, 4096}, kHalf, {}, true);
}

TEST_CASE("verbs: 3 and 4 ranks all to all through their proxies, direct and staged") {
  testing::all_to_all_three_and_four([](int world) { return devices(world); }, "mlx5_");
}

TEST_CASE("verbs: a failed completion names the status, the peer and its address") {
  FakeVerbs fake(devices(2));
  Pair pair(fake);
  fake.fail_next_write(IBV_WC_REM_ACCESS_ERR);
  REQUIRE(pair.t[0]->send(1, {0, 4096, 1}, 0, 1));
  const std::string e = testing::poll_error(*pair.t[0], *pair.heaps[0], 5s);
  CHECK(contains(e, "verbs: rank 0: rank 1 at " + pair.t[0]->peer_address(1)));
  CHECK(contains(pair.t[0]->peer_address(1), "mlx5_1:1 lid 0x21 qpn 0x"));
  CHECK(contains(e,
                 "an RDMA write of a message's bytes to it failed: remote access error "
                 "(IBV_WC_REM_ACCESS_ERR, status 10): the peer refused the write"));
}

TEST_CASE("verbs: a peer that disappears is an error naming it") {
  FakeVerbs fake(devices(2));
  Pair pair(fake);
  // Its process died: its queue pairs are gone.
  pair.t[1].reset();
  REQUIRE(pair.t[0]->send(1, {0, 8, 1}, 0, 1));
  const std::string e = testing::poll_error(*pair.t[0], *pair.heaps[0], 5s);
  CHECK(contains(e, "verbs: rank 0: rank 1 at mlx5_1:1"));
  CHECK(contains(e, "IBV_WC_RETRY_EXC_ERR"));
  CHECK(contains(e, "its process exited, or the path to it is down"));
}

TEST_CASE("verbs: writes that never complete time out, naming the peer") {
  FakeVerbs fake(devices(2));
  Pair pair(fake, 300ms);
  fake.hold_writes();
  REQUIRE(pair.t[0]->send(1, {0, 8, 1}, 0, 1));
  const std::string e = testing::poll_error(*pair.t[0], *pair.heaps[0], 10s);
  CHECK(contains(e, "verbs: rank 0: rank 1 at mlx5_1:1"));
  CHECK(contains(e, "no completion came within 0.3 s for a write to it"));
}

TEST_CASE("verbs: a peer that takes nothing holds the sender at its credits, then times out") {
  FakeVerbs fake(devices(2));
  VerbsOptions o;
  o.mailbox_slots = 4;
  Pair pair(fake, 300ms, o);
  // Rank 1 never polls: after 4 fragments rank 0 has no mailbox slot left.
  for (int i = 0; i < 6; ++i) REQUIRE(pair.t[0]->send(1, {0, 8, 1}, 0, static_cast<uint64_t>(i)));
  size_t sent = 0;
  const std::string e = testing::poll_error(*pair.t[0], *pair.heaps[0], 10s, &sent);
  CHECK(sent == 4);
  CHECK(contains(e, "verbs: rank 0: rank 1 at mlx5_1:1"));
  CHECK(contains(e, "took none of this rank's messages for 0.3 s (4 fragments sent, 0 taken)"));
}

TEST_CASE("verbs: a goodbye is not a failure; sending to the rank that said it is one") {
  FakeVerbs fake(devices(2));
  Pair pair(fake);
  REQUIRE(pair.t[1]->send(0, {64, 8, 0}, 0, 1));
  Receiver rx1(*pair.t[1], *pair.heaps[1], 2);
  poll_until(rx1, [&] { return rx1.sent.size() == 1; });
  pair.t[1]->close();
  Receiver rx0(*pair.t[0], *pair.heaps[0], 2);
  for (int i = 0; i < 10; ++i) rx0.poll();
  CHECK(rx0.received.size() == 1);
  CHECK_THROWS_WITH_AS(pair.t[0]->send(1, {0, 8, 0}, 0, 2),
                       doctest::Contains("has stopped its proxy"), TransportError);
  pair.t[0]->close();
  CHECK(fake.live_objects() == 0);
}

TEST_CASE("verbs: a failing verbs call is named, with its errno, and releases what was made") {
  testing::check_failing_calls(
      devices(1), on_device(0),
      {
          {"create_qp", ENOMEM,
           "verbs: ibv_create_qp (rank 0, for rank 1) failed: Cannot allocate "
           "memory (ENOMEM)"},
          {"alloc_pd", EACCES,
           "verbs: ibv_alloc_pd (rank 0, mlx5_0 port 1) failed: Permission "
           "denied (EACCES)"},
          {"reg_mr", EFAULT, "verbs: ibv_reg_mr"},
          {"modify_qp", EINVAL,
           "verbs: ibv_modify_qp (rank 0, for rank 1) to INIT failed: Invalid "
           "argument (EINVAL)"},
          {"create_cq", ENOMEM, "verbs: ibv_create_cq"},
          {"post_recv", ENOMEM, "verbs: ibv_post_recv (rank 0, for rank 1) failed"},
          {"query_gid", EINVAL, "verbs: ibv_query_gid"},
      });
}

TEST_CASE("verbs: connection details that are not a verbs transport's are named") {
  FakeVerbs fake(devices(1));
  HostMemory heap(4096);
  ConnectParams p;
  p.world = 2;
  p.peers = {1};
  p.all_gather = [](const std::string& m) { return std::vector<std::string>{m, "garbage"}; };
  CHECK_THROWS_WITH_AS(make_verbs_transport(fake.api(), on_device(0))->connect(p, heap),
                       doctest::Contains("rank 1's connection details"), TransportError);
  CHECK(fake.live_objects() == 0);
}

TEST_CASE("verbs: loading libibverbs") {
  CHECK_THROWS_WITH_AS(load_verbs("libibverbs-not-here.so.9"),
                       doctest::Contains("dlopen(\"libibverbs-not-here.so.9\") failed"),
                       EnvironmentError);
  // Where rdma-core is installed (it is on the CI image: tools/setup.sh), every entry point
  // resolves; whether a port is active depends on the machine, but the answer is a port or a
  // reason, never a crash.
  VerbsApi api;
  try {
    api = load_verbs();
  } catch (const EnvironmentError& e) {
    MESSAGE("libibverbs not installed here: " << e.what());
    return;
  }
#define MKC_CHECK_ENTRY(name) CHECK(static_cast<bool>(api.name));
  MKC_VERBS_ENTRY_POINTS(MKC_CHECK_ENTRY)
#undef MKC_CHECK_ENTRY
  CHECK(static_cast<bool>(api.query_port));
  CHECK(static_cast<bool>(api.post_send));
  CHECK(static_cast<bool>(api.poll_cq));
  try {
    const VerbsPort p = choose_port(api, "");
    MESSAGE("an active RDMA port here: " << p.device << " port " << p.port);
  } catch (const EnvironmentError& e) {
    CHECK(contains(e.what(), "verbs: no"));
  }
}

}  // namespace
}  // namespace mkc::rt::net
