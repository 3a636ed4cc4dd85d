// The SRD path moving messages (verbs_srd.h): fragment headers sent within the peer's credits,
// payloads pulled by RDMA reads in sequence order, fragments handed out in order, credits, the
// completions, the deadlines and the goodbye. Connecting is in verbs_srd_connect.cc.
#include "runtime/net/verbs_srd.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "runtime/net/verbs_calls.h"

namespace mkc::rt::net {
namespace verbs {
namespace {

bool overlaps(const Ctl& a, const Ctl& b) {
  return a.dst_offset < b.dst_offset + b.bytes && b.dst_offset < a.dst_offset + a.bytes;
}

}  // namespace

void SrdTransport::post_recv(Peer& p, size_t index, uint64_t slot) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(&p.inbox[slot]);
  sge.length = sizeof(Ctl);
  sge.lkey = dev_.ctrl_mr->lkey;
  ibv_recv_wr wr{};
  wr.wr_id = wr_id(kRecvWr, index, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  MKC_IBV(api_, post_recv, p.rank, for_peer(p.rank), p.qp, &wr, &bad);
}

void SrdTransport::post_ctl(Peer& p, uint64_t id, const Ctl* ctl, const char* what) {
  ibv_wr_start(p.qpx);
  p.qpx->wr_id = id;
  p.qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(p.qpx);
  ibv_wr_set_ud_addr(p.qpx, p.ah, p.remote_qpn, kSrdQkey);
  ibv_wr_set_sge(p.qpx, dev_.ctrl_mr->lkey, reinterpret_cast<uintptr_t>(ctl), sizeof(Ctl));
  errno = 0;
  if (const int rc = ibv_wr_complete(p.qpx); rc != 0) {
    throw_call("ibv_wr_complete", rc > 0 ? rc : (errno ? errno : EIO), p.rank,
               fmt::format(" (rank {}, {} to rank {} at {})", rank_, what, p.rank, p.address),
               __FILE__, __LINE__);
  }
  ++p.sq_used;
}

void SrdTransport::post_read(Peer& p, uint64_t id, void* local, uint32_t lkey, const Ctl& c) {
  ibv_wr_start(p.qpx);
  p.qpx->wr_id = id;
  p.qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_read(p.qpx, c.src_rkey, c.src_addr);
  ibv_wr_set_ud_addr(p.qpx, p.ah, p.remote_qpn, kSrdQkey);
  ibv_wr_set_sge(p.qpx, lkey, reinterpret_cast<uintptr_t>(local), static_cast<uint32_t>(c.bytes));
  errno = 0;
  if (const int rc = ibv_wr_complete(p.qpx); rc != 0) {
    throw_call("ibv_wr_complete", rc > 0 ? rc : (errno ? errno : EIO), p.rank,
               fmt::format(" (rank {}, an RDMA read of fragment {} from rank {} at {})", rank_,
                           c.seq, p.rank, p.address),
               __FILE__, __LINE__);
  }
  ++p.sq_used;
}

bool SrdTransport::send(int peer, const MessageHeader& header, int64_t src_offset,
                        uint64_t cookie) {
  return queue_message(peers_, connected_, closed_, "verbs (srd)", rank_, peer,
                       QueuedMessage{header, src_offset, cookie},
                       [&](const Peer& p, const char* what) { fail(p, what); });
}

// Announces the current message's next fragment when the peer's credits and this rank's queues
// allow; its payload stays where the header says until the peer's credits cover it.
bool SrdTransport::post_fragment(Peer& p, size_t index, Completion* out, size_t& n, size_t max,
                                 Clock::time_point now) {
  const uint64_t m = static_cast<uint64_t>(options_.mailbox_slots);
  const uint64_t s = static_cast<uint64_t>(options_.staging_slots);
  const int64_t chunk = static_cast<int64_t>(options_.chunk_bytes);
  const QueuedMessage& msg = p.current;
  const int64_t left = msg.header.bytes - p.posted_bytes;
  // A staging slot (this rank's, or the peer's when its heap is not registered) takes a chunk:
  // every fragment is cut to a chunk unless both heaps are registered.
  const int64_t frag = std::min(left, dev_.direct && p.remote_direct ? p.max_fragment : chunk);
  const bool last = frag == left;
  // Staged (this rank's heap not registered): the source is copied out now, so the message is
  // sent as soon as its last fragment is announced, as on RC; in order, empty ones too.
  const bool staged_mode = !dev_.direct;
  const bool staged = frag > 0 && staged_mode;
  if (p.msg_seq - p.taken >= m) {
    if (!p.blocked) {
      p.blocked = true;
      p.blocked_since = now;
    }
    return false;
  }
  p.blocked = false;
  // Taken but not yet released (no room for the kSent): its record is still needed.
  if (p.msg_seq - p.released >= m) return false;
  Sent& r = p.sent[p.msg_seq % m];
  if (r.header_in_flight) return false;
  // Headers and reads are at most m each (records, window): a credit and a goodbye keep room.
  if (p.sq_used + 1 > sq_depth_ - 2) return false;
  if (staged && p.stage_used - p.stage_freed >= s) return false;
  if (last && staged_mode && n >= max) return false;

  Ctl& h = p.headers[p.msg_seq % m];
  h = Ctl{};
  h.seq = p.msg_seq;
  h.dst_offset = msg.header.dst_offset + p.posted_bytes;
  h.bytes = frag;
  h.event = msg.header.event;
  h.flags = last ? kLast : 0;
  h.magic = kCtlMagic;
  if (staged) {
    char* at = p.send_stage + (p.stage_used % s) * static_cast<uint64_t>(chunk);
    heap_->read(msg.src_offset + p.posted_bytes, at, frag);
    h.flags |= kStaged;
    h.src_addr = reinterpret_cast<uintptr_t>(at);
    h.src_rkey = dev_.stage_mr->rkey;
    ++p.stage_used;
  } else if (frag > 0) {
    h.src_addr = dev_.heap_base + static_cast<uint64_t>(msg.src_offset + p.posted_bytes);
    h.src_rkey = dev_.heap_mr->rkey;
  }
  post_ctl(p, wr_id(kHeaderWr, index, p.msg_seq % m), &h, "a fragment header");
  r = Sent{};
  r.cookie = msg.cookie;
  r.posted = now;
  r.header_in_flight = true;
  r.emit_sent = last && !staged_mode;
  r.staged = staged;
  ++p.msg_seq;
  p.posted_bytes += frag;
  if (last) {
    p.has_current = false;
    if (staged_mode) {
      Completion& c = out[n++];
      c = Completion{};
      c.kind = Completion::kSent;
      c.peer = p.rank;
      c.cookie = msg.cookie;
    }
  }
  return true;
}

// The fragments the peer's credits say it has taken: their sources are free.
void SrdTransport::release_taken(Peer& p, Completion* out, size_t& n, size_t max) {
  const uint64_t m = static_cast<uint64_t>(options_.mailbox_slots);
  while (p.released < p.taken) {
    const Sent& r = p.sent[p.released % m];
    if (r.emit_sent) {
      if (n >= max) return;
      Completion& c = out[n++];
      c = Completion{};
      c.kind = Completion::kSent;
      c.peer = p.rank;
      c.cookie = r.cookie;
    }
    if (r.staged) ++p.stage_freed;
    ++p.released;
  }
}

// Reads the payloads of the fragments that arrived, in sequence order: into the heap at their
// destination (registered) or into the next staging slot. A read whose destination overlaps one
// still in flight waits for it, so that bytes land in the order they were sent, as on RC.
void SrdTransport::issue_reads(Peer& p, size_t index, Clock::time_point now) {
  const uint64_t m = static_cast<uint64_t>(options_.mailbox_slots);
  const uint64_t s = static_cast<uint64_t>(options_.staging_slots);
  const size_t chunk = options_.chunk_bytes;
  while (p.read_seq < p.recv_seq + m) {
    Incoming& in = p.window[p.read_seq % m];
    if (!in.arrived) return;
    const Ctl& c = in.ctl;
    if (c.bytes == 0) {
      in.read_done = true;
      ++p.read_seq;
      continue;
    }
    if (p.sq_used + 1 > sq_depth_ - 1) return;
    void* local = nullptr;
    uint32_t lkey = 0;
    if (dev_.direct) {
      for (uint64_t q = p.recv_seq; q < p.read_seq; ++q) {
        const Incoming& o = p.window[q % m];
        if (o.read_posted && !o.read_done && overlaps(o.ctl, c)) return;
      }
      local = reinterpret_cast<void*>(dev_.heap_base + static_cast<uint64_t>(c.dst_offset));
      lkey = dev_.heap_mr->lkey;
    } else {
      if (p.rstage_used - p.rstage_freed >= s) return;
      in.stage = p.recv_stage + (p.rstage_used % s) * chunk;
      in.staged = true;
      ++p.rstage_used;
      local = in.stage;
      lkey = dev_.stage_mr->lkey;
    }
    post_read(p, wr_id(kReadWr, index, p.read_seq % m), local, lkey, c);
    in.read_posted = true;
    in.posted = now;
    ++p.read_seq;
  }
}

// Hands out, in sequence order, the fragments whose payloads are in.
void SrdTransport::hand_out(Peer& p, Completion* out, size_t& n, size_t max) {
  const uint64_t m = static_cast<uint64_t>(options_.mailbox_slots);
  while (p.recv_seq < p.read_seq && n < max) {
    Incoming& in = p.window[p.recv_seq % m];
    if (!in.read_done) return;
    const Ctl c = in.ctl;
    const bool staged = in.staged;
    const char* data = in.stage;
    in = Incoming{};
    ++p.recv_seq;
    // Taken: the sender's source is free now (the bytes are here); only this rank's staging
    // slot stays the caller's until the next poll.
    ++p.freed;
    if (staged) ++p.to_free_stage;
    if (c.flags & kBye) {
      p.departed = true;
      return;
    }
    if (c.bytes > 0 && !staged) p.message_placed = true;
    const bool last = (c.flags & kLast) != 0;
    Completion& out_c = out[n++];
    out_c = Completion{};
    out_c.kind = Completion::kReceived;
    out_c.peer = p.rank;
    out_c.dst_offset = c.dst_offset;
    out_c.bytes = c.bytes;
    out_c.data = staged ? data : nullptr;
    out_c.last = last;
    out_c.placed = last && p.message_placed;
    out_c.event = c.event;
    if (last) p.message_placed = false;
  }
}

// Tells the peer how many of its fragments this rank has taken (one message in flight): at once,
// since its sources wait for it (a peer that stops polling after its last message must still
// free this rank's).
void SrdTransport::return_credits(Peer& p, size_t index) {
  // Also after the peer's goodbye: it waits for this last count before it lets go of its memory.
  if (p.credit_in_flight || p.freed == p.credit_sent) return;
  if (p.sq_used >= sq_depth_) return;
  *p.credit = Ctl{};
  p.credit->flags = kCredit;
  p.credit->taken = p.freed;
  p.credit->magic = kCtlMagic;
  post_ctl(p, wr_id(kCreditWr, index, 0), p.credit, "credits");
  p.credit_in_flight = true;
  p.credit_sent = p.freed;
}

size_t SrdTransport::poll(Completion* out, size_t max) {
  if (!connected_ || closed_ || max == 0) return 0;
  const auto now = Clock::now();
  size_t n = 0;
  for (size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    // What the previous poll handed out from staging is the caller's no more.
    p.rstage_freed += p.to_free_stage;
    p.to_free_stage = 0;
    return_credits(p, i);
    release_taken(p, out, n, max);
    while (true) {
      if (!p.has_current) {
        if (!p.queue.pop(p.current)) break;
        p.has_current = true;
        p.posted_bytes = 0;
      }
      if (!post_fragment(p, i, out, n, max, now)) break;
    }
  }
  while (true) {
    const int got = api_.poll_cq(dev_.cq, static_cast<int>(wcs_.size()), wcs_.data());
    if (got < 0) {
      throw TransportError(-1, fmt::format("verbs (srd): rank {}: ibv_poll_cq failed (returned "
                                           "{}): the completion queue overflowed or the device "
                                           "failed",
                                           rank_, got));
    }
    for (int k = 0; k < got; ++k) on_completion(wcs_[static_cast<size_t>(k)]);
    if (got < static_cast<int>(wcs_.size())) break;
  }
  const uint64_t m = static_cast<uint64_t>(options_.mailbox_slots);
  for (size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    issue_reads(p, i, now);
    hand_out(p, out, n, max);
    return_credits(p, i);
    release_taken(p, out, n, max);
    // Deadlines: a header or a read without a completion, a peer that takes nothing.
    for (uint64_t q = p.released; q < p.msg_seq; ++q) {
      const Sent& r = p.sent[q % m];
      if (r.header_in_flight && now - r.posted > timeout_) {
        fail(p, fmt::format("no completion came within {:.1f} s for fragment {}'s header (the "
                            "path to it is down, or its NIC stopped answering)",
                            timeout_.count() / 1e3, q));
      }
    }
    for (uint64_t q = p.recv_seq; q < p.read_seq; ++q) {
      const Incoming& in = p.window[q % m];
      if (in.read_posted && !in.read_done && now - in.posted > timeout_) {
        fail(p, fmt::format("an RDMA read of its fragment {} ({} bytes) did not complete within "
                            "{:.1f} s",
                            q, in.ctl.bytes, timeout_.count() / 1e3));
      }
    }
    if (p.bye_seen && p.released == p.taken && p.taken < p.msg_seq) {
      fail(p, fmt::format("said goodbye before taking {} of this rank's fragments (their "
                          "messages are lost)",
                          p.msg_seq - p.taken));
    }
    if (p.blocked && now - p.blocked_since > timeout_) {
      fail(p, fmt::format("took none of this rank's messages for {:.1f} s ({} fragments sent, "
                          "{} taken): its proxy is stuck or gone",
                          timeout_.count() / 1e3, p.msg_seq, p.taken));
    }
  }
  return n;
}

void SrdTransport::on_completion(const ibv_wc& wc) {
  const size_t index = wr_peer(wc.wr_id);
  if (index >= peers_.size()) {
    throw InternalError(
        fmt::format("verbs (srd): a completion for work request {:#x} of no peer", wc.wr_id));
  }
  Peer& p = peers_[index];
  const WrKind kind = wr_kind(wc.wr_id);
  // Headers and reads carry their window slot (seq % m), not their sequence number, which the
  // id would cut to 40 bits.
  const uint64_t m = static_cast<uint64_t>(options_.mailbox_slots);
  const uint64_t slot = wr_seq(wc.wr_id) % m;
  if (kind != kRecvWr) --p.sq_used;
  if (wc.status != IBV_WC_SUCCESS) {
    // Credits racing the peer's goodbye find its queue pair gone: no harm done.
    if (kind == kCreditWr && (p.departed || p.bye_seen)) {
      p.credit_in_flight = false;
      return;
    }
    const std::string what =
        kind == kRecvWr     ? std::string("a receive")
        : kind == kCreditWr ? std::string("a credit message to it")
        : kind == kReadWr   ? fmt::format("an RDMA read of its fragment {}", p.window[slot].ctl.seq)
                            : fmt::format("the header of fragment {} to it", p.headers[slot].seq);
    fail(p, fmt::format("{} failed: {} (vendor error {:#x})", what,
                        describe_wc_status(api_, wc.status), wc.vendor_err));
  }
  switch (kind) {
    case kHeaderWr:
      // Completions come in any order: the slot says which header's buffer is free.
      p.sent[slot].header_in_flight = false;
      return;
    case kCreditWr:
      p.credit_in_flight = false;
      return;
    case kReadWr: {
      Incoming& in = p.window[slot];
      if (!in.read_posted || in.read_done) {
        throw InternalError(fmt::format(
            "verbs (srd): a read into window slot {} completed that was not in flight", slot));
      }
      in.read_done = true;
      return;
    }
    case kRecvWr:
      on_control(p, index, wc);
      return;
    default:
      throw InternalError(fmt::format("verbs (srd): a completion of kind {} ({:#x})",
                                      static_cast<int>(kind), wc.wr_id));
  }
}

// A control message from the peer: a fragment header, credits or its goodbye.
void SrdTransport::on_control(Peer& p, size_t index, const ibv_wc& wc) {
  const uint64_t m = static_cast<uint64_t>(options_.mailbox_slots);
  const uint64_t slot = wr_seq(wc.wr_id);
  if (slot >= static_cast<uint64_t>(inbox_)) {
    throw InternalError(fmt::format("verbs (srd): a receive into buffer {} of {}", slot, inbox_));
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  Ctl c;
  std::memcpy(&c, &p.inbox[slot], sizeof(c));
  post_recv(p, index, slot);
  if (wc.byte_len != sizeof(Ctl) || c.magic != kCtlMagic) {
    fail(p, fmt::format("sent {} bytes that are not a control message of this transport (magic "
                        "{:#x})",
                        wc.byte_len, c.magic));
  }
  if (c.flags & kCredit) {
    if (c.taken > p.msg_seq) {
      fail(p,
           fmt::format("says it took {} fragments of the {} this rank sent", c.taken, p.msg_seq));
    }
    // Credit messages may overtake each other: the count only grows.
    p.taken = std::max(p.taken, c.taken);
    return;
  }
  if (c.seq < p.recv_seq || c.seq >= p.recv_seq + m || p.window[c.seq % m].arrived) {
    fail(p, fmt::format("announced fragment {} where {} to {} were due (a lost or repeated "
                        "message)",
                        c.seq, p.recv_seq, p.recv_seq + m - 1));
  }
  if (c.flags & kBye) {
    // It carries the peer's last count of this rank's fragments it took: it takes no more.
    if (c.bytes != 0 || c.taken > p.msg_seq)
      fail(p, fmt::format("sent a bad goodbye ({} bytes, {} fragments taken of {})", c.bytes,
                          c.taken, p.msg_seq));
    p.taken = std::max(p.taken, c.taken);
    p.bye_seen = true;
  } else if (c.bytes < 0 || c.event < -1 || !in_range(c.dst_offset, c.bytes, heap_->size()) ||
             (!dev_.direct && c.bytes > static_cast<int64_t>(options_.chunk_bytes)) ||
             c.bytes > max_fragment_) {
    fail(p, fmt::format("sent a bad header ({} bytes at heap offset {} of {}, event {})", c.bytes,
                        c.dst_offset, heap_->size(), c.event));
  }
  Incoming& in = p.window[c.seq % m];
  in = Incoming{};
  in.ctl = c;
  in.arrived = true;
}

std::string SrdTransport::peer_address(int peer) const {
  return peers_.address(peer);
}

void SrdTransport::close() {
  if (closed_) return;
  if (connected_) {
    // A goodbye to every peer still there, at a message boundary and within its credits; then a
    // short wait for those sends to complete before the queue pairs go.
    const uint64_t m = static_cast<uint64_t>(options_.mailbox_slots);
    std::vector<uint64_t> bye(peers_.size(), ~uint64_t{0});
    for (size_t i = 0; i < peers_.size(); ++i) {
      Peer& p = peers_[i];
      Sent& r = p.sent[p.msg_seq % m];
      if (p.departed || p.has_current || p.sq_used >= sq_depth_ || p.msg_seq - p.taken >= m ||
          r.header_in_flight) {
        continue;
      }
      Ctl& h = p.headers[p.msg_seq % m];
      h = Ctl{};
      h.seq = p.msg_seq;
      h.flags = kBye;
      h.event = -1;
      h.taken = p.freed;
      h.magic = kCtlMagic;
      try {
        post_ctl(p, wr_id(kHeaderWr, i, p.msg_seq % m), &h, "the goodbye");
      } catch (const TransportError&) {
        continue;
      }
      r = Sent{};
      r.header_in_flight = true;
      bye[i] = p.msg_seq;
      ++p.msg_seq;
    }
    // The peers read this rank's memory (SRD pulls): it stays registered until each has taken
    // every fragment before the goodbye (its credits), or for at most 200 ms. Meanwhile
    // completions and credits are handled as in poll(), and this rank's own last counts go out.
    const auto deadline = Clock::now() + std::chrono::milliseconds(200);
    const auto waiting = [&] {
      for (size_t i = 0; i < peers_.size(); ++i) {
        const Peer& p = peers_[i];
        if (bye[i] == ~uint64_t{0}) continue;
        if (p.sent[bye[i] % m].header_in_flight || p.taken < bye[i]) return true;
      }
      return false;
    };
    while (waiting() && Clock::now() < deadline) {
      const int got = api_.poll_cq(dev_.cq, static_cast<int>(wcs_.size()), wcs_.data());
      if (got < 0) break;
      for (int k = 0; k < got; ++k) {
        const ibv_wc& wc = wcs_[static_cast<size_t>(k)];
        const size_t i = wr_peer(wc.wr_id);
        if (i >= peers_.size()) continue;
        try {
          on_completion(wc);
        } catch (const std::exception&) {
          bye[i] = ~uint64_t{0};  // a peer that is gone gets no goodbye: stop waiting for it
        }
      }
      for (size_t i = 0; i < peers_.size(); ++i) {
        try {
          return_credits(peers_[i], i);
        } catch (const std::exception&) {
        }
      }
      if (got == 0) std::this_thread::yield();
    }
  }
  closed_ = true;
  release();
}

}  // namespace verbs

std::unique_ptr<Transport> make_srd_transport(const VerbsApi& api, const VerbsOptions& options) {
  return std::make_unique<verbs::SrdTransport>(api, options);
}

}  // namespace mkc::rt::net
