// The fake verbs table's AWS EFA half: efadv_query_device and efadv_create_qp_ex, address
// handles, SRD queue pairs (their UD-style state machine and the extended work-request API), and
// SRD's execution: every request waits in flight and runs in a seeded random order, a SEND into
// the destination's next posted receive, an RDMA READ from its registered memory
// (tests/runtime/net/fake_verbs.h says what is checked).
#include "tests/runtime/net/fake_verbs_state.h"

namespace mkc::rt::net::testing {

// SRD's state machine, as EFA's: the attribute masks must be exactly these.
int modify_srd_qp(FakeVerbs::State& s, ibv_qp* qp, FakeVerbs::State::Qp& q, ibv_qp_attr* a,
                  int mask) {
  const FakeDevice& d = s.device_of(qp->context);
  if (q.state == IBV_QPS_RESET && a->qp_state == IBV_QPS_INIT &&
      mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) {
    if (a->port_num < 1 || a->port_num > d.ports.size()) return EINVAL;
    q.port = a->port_num;
    q.qkey = a->qkey;
  } else if (q.state == IBV_QPS_INIT && a->qp_state == IBV_QPS_RTR && mask == IBV_QP_STATE) {
  } else if (q.state == IBV_QPS_RTR && a->qp_state == IBV_QPS_RTS &&
             (mask == (IBV_QP_STATE | IBV_QP_SQ_PSN) ||
              (mask == (IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RNR_RETRY) &&
               (d.efa_caps & EFADV_DEVICE_ATTR_CAPS_RNR_RETRY) != 0))) {
    q.sq_psn = a->sq_psn;
  } else {
    return EINVAL;
  }
  q.state = a->qp_state;
  qp->state = a->qp_state;
  return 0;
}

ibv_ah* fake_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_PTR("create_ah");
  if (s.pds.count(pd) == 0 || attr == nullptr || attr->is_global == 0 || attr->port_num < 1 ||
      attr->port_num > s.device_of(pd->context).ports.size()) {
    errno = EINVAL;
    return nullptr;
  }
  auto* ah = new ibv_ah{};
  ah->context = pd->context;
  ah->pd = pd;
  ah->handle = static_cast<uint32_t>(s.ahs.size());
  // A GID no device has still makes an address handle, as on a NIC: sends to it fail.
  s.ahs[ah] = s.locate(attr->grh.dgid);
  return ah;
}

int fake_destroy_ah(ibv_ah* ah) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  s.ahs.erase(ah);
  delete ah;
  return 0;
}

namespace {

int fake_efa_query_device(ibv_context* ctx, efadv_device_attr* attr, uint32_t inlen) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_RC("efa_query_device");
  const FakeDevice& d = s.device_of(ctx);
  if (!d.efa) {
    errno = EOPNOTSUPP;
    return EOPNOTSUPP;
  }
  efadv_device_attr a{};
  a.comp_mask = 0;
  a.max_sq_wr = kEfaMaxSqWr;
  a.max_rq_wr = kEfaMaxRqWr;
  a.max_sq_sge = kEfaMaxSqSge;
  a.max_rq_sge = kEfaMaxRqSge;
  a.inline_buf_size = 32;
  a.device_caps = d.efa_caps;
  a.max_rdma_size = d.max_rdma_size;
  // A caller built against an older efadv.h passes a shorter struct.
  std::memcpy(attr, &a, std::min<size_t>(inlen, sizeof(a)));
  return 0;
}

// The extended work-request API of an SRD queue pair (ibv_wr_*), as libefa fills it in.
FakeVerbs::State::Qp& srd_of(FakeVerbs::State& s, ibv_qp_ex* qpx) {
  return s.qps.at(&qpx->qp_base);
}

void fake_wr_start(ibv_qp_ex* qpx) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FakeVerbs::State::Qp& q = srd_of(s, qpx);
  q.building = true;
  q.batch_bad = false;
  q.batch.clear();
}

// A new work request in the batch, with the wr_id and flags the caller set on the queue pair; an
// operation the queue pair was not created for (send_ops_flags), or one outside wr_start and
// wr_complete, makes wr_complete fail.
void add_wr(ibv_qp_ex* qpx, FakeVerbs::State::SrdWr w, uint64_t op) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FakeVerbs::State::Qp& q = srd_of(s, qpx);
  if (!q.building || (q.send_ops & op) == 0) q.batch_bad = true;
  w.wr_id = qpx->wr_id;
  w.signaled = (qpx->wr_flags & IBV_SEND_SIGNALED) != 0;
  q.batch.push_back(w);
}

