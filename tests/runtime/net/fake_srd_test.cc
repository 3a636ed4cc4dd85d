// The fake verbs' EFA devices and SRD queue pairs (tests/runtime/net/fake_verbs.h), driven through
// the VerbsApi table as the SRD transport drives them: efadv_query_device and efadv_create_qp_ex,
// SRD's state machine and its attribute masks, address handles by GID, the extended work-request
// API (ibv_wr_*), SENDs that arrive out of order, RDMA reads, and the failures an EFA NIC reports
// (unreachable queue pair or wrong qkey, RNR, access and length errors, missing capabilities).
#include <doctest/doctest.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "runtime/net/verbs_loader.h"
#include "tests/runtime/net/fake_verbs.h"

namespace mkc::rt::net {
namespace {

using testing::FakeDevice;
using testing::FakeVerbs;

constexpr uint32_t kQkey = 0x4b4b4b4b;
constexpr uint64_t kOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ;

// efa_0 and efa_1; efa_2 without RDMA reads; efa_3 without RNR retries; mlx5_0, not an EFA
// device.
std::vector<FakeDevice> devices() {
  std::vector<FakeDevice> v(5);
  v[0].name = "efa_0";
  v[1].name = "efa_1";
  v[2].name = "efa_2";
  v[3].name = "efa_3";
  v[4].name = "mlx5_0";
  for (int i = 0; i < 4; ++i) v[i].efa = true;
  v[2].efa_caps = EFADV_DEVICE_ATTR_CAPS_RNR_RETRY;
  v[3].efa_caps = EFADV_DEVICE_ATTR_CAPS_RDMA_READ;
  return v;
}

ibv_context* open_device(const VerbsApi& v, const std::string& name) {
  int n = 0;
  ibv_device** list = v.get_device_list(&n);
  REQUIRE(list != nullptr);
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n; ++i) {
    if (name == v.get_device_name(list[i])) ctx = v.open_device(list[i]);
  }
  v.free_device_list(list);
  REQUIRE(ctx != nullptr);
  return ctx;
}

ibv_qp* create_srd(const VerbsApi& v, ibv_context* ctx, ibv_pd* pd, ibv_cq* cq, uint64_t ops,
                   uint32_t max_send_wr = 512) {
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_DRIVER;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.pd = pd;
  a.send_cq = cq;
  a.recv_cq = cq;
  a.cap.max_send_wr = max_send_wr;
  a.cap.max_recv_wr = 512;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.send_ops_flags = ops;
  efadv_qp_init_attr e{};
  e.driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD;
  return v.efa_create_qp_ex(ctx, &a, &e, sizeof(e));
}

// A device opened with a PD, a CQ (for both queues) and an SRD queue pair; everything released
// on destruction.
struct Node {
  const VerbsApi& v;
  ibv_context* ctx;
  ibv_pd* pd;
  ibv_cq* cq;
  ibv_qp* qp = nullptr;
  ibv_qp_ex* qpx = nullptr;
  std::vector<ibv_mr*> mrs;
  std::vector<ibv_ah*> ahs;

