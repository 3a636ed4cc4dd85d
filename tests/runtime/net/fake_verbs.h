// A fake libibverbs: a VerbsApi whose entries simulate, in this process's memory, RDMA devices
// and their ports, protection domains, memory regions (host memory and dma-bufs mapped to host
// memory), completion queues and RC queue pairs with their state machine (RESET, INIT, RTR, RTS)
// and their addressing (LID or GID, QP number, PSN). RDMA writes and writes with immediate are
// executed at once (memcpy into the remote region, a receive consumed, completions queued), with
// the checks a NIC makes: keys and bounds (a local or remote protection error), a remote queue
// pair that exists, is connected back and agrees on PSN and address (else the retry counter is
// exceeded), a posted receive (else RNR), queue depths (ENOMEM), CQ overrun. Faults can be asked
// for: a verbs call failing with an errno, a write failing with a status, writes that never
// complete.
//
// Devices marked `efa` stand for AWS EFA NICs (libefa's efadv_query_device and efadv_create_qp_ex,
// address handles, the extended work-request API): ports without LIDs (addressed by GID) and SRD
// queue pairs (RESET, INIT with a qkey, RTR, RTS). SRD is reliable but unordered, and the fake
// makes it so: posted SENDs and RDMA READs go to an in-flight pool and execute later, a random
// subset at each poll_cq and wr_complete (seeded by set_seed), so that work requests of one queue
// pair overtake each other (srd_overtakes counts it). They get EFA's checks: a reachable SRD queue
// pair with the right qkey (else a general error, vendor_err 1), message sizes, a posted receive
// (else RNR), keys, access and bounds of the regions, queue depths.
//
// One FakeVerbs at a time (its entries are plain functions, so they find it through a global);
// every entry takes its lock, so ranks on several threads may use it at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/net/verbs.h"

namespace mkc::rt::net::testing {

struct FakeDevice {
  std::string name;
  std::vector<ibv_port_state> ports = {IBV_PORT_ACTIVE};
  // IBV_LINK_LAYER_ETHERNET: RoCE, no LIDs (addressed by GID).
  uint8_t link_layer = IBV_LINK_LAYER_INFINIBAND;
  // An AWS EFA device: its ports are IBV_LINK_LAYER_UNSPECIFIED without LIDs (link_layer above is
  // not used), its messages at most 8928 B; it makes SRD queue pairs (efa_create_qp_ex) and no RC
  // ones. efa_caps: EFADV_DEVICE_ATTR_CAPS_*, as efa_query_device reports them.
  bool efa = false;
  uint32_t efa_caps = EFADV_DEVICE_ATTR_CAPS_RDMA_READ | EFADV_DEVICE_ATTR_CAPS_RNR_RETRY;
  uint32_t max_rdma_size = 1u << 30;
};

class FakeVerbs {
 public:
  explicit FakeVerbs(std::vector<FakeDevice> devices);
  ~FakeVerbs();
  FakeVerbs(const FakeVerbs&) = delete;
  FakeVerbs& operator=(const FakeVerbs&) = delete;

  const VerbsApi& api() const { return api_; }

  // The `nth` next call of `call` (the entry's name: "create_qp", "reg_mr", ...) fails with
  // errno `err`.
  void fail_call(const std::string& call, int err, int nth = 1);
  // The next RDMA write posted (on any queue pair), or the next SRD work request executed, fails
  // with `status` and moves nothing.
  void fail_next_write(ibv_wc_status status);
  // From now on, writes are taken but never complete (a path that went dark); SRD work requests
  // stay in flight.
  void hold_writes();
  // Seeds the order in which SRD work requests execute (a fixed seed until this is called).
  void set_seed(uint64_t seed);
  // SRD work requests executed while one posted earlier on the same queue pair was in flight.
  int srd_overtakes() const;
  // As a libibverbs without ibv_reg_dmabuf_mr.
  void drop_dmabuf();
  // A dma-buf file descriptor and the host memory it stands for.
  void add_dmabuf(int fd, void* base, size_t bytes);

  int dmabuf_registrations() const;
  int host_registrations() const;
  // Objects alive now (address handles included): a transport that released everything leaves
  // none.
  int live_objects() const;

  struct State;

 private:
  VerbsApi api_;
  std::unique_ptr<State> state_;
};

}  // namespace mkc::rt::net::testing