void fake_wr_send(ibv_qp_ex* qpx) {
  add_wr(qpx, {}, IBV_QP_EX_WITH_SEND);
}

void fake_wr_send_imm(ibv_qp_ex* qpx, __be32 imm_data) {
  FakeVerbs::State::SrdWr w;
  w.imm = true;
  w.imm_data = imm_data;
  add_wr(qpx, w, IBV_QP_EX_WITH_SEND_WITH_IMM);
}

void fake_wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  FakeVerbs::State::SrdWr w;
  w.read = true;
  w.rkey = rkey;
  w.remote_addr = remote_addr;
  add_wr(qpx, w, IBV_QP_EX_WITH_RDMA_READ);
}

void fake_wr_set_ud_addr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FakeVerbs::State::Qp& q = srd_of(s, qpx);
  const auto it = s.ahs.find(ah);
  if (q.batch.empty() || it == s.ahs.end()) {
    q.batch_bad = true;
    return;
  }
  FakeVerbs::State::SrdWr& w = q.batch.back();
  w.has_addr = true;
  w.known = it->second.known;
  w.device = it->second.device;
  w.port = it->second.port;
  w.remote_qpn = remote_qpn;
  w.remote_qkey = remote_qkey;
}

void fake_wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FakeVerbs::State::Qp& q = srd_of(s, qpx);
  if (q.batch.empty()) {
    q.batch_bad = true;
    return;
  }
  q.batch.back().has_sge = true;
  q.batch.back().sge = {addr, length, lkey};
}

void fake_wr_abort(ibv_qp_ex* qpx) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FakeVerbs::State::Qp& q = srd_of(s, qpx);
  q.building = false;
  q.batch.clear();
}

// Posts the batch whole, or nothing (returning the errno).
int fake_wr_complete(ibv_qp_ex* qpx) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FakeVerbs::State::Qp& q = srd_of(s, qpx);
  std::vector<FakeVerbs::State::SrdWr> batch = std::move(q.batch);
  q.batch.clear();
  const bool started = q.building;
  q.building = false;
  FAKE_FAULT_RC("wr_complete");
  if (!started || q.batch_bad || q.state != IBV_QPS_RTS) return EINVAL;
  for (const auto& w : batch) {
    if (!w.has_addr || !w.has_sge) return EINVAL;
  }
  if (q.outstanding + batch.size() > q.cap.max_send_wr) return ENOMEM;
  for (auto& w : batch) {
    w.qpn = qpx->qp_base.qp_num;
    w.seq = s.next_seq++;
    s.in_flight.push_back(w);
  }
  q.outstanding += batch.size();
  s.progress(false);
  return 0;
}