  Node(const VerbsApi& api, const std::string& name, uint64_t ops = kOps,
       uint32_t max_send_wr = 512)
      : v(api),
        ctx(open_device(api, name)),
        pd(v.alloc_pd(ctx)),
        cq(v.create_cq(ctx, 4096, nullptr, nullptr, 0)) {
    REQUIRE(pd != nullptr);
    REQUIRE(cq != nullptr);
    qp = create_srd(v, ctx, pd, cq, ops, max_send_wr);
    REQUIRE(qp != nullptr);
    qpx = v.qp_to_qp_ex(qp);
    REQUIRE(qpx == reinterpret_cast<ibv_qp_ex*>(qp));
  }
  ~Node() {
    for (ibv_ah* ah : ahs) v.destroy_ah(ah);
    for (ibv_mr* mr : mrs) v.dereg_mr(mr);
    v.destroy_qp(qp);
    v.destroy_cq(cq);
    v.dealloc_pd(pd);
    v.close_device(ctx);
  }
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  uint32_t qpn() const { return qp->qp_num; }
  int to_init(int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qkey = kQkey;
    return v.modify_qp(qp, &a, mask);
  }
  int to_rtr(int mask = IBV_QP_STATE) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    return v.modify_qp(qp, &a, mask);
  }
  int to_rts(int mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RNR_RETRY) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    a.rnr_retry = 7;
    return v.modify_qp(qp, &a, mask);
  }
  void ready() {
    REQUIRE(to_init() == 0);
    REQUIRE(to_rtr() == 0);
    REQUIRE(to_rts() == 0);
  }
  ibv_ah* ah_to(const Node& peer) {
    ibv_ah_attr a{};
    a.is_global = 1;
    a.port_num = 1;
    REQUIRE(v.query_gid(peer.ctx, 1, 0, &a.grh.dgid) == 0);
    ibv_ah* ah = v.create_ah(pd, &a);
    REQUIRE(ah != nullptr);
    ahs.push_back(ah);
    return ah;
  }
  ibv_mr* reg(void* p, size_t bytes, int access) {
    ibv_mr* mr = v.reg_mr(pd, p, bytes, access);
    REQUIRE(mr != nullptr);
    mrs.push_back(mr);
    return mr;
  }
  void post_recv(uint64_t id, const ibv_mr* mr, void* p, uint32_t len) {
    ibv_sge g{reinterpret_cast<uintptr_t>(p), len, mr->lkey};
    ibv_recv_wr w{};
    w.wr_id = id;
    w.sg_list = &g;
    w.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    REQUIRE(v.post_recv(qp, &w, &bad) == 0);
  }
  // One signaled SEND of [p, p + len) to `peer_qpn` through `ah`, in a batch of its own.
  int send(uint64_t id, ibv_ah* ah, uint32_t peer_qpn, const ibv_mr* mr, const void* p,
           uint32_t len, uint32_t qkey = kQkey) {
    ibv_wr_start(qpx);
    add_send(id, ah, peer_qpn, mr, p, len, qkey);
    return ibv_wr_complete(qpx);
  }
  void add_send(uint64_t id, ibv_ah* ah, uint32_t peer_qpn, const ibv_mr* mr, const void* p,
                uint32_t len, uint32_t qkey = kQkey) {
    qpx->wr_id = id;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qpx);
    ibv_wr_set_ud_addr(qpx, ah, peer_qpn, qkey);
    ibv_wr_set_sge(qpx, mr->lkey, reinterpret_cast<uintptr_t>(p), len);
  }
  // One signaled RDMA read of the peer's [remote, remote + len) into [p, p + len).
  int read(uint64_t id, ibv_ah* ah, uint32_t peer_qpn, uint32_t rkey, const void* remote,
           const ibv_mr* mr, void* p, uint32_t len) {
    ibv_wr_start(qpx);
    qpx->wr_id = id;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_read(qpx, rkey, reinterpret_cast<uintptr_t>(remote));
    ibv_wr_set_ud_addr(qpx, ah, peer_qpn, kQkey);
    ibv_wr_set_sge(qpx, mr->lkey, reinterpret_cast<uintptr_t>(p), len);
    return ibv_wr_complete(qpx);
  }
  // Polls until `count` completions came (or plainly too many polls).
  std::vector<ibv_wc> poll(size_t count) {
    std::vector<ibv_wc> got;
    for (int i = 0; i < 100000 && got.size() < count; ++i) {
      ibv_wc wc[16];
      const int n = v.poll_cq(cq, 16, wc);
      if (n < 0) FAIL("poll_cq: ", n);
      got.insert(got.end(), wc, wc + n);
    }
    return got;
  }
  // The one completion a single work request gives.
  ibv_wc one() {
    const std::vector<ibv_wc> wc = poll(1);
    REQUIRE(wc.size() == 1);
    return wc[0];
  }
};

