#include "tests/runtime/net/fake_verbs.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <deque>
#include <random>
#include <stdexcept>

namespace mkc::rt::net::testing {

namespace {

// EFA's limits: the largest SEND (the port's max_msg_sz), and its queues' (efadv_query_device).
constexpr uint32_t kEfaMaxMsg = 8928;
constexpr uint32_t kEfaMaxSqWr = 4096;
constexpr uint32_t kEfaMaxRqWr = 8192;
constexpr uint32_t kEfaMaxSqSge = 2;
constexpr uint32_t kEfaMaxRqSge = 1;
// vendor_err of a completion whose destination was unreachable (no such queue pair, or a qkey
// that does not match).
constexpr uint32_t kEfaUnreachable = 1;
constexpr uint64_t kDefaultSeed = 0x5eed5eed;

}  // namespace

struct FakeVerbs::State {
  struct Context {
    size_t device;
  };
  struct Cq {
    struct Entry {
      ibv_wc wc;
      uint32_t qpn;       // the queue pair whose send queue it retires (sends only)
      uint64_t sq_index;  // the work request's place in that send queue
      bool send;
      bool srd = false;  // a send of an SRD queue pair: it retires only its own work request
    };
    std::deque<Entry> entries;
    int cqe = 0;
    bool overrun = false;
  };
  struct Recv {
    uint64_t wr_id;
    ibv_sge sge;  // length 0 when the receive has no buffer
  };
  // An SRD work request, from ibv_wr_send or ibv_wr_rdma_read to its execution.
  struct SrdWr {
    uint32_t qpn = 0;  // the queue pair that posted it
    uint64_t seq = 0;  // the order of posting, over all queue pairs
    uint64_t wr_id = 0;
    bool signaled = false;
    bool read = false;
    bool imm = false;
    uint32_t imm_data = 0;
    uint32_t rkey = 0;
    uint64_t remote_addr = 0;
    // ibv_wr_set_ud_addr: where the address handle points (when its GID is a device's).
    bool has_addr = false;
    bool known = false;
    size_t device = 0;
    uint8_t port = 0;
    uint32_t remote_qpn = 0, remote_qkey = 0;
    // ibv_wr_set_sge.
    bool has_sge = false;
    ibv_sge sge{};
  };
  struct Qp {
    ibv_qp* qp = nullptr;
    ibv_qp_state state = IBV_QPS_RESET;
    ibv_qp_cap cap{};
    bool sig_all = false;
    uint8_t port = 0;
    int access = 0;
    uint32_t dest_qpn = 0;
    uint32_t rq_psn = 0, sq_psn = 0;
    ibv_ah_attr ah{};
    std::deque<Recv> recvs;
    uint64_t posted = 0, retired = 0;
    bool error = false;
    // SRD (efa_create_qp_ex): the qkey, the extended queue pair it was allocated as, its
    // send_ops_flags, its work requests not yet retired (in flight, or completed and not polled),
    // and the batch between ibv_wr_start and ibv_wr_complete.
    bool srd = false;
    ibv_qp_ex* ex = nullptr;
    uint64_t send_ops = 0;
    uint32_t qkey = 0;
    uint64_t outstanding = 0;
    bool building = false;
    bool batch_bad = false;
    std::vector<SrdWr> batch;
  };
  struct Ah {
    bool known;  // its GID is some device's
    size_t device;
    uint8_t port;
  };
  struct Mr {
    ibv_pd* pd;
    char* host;
    uint64_t iova;
    size_t length;
    int access;
  };

  std::mutex mutex;
  std::vector<FakeDevice> devices;
  std::vector<std::unique_ptr<ibv_device>> device_objects;
  std::map<ibv_context*, Context> contexts;
  std::map<ibv_pd*, ibv_context*> pds;
  std::map<ibv_cq*, Cq> cqs;
  std::map<ibv_qp*, Qp> qps;
  std::map<uint32_t, ibv_qp*> qp_by_num;
  std::map<ibv_mr*, Mr> mrs;
  std::map<uint32_t, ibv_mr*> mr_by_key;
  std::map<int, std::pair<char*, size_t>> dmabufs;
  std::map<ibv_ah*, Ah> ahs;
  std::vector<SrdWr> in_flight;
  std::mt19937_64 rng{kDefaultSeed};
  uint64_t next_seq = 0;
  int overtakes = 0;
  struct Fault {
    int countdown;
    int err;
  };
  std::map<std::string, Fault> faults;
  bool fail_write = false;
  ibv_wc_status fail_status = IBV_WC_SUCCESS;
  bool hold = false;
  uint32_t next_qpn = 0x100;
  uint32_t next_key = 0x1000;
  int dmabuf_regs = 0, host_regs = 0;