ibv_qp* fake_efa_create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr, efadv_qp_init_attr* efa,
                              uint32_t inlen) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_PTR("efa_create_qp_ex");
  const auto invalid = [&] {
    errno = EINVAL;
    return nullptr;
  };
  if (s.contexts.count(ctx) == 0 || attr == nullptr || efa == nullptr) return invalid();
  const FakeDevice& d = s.device_of(ctx);
  if (!d.efa || attr->qp_type != IBV_QPT_DRIVER) return invalid();
  if (inlen < offsetof(efadv_qp_init_attr, driver_qp_type) + sizeof(efa->driver_qp_type) ||
      efa->comp_mask != 0 || efa->driver_qp_type != EFADV_QP_DRIVER_TYPE_SRD)
    return invalid();
  const uint32_t needed = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if ((attr->comp_mask & needed) != needed) return invalid();
  if (s.pds.count(attr->pd) == 0 || attr->pd->context != ctx) return invalid();
  const uint64_t supported =
      IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_SEND_WITH_IMM;
  if ((attr->send_ops_flags & ~supported) != 0) return invalid();
  if ((attr->send_ops_flags & IBV_QP_EX_WITH_RDMA_READ) != 0 &&
      (d.efa_caps & EFADV_DEVICE_ATTR_CAPS_RDMA_READ) == 0)
    return invalid();
  if (s.cqs.count(attr->send_cq) == 0 || s.cqs.count(attr->recv_cq) == 0) return invalid();
  if (attr->cap.max_send_wr > kEfaMaxSqWr || attr->cap.max_recv_wr > kEfaMaxRqWr ||
      attr->cap.max_send_sge > kEfaMaxSqSge || attr->cap.max_recv_sge > kEfaMaxRqSge)
    return invalid();
  auto* qpx = new ibv_qp_ex{};
  ibv_qp* qp = &qpx->qp_base;
  qp->context = ctx;
  qp->pd = attr->pd;
  qp->send_cq = attr->send_cq;
  qp->recv_cq = attr->recv_cq;
  qp->qp_type = IBV_QPT_DRIVER;
  qp->qp_num = s.next_qpn++;
  qp->state = IBV_QPS_RESET;
  qpx->wr_start = fake_wr_start;
  qpx->wr_complete = fake_wr_complete;
  qpx->wr_abort = fake_wr_abort;
  qpx->wr_send = fake_wr_send;
  qpx->wr_send_imm = fake_wr_send_imm;
  qpx->wr_rdma_read = fake_wr_rdma_read;
  qpx->wr_set_ud_addr = fake_wr_set_ud_addr;
  qpx->wr_set_sge = fake_wr_set_sge;
  FakeVerbs::State::Qp& q = s.qps[qp];
  q.qp = qp;
  q.cap = attr->cap;
  q.sig_all = attr->sq_sig_all != 0;
  q.srd = true;
  q.ex = qpx;
  q.send_ops = attr->send_ops_flags;
  s.qp_by_num[qp->qp_num] = qp;
  return qp;
}

ibv_qp_ex* fake_qp_to_qp_ex(ibv_qp* qp) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  const auto it = s.qps.find(qp);
  if (it == s.qps.end() || !it->second.srd) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  return it->second.ex;
}

}  // namespace

void install_srd_entries(VerbsApi& api) {
  api.qp_to_qp_ex = fake_qp_to_qp_ex;
  api.efa_query_device = fake_efa_query_device;
  api.efa_create_qp_ex = fake_efa_create_qp_ex;
}

void FakeVerbs::State::progress(bool at_least_one) {
  if (hold || in_flight.empty()) return;
  const size_t n =
      std::uniform_int_distribution<size_t>(at_least_one ? 1 : 0, in_flight.size())(rng);
  for (size_t i = 0; i < n && !in_flight.empty(); ++i) {
    const size_t j = std::uniform_int_distribution<size_t>(0, in_flight.size() - 1)(rng);
    const SrdWr w = in_flight[j];
    in_flight[j] = in_flight.back();
    in_flight.pop_back();
    const bool overtook = std::any_of(in_flight.begin(), in_flight.end(), [&](const SrdWr& o) {
      return o.qpn == w.qpn && o.seq < w.seq;
    });
    if (overtook) ++overtakes;
    execute_srd(w);
  }
}

ibv_qp* FakeVerbs::State::destination(const SrdWr& w) {
  if (!w.known) return nullptr;
  const auto it = qp_by_num.find(w.remote_qpn);
  if (it == qp_by_num.end()) return nullptr;
  ibv_qp* rqp = it->second;
  const Qp& r = qps.at(rqp);
  if (!r.srd || contexts.at(rqp->context).device != w.device || r.port != w.port) return nullptr;
  if (r.state != IBV_QPS_RTR && r.state != IBV_QPS_RTS) return nullptr;
  if (r.qkey != w.remote_qkey) return nullptr;
  return rqp;
}

