// The fake verbs table's state and what its two files share (tests/runtime/net/fake_verbs.cc:
// devices, protection domains, memory regions, completion queues, RC queue pairs;
// fake_verbs_srd.cc: EFA's efadv calls, address handles and SRD queue pairs). Internal to the fake.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/runtime/net/fake_verbs.h"

namespace mkc::rt::net::testing {

// EFA's limits: the largest SEND (the port's max_msg_sz), and its queues' (efadv_query_device).
inline constexpr uint32_t kEfaMaxMsg = 8928;
inline constexpr uint32_t kEfaMaxSqWr = 4096;
inline constexpr uint32_t kEfaMaxRqWr = 8192;
inline constexpr uint32_t kEfaMaxSqSge = 2;
inline constexpr uint32_t kEfaMaxRqSge = 1;
// vendor_err of a completion whose destination was unreachable (no such queue pair, or a qkey
// that does not match).
inline constexpr uint32_t kEfaUnreachable = 1;
inline constexpr uint64_t kDefaultSeed = 0x5eed5eed;

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

// The one FakeVerbs alive (its entries are plain functions); a logic_error when there is none.
FakeVerbs::State& state();

// An injected failure (FakeVerbs::fail_call) of the entry `call`, in an entry holding `s`.

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

// fake_verbs_srd.cc: the SRD half of modify_qp, the address handles, and the table's EFA entries.
int modify_srd_qp(FakeVerbs::State& s, ibv_qp* qp, FakeVerbs::State::Qp& q, ibv_qp_attr* a,
                  int mask);
ibv_ah* fake_create_ah(ibv_pd* pd, ibv_ah_attr* attr);
int fake_destroy_ah(ibv_ah* ah);
void install_srd_entries(VerbsApi& api);

}  // namespace mkc::rt::net::testing
