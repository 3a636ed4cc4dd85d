#include "tests/runtime/net/fake_verbs.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <deque>
#include <random>
#include <stdexcept>

#include "tests/runtime/net/fake_verbs_state.h"

namespace mkc::rt::net::testing {
namespace {

FakeVerbs::State* g_state = nullptr;

}  // namespace

FakeVerbs::State& state() {
  if (g_state == nullptr) throw std::logic_error("fake verbs: no FakeVerbs alive");
  return *g_state;
}

namespace {

ibv_device** fake_get_device_list(int* n) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_PTR("get_device_list");
  auto** list = new ibv_device*[s.device_objects.size() + 1];
  for (size_t i = 0; i < s.device_objects.size(); ++i) list[i] = s.device_objects[i].get();
  list[s.device_objects.size()] = nullptr;
  if (n != nullptr) *n = static_cast<int>(s.device_objects.size());
  return list;
}

void fake_free_device_list(ibv_device** list) {
  delete[] list;
}

const char* fake_get_device_name(ibv_device* d) {
  return d->name;
}

ibv_context* fake_open_device(ibv_device* d) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_PTR("open_device");
  for (size_t i = 0; i < s.device_objects.size(); ++i) {
    if (s.device_objects[i].get() != d) continue;
    auto* ctx = new ibv_context{};
    ctx->device = d;
    s.contexts[ctx] = {i};
    return ctx;
  }
  errno = ENODEV;
  return nullptr;
}

int fake_close_device(ibv_context* ctx) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  s.contexts.erase(ctx);
  delete ctx;
  return 0;
}

int fake_query_device(ibv_context* ctx, ibv_device_attr* attr) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_RC("query_device");
  *attr = ibv_device_attr{};
  attr->phys_port_cnt = static_cast<uint8_t>(s.device_of(ctx).ports.size());
  attr->max_qp_wr = 16384;
  attr->max_cqe = 1 << 20;
  attr->max_mr_size = uint64_t{1} << 40;
  return 0;
}

int fake_query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_RC("query_port");
  const FakeDevice& d = s.device_of(ctx);
  if (port < 1 || port > d.ports.size()) return EINVAL;
  *attr = ibv_port_attr{};
  attr->state = d.ports[port - 1];
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = IBV_MTU_4096;
  attr->lid = s.lid_of(ctx, port);
  // EFA's ports have no link layer verbs knows of, and no LIDs: they are addressed by GID.
  attr->link_layer = d.efa ? uint8_t{IBV_LINK_LAYER_UNSPECIFIED} : d.link_layer;
  attr->max_msg_sz = d.efa ? kEfaMaxMsg : 1u << 31;
  attr->gid_tbl_len = 4;
  return 0;
}

int fake_query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_RC("query_gid");
  if (index < 0 || index >= 4) return EINVAL;
  *gid = s.gid_of(ctx, port, index);
  return 0;
}

ibv_pd* fake_alloc_pd(ibv_context* ctx) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_PTR("alloc_pd");
  auto* pd = new ibv_pd{};
  pd->context = ctx;
  s.pds[pd] = ctx;
  return pd;
}

int fake_dealloc_pd(ibv_pd* pd) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  s.pds.erase(pd);
  delete pd;
  return 0;
}

ibv_cq* fake_create_cq(ibv_context* ctx, int cqe, void*, ibv_comp_channel*, int) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_PTR("create_cq");
  if (cqe < 1) {
    errno = EINVAL;
    return nullptr;
  }
  auto* cq = new ibv_cq{};
  cq->context = ctx;
  cq->cqe = cqe;
  s.cqs[cq].cqe = cqe;
  return cq;
}

int fake_destroy_cq(ibv_cq* cq) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  s.cqs.erase(cq);
  delete cq;
  return 0;
}