ibv_wc_status FakeVerbs::State::srd_send(ibv_qp* qp, const SrdWr& w, uint32_t& vendor_err) {
  const ibv_sge& g = w.sge;
  if (g.length > kEfaMaxMsg) return IBV_WC_LOC_LEN_ERR;
  Mr* src = region(g.lkey, qp->pd, g.addr, g.length);
  if (src == nullptr) return IBV_WC_LOC_PROT_ERR;
  ibv_qp* rqp = destination(w);
  if (rqp == nullptr) {
    vendor_err = kEfaUnreachable;
    return IBV_WC_GENERAL_ERR;
  }
  Qp& r = qps.at(rqp);
  if (r.recvs.empty()) return IBV_WC_RNR_RETRY_EXC_ERR;
  const Recv recv = r.recvs.front();
  r.recvs.pop_front();
  Cq::Entry e{};
  e.wc.wr_id = recv.wr_id;
  e.wc.opcode = IBV_WC_RECV;
  e.wc.qp_num = rqp->qp_num;
  e.wc.src_qp = qp->qp_num;
  // The receive fails and so does the send (the receiver's NIC reports it back).
  ibv_wc_status sender = IBV_WC_SUCCESS;
  Mr* dst = region(recv.sge.lkey, rqp->pd, recv.sge.addr, g.length);
  if (g.length > recv.sge.length) {
    e.wc.status = IBV_WC_LOC_LEN_ERR;
    sender = IBV_WC_REM_INV_REQ_ERR;
  } else if (g.length > 0 && (dst == nullptr || (dst->access & IBV_ACCESS_LOCAL_WRITE) == 0)) {
    e.wc.status = IBV_WC_LOC_PROT_ERR;
    sender = IBV_WC_REM_OP_ERR;
  } else {
    if (g.length > 0)
      std::memmove(dst->host + (recv.sge.addr - dst->iova), src->host + (g.addr - src->iova),
                   g.length);
    e.wc.status = IBV_WC_SUCCESS;
    e.wc.byte_len = g.length;
    if (w.imm) {
      e.wc.wc_flags = IBV_WC_WITH_IMM;
      e.wc.imm_data = w.imm_data;
    }
  }
  push(rqp->recv_cq, e);
  return sender;
}

ibv_wc_status FakeVerbs::State::srd_read(ibv_qp* qp, const SrdWr& w, uint32_t& vendor_err) {
  const FakeDevice& d = device_of(qp->context);
  const ibv_sge& g = w.sge;
  if ((d.efa_caps & EFADV_DEVICE_ATTR_CAPS_RDMA_READ) == 0) return IBV_WC_GENERAL_ERR;
  if (g.length > d.max_rdma_size) return IBV_WC_LOC_LEN_ERR;
  ibv_qp* rqp = destination(w);
  if (rqp == nullptr) {
    vendor_err = kEfaUnreachable;
    return IBV_WC_GENERAL_ERR;
  }
  // The remote NIC serves the read: it must be able to.
  if ((devices[w.device].efa_caps & EFADV_DEVICE_ATTR_CAPS_RDMA_READ) == 0)
    return IBV_WC_GENERAL_ERR;
  Mr* from = region(w.rkey, rqp->pd, w.remote_addr, g.length);
  if (from == nullptr || (from->access & IBV_ACCESS_REMOTE_READ) == 0) return IBV_WC_REM_ACCESS_ERR;
  Mr* to = region(g.lkey, qp->pd, g.addr, g.length);
  if (to == nullptr || (to->access & IBV_ACCESS_LOCAL_WRITE) == 0) return IBV_WC_LOC_PROT_ERR;
  std::memmove(to->host + (g.addr - to->iova), from->host + (w.remote_addr - from->iova), g.length);
  return IBV_WC_SUCCESS;
}

void FakeVerbs::State::execute_srd(const SrdWr& w) {
  ibv_qp* qp = qp_by_num.at(w.qpn);
  Qp& q = qps.at(qp);
  uint32_t vendor_err = 0;
  ibv_wc_status status;
  if (fail_write) {
    fail_write = false;
    status = fail_status;
  } else {
    status = w.read ? srd_read(qp, w, vendor_err) : srd_send(qp, w, vendor_err);
  }
  // SRD queue pairs stay usable after a failed work request: only it fails.
  if (status == IBV_WC_SUCCESS && !w.signaled && !q.sig_all) {
    --q.outstanding;
    return;
  }
  Cq::Entry e{};
  e.wc.wr_id = w.wr_id;
  e.wc.status = status;
  e.wc.opcode = w.read ? IBV_WC_RDMA_READ : IBV_WC_SEND;
  e.wc.vendor_err = vendor_err;
  e.wc.byte_len = w.read && status == IBV_WC_SUCCESS ? w.sge.length : 0;
  e.wc.qp_num = qp->qp_num;
  e.qpn = qp->qp_num;
  e.send = true;
  e.srd = true;
  push(qp->send_cq, e);
}

}  // namespace mkc::rt::net::testing
