// The verbs transport's state: its device, protection domain, completion queue and memory
// regions, and per peer its queue pair, its side of the connection details, the areas of the
// control and staging regions, and the sending and receiving sequence numbers and credits.
// Set up in verbs_connect.cc; moves messages in verbs.cc.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/net/peers.h"
#include "runtime/net/verbs.h"
#include "runtime/net/verbs_wire.h"

namespace mkc::rt::net::verbs {

using Clock = std::chrono::steady_clock;

template <typename T>
T load_acquire(const T& v) {
  return std::atomic_ref<T>(const_cast<T&>(v)).load(std::memory_order_acquire);
}

// Host memory for the NIC: page aligned, zeroed.
struct PageBuffer {
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data;
  size_t bytes = 0;
  void allocate(size_t n) {
    bytes = (std::max<size_t>(n, 1) + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(4096, bytes);
    if (p == nullptr) throw EnvironmentError(fmt::format("verbs: cannot allocate {} bytes", n));
    std::memset(p, 0, bytes);
    data.reset(static_cast<char*>(p));
  }
};

// What both paths (RC here, EFA's SRD in verbs_srd.h) hold of the device: its context, the
// protection domain, the completion queue and the memory regions, the heap's registration, and
// their release (after the queue pairs and address handles that use them).
struct DeviceResources {
  const VerbsApi* api = nullptr;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* heap_mr = nullptr;
  ibv_mr* ctrl_mr = nullptr;
  ibv_mr* stage_mr = nullptr;
  bool direct = false;  // the heap is registered: the NIC reads and writes it itself
  uint64_t heap_base = 0;

  // Registers `heap` with `access`: as a dma-buf when it has one and the library can (a refusal
  // is said on stderr, naming `transport` and `rank`), else as host memory when it is
  // addressable; else not at all (the path stages). Sets `direct` and `heap_base`.
  void register_heap(MemoryAccess& heap, int access, const char* transport, int rank,
                     const std::string& here);
  void release();
};

// The options within the bounds both paths keep: 2-4096 mailbox slots, 1-1024 staging slots,
// chunks of at least 4 KB, a queue of at least one message.
inline VerbsOptions bounded(VerbsOptions o) {
  o.mailbox_slots = std::clamp(o.mailbox_slots, 2, 4096);
  o.staging_slots = std::clamp(o.staging_slots, 1, 1024);
  o.chunk_bytes = std::max<size_t>(o.chunk_bytes, 4096);
  o.queue = std::max<size_t>(o.queue, 1);
  return o;
}

// Both paths' send(): the message queued for `peer` (false: no room), or a TransportError when
// the transport is not connected, `peer` is not one of its peers or has said goodbye.
template <typename Peer, typename Fail>
bool queue_message(PeerTable<Peer>& peers, bool connected, bool closed, const char* transport,
                   int rank, int peer, const QueuedMessage& message, Fail&& fail) {
  Peer* p = peers.find(peer);
  if (!connected || closed || p == nullptr) {
    throw TransportError(peer, fmt::format("{}: rank {} has no queue pair to rank {}{}", transport,
                                           rank, peer, connected ? " (not one of its peers)" : ""));
  }
  if (p->departed)
    fail(*p, "has stopped its proxy (said goodbye), yet this rank sends it a message");
  return p->queue.push(message);
}

class VerbsTransport final : public Transport {
 public:
  VerbsTransport(const VerbsApi& api, const VerbsOptions& options)
      : api_(api), options_(bounded(options)) {
    dev_.api = &api;
  }
  ~VerbsTransport() override { release(); }

  const char* name() const override { return "verbs"; }
  void connect(const ConnectParams& params, MemoryAccess& heap) override;
  bool send(int peer, const MessageHeader& header, int64_t src_offset, uint64_t cookie) override;
  size_t poll(Completion* out, size_t max) override;
  std::string peer_address(int peer) const override;
  void close() override;

 private:
  struct SlotRecord {
    uint64_t cookie = 0;
    Clock::time_point posted{};
    int wrs = 0;
    bool emit_sent = false;
    bool used_local_stage = false;
  };
  struct Peer {
    int rank = -1;
    std::string address;
    ibv_qp* qp = nullptr;
    uint32_t psn = 0;
    bool departed = false;

    // The peer's side, from its blob.
    bool remote_direct = false;
    uint64_t remote_heap_base = 0;
    uint32_t remote_heap_rkey = 0;
    uint64_t remote_mailbox = 0, remote_credits = 0, remote_stage = 0;
    uint32_t remote_ctrl_rkey = 0, remote_stage_rkey = 0;

    // This rank's areas for the peer.
    Mail* mailbox = nullptr;         // the peer writes headers here
    Mail* headers = nullptr;         // headers this rank writes from
    Credits* credits_in = nullptr;   // the peer writes its freed slots here
    Credits* credits_out = nullptr;  // this rank's freed slots, written from here
    uint64_t ctrl_offset = 0, stage_offset = 0;
    char* recv_stage = nullptr;
    char* send_stage = nullptr;

    // Sending.
    SendQueue queue;
    bool has_current = false;
    QueuedMessage current{};
    int64_t posted_bytes = 0;       // of the current message
    uint64_t msg_seq = 0;           // fragments posted
    uint64_t hdr_done = 0;          // fragments whose header write completed
    uint64_t remote_stage_seq = 0;  // peer's staging slots used
    uint64_t local_stage_seq = 0, local_stage_done = 0;
    std::vector<SlotRecord> slots;
    int sq_used = 0;
    bool credit_in_flight = false;
    uint64_t credit_sent_mailbox = 0, credit_sent_staging = 0;
    bool blocked = false;
    Clock::time_point blocked_since{};

    // Receiving.
    uint64_t recv_seq = 0;
    uint64_t recv_stage_seq = 0;
    uint64_t freed_mailbox = 0, freed_staging = 0;      // credits to return
    uint32_t to_free_mailbox = 0, to_free_staging = 0;  // handed out last poll, freed at the next
    bool message_placed = false;
  };

  [[noreturn]] void fail(const Peer& p, const std::string& what) const {
    throw TransportError(
        p.rank, fmt::format("verbs: rank {}: rank {} at {}: {}", rank_, p.rank, p.address, what));
  }
  std::string for_peer(int rank) const {
    return fmt::format(" (rank {}, for rank {})", rank_, rank);
  }
  void to_init(Peer& p);
  void to_rtr_rts(Peer& p, const BlobHead& remote, const BlobPeer& entry);
  void post_recv(Peer& p, size_t index);
  bool post_fragment(Peer& p, size_t index, Completion* out, size_t& n, size_t max,
                     Clock::time_point now);
  void return_credits(Peer& p, size_t index);
  void on_completion(const ibv_wc& wc, Completion* out, size_t& n);
  void on_receive(Peer& p, size_t index, const ibv_wc& wc, Completion* out, size_t& n);
  void release();

  const VerbsApi& api_;
  VerbsOptions options_;
  int rank_ = 0;
  int world_ = 1;
  std::chrono::milliseconds timeout_{30000};
  MemoryAccess* heap_ = nullptr;
  bool connected_ = false;
  bool closed_ = false;

  VerbsPort port_;
  union ibv_gid gid_ {};
  int gid_index_ = 0;
  int64_t max_fragment_ = int64_t{1} << 30;
  int sq_depth_ = 0;
  DeviceResources dev_;
  PageBuffer ctrl_, stage_;
  PeerTable<Peer> peers_;
  std::vector<ibv_wc> wcs_;
};

}  // namespace mkc::rt::net::verbs
