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
// One FakeVerbs at a time (its entries are plain functions, so they find it through a global);
// every entry takes its lock, so ranks on several threads may use it at once.
#pragma once

#include <cstddef>
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
  // The next RDMA write posted (on any queue pair) fails with `status` and moves nothing.
  void fail_next_write(ibv_wc_status status);
  // From now on, writes are taken but never complete (a path that went dark).
  void hold_writes();
  // As a libibverbs without ibv_reg_dmabuf_mr.
  void drop_dmabuf();
  // A dma-buf file descriptor and the host memory it stands for.
  void add_dmabuf(int fd, void* base, size_t bytes);

  int dmabuf_registrations() const;
  int host_registrations() const;
  // Objects alive now: a transport that released everything leaves none.
  int live_objects() const;

  struct State;

 private:
  VerbsApi api_;
  std::unique_ptr<State> state_;
};

}  // namespace mkc::rt::net::testing
