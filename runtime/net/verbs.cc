// The verbs transport moving messages: queueing, posting fragments as RDMA writes within the
// credits, returning credits, polling completions and receiving fragments, and the goodbye and
// teardown of close(). Connecting is in verbs_connect.cc.
#include "runtime/net/verbs.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "runtime/net/verbs_calls.h"
#include "runtime/net/verbs_transport.h"

namespace mkc::rt::net {
namespace verbs {

// A receive for the peer's next write with immediate; it carries no buffer (the write says where
// its bytes go), only the slot in the queue the immediate consumes.
void VerbsTransport::post_recv(Peer& p, size_t index) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id(kRecvWr, index, 0);
  ibv_recv_wr* bad = nullptr;
  MKC_IBV(api_, post_recv, p.rank, for_peer(p.rank), p.qp, &wr, &bad);
}

bool VerbsTransport::send(int peer, const MessageHeader& header, int64_t src_offset,
                          uint64_t cookie) {
  return queue_message(peers_, connected_, closed_, "verbs", rank_, peer,
                       QueuedMessage{header, src_offset, cookie},
                       [&](const Peer& p, const char* what) { fail(p, what); });
}

// Posts the current message's next fragment when the credits allow: payload write (unless
// empty), then the header write with immediate. Returns whether it posted.
bool VerbsTransport::post_fragment(Peer& p, size_t index, Completion* out, size_t& n, size_t max,
                                   Clock::time_point now) {
  const uint64_t m = static_cast<uint64_t>(options_.mailbox_slots);
  const uint64_t s = static_cast<uint64_t>(options_.staging_slots);
  const int64_t chunk = static_cast<int64_t>(options_.chunk_bytes);
  const QueuedMessage& msg = p.current;
  const bool local_staged = !dev_.direct, remote_staged = !p.remote_direct;
  const int64_t left = msg.header.bytes - p.posted_bytes;
  const int64_t frag = std::min(left, local_staged || remote_staged ? chunk : max_fragment_);
  const bool payload = frag > 0;
  const bool last = frag == left;
  const int wrs = payload ? 2 : 1;
  const auto blocked_by_peer = [&] {
    if (!p.blocked) {
      p.blocked = true;
      p.blocked_since = now;
    }
    return false;
  };
  if (p.msg_seq - load_acquire(p.credits_in->mailbox) >= m) return blocked_by_peer();
  if (payload && remote_staged && p.remote_stage_seq - load_acquire(p.credits_in->staging) >= s) {
    return blocked_by_peer();
  }
  p.blocked = false;
  if (p.msg_seq - p.hdr_done >= m) return false;
  // One entry stays free for credit updates, which the peer's progress depends on.
  if (p.sq_used + wrs > sq_depth_ - 1) return false;
  if (payload && local_staged && p.local_stage_seq - p.local_stage_done >= s) return false;
  // Staged locally, the last fragment frees the source now: a kSent needs room in `out`.
  if (last && local_staged && n >= max) return false;

  ibv_sge psge{}, hsge{};
  ibv_send_wr pwr{}, hwr{};
  ibv_send_wr* bad = nullptr;
  Mail& h = p.headers[p.msg_seq % m];
  h = Mail{};
  h.seq = p.msg_seq;
  h.dst_offset = msg.header.dst_offset + p.posted_bytes;
  h.bytes = frag;
  h.event = msg.header.event;
  h.flags = last ? kLast : 0;
  h.magic = kMailMagic;
  if (payload) {
    if (local_staged) {
      char* at = p.send_stage + (p.local_stage_seq % s) * static_cast<uint64_t>(chunk);
      heap_->read(msg.src_offset + p.posted_bytes, at, frag);
      psge.addr = reinterpret_cast<uintptr_t>(at);
      psge.lkey = dev_.stage_mr->lkey;
      ++p.local_stage_seq;
    } else {
      psge.addr = dev_.heap_base + static_cast<uint64_t>(msg.src_offset + p.posted_bytes);
      psge.lkey = dev_.heap_mr->lkey;
    }
    psge.length = static_cast<uint32_t>(frag);
    pwr.wr_id = wr_id(kPayloadWr, index, p.msg_seq);
    pwr.sg_list = &psge;
    pwr.num_sge = 1;
    pwr.opcode = IBV_WR_RDMA_WRITE;
    pwr.next = &hwr;
    if (remote_staged) {
      h.flags |= kStaged;
      h.stage_slot = static_cast<uint32_t>(p.remote_stage_seq % s);
      pwr.wr.rdma.remote_addr = p.remote_stage + h.stage_slot * static_cast<uint64_t>(chunk);
      pwr.wr.rdma.rkey = p.remote_stage_rkey;
      ++p.remote_stage_seq;
    } else {
      pwr.wr.rdma.remote_addr = p.remote_heap_base + static_cast<uint64_t>(h.dst_offset);
      pwr.wr.rdma.rkey = p.remote_heap_rkey;
    }
  }
  hsge.addr = reinterpret_cast<uintptr_t>(&h);
  hsge.length = sizeof(Mail);
  hsge.lkey = dev_.ctrl_mr->lkey;
  hwr.wr_id = wr_id(kHeaderWr, index, p.msg_seq);
  hwr.sg_list = &hsge;
  hwr.num_sge = 1;
  hwr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  hwr.send_flags = IBV_SEND_SIGNALED;
  hwr.imm_data = htonl(static_cast<uint32_t>(p.msg_seq));
  hwr.wr.rdma.remote_addr = p.remote_mailbox + (p.msg_seq % m) * sizeof(Mail);
  hwr.wr.rdma.rkey = p.remote_ctrl_rkey;
  MKC_IBV(api_, post_send, p.rank,
          fmt::format(" (rank {}, a write to rank {} at {})", rank_, p.rank, p.address), p.qp,
          payload ? &pwr : &hwr, &bad);
  SlotRecord& r = p.slots[p.msg_seq % m];
  r.cookie = msg.cookie;
  r.posted = now;
  r.wrs = wrs;
  r.emit_sent = last && !local_staged;
  r.used_local_stage = payload && local_staged;
  ++p.msg_seq;
  p.sq_used += wrs;
  p.posted_bytes += frag;
  if (last) {
    p.has_current = false;
    if (local_staged) {
      Completion& c = out[n++];
      c = Completion{};
      c.kind = Completion::kSent;
      c.peer = p.rank;
      c.cookie = msg.cookie;
    }
  }
  return true;
}

// Tells the peer which mailbox and staging slots this rank has freed (one update in flight).
void VerbsTransport::return_credits(Peer& p, size_t index) {
  p.freed_mailbox += p.to_free_mailbox;
  p.freed_staging += p.to_free_staging;
  p.to_free_mailbox = p.to_free_staging = 0;
  if (p.credit_in_flight || p.departed || p.sq_used >= sq_depth_) return;
  if (p.freed_mailbox == p.credit_sent_mailbox && p.freed_staging == p.credit_sent_staging) return;
  p.credits_out->mailbox = p.freed_mailbox;
  p.credits_out->staging = p.freed_staging;
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(p.credits_out);
  sge.length = 2 * sizeof(uint64_t);
  sge.lkey = dev_.ctrl_mr->lkey;
  ibv_send_wr wr{};
  wr.wr_id = wr_id(kCreditWr, index, 0);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = p.remote_credits;
  wr.wr.rdma.rkey = p.remote_ctrl_rkey;
  ibv_send_wr* bad = nullptr;
  MKC_IBV(api_, post_send, p.rank,
          fmt::format(" (rank {}, credits to rank {} at {})", rank_, p.rank, p.address), p.qp, &wr,
          &bad);
  p.credit_in_flight = true;
  ++p.sq_used;
  p.credit_sent_mailbox = p.freed_mailbox;
  p.credit_sent_staging = p.freed_staging;
}

size_t VerbsTransport::poll(Completion* out, size_t max) {
  if (!connected_ || closed_ || max == 0) return 0;
  const auto now = Clock::now();
  size_t n = 0;
  // What the previous poll handed out is the caller's no more: its slots go back to the peers.
  for (size_t i = 0; i < peers_.size(); ++i) return_credits(peers_[i], i);
  for (size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    while (true) {
      if (!p.has_current) {
        if (!p.queue.pop(p.current)) break;
        p.has_current = true;
        p.posted_bytes = 0;
      }
      if (!post_fragment(p, i, out, n, max, now)) break;
    }
  }
  while (n < max) {
    const int want = static_cast<int>(std::min(wcs_.size(), max - n));
    const int got = api_.poll_cq(dev_.cq, want, wcs_.data());
    if (got < 0) {
      throw TransportError(-1, fmt::format("verbs: rank {}: ibv_poll_cq failed (returned {}): "
                                           "the completion queue overflowed or the device failed",
                                           rank_, got));
    }
    for (int k = 0; k < got; ++k) on_completion(wcs_[static_cast<size_t>(k)], out, n);
    if (got < want) break;
  }
  for (Peer& p : peers_) {
    if (p.msg_seq > p.hdr_done &&
        now - p.slots[p.hdr_done % static_cast<uint64_t>(options_.mailbox_slots)].posted >
            timeout_) {
      fail(p, fmt::format("no completion came within {:.1f} s for a write to it (the path to it "
                          "is down, or its NIC stopped answering)",
                          timeout_.count() / 1e3));
    }
    if (p.blocked && now - p.blocked_since > timeout_) {
      fail(p, fmt::format("took none of this rank's messages for {:.1f} s ({} fragments sent, "
                          "{} taken): its proxy is stuck or gone",
                          timeout_.count() / 1e3, p.msg_seq, load_acquire(p.credits_in->mailbox)));
    }
  }
  return n;
}

void VerbsTransport::on_completion(const ibv_wc& wc, Completion* out, size_t& n) {
  const size_t index = wr_peer(wc.wr_id);
  if (index >= peers_.size()) {
    throw InternalError(
        fmt::format("verbs: a completion for work request {:#x} of no peer", wc.wr_id));
  }
  Peer& p = peers_[index];
  const WrKind kind = wr_kind(wc.wr_id);
  if (wc.status != IBV_WC_SUCCESS) {
    // A credit update racing the peer's goodbye finds its queue pair gone: no harm done.
    if (kind == kCreditWr && p.departed) {
      p.credit_in_flight = false;
      --p.sq_used;
      return;
    }
    const char* what = kind == kRecvWr     ? "a receive"
                       : kind == kCreditWr ? "a credit update to it"
                       : kind == kPayloadWr
                           ? "an RDMA write of a message's bytes to it"
                           : "an RDMA write with immediate of a message header to it";
    fail(p, fmt::format("{} failed: {} (vendor error {:#x}, fragment {})", what,
                        describe_wc_status(api_, wc.status), wc.vendor_err, wr_seq(wc.wr_id)));
  }
  switch (kind) {
    case kHeaderWr: {
      const uint64_t seq = wr_seq(wc.wr_id);
      if (seq != (p.hdr_done & ((uint64_t{1} << 40) - 1))) {
        throw InternalError(
            fmt::format("verbs: header write {} completed where {} was due", seq, p.hdr_done));
      }
      const SlotRecord& r = p.slots[p.hdr_done % static_cast<uint64_t>(options_.mailbox_slots)];
      p.sq_used -= r.wrs;
      if (r.used_local_stage) ++p.local_stage_done;
      ++p.hdr_done;
      if (r.emit_sent) {
        Completion& c = out[n++];
        c = Completion{};
        c.kind = Completion::kSent;
        c.peer = p.rank;
        c.cookie = r.cookie;
      }
      return;
    }
    case kCreditWr:
      p.credit_in_flight = false;
      --p.sq_used;
      return;
    case kRecvWr:
      on_receive(p, index, wc, out, n);
      return;
    default:
      // Payload writes are unsignaled: only their failures come back (above).
      return;
  }
}

void VerbsTransport::on_receive(Peer& p, size_t index, const ibv_wc& wc, Completion* out,
                                size_t& n) {
  const uint64_t m = static_cast<uint64_t>(options_.mailbox_slots);
  const uint64_t s = static_cast<uint64_t>(options_.staging_slots);
  if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || (wc.wc_flags & IBV_WC_WITH_IMM) == 0) {
    fail(p, fmt::format("a receive completed with opcode {} and no immediate: not a header "
                        "write of this transport",
                        static_cast<int>(wc.opcode)));
  }
  const uint32_t imm = ntohl(wc.imm_data);
  if (imm != static_cast<uint32_t>(p.recv_seq)) {
    fail(p, fmt::format("fragment {} announced where {} was due (a lost or repeated write)", imm,
                        static_cast<uint32_t>(p.recv_seq)));
  }
  // The completion was read before the mailbox: its bytes are in place (the provider's poll
  // orders device writes before the completion it returns).
  std::atomic_thread_fence(std::memory_order_acquire);
  Mail h;
  std::memcpy(&h, &p.mailbox[p.recv_seq % m], sizeof(h));
  if (h.magic != kMailMagic || h.seq != p.recv_seq) {
    fail(p, fmt::format("its mailbox slot {} holds no header for fragment {} (magic {:#x}, seq "
                        "{})",
                        p.recv_seq % m, p.recv_seq, h.magic, h.seq));
  }
  ++p.recv_seq;
  ++p.to_free_mailbox;
  post_recv(p, index);
  if (h.flags & kBye) {
    p.departed = true;
    return;
  }
  if (h.bytes < 0 || h.event < -1 || !in_range(h.dst_offset, h.bytes, heap_->size())) {
    fail(p, fmt::format("sent a bad header ({} bytes at heap offset {} of {}, event {})", h.bytes,
                        h.dst_offset, heap_->size(), h.event));
  }
  const bool staged = (h.flags & kStaged) != 0;
  const void* data = nullptr;
  if (staged) {
    if (dev_.direct || h.stage_slot != p.recv_stage_seq % s ||
        h.bytes > static_cast<int64_t>(options_.chunk_bytes)) {
      fail(p, fmt::format("staged {} bytes in slot {} where slot {} of {} bytes was due", h.bytes,
                          h.stage_slot, p.recv_stage_seq % s, options_.chunk_bytes));
    }
    data = p.recv_stage + h.stage_slot * options_.chunk_bytes;
    ++p.recv_stage_seq;
    ++p.to_free_staging;
  } else if (h.bytes > 0) {
    if (!dev_.direct) fail(p, "wrote into this rank's heap, which it did not register");
    p.message_placed = true;
  }
  const bool last = (h.flags & kLast) != 0;
  Completion& c = out[n++];
  c = Completion{};
  c.kind = Completion::kReceived;
  c.peer = p.rank;
  c.dst_offset = h.dst_offset;
  c.bytes = h.bytes;
  c.data = data;
  c.last = last;
  c.placed = last && p.message_placed;
  c.event = h.event;
  if (last) p.message_placed = false;
}

