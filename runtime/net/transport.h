// The proxy's view of the network between ranks on different nodes: a Transport moves messages (a
// header, then a payload read from the local symmetric heap) to peers, and reports what it sent
// and what it received. Two backends implement it: `tcp` (runtime/net/tcp.h: sockets, any host)
// and `verbs` (runtime/net/verbs.h: RDMA through a dlopen'd libibverbs); runtime/net/net.h picks
// one from MKC_NET. The proxy (runtime/net/proxy.h) is written against this interface only, so its
// tests run on any machine with a scripted transport.
//
// Contract, for every backend:
// - connect() is collective: every rank of the job calls it at the same time with the same
//   all_gather (each rank's blob, in rank order, on every rank), and a peer set that is symmetric
//   (i lists j exactly when j lists i; checked, named when not).
// - Messages to one peer arrive in the order they were sent, each exactly once; a message is
//   reported in fragments, in order, covering [dst_offset, dst_offset + bytes) exactly.
// - Nothing blocks: send() queues, poll() makes progress and returns at once. Every wait on a peer
//   has a deadline (ConnectParams::timeout without progress); a peer that closes, dies or stalls
//   is a TransportError naming its rank and address, never a hang.
// - No allocation per message once connected.
// - One thread uses a connected transport (the proxy's).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/net/errors.h"
#include "runtime/net/memory.h"

namespace mkc::rt::net {

// Every rank's blob in rank order, on every rank: Rendezvous::all_gather, or LocalAllGather
// (runtime/net/all_gather.h) for ranks that are threads of one process.
using AllGatherFn = std::function<std::vector<std::string>(const std::string& mine)>;

struct ConnectParams {
  int rank = 0;
  int world = 1;
  // The ranks this rank exchanges messages with: distinct, in [0, world), not `rank`.
  std::vector<int> peers;
  AllGatherFn all_gather;
  // The deadline of connecting, and of every later wait on a peer that makes no progress.
  std::chrono::milliseconds timeout{30000};
};

// What travels ahead of a payload: where it goes in the destination's heap and which of the
// destination's proxy counters to raise once it is there (-1: none).
struct MessageHeader {
  int64_t dst_offset = 0;
  int64_t bytes = 0;
  int32_t event = -1;
};

// What poll() reports.
struct Completion {
  enum Kind : uint8_t {
    // The message sent with `cookie` no longer needs its source bytes (copied out, or written).
    kSent,
    // A fragment of a message from `peer`: `bytes` bytes for the heap at `dst_offset`.
    kReceived,
  };
  Kind kind = kSent;
  int peer = -1;
  uint64_t cookie = 0;
  int64_t dst_offset = 0;
  int64_t bytes = 0;
  // kReceived: host bytes for the caller to write into the heap at dst_offset, valid until the
  // next poll(); null when there are none or the NIC placed them in the heap already.
  const void* data = nullptr;
  // kReceived: the message's last fragment; raise `event` (if >= 0) once its bytes are in place.
  bool last = false;
  // kReceived, last: the NIC wrote (some of) this message into the heap itself; call
  // MemoryAccess::flush_inbound() before raising the counter.
  bool placed = false;
  int32_t event = -1;
};

class Transport {
 public:
  // Destroying a transport without close() drops its connections at once, without the goodbye
  // that tells peers this rank stopped on purpose: they see it as gone.
  virtual ~Transport() = default;

  // "tcp", "verbs".
  virtual const char* name() const = 0;

  // Connects to every peer (collective, see above). `heap` is this rank's: sources are read from
  // it and (verbs with a registration) written into it; it must outlive the transport.
  virtual void connect(const ConnectParams& params, MemoryAccess& heap) = 0;

  // Queues a message to `peer` whose payload is header.bytes bytes of the local heap at
  // `src_offset`. False when the transport has no room now (poll, then try again); a peer that is
  // not connected or has gone is a TransportError. `cookie` comes back in a kSent completion.
  virtual bool send(int peer, const MessageHeader& header, int64_t src_offset, uint64_t cookie) = 0;

  // Makes progress on every connection and writes up to `max` completions to `out`; returns how
  // many. Throws TransportError when a peer failed.
  virtual size_t poll(Completion* out, size_t max) = 0;

  // How a peer is reached, for messages: "10.0.0.2:41234", "mlx5_0 lid 0x12 qpn 0x1a2b".
  virtual std::string peer_address(int peer) const = 0;

  // Tells every peer this rank is stopping (a peer that receives the goodbye does not take the
  // closed connection for a failure) and releases everything. Bounded in time; idempotent.
  virtual void close() = 0;
};

// Throws UserError unless `p` names distinct peers in [0, world) other than `rank`.
void check_peer_list(const ConnectParams& p);

// What every connect() checks first: InternalError when `connected` (connect() called twice on
// the `transport` transport), then check_peer_list(p).
void check_connect(const ConnectParams& p, bool connected, const char* transport);

// Given every rank's peer list (lists[r] for rank r), throws EnvironmentError unless rank `rank`'s
// relation with each peer is mutual.
void check_symmetric(int rank, const std::vector<std::vector<int>>& lists);

}  // namespace mkc::rt::net
