// What the verbs transport puts on the wire: the connection details each rank publishes through
// the all_gather (a head, and one entry per peer), the 64-byte header of a fragment written into
// the peer's mailbox, the credit words, and the ids of work requests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/net/conn_details.h"

namespace mkc::rt::net::verbs {

// A verbs transport's all_gather blob: "MKNV", version 1 (bumped when the wire format changes).
constexpr DetailsFormat kDetails{"verbs", 0x4d4b4e56, 1};
constexpr uint32_t kMailMagic = 0x4d4b4d4c;  // "MKML"

struct BlobHead {
  uint64_t heap_base, heap_bytes, ctrl_base, stage_base, chunk_bytes;
  uint32_t magic, version;
  int32_t rank, world;
  uint32_t port, link_layer, active_mtu, lid, gid_index, direct;
  uint32_t heap_rkey, ctrl_rkey, stage_rkey, mailbox_slots, staging_slots, npeers;
  uint8_t gid[16];
  char device[64];
};
static_assert(sizeof(BlobHead) == 184, "the blob head has no hidden padding");

// One per peer in a rank's blob: the queue pair it made for that peer, where that peer's areas
// are in its control and staging regions.
struct BlobPeer {
  uint64_t ctrl_offset, stage_offset;
  int32_t rank;
  uint32_t qpn, psn, pad;
};
static_assert(sizeof(BlobPeer) == 32, "a blob peer entry has no hidden padding");

// A fragment's header, written into the receiver's mailbox slot seq % mailbox_slots.
struct Mail {
  uint64_t seq;
  int64_t dst_offset;
  int64_t bytes;
  int32_t event;
  uint32_t flags;
  uint32_t stage_slot;
  uint32_t magic;
  uint64_t pad[3];
};
static_assert(sizeof(Mail) == 64, "a mailbox slot is one line");
constexpr uint32_t kLast = 1, kStaged = 2, kBye = 4;

// Per peer in the control region: mailbox [M], outgoing headers [M], credits in, credits out.
struct Credits {
  uint64_t mailbox;  // mailbox slots the receiver has freed
  uint64_t staging;  // staging slots it has freed
  uint64_t pad[6];
};
static_assert(sizeof(Credits) == 64, "credit words on a line of their own");

// A work request's id: what it is, for which peer (index in peers_), which fragment.
// kReadWr: the SRD path's RDMA read of a fragment's payload.
enum WrKind : uint64_t { kPayloadWr = 1, kHeaderWr = 2, kCreditWr = 3, kRecvWr = 4, kReadWr = 5 };
constexpr uint64_t wr_id(WrKind kind, size_t peer, uint64_t seq) {
  return (static_cast<uint64_t>(kind) << 61) | (static_cast<uint64_t>(peer) << 40) |
         (seq & ((uint64_t{1} << 40) - 1));
}
constexpr WrKind wr_kind(uint64_t id) {
  return static_cast<WrKind>(id >> 61);
}
constexpr size_t wr_peer(uint64_t id) {
  return static_cast<size_t>((id >> 40) & ((uint64_t{1} << 21) - 1));
}
constexpr uint64_t wr_seq(uint64_t id) {
  return id & ((uint64_t{1} << 40) - 1);
}

// EFA's SRD path (verbs_srd.h). Its blob: "MKNS", version 1.
constexpr DetailsFormat kSrdDetails{"verbs (srd)", 0x4d4b4e53, 1};
// The queue key every SRD queue pair of mkc's uses (below 0x80000000: the privileged range).
constexpr uint32_t kSrdQkey = 0x4d4b4351;

struct SrdHead {
  uint64_t chunk_bytes;
  uint32_t magic, version;
  int32_t rank, world;
  uint32_t port, qkey, mailbox_slots, staging_slots, gid_index, npeers, direct;
  uint32_t max_fragment;  // the largest RDMA read the device takes (efadv max_rdma_size)
  uint8_t gid[16];
  char device[64];
};
static_assert(sizeof(SrdHead) == 136, "the SRD blob head has no hidden padding");

// One per peer: the queue pair this rank made for it.
struct SrdPeer {
  int32_t rank;
  uint32_t qpn;
};
static_assert(sizeof(SrdPeer) == 8, "an SRD blob entry has no hidden padding");

// A control message, sent (SEND) into one of the receiver's posted buffers. SRD delivers
// messages in any order: each says what it is and, for a fragment, its sequence number; the
// payload stays with the sender until the receiver has read it (RDMA READ from src_addr).
struct Ctl {
  uint64_t seq;  // fragment number (a fragment or the goodbye)
  int64_t dst_offset;
  int64_t bytes;
  uint64_t src_addr;  // where the payload is read from (the sender's heap or staging)
  uint64_t taken;     // kCredit: fragments the sender of this message has taken, in total
  int32_t event;
  uint32_t flags;  // kLast, kStaged (src in the sender's staging), kBye, kCredit
  uint32_t src_rkey;
  uint32_t magic;
  uint64_t pad;
};
static_assert(sizeof(Ctl) == 64, "a control message is one line");
constexpr uint32_t kCredit = 8;
constexpr uint32_t kCtlMagic = 0x4d4b4354;  // "MKCT"

// A GID as an IPv6 address: "fe80::1".
std::string gid_text(const uint8_t* raw);

}  // namespace mkc::rt::net::verbs