ibv_qp* fake_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_PTR("create_qp");
  // EFA makes no RC queue pairs (only UD, and SRD through efadv_create_qp_ex).
  if (s.device_of(pd->context).efa) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (init->qp_type != IBV_QPT_RC || s.cqs.count(init->send_cq) == 0 ||
      s.cqs.count(init->recv_cq) == 0 || init->cap.max_send_wr > 16384 ||
      init->cap.max_recv_wr > 16384) {
    errno = EINVAL;
    return nullptr;
  }
  auto* qp = new ibv_qp{};
  qp->context = pd->context;
  qp->pd = pd;
  qp->send_cq = init->send_cq;
  qp->recv_cq = init->recv_cq;
  qp->qp_type = IBV_QPT_RC;
  qp->qp_num = s.next_qpn++;
  qp->state = IBV_QPS_RESET;
  FakeVerbs::State::Qp& q = s.qps[qp];
  q.qp = qp;
  q.cap = init->cap;
  q.sig_all = init->sq_sig_all != 0;
  s.qp_by_num[qp->qp_num] = qp;
  return qp;
}

int fake_destroy_qp(ibv_qp* qp) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  ibv_qp_ex* ex = s.qps.at(qp).ex;
  // Its work requests in flight go with it (no completion will come).
  std::erase_if(s.in_flight, [&](const auto& w) { return w.qpn == qp->qp_num; });
  s.qp_by_num.erase(qp->qp_num);
  s.qps.erase(qp);
  if (ex != nullptr) {
    delete ex;
  } else {
    delete qp;
  }
  return 0;
}

int fake_modify_qp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_RC("modify_qp");
  FakeVerbs::State::Qp& q = s.qps.at(qp);
  if (q.srd) return modify_srd_qp(s, qp, q, a, mask);
  const auto has = [&](int bits) { return (mask & bits) == bits; };
  if (!has(IBV_QP_STATE)) return EINVAL;
  const FakeDevice& d = s.device_of(qp->context);
  if (q.state == IBV_QPS_RESET && a->qp_state == IBV_QPS_INIT) {
    if (!has(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return EINVAL;
    if (a->port_num < 1 || a->port_num > d.ports.size()) return EINVAL;
    q.port = a->port_num;
    q.access = static_cast<int>(a->qp_access_flags);
  } else if (q.state == IBV_QPS_INIT && a->qp_state == IBV_QPS_RTR) {
    if (!has(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      return EINVAL;
    if (a->path_mtu > IBV_MTU_4096 || a->ah_attr.port_num != q.port) return EINVAL;
    // RoCE has no LIDs: an address without a GID cannot reach anyone there.
    if (d.link_layer == IBV_LINK_LAYER_ETHERNET && !a->ah_attr.is_global) return EINVAL;
    q.dest_qpn = a->dest_qp_num;
    q.rq_psn = a->rq_psn;
    q.ah = a->ah_attr;
  } else if (q.state == IBV_QPS_RTR && a->qp_state == IBV_QPS_RTS) {
    if (!has(IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
             IBV_QP_MAX_QP_RD_ATOMIC))
      return EINVAL;
    q.sq_psn = a->sq_psn;
  } else {
    return EINVAL;
  }
  q.state = a->qp_state;
  qp->state = a->qp_state;
  return 0;
}

ibv_mr* make_mr(FakeVerbs::State& s, ibv_pd* pd, char* host, uint64_t iova, size_t length,
                int access) {
  auto* mr = new ibv_mr{};
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = reinterpret_cast<void*>(iova);
  mr->length = length;
  mr->lkey = mr->rkey = s.next_key++;
  s.mrs[mr] = {pd, host, iova, length, access};
  s.mr_by_key[mr->lkey] = mr;
  return mr;
}

ibv_mr* fake_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_PTR("reg_mr");
  if (s.pds.count(pd) == 0 || addr == nullptr || length == 0) {
    errno = EINVAL;
    return nullptr;
  }
  ++s.host_regs;
  return make_mr(s, pd, static_cast<char*>(addr), reinterpret_cast<uintptr_t>(addr), length,
                 access);
}

ibv_mr* fake_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                           int access) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_PTR("reg_dmabuf_mr");
  const auto it = s.dmabufs.find(fd);
  if (s.pds.count(pd) == 0 || it == s.dmabufs.end() || offset > it->second.second ||
      length > it->second.second - offset) {
    errno = EINVAL;
    return nullptr;
  }
  ++s.dmabuf_regs;
  return make_mr(s, pd, it->second.first + offset, iova, length, access);
}

