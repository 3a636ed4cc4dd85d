// What both transports (runtime/net/tcp.cc, runtime/net/verbs*.cc) keep about their peers in the
// same way: the table of peers in rank order with each rank's place in it, and each peer's queue
// of messages that send() took and poll() has not started yet. A transport's own Peer (its
// socket, or its queue pair) holds the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/net/transport.h"

namespace mkc::rt::net {

// A message send() queued: its header, where its payload is in the local heap, and the cookie its
// kSent completion carries.
struct QueuedMessage {
  MessageHeader header;
  int64_t src_offset = 0;
  uint64_t cookie = 0;
};

// A fixed ring of queued messages: sized once at connect(), no allocation per message after.
class SendQueue {
 public:
  void set_capacity(size_t n) { ring_.assign(n, QueuedMessage{}); }
  // False when full (send() says no room).
  bool push(const QueuedMessage& m) {
    if (size_ == ring_.size()) return false;
    ring_[(head_ + size_) % ring_.size()] = m;
    ++size_;
    return true;
  }
  // False when empty.
  bool pop(QueuedMessage& m) {
    if (size_ == 0) return false;
    m = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
    --size_;
    return true;
  }

 private:
  std::vector<QueuedMessage> ring_;
  size_t head_ = 0, size_ = 0;
};

// A transport's peers, in rank order, and where each rank is among them. Peer has `int rank` and
// `std::string address`.
template <typename Peer>
class PeerTable {
 public:
  // The peers `ranks` (sorted, distinct, in [0, world)), each with its rank set.
  void assign(int world, const std::vector<int>& ranks) {
    slot_of_.assign(static_cast<size_t>(world), -1);
    peers_.resize(ranks.size());
    for (size_t i = 0; i < ranks.size(); ++i) {
      peers_[i].rank = ranks[i];
      slot_of_[static_cast<size_t>(ranks[i])] = static_cast<int>(i);
    }
  }
  // Null unless `rank` is a peer.
  Peer* find(int rank) {
    const int s = slot(rank);
    return s < 0 ? nullptr : &peers_[static_cast<size_t>(s)];
  }
  // How the peer `rank` is reached; "not a peer" when it is none.
  std::string address(int rank) const {
    const int s = slot(rank);
    return s < 0 ? "not a peer" : peers_[static_cast<size_t>(s)].address;
  }

  size_t size() const { return peers_.size(); }
  Peer& operator[](size_t i) { return peers_[i]; }
  const Peer& operator[](size_t i) const { return peers_[i]; }
  auto begin() { return peers_.begin(); }
  auto end() { return peers_.end(); }
  auto begin() const { return peers_.begin(); }
  auto end() const { return peers_.end(); }

 private:
  int slot(int rank) const {
    if (rank < 0 || static_cast<size_t>(rank) >= slot_of_.size()) return -1;
    return slot_of_[static_cast<size_t>(rank)];
  }
  std::vector<Peer> peers_;
  std::vector<int> slot_of_;  // rank -> index into peers_, or -1
};

}  // namespace mkc::rt::net
