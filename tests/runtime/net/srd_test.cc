// The verbs transport on AWS EFA: SRD queue pairs, against the fake verbs table's EFA devices,
// which deliver every request in a random order (tests/runtime/net/fake_verbs.h; no NIC here, and
// never run on EFA hardware). The path is chosen per device (MKC_IB_QP=auto), refused where the
// device cannot (RC on EFA, SRD elsewhere, EFA without RDMA reads); messages of 0 B to 16 MB
// arrive in order, byte for byte, with the heaps registered, staged or one of each, across 2 to 4
// ranks through their proxies, while the fake overtakes; failures, silence and a peer that takes
// nothing are named within the deadline; failing calls are named and release what was made.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "runtime/net/verbs.h"
#include "tests/runtime/net/exchange.h"
#include "tests/runtime/net/verbs_test_util.h"

namespace mkc::rt::net {
namespace {

using namespace std::chrono_literals;
using testing::connect_alone;
using testing::contains;
using testing::DmabufMemory;
using testing::error_of;
using testing::exchange_two;
using testing::FakeDevice;
using testing::FakeVerbs;
using testing::first_difference;
using testing::on_device;
using testing::Pair;
using testing::params;
using testing::poll_until;
using testing::Receiver;
using testing::run_ranks;

// One EFA device per rank: efa_0, efa_1, ...
std::vector<FakeDevice> efa_devices(int n, uint32_t caps = EFADV_DEVICE_ATTR_CAPS_RDMA_READ |
                                                           EFADV_DEVICE_ATTR_CAPS_RNR_RETRY) {
  std::vector<FakeDevice> v;
  for (int i = 0; i < n; ++i) {
    FakeDevice d;
    d.name = fmt::format("efa_{}", i);
    d.link_layer = IBV_LINK_LAYER_UNSPECIFIED;
    d.efa = true;
    d.efa_caps = caps;
    v.push_back(d);
  }
  return v;
}

VerbsOptions efa(int rank, VerbsOptions o = {}) {
  return on_device(rank, o, "efa_");
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

// Many small messages and a few large ones: enough requests in flight for the fake to reorder.
std::vector<int64_t> many_sizes() {
  std::vector<int64_t> sizes = kSizes;
  for (int i = 0; i < 60; ++i) sizes.push_back(i % 5 == 0 ? 300 << 10 : 8 + 64 * (i % 7));
  return sizes;
}

TEST_CASE("srd: an EFA device gets SRD queue pairs; heaps registered, messages in order") {
  FakeVerbs fake(efa_devices(2));
  auto heaps = host_heaps(true);
  long fragments = 0;
  exchange_two(fake, heaps, many_sizes(), kHalf, {}, true, &fragments, "efa_");
  // One fragment per message (each is read whole), delivered in order although the fake
  // delivered the requests out of order.
  CHECK(fragments == static_cast<long>(many_sizes().size()));
  CHECK(fake.srd_overtakes() > 0);
  Pair pair(fake, 10s, {}, "efa_");
  CHECK(std::string(pair.t[0]->name()) == "verbs (srd)");
  CHECK(contains(pair.t[0]->peer_address(1), "efa_1:1 gid fe80::"));
}

TEST_CASE("srd: ranks whose devices read different sizes cut fragments to the smaller") {
  // EFA generations differ in max_rdma_size: a 16 MB message from either rank arrives in reads
  // the smaller device takes, not refused as a bad header by the other.
  auto devs = efa_devices(2);
  devs[1].max_rdma_size = 1 << 20;
  FakeVerbs fake(devs);
  auto heaps = host_heaps(true);
  long fragments = 0;
  exchange_two(fake, heaps, kSizes, kHalf, {}, true, &fragments, "efa_");
  CHECK(fragments >= 16 + 1 + static_cast<long>(kSizes.size()) - 2);
}

TEST_CASE("srd: heaps staged, mailbox and staging credits wrapping, out of order") {
  FakeVerbs fake(efa_devices(2));
  auto heaps = host_heaps(false);
  VerbsOptions o;
  o.mailbox_slots = 4;
  o.staging_slots = 2;
  o.chunk_bytes = 256 << 10;
  long fragments = 0;
  exchange_two(fake, heaps, many_sizes(), kHalf, o, false, &fragments, "efa_");
  CHECK(fragments > 64);
  CHECK(fake.srd_overtakes() > 0);
}

TEST_CASE("srd: one rank's heap registered, the other's staged, both ways") {
  FakeVerbs fake(efa_devices(2));
  testing::one_registered_one_staged(fake, "efa_");
}

TEST_CASE("srd: heaps as dma-bufs (GPU memory)") {
  FakeVerbs fake(efa_devices(2));
  std::vector<std::unique_ptr<HostMemory>> heaps;
  for (int r = 0; r < 2; ++r)
    heaps.push_back(std::make_unique<DmabufMemory>(2 * kHalf, 40 + r, fake));
  exchange_two(fake, heaps, kSizes, kHalf, {}, true, nullptr, "efa_");
  CHECK(fake.dmabuf_registrations() == 2);
}

TEST_CASE("srd: overlapping destinations land in the order they were sent") {
  // Every message writes the same 64 KB of the peer's heap, each from a different source: what
  // stays there must be the last one's, whatever order the fake runs the reads in.
  FakeVerbs fake(efa_devices(2));
  auto heaps = host_heaps(true);
  const int64_t bytes = 64 << 10;
  const int count = 12;
  for (int r = 0; r < 2; ++r) testing::fill_pattern(*heaps[r], r, 0, count * bytes);
  LocalAllGather ag(2, 10s);
  const auto errors = run_ranks(2, [&](int rank) {
    auto t = make_verbs_transport(fake.api(), efa(rank));
    t->connect(params(rank, 2, ag), *heaps[rank]);
    for (int i = 0; i < count; ++i)
      REQUIRE(t->send(1 - rank, {kHalf, bytes, -1}, i * bytes, static_cast<uint64_t>(i)));
    Receiver rx(*t, *heaps[rank], 2);
    poll_until(rx, [&] {
      return rx.sent.size() == static_cast<size_t>(count) &&
             rx.received.size() == static_cast<size_t>(count);
    });
    ag.gather(rank, "");
    t->close();
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  for (int r = 0; r < 2; ++r)
    CHECK(first_difference(*heaps[r], kHalf, 1 - r, (count - 1) * bytes, bytes) == -1);
}

TEST_CASE("srd: 3 and 4 ranks all to all through their proxies, direct and staged") {
  testing::all_to_all_three_and_four([](int world) { return efa_devices(world); }, "efa_");
}

TEST_CASE("srd: the queue pair type is chosen per device, and refused where it cannot be") {
  {
    FakeVerbs fake(efa_devices(1));
    VerbsOptions o = efa(0);
    o.qp = "rc";
    CHECK(contains(connect_alone(fake, o),
                   "verbs: MKC_IB_QP=rc, but efa_0 is an AWS EFA device, which has no RC queue "
                   "pairs: set MKC_IB_QP=srd or auto"));
    o.qp = "ud";
    CHECK(contains(connect_alone(fake, o), "MKC_IB_QP=ud: the queue pair type is rc, srd or auto"));
    CHECK(fake.live_objects() == 0);
  }
  {
    FakeVerbs fake(testing::devices(1));
    VerbsOptions o = on_device(0);
    o.qp = "srd";
    CHECK(contains(connect_alone(fake, o),
                   "verbs (srd): mlx5_0 is not an EFA device (efadv_query_device refuses it)"));
    CHECK(fake.live_objects() == 0);
  }
  {
    FakeVerbs fake(efa_devices(1, EFADV_DEVICE_ATTR_CAPS_RNR_RETRY));
    CHECK(contains(connect_alone(fake, efa(0)),
                   "verbs (srd): EFA device efa_0 cannot do RDMA reads (device_caps 0x2; EFA's "
                   "first generation)"));
    CHECK(fake.live_objects() == 0);
  }
}

TEST_CASE("srd: a failed completion names the status, the peer and its address") {
  FakeVerbs fake(efa_devices(2));
  Pair pair(fake, 10s, {}, "efa_");
  fake.fail_next_write(IBV_WC_REM_ACCESS_ERR);
  REQUIRE(pair.t[0]->send(1, {0, 4096, 1}, 0, 1));
  const std::string e = testing::poll_error(*pair.t[0], *pair.heaps[0], 5s);
  CHECK(contains(e, "verbs (srd): rank 0: rank 1 at " + pair.t[0]->peer_address(1)));
  CHECK(contains(e,
                 "the header of fragment 0 to it failed: remote access error "
                 "(IBV_WC_REM_ACCESS_ERR, status 10)"));
}

TEST_CASE("srd: a peer that disappears is an error naming it") {
  FakeVerbs fake(efa_devices(2));
  Pair pair(fake, 10s, {}, "efa_");
  pair.t[1].reset();
  REQUIRE(pair.t[0]->send(1, {0, 8, 1}, 0, 1));
  const std::string e = testing::poll_error(*pair.t[0], *pair.heaps[0], 5s);
  CHECK(contains(e, "verbs (srd): rank 0: rank 1 at efa_1:1"));
  CHECK(contains(e, "the header of fragment 0 to it failed"));
}

TEST_CASE("srd: requests that never complete time out, naming the peer") {
  FakeVerbs fake(efa_devices(2));
  Pair pair(fake, 300ms, {}, "efa_");
  fake.hold_writes();
  REQUIRE(pair.t[0]->send(1, {0, 8, 1}, 0, 1));
  const std::string e = testing::poll_error(*pair.t[0], *pair.heaps[0], 10s);
  CHECK(contains(e, "verbs (srd): rank 0: rank 1 at efa_1:1"));
  CHECK(contains(e, "no completion came within 0.3 s for fragment 0's header"));
}

TEST_CASE("srd: a peer that takes nothing holds the sender at its credits, then times out") {
  FakeVerbs fake(efa_devices(2));
  VerbsOptions o;
  o.mailbox_slots = 4;
  Pair pair(fake, 300ms, o, "efa_");
  for (int i = 0; i < 6; ++i) REQUIRE(pair.t[0]->send(1, {0, 8, 1}, 0, static_cast<uint64_t>(i)));
  size_t sent = 0;
  const std::string e = testing::poll_error(*pair.t[0], *pair.heaps[0], 10s, &sent);
  // Nothing is sent until the peer has read it: no kSent at all.
  CHECK(sent == 0);
  CHECK(contains(e, "verbs (srd): rank 0: rank 1 at efa_1:1"));
  CHECK(contains(e, "took none of this rank's messages for 0.3 s (4 fragments sent, 0 taken)"));
}

TEST_CASE("srd: a goodbye is not a failure; sending to the rank that said it is one") {
  FakeVerbs fake(efa_devices(2));
  Pair pair(fake, 10s, {}, "efa_");
  REQUIRE(pair.t[1]->send(0, {64, 8, 0}, 0, 1));
  Receiver rx0(*pair.t[0], *pair.heaps[0], 2);
  Receiver rx1(*pair.t[1], *pair.heaps[1], 2);
  // The payload is read by rank 0: both poll until rank 1 knows it was taken.
  for (int i = 0; i < 2000 && rx1.sent.empty(); ++i) {
    rx0.poll();
    rx1.poll();
  }
  REQUIRE(rx1.sent.size() == 1);
  pair.t[1]->close();
  for (int i = 0; i < 200; ++i) rx0.poll();
  CHECK(rx0.received.size() == 1);
  CHECK_THROWS_WITH_AS(pair.t[0]->send(1, {0, 8, 0}, 0, 2),
                       doctest::Contains("has stopped its proxy"), TransportError);
  pair.t[0]->close();
  CHECK(fake.live_objects() == 0);
}

TEST_CASE("srd: a goodbye before the peer took this rank's fragments is an error, not a wait") {
  // SRD pulls: a sent message is done only when the peer has read it. A peer that stops without
  // reading says how many it took in its goodbye; the rest are named lost at once.
  FakeVerbs fake(efa_devices(2));
  Pair pair(fake, 10s, {}, "efa_");
  REQUIRE(pair.t[0]->send(1, {0, 8, 1}, 0, 1));
  REQUIRE(pair.t[0]->send(1, {64, 8, 1}, 64, 2));
  Receiver rx0(*pair.t[0], *pair.heaps[0], 2);
  for (int i = 0; i < 5; ++i) rx0.poll();  // the headers go out; rank 1 never polls
  pair.t[1]->close();
  const std::string e = testing::poll_error(*pair.t[0], *pair.heaps[0], 5s);
  CHECK(contains(e, "verbs (srd): rank 0: rank 1 at efa_1:1"));
  CHECK(contains(e, "said goodbye before taking 2 of this rank's fragments"));
  pair.t[0]->close();
  CHECK(fake.live_objects() == 0);
}

TEST_CASE("srd: a failing call is named, with its errno, and releases what was made") {
  testing::check_failing_calls(
      efa_devices(1), efa(0),
      {
          {"efa_create_qp_ex", ENOMEM,
           "verbs: efadv_create_qp_ex (rank 0, for rank 1) failed: Cannot allocate memory "
           "(ENOMEM)"},
          {"modify_qp", EINVAL, "verbs: ibv_modify_qp (rank 0, for rank 1) to INIT failed"},
          {"reg_mr", EFAULT, "verbs: ibv_reg_mr"},
          {"post_recv", ENOMEM, "verbs: ibv_post_recv (rank 0, for rank 1) failed"},
      });
}

TEST_CASE("srd: an address handle refused after the exchange is named; nothing is left") {
  FakeVerbs fake(efa_devices(2));
  fake.fail_call("create_ah", EINVAL);
  std::vector<std::unique_ptr<HostMemory>> heaps;
  for (int r = 0; r < 2; ++r) heaps.push_back(std::make_unique<HostMemory>(4096));
  LocalAllGather ag(2, 1s);
  const auto errors = run_ranks(2, [&](int rank) {
    auto t = make_verbs_transport(fake.api(), efa(rank));
    t->connect(params(rank, 2, ag, 1s), *heaps[rank]);
  });
  // The rank refused says why; the other is left waiting for it at the last all_gather.
  CHECK(contains(errors[0] + errors[1], "verbs: ibv_create_ah (rank "));
  CHECK(contains(errors[0] + errors[1], "Invalid argument (EINVAL)"));
  CHECK(fake.live_objects() == 0);
}

TEST_CASE("srd: loading libefa beside libibverbs") {
  VerbsApi api;
  try {
    api = load_verbs();
  } catch (const EnvironmentError& e) {
    MESSAGE("libibverbs not installed here: " << e.what());
    return;
  }
  CHECK(static_cast<bool>(api.create_ah));
  CHECK(static_cast<bool>(api.qp_to_qp_ex));
  // rdma-core's libefa ships with its providers (ibverbs-providers); where it is, both calls are
  // found.
  const std::string libefa = api.efa_query_device != nullptr ? "found" : "not installed here";
  MESSAGE("libefa " << libefa);
  CHECK(static_cast<bool>(api.efa_query_device) == static_cast<bool>(api.efa_create_qp_ex));
}

}  // namespace
}  // namespace mkc::rt::net