int fake_dereg_mr(ibv_mr* mr) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  s.mr_by_key.erase(mr->lkey);
  s.mrs.erase(mr);
  delete mr;
  return 0;
}

const char* fake_wc_status_str(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR:
      return "remote access error";
    case IBV_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "RNR retry counter exceeded";
    case IBV_WC_LOC_LEN_ERR:
      return "local length error";
    case IBV_WC_REM_INV_REQ_ERR:
      return "remote invalid request error";
    case IBV_WC_REM_OP_ERR:
      return "remote operation error";
    case IBV_WC_GENERAL_ERR:
      return "general error";
    default:
      return "unknown";
  }
}

int fake_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_RC("post_recv");
  FakeVerbs::State::Qp& q = s.qps.at(qp);
  for (ibv_recv_wr* w = wr; w != nullptr; w = w->next) {
    if (q.state == IBV_QPS_RESET || q.recvs.size() >= q.cap.max_recv_wr ||
        w->num_sge > static_cast<int>(q.cap.max_recv_sge)) {
      *bad = w;
      return q.state == IBV_QPS_RESET ? EINVAL : ENOMEM;
    }
    q.recvs.push_back({w->wr_id, w->num_sge > 0 ? w->sg_list[0] : ibv_sge{}});
  }
  return 0;
}

int fake_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FAKE_FAULT_RC("post_send");
  FakeVerbs::State::Qp& q = s.qps.at(qp);
  if (q.srd) {
    // libefa's SRD queue pairs take RDMA reads only through the extended API (ibv_wr_*), and the
    // transport must post everything there; the classic call is refused here so that a transport
    // mixing the two is caught.
    *bad = wr;
    return EINVAL;
  }
  for (ibv_send_wr* w = wr; w != nullptr; w = w->next) {
    if (q.state != IBV_QPS_RTS) {
      *bad = w;
      return EINVAL;
    }
    if (q.posted - q.retired >= q.cap.max_send_wr) {
      *bad = w;
      return ENOMEM;
    }
    if ((w->opcode != IBV_WR_RDMA_WRITE && w->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) ||
        w->num_sge > static_cast<int>(q.cap.max_send_sge)) {
      *bad = w;
      return EINVAL;
    }
    const uint64_t index = q.posted++;
    if (s.hold) continue;
    const ibv_wc_status status = s.execute(qp, q, *w);
    if (status != IBV_WC_SUCCESS) q.error = true;
    const bool signaled = q.sig_all || (w->send_flags & IBV_SEND_SIGNALED) != 0;
    if (status != IBV_WC_SUCCESS || signaled) {
      FakeVerbs::State::Cq::Entry e{};
      e.wc.wr_id = w->wr_id;
      e.wc.status = status;
      e.wc.opcode = IBV_WC_RDMA_WRITE;
      e.wc.qp_num = qp->qp_num;
      e.qpn = qp->qp_num;
      e.sq_index = index;
      e.send = true;
      s.push(qp->send_cq, e);
    }
  }
  return 0;
}