// Two ready EFA queue pairs with address handles to each other.
struct Pair {
  FakeVerbs fake{devices()};
  const VerbsApi& v = fake.api();
  Node a{v, "efa_0"};
  Node b{v, "efa_1"};
  ibv_ah* to_b;
  ibv_ah* to_a;
  Pair() {
    a.ready();
    b.ready();
    to_b = a.ah_to(b);
    to_a = b.ah_to(a);
  }
};

TEST_CASE("fake srd: EFA devices answer efadv_query_device; their ports have no LID") {
  FakeVerbs fake(devices());
  const VerbsApi& v = fake.api();
  REQUIRE((v.qp_to_qp_ex != nullptr));
  REQUIRE((v.efa_query_device != nullptr));
  REQUIRE((v.efa_create_qp_ex != nullptr));
  ibv_context* efa = open_device(v, "efa_0");
  ibv_context* mlx = open_device(v, "mlx5_0");

  efadv_device_attr attr{};
  REQUIRE(v.efa_query_device(efa, &attr, sizeof(attr)) == 0);
  CHECK(attr.max_sq_wr == 4096);
  CHECK(attr.max_rq_wr == 8192);
  CHECK(attr.max_sq_sge == 2);
  CHECK(attr.max_rq_sge == 1);
  CHECK(attr.inline_buf_size == 32);
  CHECK(attr.device_caps == (EFADV_DEVICE_ATTR_CAPS_RDMA_READ | EFADV_DEVICE_ATTR_CAPS_RNR_RETRY));
  CHECK(attr.max_rdma_size == 1u << 30);

  // An older caller's shorter struct: nothing written past it.
  efadv_device_attr part;
  std::memset(&part, 0xab, sizeof(part));
  REQUIRE(v.efa_query_device(efa, &part, offsetof(efadv_device_attr, max_rq_wr)) == 0);
  CHECK(part.max_sq_wr == 4096);
  CHECK(part.max_rq_wr == 0xabababab);

  errno = 0;
  CHECK(v.efa_query_device(mlx, &attr, sizeof(attr)) == EOPNOTSUPP);
  CHECK(errno == EOPNOTSUPP);

  fake.fail_call("efa_query_device", EIO);
  CHECK(v.efa_query_device(efa, &attr, sizeof(attr)) == EIO);

  ibv_port_attr port{};
  REQUIRE(v.query_port(efa, 1, &port) == 0);
  CHECK(port.link_layer == IBV_LINK_LAYER_UNSPECIFIED);
  CHECK(port.lid == 0);
  CHECK(port.max_msg_sz == 8928);
  CHECK(port.active_mtu == IBV_MTU_4096);

  v.close_device(efa);
  v.close_device(mlx);
  CHECK(fake.live_objects() == 0);
}