  // errno for the call if a fault was asked for it, else 0.
  int injected(const char* call) {
    const auto it = faults.find(call);
    if (it == faults.end()) return 0;
    if (--it->second.countdown > 0) return 0;
    const int err = it->second.err;
    faults.erase(it);
    return err;
  }
  const FakeDevice& device_of(ibv_context* ctx) { return devices[contexts.at(ctx).device]; }
  uint16_t lid_of(ibv_context* ctx, uint8_t port) {
    const FakeDevice& d = device_of(ctx);
    if (d.link_layer == IBV_LINK_LAYER_ETHERNET || d.efa) return 0;
    return static_cast<uint16_t>(0x10 * (contexts.at(ctx).device + 1) + port);
  }
  static ibv_gid gid_of_device(size_t device, uint8_t port, int index) {
    ibv_gid g{};
    g.raw[0] = 0xfe;
    g.raw[1] = 0x80;
    g.raw[13] = static_cast<uint8_t>(device);
    g.raw[14] = port;
    g.raw[15] = static_cast<uint8_t>(index);
    return g;
  }
  ibv_gid gid_of(ibv_context* ctx, uint8_t port, int index) {
    return gid_of_device(contexts.at(ctx).device, port, index);
  }
  // The device and port whose GID table holds `gid`.
  Ah locate(const ibv_gid& gid) const {
    for (size_t d = 0; d < devices.size(); ++d) {
      for (size_t p = 1; p <= devices[d].ports.size(); ++p) {
        for (int i = 0; i < 4; ++i) {
          const ibv_gid g = gid_of_device(d, static_cast<uint8_t>(p), i);
          if (std::memcmp(g.raw, gid.raw, sizeof(g.raw)) == 0)
            return {true, d, static_cast<uint8_t>(p)};
        }
      }
    }
    return {false, 0, 0};
  }
  void push(ibv_cq* cq, const Cq::Entry& e) {
    Cq& c = cqs.at(cq);
    if (static_cast<int>(c.entries.size()) >= c.cqe) c.overrun = true;
    c.entries.push_back(e);
  }
  // A memory region with `key` in protection domain `pd` covering [addr, addr + len), or null.
  Mr* region(uint32_t key, ibv_pd* pd, uint64_t addr, uint64_t len) {
    const auto it = mr_by_key.find(key);
    if (it == mr_by_key.end()) return nullptr;
    Mr& m = mrs.at(it->second);
    if (m.pd != pd || addr < m.iova || len > m.length || addr - m.iova > m.length - len)
      return nullptr;
    return &m;
  }
  ibv_wc_status execute(ibv_qp* qp, Qp& q, const ibv_send_wr& w);

  // SRD: executes a random subset of the work requests in flight (at least one if `at_least_one`
  // and any are), unless writes are held.
  void progress(bool at_least_one);
  void execute_srd(const SrdWr& w);
  // The SRD queue pair `w` is addressed to, if it can take it (exists where the address handle
  // points, is ready, has the qkey), else null.
  ibv_qp* destination(const SrdWr& w);
  ibv_wc_status srd_send(ibv_qp* qp, const SrdWr& w, uint32_t& vendor_err);
  ibv_wc_status srd_read(ibv_qp* qp, const SrdWr& w, uint32_t& vendor_err);
};

namespace {

FakeVerbs::State* g_state = nullptr;

FakeVerbs::State& state() {
  if (g_state == nullptr) throw std::logic_error("fake verbs: no FakeVerbs alive");
  return *g_state;
}

#define FAKE_FAULT_PTR(call)                    \
  if (const int e = s.injected(call); e != 0) { \
    errno = e;                                  \
    return nullptr;                             \
  }
#define FAKE_FAULT_RC(call)                     \
  if (const int e = s.injected(call); e != 0) { \
    errno = e;                                  \
    return e;                                   \
  }

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
  api_.qp_to_qp_ex = fake_qp_to_qp_ex;
  api_.efa_query_device = fake_efa_query_device;
  api_.efa_create_qp_ex = fake_efa_create_qp_ex;
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
