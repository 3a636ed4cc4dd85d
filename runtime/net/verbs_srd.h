// The verbs transport over AWS EFA's SRD queue pairs: its state. SRD (scalable reliable datagram)
// is EFA's only reliable transport; it has no RC. It is reliable but unordered: two messages of
// one queue pair may arrive in either order, and no write is ordered before a later send. So the
// RC path's "payload write, then header write with immediate" cannot work; this path pulls:
//
//   sender                                   receiver
//   header (SEND of a 64-byte Ctl: seq,      header lands in any posted buffer; kept in the
//   dst, bytes, event, src_addr, rkey)  -->  window by seq (m fragments in flight per peer)
//                                            RDMA READ of the payload from src_addr, into the heap
//                                            (registered) or a staging slot, issued in seq order,
//                                            one at a time per overlapping destination range
//                                            fragments handed out in seq order once read
//   credits (the fragments taken) <--------  SEND of a Ctl kCredit, one in flight
//   frees the fragment's source (kSent)
//
// Every work request is signaled (EFA takes no unsignaled ones) and posted through the extended
// API (RDMA reads exist only there). Connecting: efadv_create_qp_ex (IBV_QPT_DRIVER, SRD), RESET
// -> INIT (pkey 0, port, qkey) -> RTR -> RTS (sq_psn), an address handle per peer from its GID.
// One queue pair per peer, like the RC path, so a peer's control messages have receive buffers
// of their own.
//
// NOT RUN ON EFA HARDWARE: written from rdma-core's efadv.h and the man pages, and tested against
// the fake verbs table's SRD queue pairs, which deliver out of order (tests/runtime/net/
// fake_verbs.h). Devices without RDMA read (EFA's first generation) are refused with a message.
#pragma once

#include <infiniband/efadv.h>

#include <string>
#include <vector>

#include "runtime/net/verbs_transport.h"

namespace mkc::rt::net::verbs {

class SrdTransport final : public Transport {
 public:
  SrdTransport(const VerbsApi& api, const VerbsOptions& options)
      : api_(api), options_(bounded(options)) {
    dev_.api = &api;
  }
  ~SrdTransport() override { release(); }

  const char* name() const override { return "verbs (srd)"; }
  void connect(const ConnectParams& params, MemoryAccess& heap) override;
  bool send(int peer, const MessageHeader& header, int64_t src_offset, uint64_t cookie) override;
  size_t poll(Completion* out, size_t max) override;
  std::string peer_address(int peer) const override;
  void close() override;

 private:
  // A fragment this rank announced, until the peer's credits say it was taken.
  struct Sent {
    uint64_t cookie = 0;
    Clock::time_point posted{};
    bool header_in_flight = false;  // its Ctl buffer is the NIC's until the send completes
    bool emit_sent = false;         // the message's last fragment, read from the heap itself
    bool staged = false;            // its source is a staging slot of this rank's
  };
  // A fragment the peer announced, until it is handed out.
  struct Incoming {
    Ctl ctl{};
    bool arrived = false;
    bool read_posted = false;
    bool read_done = false;
    bool staged = false;  // read into a staging slot (this rank's heap is not registered)
    char* stage = nullptr;
    Clock::time_point posted{};
  };
  struct Peer {
    int rank = -1;
    std::string address;
    ibv_qp* qp = nullptr;
    ibv_qp_ex* qpx = nullptr;
    ibv_ah* ah = nullptr;
    uint32_t remote_qpn = 0;
    bool remote_direct = false;  // its heap is registered: it reads whole fragments into it
    int64_t max_fragment = 0;    // the smaller of the two devices' read limits
    bool departed = false;       // its goodbye was handed out
    bool bye_seen = false;       // its goodbye arrived (perhaps ahead of its last fragments)
    int sq_used = 0;

    Ctl* inbox = nullptr;        // posted receive buffers
    Ctl* headers = nullptr;      // [m] this rank's outgoing fragment headers, by seq % m
    Ctl* credit = nullptr;       // the outgoing credit message
    char* send_stage = nullptr;  // [s] sources staged for the peer's reads
    char* recv_stage = nullptr;  // [s] the peer's payloads read here (heap not registered)

    // Sending.
    SendQueue queue;
    bool has_current = false;
    QueuedMessage current{};
    int64_t posted_bytes = 0;
    uint64_t msg_seq = 0;                      // fragments announced
    uint64_t taken = 0;                        // of those, taken by the peer (its credits)
    uint64_t released = 0;                     // of those, whose source this rank has freed
    uint64_t stage_used = 0, stage_freed = 0;  // send staging slots, in order
    std::vector<Sent> sent;
    bool blocked = false;
    Clock::time_point blocked_since{};

    // Receiving.
    std::vector<Incoming> window;                // by seq % m
    uint64_t recv_seq = 0;                       // next fragment to hand out
    uint64_t read_seq = 0;                       // next fragment whose read is to be issued
    uint64_t rstage_used = 0, rstage_freed = 0;  // receive staging slots, in order
    uint64_t freed = 0, credit_sent = 0;         // fragments taken (credits), told
    uint32_t to_free_stage = 0;  // staging slots handed out last poll, freed at the next
    bool credit_in_flight = false;
    bool message_placed = false;
  };

  [[noreturn]] void fail(const Peer& p, const std::string& what) const {
    throw TransportError(p.rank, fmt::format("verbs (srd): rank {}: rank {} at {}: {}", rank_,
                                             p.rank, p.address, what));
  }
  std::string for_peer(int rank) const {
    return fmt::format(" (rank {}, for rank {})", rank_, rank);
  }
  void make_qp(Peer& p, size_t index);
  // Posts one signaled work request: a SEND of `ctl` or an RDMA READ into [local, + bytes).
  void post_ctl(Peer& p, uint64_t id, const Ctl* ctl, const char* what);
  void post_read(Peer& p, uint64_t id, void* local, uint32_t lkey, const Ctl& c);
  void post_recv(Peer& p, size_t index, uint64_t slot);
  bool post_fragment(Peer& p, size_t index, Completion* out, size_t& n, size_t max,
                     Clock::time_point now);
  void release_taken(Peer& p, Completion* out, size_t& n, size_t max);
  void issue_reads(Peer& p, size_t index, Clock::time_point now);
  void hand_out(Peer& p, Completion* out, size_t& n, size_t max);
  void return_credits(Peer& p, size_t index);
  void on_completion(const ibv_wc& wc);
  void on_control(Peer& p, size_t index, const ibv_wc& wc);
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
  efadv_device_attr efa_{};
  union ibv_gid gid_ {};
  int gid_index_ = 0;
  int64_t max_fragment_ = int64_t{1} << 30;
  int sq_depth_ = 0;
  int inbox_ = 0;  // receive buffers per peer
  DeviceResources dev_;
  PageBuffer ctrl_, stage_;
  PeerTable<Peer> peers_;
  std::vector<ibv_wc> wcs_;
};

}  // namespace mkc::rt::net::verbs