std::string VerbsTransport::peer_address(int peer) const {
  return peers_.address(peer);
}

void VerbsTransport::close() {
  if (closed_) return;
  if (connected_) {
    // A goodbye to every peer still there, at a message boundary and if credits allow; then a
    // short wait for those writes to leave before the queue pairs go.
    const uint64_t m = static_cast<uint64_t>(options_.mailbox_slots);
    for (size_t i = 0; i < peers_.size(); ++i) {
      Peer& p = peers_[i];
      if (p.departed || p.has_current || p.sq_used >= sq_depth_ ||
          p.msg_seq - load_acquire(p.credits_in->mailbox) >= m || p.msg_seq - p.hdr_done >= m) {
        continue;
      }
      Mail& h = p.headers[p.msg_seq % m];
      h = Mail{};
      h.seq = p.msg_seq;
      h.flags = kBye;
      h.event = -1;
      h.magic = kMailMagic;
      ibv_sge sge{reinterpret_cast<uintptr_t>(&h), sizeof(Mail), dev_.ctrl_mr->lkey};
      ibv_send_wr wr{};
      wr.wr_id = wr_id(kHeaderWr, i, p.msg_seq);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.imm_data = htonl(static_cast<uint32_t>(p.msg_seq));
      wr.wr.rdma.remote_addr = p.remote_mailbox + (p.msg_seq % m) * sizeof(Mail);
      wr.wr.rdma.rkey = p.remote_ctrl_rkey;
      ibv_send_wr* bad = nullptr;
      if (api_.post_send(p.qp, &wr, &bad) == 0) {
        p.slots[p.msg_seq % m] = SlotRecord{0, Clock::now(), 1, false, false};
        ++p.msg_seq;
        ++p.sq_used;
      }
    }
    const auto deadline = Clock::now() + std::chrono::milliseconds(200);
    const auto waiting = [&] {
      return std::any_of(peers_.begin(), peers_.end(),
                         [](const Peer& p) { return p.msg_seq > p.hdr_done && !p.departed; });
    };
    while (waiting() && Clock::now() < deadline) {
      const int got = api_.poll_cq(dev_.cq, static_cast<int>(wcs_.size()), wcs_.data());
      if (got < 0) break;
      for (int k = 0; k < got; ++k) {
        const ibv_wc& wc = wcs_[static_cast<size_t>(k)];
        const size_t i = wr_peer(wc.wr_id);
        if (i < peers_.size() && wr_kind(wc.wr_id) == kHeaderWr && wc.status == IBV_WC_SUCCESS) {
          ++peers_[i].hdr_done;
        } else if (i < peers_.size() && wc.status != IBV_WC_SUCCESS) {
          // A peer that is gone gets no goodbye; stop waiting for it.
          peers_[i].hdr_done = peers_[i].msg_seq;
        }
      }
      if (got == 0) std::this_thread::yield();
    }
  }
  closed_ = true;
  release();
}

void VerbsTransport::release() {
  for (Peer& p : peers_) {
    if (p.qp != nullptr) api_.destroy_qp(p.qp);
    p.qp = nullptr;
  }
  dev_.release();
}

}  // namespace verbs

std::unique_ptr<Transport> make_rc_transport(const VerbsApi& api, const VerbsOptions& options) {
  return std::make_unique<verbs::VerbsTransport>(api, options);
}

}  // namespace mkc::rt::net
