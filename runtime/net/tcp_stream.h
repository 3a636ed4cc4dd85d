// The tcp transport's framing: the message header on the wire, and the reader that cuts one
// connection's incoming byte stream into headers and payload fragments, whatever pieces recv()
// returns (one byte at a time, a header split anywhere, a payload in any number of parts).
// runtime/net/tcp.cc writes the stream and drives one StreamReader per peer; the reader is its own
// unit so that tests can feed it any split of a stream through a socketpair.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/net/transport.h"

namespace mkc::rt::net::tcp {

inline constexpr uint32_t kMessageMagic = 0x4d4b4e4d;  // "MKNM": a message header
inline constexpr uint32_t kByeMagic = 0x4d4b4e42;      // "MKNB": the sender stops on purpose

// Ahead of every message's payload; a goodbye is a header of its own (kByeMagic, no payload).
struct WireHeader {
  uint32_t magic;
  int32_t event;
  int64_t dst_offset;
  int64_t bytes;
  uint64_t seq;  // messages sent on this connection before this one
};
static_assert(sizeof(WireHeader) == 32, "a message header is 32 bytes on the wire");

inline WireHeader message_header(const MessageHeader& h, uint64_t seq) {
  return WireHeader{kMessageMagic, h.event, h.dst_offset, h.bytes, seq};
}
inline WireHeader bye_header(uint64_t seq) {
  return WireHeader{kByeMagic, -1, 0, 0, seq};
}

// One connection's incoming stream. Not thread-safe (the transport's poll thread owns it).
class StreamReader {
 public:
  using Clock = std::chrono::steady_clock;

  // `capacity`: the receive buffer; fragments are at least half of it, or a message's end (few,
  // large heap writes). `heap_size`: a header must name a range inside it. `timeout`: how long a
  // message cut short waits for the peer's next bytes. `peer` and `who` name the sender in every
  // error: TransportError(peer, who + ": " + what), `who` as "tcp: rank 0: rank 1
  // at 10.0.0.2:41234".
  StreamReader(size_t capacity, int64_t heap_size, std::chrono::milliseconds timeout, int peer,
               std::string who);

  // One step: at most one recv() from `fd` (non-blocking) when `readable`, then as many
  // completions into out[n, max) as the buffered bytes make (n is advanced). The fragments of the
  // previous step point into the buffer and stay valid until this call. Returns true once the
  // stream ended after the peer's goodbye (the caller closes `fd`; no further steps). Throws
  // TransportError naming the peer when it sends a bad header, closes or resets the connection
  // without a goodbye (in the middle of a message or not), or sends nothing for `timeout` while a
  // message is cut short. No step blocks or waits; `now` is the caller's clock.
  bool step(int fd, bool readable, Completion* out, size_t& n, size_t max, Clock::time_point now);

  // The buffer received bytes land in (for MemoryAccess::stage_begin), and its size.
  char* buffer() const { return buf_.get(); }
  size_t capacity() const { return cap_; }

  // The peer said goodbye: sending to it is an error.
  bool departed() const { return departed_; }
  // A message (or its header) is cut short: the reader waits for the rest.
  bool mid_message() const { return in_message_ || header_got_ > 0; }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  // Why parse() stopped.
  enum class Stop { kWantBytes, kWantRoom };
  Stop parse(Completion* out, size_t& n, size_t max);

  const size_t cap_;
  const int64_t heap_size_;
  const std::chrono::milliseconds timeout_;
  const int peer_;
  const std::string who_;

  std::unique_ptr<char[]> buf_;
  size_t len_ = 0;  // bytes in buf_
  size_t pos_ = 0;  // bytes of buf_ parsed
  bool eof_ = false;
  bool departed_ = false;

  WireHeader header_{};
  size_t header_got_ = 0;  // bytes of the next header read so far
  bool in_message_ = false;
  int64_t payload_done_ = 0;  // payload bytes of the current message handed out
  uint64_t seq_ = 0;          // the next message's sequence number
  // The later of the last bytes received and the last step that did not wait for the peer.
  Clock::time_point since_{};
};

}  // namespace mkc::rt::net::tcp
