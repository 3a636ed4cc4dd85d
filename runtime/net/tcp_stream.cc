#include "runtime/net/tcp_stream.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mkc::rt::net::tcp {

StreamReader::StreamReader(size_t capacity, int64_t heap_size, std::chrono::milliseconds timeout,
                           int peer, std::string who)
    : cap_(capacity),
      heap_size_(heap_size),
      timeout_(timeout),
      peer_(peer),
      who_(std::move(who)),
      buf_(new char[capacity]) {
  if (capacity < 2) throw InternalError("tcp: a stream reader's buffer of fewer than 2 bytes");
}

void StreamReader::fail(const std::string& what) const {
  throw TransportError(peer_, fmt::format("{}: {}", who_, what));
}

bool StreamReader::step(int fd, bool readable, Completion* out, size_t& n, size_t max,
                        Clock::time_point now) {
  // Only here, at the start of a step, may the buffer move or be overwritten: the fragments the
  // previous step handed out were valid until now.
  if (readable && !eof_) {
    if (pos_ > 0) {
      std::memmove(buf_.get(), buf_.get() + pos_, len_ - pos_);
      len_ -= pos_;
      pos_ = 0;
    }
    if (len_ < cap_) {
      const ssize_t k = ::recv(fd, buf_.get() + len_, cap_ - len_, MSG_DONTWAIT);
      if (k > 0) {
        len_ += static_cast<size_t>(k);
        since_ = now;
      } else if (k == 0) {
        eof_ = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        if (!departed_) {
          fail(fmt::format("receiving failed: {} (its process exited or crashed?)",
                           errno_text(errno)));
        }
        // A reset after the goodbye: the peer closed with our bytes unread. It left on purpose.
        eof_ = true;
        pos_ = len_;
      }
    }
  }
  const Stop stop = parse(out, n, max);
  if (eof_ && pos_ == len_) {
    if (header_got_ > 0) {
      fail(
          fmt::format("closed the connection in the middle of a message header ({} of {} bytes "
                      "received): its process exited or crashed",
                      header_got_, sizeof(WireHeader)));
    }
    if (in_message_) {
      fail(
          fmt::format("closed the connection in the middle of a message ({} of {} payload bytes "
                      "received): its process exited or crashed",
                      payload_done_, header_.bytes));
    }
    if (!departed_) {
      fail(
          "closed the connection without a goodbye: its process exited, crashed, or dropped its "
          "transport");
    }
    return true;
  }
  // The peer is waited for only while a message is cut short and parse stopped for want of its
  // bytes, not for want of room in `out`. The clock runs from the later of the last bytes
  // received and the last step that did not wait, so a slow consumer never blames the peer.
  if (!(mid_message() && stop == Stop::kWantBytes)) {
    since_ = now;
  } else if (now - since_ > timeout_) {
    if (in_message_) {
      const int64_t buffered =
          std::min(header_.bytes - payload_done_, static_cast<int64_t>(len_ - pos_));
      fail(
          fmt::format("sent nothing for {:.1f} s in the middle of a message ({} of {} payload "
                      "bytes received): it is stuck or gone",
                      timeout_.count() / 1e3, payload_done_ + buffered, header_.bytes));
    }
    fail(
        fmt::format("sent nothing for {:.1f} s in the middle of a message header ({} of {} bytes "
                    "received): it is stuck or gone",
                    timeout_.count() / 1e3, header_got_, sizeof(WireHeader)));
  }
  return false;
}

StreamReader::Stop StreamReader::parse(Completion* out, size_t& n, size_t max) {
  while (pos_ < len_) {
    if (n >= max) return Stop::kWantRoom;
    if (!in_message_) {
      const size_t take = std::min(sizeof(WireHeader) - header_got_, len_ - pos_);
      std::memcpy(reinterpret_cast<char*>(&header_) + header_got_, buf_.get() + pos_, take);
      header_got_ += take;
      pos_ += take;
      if (header_got_ < sizeof(WireHeader)) return Stop::kWantBytes;
      header_got_ = 0;
      const WireHeader& h = header_;
      if (departed_) fail("sent data after its goodbye");
      if (h.magic == kByeMagic && h.seq == seq_) {
        departed_ = true;
        continue;
      }
      if (h.magic != kMessageMagic || h.seq != seq_ || h.event < -1 ||
          !in_range(h.dst_offset, h.bytes, heap_size_)) {
        fail(
            fmt::format("sent a bad message header (magic {:#x}, seq {} where {} was due, {} "
                        "bytes at heap offset {} of {}, event {}): not this mkc's peer, or a "
                        "corrupted stream",
                        h.magic, h.seq, seq_, h.bytes, h.dst_offset, heap_size_, h.event));
      }
      ++seq_;
      payload_done_ = 0;
      if (h.bytes == 0) {
        Completion& c = out[n++];
        c = Completion{};
        c.kind = Completion::kReceived;
        c.peer = peer_;
        c.dst_offset = h.dst_offset;
        c.last = true;
        c.event = h.event;
        continue;
      }
      in_message_ = true;
      continue;
    }
    const int64_t left = header_.bytes - payload_done_;
    const int64_t take = std::min(left, static_cast<int64_t>(len_ - pos_));
    // A fragment of at least half a buffer, or the message's end: few, large heap writes. At the
    // end of the stream what is there goes out as it is (the close is reported after it).
    if (take < left && take < static_cast<int64_t>(cap_ / 2) && !eof_) return Stop::kWantBytes;
    Completion& c = out[n++];
    c = Completion{};
    c.kind = Completion::kReceived;
    c.peer = peer_;
    c.dst_offset = header_.dst_offset + payload_done_;
    c.bytes = take;
    c.data = buf_.get() + pos_;
    c.last = take == left;
    c.event = header_.event;
    pos_ += static_cast<size_t>(take);
    payload_done_ += take;
    if (c.last) in_message_ = false;
  }
  return Stop::kWantBytes;
}

}  // namespace mkc::rt::net::tcp