int fake_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  FakeVerbs::State& s = state();
  std::lock_guard lock(s.mutex);
  FakeVerbs::State::Cq& c = s.cqs.at(cq);
  s.progress(true);
  if (c.overrun) return -EOVERFLOW;
  int got = 0;
  while (got < n && !c.entries.empty()) {
    const FakeVerbs::State::Cq::Entry& e = c.entries.front();
    wc[got++] = e.wc;
    if (e.send) {
      // A completion retires its work request and the unsignaled ones before it (SRD: its own
      // only; an unsignaled one retired when it executed).
      const auto it = s.qp_by_num.find(e.qpn);
      if (it != s.qp_by_num.end()) {
        FakeVerbs::State::Qp& q = s.qps.at(it->second);
        if (e.srd) {
          if (q.outstanding > 0) --q.outstanding;
        } else {
          q.retired = std::max(q.retired, e.sq_index + 1);
        }
      }
    }
    c.entries.pop_front();
  }
  return got;
}

}  // namespace

ibv_wc_status FakeVerbs::State::execute(ibv_qp* qp, Qp& q, const ibv_send_wr& w) {
  if (q.error) return IBV_WC_WR_FLUSH_ERR;
  if (fail_write) {
    fail_write = false;
    return fail_status;
  }
  uint64_t total = 0;
  for (int i = 0; i < w.num_sge; ++i) {
    if (region(w.sg_list[i].lkey, qp->pd, w.sg_list[i].addr, w.sg_list[i].length) == nullptr)
      return IBV_WC_LOC_PROT_ERR;
    total += w.sg_list[i].length;
  }
  // The peer's queue pair: it must exist, be ready, be connected to this one, agree on the PSN
  // and be what this queue pair's address names; otherwise no ACK ever comes.
  const auto rit = qp_by_num.find(q.dest_qpn);
  if (rit == qp_by_num.end()) return IBV_WC_RETRY_EXC_ERR;
  ibv_qp* rqp = rit->second;
  Qp& r = qps.at(rqp);
  if (r.state != IBV_QPS_RTR && r.state != IBV_QPS_RTS) return IBV_WC_RETRY_EXC_ERR;
  if (r.dest_qpn != qp->qp_num || r.rq_psn != q.sq_psn) return IBV_WC_RETRY_EXC_ERR;
  if (q.ah.is_global) {
    const ibv_gid g = gid_of(rqp->context, r.port, q.ah.grh.sgid_index);
    if (std::memcmp(g.raw, q.ah.grh.dgid.raw, sizeof(g.raw)) != 0) return IBV_WC_RETRY_EXC_ERR;
  } else if (q.ah.dlid != lid_of(rqp->context, r.port) || q.ah.dlid == 0) {
    return IBV_WC_RETRY_EXC_ERR;
  }
  Mr* dst = region(w.wr.rdma.rkey, rqp->pd, w.wr.rdma.remote_addr, total);
  if (dst == nullptr || (dst->access & IBV_ACCESS_REMOTE_WRITE) == 0 ||
      (r.access & IBV_ACCESS_REMOTE_WRITE) == 0)
    return IBV_WC_REM_ACCESS_ERR;
  const bool imm = w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (imm && r.recvs.empty()) return IBV_WC_RNR_RETRY_EXC_ERR;
  char* to = dst->host + (w.wr.rdma.remote_addr - dst->iova);
  for (int i = 0; i < w.num_sge; ++i) {
    const ibv_sge& g = w.sg_list[i];
    Mr* src = region(g.lkey, qp->pd, g.addr, g.length);
    const char* from = src->host + (g.addr - src->iova);
    // A NIC writes aligned 8-byte words whole: words the peer polls without a completion (credit
    // counters) are stored as atomics, so that the fake is as race-free as the hardware.
    if (reinterpret_cast<uintptr_t>(to) % 8 == 0 && g.length % 8 == 0 && g.length <= 64) {
      for (uint32_t k = 0; k < g.length; k += 8) {
        uint64_t v;
        std::memcpy(&v, from + k, 8);
        std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(to + k))
            .store(v, std::memory_order_release);
      }
    } else {
      std::memmove(to, from, g.length);
    }
    to += g.length;
  }
  if (imm) {
    Cq::Entry e{};
    e.wc.wr_id = r.recvs.front().wr_id;
    r.recvs.pop_front();
    e.wc.status = IBV_WC_SUCCESS;
    e.wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    e.wc.byte_len = static_cast<uint32_t>(total);
    e.wc.imm_data = w.imm_data;
    e.wc.qp_num = rqp->qp_num;
    e.wc.src_qp = qp->qp_num;
    e.wc.wc_flags = IBV_WC_WITH_IMM;
    push(rqp->recv_cq, e);
  }
  return IBV_WC_SUCCESS;
}