TEST_CASE("fake srd: efadv_create_qp_ex takes SRD queue pairs within EFA's limits only") {
  FakeVerbs fake(devices());
  const VerbsApi& v = fake.api();
  ibv_context* efa = open_device(v, "efa_0");
  ibv_context* noread = open_device(v, "efa_2");
  ibv_context* mlx = open_device(v, "mlx5_0");
  ibv_pd* pd = v.alloc_pd(efa);
  ibv_cq* cq = v.create_cq(efa, 64, nullptr, nullptr, 0);
  ibv_pd* pd2 = v.alloc_pd(noread);
  ibv_cq* cq2 = v.create_cq(noread, 64, nullptr, nullptr, 0);
  ibv_pd* mpd = v.alloc_pd(mlx);
  ibv_cq* mcq = v.create_cq(mlx, 64, nullptr, nullptr, 0);

  const auto refused = [&](ibv_context* ctx, ibv_qp_init_attr_ex a, efadv_qp_init_attr e) {
    errno = 0;
    ibv_qp* qp = v.efa_create_qp_ex(ctx, &a, &e, sizeof(e));
    if (qp != nullptr) v.destroy_qp(qp);
    return qp == nullptr && errno == EINVAL;
  };
  ibv_qp_init_attr_ex good{};
  good.qp_type = IBV_QPT_DRIVER;
  good.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  good.pd = pd;
  good.send_cq = good.recv_cq = cq;
  good.cap = {4096, 8192, 2, 1, 0};
  good.send_ops_flags = kOps | IBV_QP_EX_WITH_SEND_WITH_IMM;
  efadv_qp_init_attr srd{};
  srd.driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD;

  ibv_qp* qp = v.efa_create_qp_ex(efa, &good, &srd, sizeof(srd));
  REQUIRE(qp != nullptr);
  CHECK(qp->qp_type == IBV_QPT_DRIVER);
  CHECK(qp->state == IBV_QPS_RESET);
  CHECK(qp->context == efa);
  CHECK(qp->pd == pd);
  ibv_qp_ex* qpx = v.qp_to_qp_ex(qp);
  REQUIRE(qpx != nullptr);
  CHECK(&qpx->qp_base == qp);
  CHECK((qpx->wr_start != nullptr));
  CHECK((qpx->wr_complete != nullptr));
  CHECK((qpx->wr_abort != nullptr));
  CHECK((qpx->wr_send != nullptr));
  CHECK((qpx->wr_rdma_read != nullptr));
  CHECK((qpx->wr_set_ud_addr != nullptr));
  CHECK((qpx->wr_set_sge != nullptr));
  v.destroy_qp(qp);

  ibv_qp_init_attr_ex a = good;
  CHECK(refused(
      mlx,
      [&] {
        ibv_qp_init_attr_ex m = good;
        m.pd = mpd;
        m.send_cq = m.recv_cq = mcq;
        return m;
      }(),
      srd));
  a.qp_type = IBV_QPT_UD;
  CHECK(refused(efa, a, srd));
  a = good;
  CHECK(refused(efa, a, efadv_qp_init_attr{0, 1, {}}));
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  CHECK(refused(efa, a, srd));
  a = good;
  a.send_ops_flags |= IBV_QP_EX_WITH_RDMA_WRITE;
  CHECK(refused(efa, a, srd));
  a = good;
  a.cap.max_send_wr = 4097;
  CHECK(refused(efa, a, srd));
  a = good;
  a.cap.max_recv_wr = 8193;
  CHECK(refused(efa, a, srd));
  a = good;
  a.cap.max_send_sge = 3;
  CHECK(refused(efa, a, srd));
  a = good;
  a.cap.max_recv_sge = 2;
  CHECK(refused(efa, a, srd));
  a = good;
  a.recv_cq = nullptr;
  CHECK(refused(efa, a, srd));
  // A device without RDMA reads makes no queue pair for them.
  a = good;
  a.pd = pd2;
  a.send_cq = a.recv_cq = cq2;
  CHECK(refused(noread, a, srd));
  a.send_ops_flags = IBV_QP_EX_WITH_SEND;
  qp = v.efa_create_qp_ex(noread, &a, &srd, sizeof(srd));
  CHECK(qp != nullptr);
  v.destroy_qp(qp);

  fake.fail_call("efa_create_qp_ex", ENOMEM);
  errno = 0;
  CHECK(v.efa_create_qp_ex(efa, &good, &srd, sizeof(srd)) == nullptr);
  CHECK(errno == ENOMEM);

  // EFA makes no RC queue pairs; an RC queue pair elsewhere has no extended form.
  ibv_qp_init_attr rc{};
  rc.qp_type = IBV_QPT_RC;
  rc.send_cq = rc.recv_cq = cq;
  rc.cap = {16, 16, 1, 1, 0};
  CHECK(v.create_qp(pd, &rc) == nullptr);
  rc.send_cq = rc.recv_cq = mcq;
  ibv_qp* rcqp = v.create_qp(mpd, &rc);
  REQUIRE(rcqp != nullptr);
  errno = 0;
  CHECK(v.qp_to_qp_ex(rcqp) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  v.destroy_qp(rcqp);

  for (ibv_cq* c : {cq, cq2, mcq}) v.destroy_cq(c);
  for (ibv_pd* p : {pd, pd2, mpd}) v.dealloc_pd(p);
  for (ibv_context* c : {efa, noread, mlx}) v.close_device(c);
  CHECK(fake.live_objects() == 0);
}

TEST_CASE("fake srd: modify_qp takes SRD's transitions with exactly their masks") {
  FakeVerbs fake(devices());
  {
    Node n(fake.api(), "efa_0");
    CHECK(n.to_init(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ==
          EINVAL);
    CHECK(n.to_init(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
                    IBV_QP_ACCESS_FLAGS) == EINVAL);
    CHECK(n.to_rtr() == EINVAL);  // from RESET
    CHECK(n.qp->state == IBV_QPS_RESET);
    REQUIRE(n.to_init() == 0);
    CHECK(n.to_rtr(IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN) == EINVAL);
    REQUIRE(n.to_rtr() == 0);
    CHECK(n.to_rts(IBV_QP_STATE) == EINVAL);
    CHECK(n.to_rts(IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT) == EINVAL);
    CHECK(n.qp->state == IBV_QPS_RTR);
    REQUIRE(n.to_rts(IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
    CHECK(n.qp->state == IBV_QPS_RTS);
  }
  {
    // IBV_QP_RNR_RETRY only where the device has the capability.
    Node n(fake.api(), "efa_3");
    REQUIRE(n.to_init() == 0);
    REQUIRE(n.to_rtr() == 0);
    CHECK(n.to_rts() == EINVAL);
    CHECK(n.to_rts(IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
  }
  CHECK(fake.live_objects() == 0);
}

TEST_CASE("fake srd: 300 SENDs arrive whole, each once, out of order") {
  Pair p;
  constexpr int kCount = 300;
  constexpr uint32_t kSize = 64;
  std::vector<unsigned char> out(kCount * kSize), in(kCount * kSize, 0);
  for (int i = 0; i < kCount; ++i) {
    for (uint32_t k = 0; k < kSize; ++k) out[i * kSize + k] = static_cast<unsigned char>(i * 7 + k);
    std::memcpy(&out[i * kSize], &i, sizeof(i));
  }
  ibv_mr* out_mr = p.a.reg(out.data(), out.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* in_mr = p.b.reg(in.data(), in.size(), IBV_ACCESS_LOCAL_WRITE);
  for (int i = 0; i < kCount; ++i) p.b.post_recv(1000 + i, in_mr, &in[i * kSize], kSize);

  // Batches of 10 work requests, each posted whole by ibv_wr_complete.
  for (int i = 0; i < kCount; i += 10) {
    ibv_wr_start(p.a.qpx);
    for (int j = i; j < i + 10; ++j)
      p.a.add_send(j, p.to_b, p.b.qpn(), out_mr, &out[j * kSize], kSize);
    REQUIRE(ibv_wr_complete(p.a.qpx) == 0);
  }

  const std::vector<ibv_wc> recvs = p.b.poll(kCount);
  REQUIRE(recvs.size() == kCount);
  std::set<int> seen;
  for (const ibv_wc& wc : recvs) {
    REQUIRE(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.opcode == IBV_WC_RECV);
    CHECK(wc.byte_len == kSize);
    CHECK(wc.qp_num == p.b.qpn());
    CHECK(wc.src_qp == p.a.qpn());
    REQUIRE(wc.wr_id >= 1000);
    REQUIRE(wc.wr_id < 1000 + kCount);
    const unsigned char* got = &in[(wc.wr_id - 1000) * kSize];
    int i;
    std::memcpy(&i, got, sizeof(i));
    REQUIRE(i >= 0);
    REQUIRE(i < kCount);
    CHECK(seen.insert(i).second);
    CHECK(std::memcmp(got, &out[i * kSize], kSize) == 0);
  }
  CHECK(seen.size() == kCount);

  const std::vector<ibv_wc> sends = p.a.poll(kCount);
  REQUIRE(sends.size() == kCount);
  std::set<uint64_t> ids;
  for (const ibv_wc& wc : sends) {
    CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.opcode == IBV_WC_SEND);
    ids.insert(wc.wr_id);
  }
  CHECK(ids.size() == kCount);
  // SRD does not keep order, nor does the fake.
  INFO("overtakes: ", p.fake.srd_overtakes());
  CHECK(p.fake.srd_overtakes() > 0);
}

TEST_CASE("fake srd: an RDMA read of 1 MB brings the peer's bytes") {
  Pair p;
  constexpr uint32_t kBytes = 1 << 20;
  std::vector<unsigned char> remote(kBytes), local(kBytes, 0);
  for (uint32_t i = 0; i < kBytes; ++i) remote[i] = static_cast<unsigned char>(i * 31 + (i >> 8));
  ibv_mr* rmr = p.b.reg(remote.data(), kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ibv_mr* lmr = p.a.reg(local.data(), kBytes, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(p.a.read(7, p.to_b, p.b.qpn(), rmr->rkey, remote.data(), lmr, local.data(), kBytes) == 0);
  const ibv_wc wc = p.a.one();
  CHECK(wc.status == IBV_WC_SUCCESS);
  CHECK(wc.opcode == IBV_WC_RDMA_READ);
  CHECK(wc.wr_id == 7);
  CHECK(wc.byte_len == kBytes);
  CHECK(local == remote);
}

TEST_CASE("fake srd: a wrong qkey or an unknown address fails the send; the queue pair goes on") {
  Pair p;
  std::vector<char> buf(64, 'x'), rbuf(64, 0);
  ibv_mr* mr = p.a.reg(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* rmr = p.b.reg(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  p.b.post_recv(1, rmr, rbuf.data(), 64);

  REQUIRE(p.a.send(10, p.to_b, p.b.qpn(), mr, buf.data(), 64, kQkey + 1) == 0);
  ibv_wc wc = p.a.one();
  CHECK(wc.status == IBV_WC_GENERAL_ERR);
  CHECK(wc.vendor_err == 1);
  CHECK(wc.wr_id == 10);

  // No such queue pair there.
  REQUIRE(p.a.send(11, p.to_b, p.b.qpn() + 100, mr, buf.data(), 64) == 0);
  wc = p.a.one();
  CHECK(wc.status == IBV_WC_GENERAL_ERR);
  CHECK(wc.vendor_err == 1);

  // A GID no device has: the address handle is made, the send fails.
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.port_num = 1;
  attr.grh.dgid.raw[0] = 0x20;
  ibv_ah* nowhere = p.v.create_ah(p.a.pd, &attr);
  REQUIRE(nowhere != nullptr);
  p.a.ahs.push_back(nowhere);
  REQUIRE(p.a.send(12, nowhere, p.b.qpn(), mr, buf.data(), 64) == 0);
  wc = p.a.one();
  CHECK(wc.status == IBV_WC_GENERAL_ERR);
  // An address handle needs a GID and a port.
  attr.is_global = 0;
  CHECK(p.v.create_ah(p.a.pd, &attr) == nullptr);
  attr.is_global = 1;
  attr.port_num = 2;
  CHECK(p.v.create_ah(p.a.pd, &attr) == nullptr);

  // Nothing arrived; the queue pair still works.
  REQUIRE(p.a.send(13, p.to_b, p.b.qpn(), mr, buf.data(), 64) == 0);
  wc = p.b.one();
  CHECK(wc.status == IBV_WC_SUCCESS);
  CHECK(wc.wr_id == 1);
  CHECK(rbuf == buf);
  CHECK(p.a.one().status == IBV_WC_SUCCESS);
}

TEST_CASE("fake srd: no receive posted is RNR; a short receive buffer a length error") {
  Pair p;
  std::vector<char> buf(9000, 'y'), rbuf(64, 0);
  ibv_mr* mr = p.a.reg(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* rmr = p.b.reg(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);

  REQUIRE(p.a.send(20, p.to_b, p.b.qpn(), mr, buf.data(), 64) == 0);
  ibv_wc wc = p.a.one();
  CHECK(wc.status == IBV_WC_RNR_RETRY_EXC_ERR);
  CHECK(wc.wr_id == 20);

  p.b.post_recv(2, rmr, rbuf.data(), 32);
  REQUIRE(p.a.send(21, p.to_b, p.b.qpn(), mr, buf.data(), 64) == 0);
  wc = p.b.one();
  CHECK(wc.status == IBV_WC_LOC_LEN_ERR);
  CHECK(wc.wr_id == 2);
  CHECK(p.a.one().status != IBV_WC_SUCCESS);

  // Over EFA's 8928 B message limit.
  p.b.post_recv(3, rmr, rbuf.data(), 64);
  REQUIRE(p.a.send(22, p.to_b, p.b.qpn(), mr, buf.data(), 8929) == 0);
  CHECK(p.a.one().status == IBV_WC_LOC_LEN_ERR);
}

TEST_CASE("fake srd: reads need REMOTE_READ, covered bounds and the RDMA read capability") {
  FakeVerbs fake(devices());
  const VerbsApi& v = fake.api();
  {
    Node a(v, "efa_0");
    Node b(v, "efa_1");
    Node c(v, "efa_2", IBV_QP_EX_WITH_SEND);
    a.ready();
    b.ready();
    c.ready();
    ibv_ah* to_b = a.ah_to(b);
    ibv_ah* to_c = a.ah_to(c);
    std::vector<char> remote(4096, 'r'), local(4096, 0);
    ibv_mr* lmr = a.reg(local.data(), local.size(), IBV_ACCESS_LOCAL_WRITE);
    ibv_mr* no_read = b.reg(remote.data(), remote.size(), IBV_ACCESS_LOCAL_WRITE);
    CHECK(a.read(1, to_b, b.qpn(), no_read->rkey, remote.data(), lmr, local.data(), 4096) == 0);
    CHECK(a.one().status == IBV_WC_REM_ACCESS_ERR);

    ibv_mr* readable = b.reg(remote.data(), 2048, IBV_ACCESS_REMOTE_READ);
    CHECK(a.read(2, to_b, b.qpn(), readable->rkey, remote.data(), lmr, local.data(), 4096) == 0);
    CHECK(a.one().status == IBV_WC_REM_ACCESS_ERR);  // past the region's end
    ibv_mr* ro = a.reg(local.data(), local.size(), 0);
    CHECK(a.read(3, to_b, b.qpn(), readable->rkey, remote.data(), ro, local.data(), 2048) == 0);
    CHECK(a.one().status == IBV_WC_LOC_PROT_ERR);  // local memory not writable
    CHECK(local[0] == 0);

    // efa_2 cannot serve a read, nor post one.
    ibv_mr* on_c = c.reg(remote.data(), remote.size(), IBV_ACCESS_REMOTE_READ);
    CHECK(a.read(4, to_c, c.qpn(), on_c->rkey, remote.data(), lmr, local.data(), 4096) == 0);
    CHECK(a.one().status == IBV_WC_GENERAL_ERR);
    ibv_ah* c_to_b = c.ah_to(b);
    ibv_mr* clmr = c.reg(local.data(), local.size(), IBV_ACCESS_LOCAL_WRITE);
    CHECK(c.read(5, c_to_b, b.qpn(), readable->rkey, remote.data(), clmr, local.data(), 64) ==
          EINVAL);
    CHECK(c.poll(1).empty());
  }
  CHECK(fake.live_objects() == 0);
}

TEST_CASE("fake srd: what ibv_wr_complete and post_send refuse") {
  Pair p;
  std::vector<char> buf(64, 'z');
  ibv_mr* mr = p.a.reg(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);

  // The classic post_send: the transport must use the extended API on SRD.
  ibv_sge g{reinterpret_cast<uintptr_t>(buf.data()), 64, mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &g;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  CHECK(p.v.post_send(p.a.qp, &wr, &bad) == EINVAL);
  CHECK(bad == &wr);

  // A work request without its address, or without its buffer.
  ibv_wr_start(p.a.qpx);
  p.a.qpx->wr_id = 1;
  ibv_wr_send(p.a.qpx);
  ibv_wr_set_sge(p.a.qpx, mr->lkey, reinterpret_cast<uintptr_t>(buf.data()), 64);
  CHECK(ibv_wr_complete(p.a.qpx) == EINVAL);
  ibv_wr_start(p.a.qpx);
  ibv_wr_send(p.a.qpx);
  ibv_wr_set_ud_addr(p.a.qpx, p.to_b, p.b.qpn(), kQkey);
  CHECK(ibv_wr_complete(p.a.qpx) == EINVAL);
  // An aborted batch posts nothing.
  ibv_wr_start(p.a.qpx);
  p.a.add_send(2, p.to_b, p.b.qpn(), mr, buf.data(), 64);
  ibv_wr_abort(p.a.qpx);
  CHECK(p.a.poll(1).empty());
  // An injected failure.
  p.fake.fail_call("wr_complete", EIO);
  CHECK(p.a.send(3, p.to_b, p.b.qpn(), mr, buf.data(), 64) == EIO);
  CHECK(p.a.poll(1).empty());

  // A queue pair not yet in RTS.
  Node c(p.v, "efa_1", kOps, 4);
  REQUIRE(c.to_init() == 0);
  REQUIRE(c.to_rtr() == 0);
  ibv_ah* c_to_a = c.ah_to(p.a);
  ibv_mr* cmr = c.reg(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  CHECK(c.send(1, c_to_a, p.a.qpn(), cmr, buf.data(), 64) == EINVAL);
  // The send queue's depth (4): held work requests stay in it.
  REQUIRE(c.to_rts(IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
  p.fake.hold_writes();
  for (int i = 0; i < 4; ++i) CHECK(c.send(i, c_to_a, p.a.qpn(), cmr, buf.data(), 64) == 0);
  CHECK(c.send(4, c_to_a, p.a.qpn(), cmr, buf.data(), 64) == ENOMEM);
  CHECK(c.poll(1).empty());
}

TEST_CASE("fake srd: fail_next_write fails the next SRD work request executed") {
  Pair p;
  std::vector<char> buf(64, 'w'), rbuf(64, 0);
  ibv_mr* mr = p.a.reg(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* rmr = p.b.reg(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  p.b.post_recv(1, rmr, rbuf.data(), 64);
  p.fake.fail_next_write(IBV_WC_GENERAL_ERR);
  REQUIRE(p.a.send(1, p.to_b, p.b.qpn(), mr, buf.data(), 64) == 0);
  CHECK(p.a.one().status == IBV_WC_GENERAL_ERR);
  CHECK(p.b.poll(1).empty());
  REQUIRE(p.a.send(2, p.to_b, p.b.qpn(), mr, buf.data(), 64) == 0);
  CHECK(p.a.one().status == IBV_WC_SUCCESS);
  CHECK(p.b.one().status == IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace mkc::rt::net