FakeVerbs::FakeVerbs(std::vector<FakeDevice> devices) : state_(std::make_unique<State>()) {
  if (g_state != nullptr) throw std::logic_error("fake verbs: one FakeVerbs at a time");
  state_->devices = std::move(devices);
  for (const FakeDevice& d : state_->devices) {
    auto dev = std::make_unique<ibv_device>();
    *dev = ibv_device{};
    std::snprintf(dev->name, sizeof(dev->name), "%s", d.name.c_str());
    state_->device_objects.push_back(std::move(dev));
  }
  g_state = state_.get();
  api_.library = "fake";
#define FAKE_ENTRY(name) api_.name = fake_##name;
  MKC_VERBS_ENTRY_POINTS(FAKE_ENTRY)
#undef FAKE_ENTRY
  api_.reg_dmabuf_mr = fake_reg_dmabuf_mr;
  install_srd_entries(api_);
  api_.query_port = fake_query_port;
  api_.post_send = fake_post_send;
  api_.post_recv = fake_post_recv;
  api_.poll_cq = fake_poll_cq;
}

FakeVerbs::~FakeVerbs() {
  State& s = *state_;
  for (auto& [mr, m] : s.mrs) delete mr;
  for (auto& [ah, a] : s.ahs) delete ah;
  for (auto& [qp, q] : s.qps) {
    if (q.ex != nullptr) {
      delete q.ex;
    } else {
      delete qp;
    }
  }
  for (auto& [cq, c] : s.cqs) delete cq;
  for (auto& [pd, ctx] : s.pds) delete pd;
  for (auto& [ctx, c] : s.contexts) delete ctx;
  g_state = nullptr;
}

void FakeVerbs::fail_call(const std::string& call, int err, int nth) {
  std::lock_guard lock(state_->mutex);
  state_->faults[call] = {nth, err};
}

void FakeVerbs::fail_next_write(ibv_wc_status status) {
  std::lock_guard lock(state_->mutex);
  state_->fail_write = true;
  state_->fail_status = status;
}

void FakeVerbs::hold_writes() {
  std::lock_guard lock(state_->mutex);
  state_->hold = true;
}

void FakeVerbs::set_seed(uint64_t seed) {
  std::lock_guard lock(state_->mutex);
  state_->rng.seed(seed);
}

int FakeVerbs::srd_overtakes() const {
  std::lock_guard lock(state_->mutex);
  return state_->overtakes;
}

void FakeVerbs::drop_dmabuf() {
  api_.reg_dmabuf_mr = nullptr;
}

void FakeVerbs::add_dmabuf(int fd, void* base, size_t bytes) {
  std::lock_guard lock(state_->mutex);
  state_->dmabufs[fd] = {static_cast<char*>(base), bytes};
}

int FakeVerbs::dmabuf_registrations() const {
  std::lock_guard lock(state_->mutex);
  return state_->dmabuf_regs;
}

int FakeVerbs::host_registrations() const {
  std::lock_guard lock(state_->mutex);
  return state_->host_regs;
}

int FakeVerbs::live_objects() const {
  std::lock_guard lock(state_->mutex);
  return static_cast<int>(state_->mrs.size() + state_->qps.size() + state_->cqs.size() +
                          state_->pds.size() + state_->contexts.size() + state_->ahs.size());
}

}  // namespace mkc::rt::net::testing
