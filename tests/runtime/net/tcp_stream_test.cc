// The tcp transport's framing (runtime/net/tcp_stream.h) fed through a socketpair in adversarial
// splits: one byte at a time, every header cut at every place, pieces just under and over the
// reader's fragment threshold and its buffer, random pieces, all at once; with room for as few as
// one completion per step. What is delivered must be exactly what was written: the same messages
// in order, fragments contiguous, bytes exact. A stream cut anywhere, a stall anywhere and a bad
// header are errors naming the peer within a bounded number of steps: never a hang.
//
// The writer and the reader take turns on one thread (a write, then one step of the reader), so
// each split is the one the test chose and nothing depends on timing; the reader's clock is the
// test's, so the stall cases take no time.
#include "runtime/net/tcp_stream.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace mkc::rt::net {
namespace {

using namespace std::chrono_literals;
using tcp::StreamReader;
using Clock = StreamReader::Clock;

constexpr int kPeer = 1;
const char* const kWho = "tcp: rank 0: rank 1 at 192.0.2.7:4000";
const Clock::time_point t0 = Clock::time_point{} + 1h;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

struct Msg {
  int64_t dst;
  int64_t bytes;
  int32_t event;
  bool operator==(const Msg&) const = default;
};

uint8_t payload_byte(size_t msg, int64_t i) {
  return static_cast<uint8_t>(
      (msg * 131 + static_cast<size_t>(i) * 7 + (static_cast<size_t>(i) >> 8)) ^ 0x5a);
}

// Messages of `sizes`, each at its own place of a heap (gaps between them), events 0, 1, ... with
// every third one -1 (no counter).
std::vector<Msg> layout(const std::vector<int64_t>& sizes, int64_t& heap_size) {
  std::vector<Msg> msgs;
  int64_t at = 16;
  for (size_t i = 0; i < sizes.size(); ++i) {
    msgs.push_back({at, sizes[i], i % 3 == 2 ? -1 : static_cast<int32_t>(i)});
    at += sizes[i] + 24;
  }
  heap_size = at;
  return msgs;
}

void append(std::string& s, const tcp::WireHeader& h) {
  s.append(reinterpret_cast<const char*>(&h), sizeof(h));
}

// The byte stream a sender writes for `msgs` (payloads from payload_byte), then its goodbye.
std::string encode(const std::vector<Msg>& msgs, bool bye) {
  std::string s;
  uint64_t seq = 0;
  for (size_t m = 0; m < msgs.size(); ++m) {
    append(s, tcp::message_header({msgs[m].dst, msgs[m].bytes, msgs[m].event}, seq++));
    for (int64_t i = 0; i < msgs[m].bytes; ++i) s.push_back(static_cast<char>(payload_byte(m, i)));
  }
  if (bye) append(s, tcp::bye_header(seq));
  return s;
}

// Where each message's header starts in encode()'s stream.
std::vector<size_t> header_starts(const std::vector<Msg>& msgs) {
  std::vector<size_t> v;
  size_t at = 0;
  for (const Msg& m : msgs) {
    v.push_back(at);
    at += sizeof(tcp::WireHeader) + static_cast<size_t>(m.bytes);
  }
  return v;
}

// What a consumer sees: fragments written into a heap, messages recorded at their last fragment.
// Anything that breaks the contract is written into `problem` (checked once, at the end).
struct Sink {
  Sink(int64_t heap_size, size_t cap) : heap(static_cast<size_t>(heap_size), 0xee), cap(cap) {}

  void take(const Completion& c) {
    if (!problem.empty()) return;
    if (c.kind != Completion::kReceived || c.peer != kPeer) {
      problem = fmt::format("completion of kind {} from peer {}", static_cast<int>(c.kind), c.peer);
      return;
    }
    if (!open) {
      open = true;
      start = c.dst_offset;
      done = 0;
    }
    if (c.dst_offset != start + done || c.bytes < 0 ||
        c.dst_offset + c.bytes > static_cast<int64_t>(heap.size()) ||
        (c.bytes > 0 && c.data == nullptr) || c.placed) {
      problem = fmt::format("fragment of {} bytes at {} where {} was due", c.bytes, c.dst_offset,
                            start + done);
      return;
    }
    // Few, large heap writes: only a message's end (or what the close left) is under half a buffer.
    if (!c.last && c.bytes < static_cast<int64_t>(cap / 2)) ++short_fragments;
    if (c.bytes > 0) std::memcpy(heap.data() + c.dst_offset, c.data, static_cast<size_t>(c.bytes));
    done += c.bytes;
    ++fragments;
    if (c.last) {
      got.push_back({start, done, c.event});
      open = false;
    }
  }

  // The first of `msgs` whose bytes are not the payload written, or -1.
  int first_wrong_payload(const std::vector<Msg>& msgs, size_t count) const {
    for (size_t m = 0; m < count; ++m) {
      for (int64_t i = 0; i < msgs[m].bytes; ++i) {
        if (heap[static_cast<size_t>(msgs[m].dst + i)] != payload_byte(m, i))
          return static_cast<int>(m);
      }
    }
    return -1;
  }

  std::vector<uint8_t> heap;
  size_t cap;
  std::vector<Msg> got;
  bool open = false;
  int64_t start = 0, done = 0;
  long fragments = 0, short_fragments = 0;
  std::string problem;
};

// A socketpair: the test writes into one end (non-blocking), the reader reads the other.
struct Pair {
  Pair() {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    w = sv[0];
    r = sv[1];
    REQUIRE(::fcntl(w, F_SETFL, ::fcntl(w, F_GETFL) | O_NONBLOCK) == 0);
    REQUIRE(::fcntl(r, F_SETFL, ::fcntl(r, F_GETFL) | O_NONBLOCK) == 0);
  }
  ~Pair() {
    if (w >= 0) ::close(w);
    if (r >= 0) ::close(r);
  }
  void close_writer() {
    ::close(w);
    w = -1;
  }
  bool readable() const {
    pollfd p{r, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }
  int w = -1, r = -1;
};

struct Outcome {
  bool ended = false;  // the reader saw the goodbye and the close
  std::string error;   // the TransportError's text, or the test's "no end"
  int peer = -2;       // the TransportError's peer
};

// A reader of `cap` bytes on a socketpair, the sink it delivers to, and the test's turns.
struct Harness {
  Harness(size_t cap, int64_t heap_size, std::chrono::milliseconds timeout = 300ms)
      : reader(cap, heap_size, timeout, kPeer, kWho), sink(heap_size, cap) {}

  // One step of the reader at `now` with room for `room` completions, `readable` as poll() says.
  // What the step delivered before it threw is taken too (the reader advances n as it goes).
  bool step(size_t room, Clock::time_point now = t0) {
    std::vector<Completion> out(std::max<size_t>(room, 1));
    size_t n = 0;
    const auto take = [&] {
      if (n > room) sink.problem = fmt::format("{} completions with room for {}", n, room);
      for (size_t i = 0; i < n && i < room; ++i) sink.take(out[i]);
    };
    try {
      const bool ended = reader.step(pair.r, pair.readable(), out.data(), n, room, now);
      take();
      return ended;
    } catch (const TransportError&) {
      take();
      throw;
    }
  }

  // Writes stream[from, to) in pieces of the sizes `pieces` gives in turn (cycled), one reader
  // step after each piece (and while the socket is full).
  bool write(const std::string& stream, size_t from, size_t to, const std::vector<size_t>& pieces,
             size_t room) {
    size_t at = from, k = 0;
    while (at < to) {
      const size_t end = std::min(to, at + std::max<size_t>(1, pieces[k++ % pieces.size()]));
      while (at < end) {
        const ssize_t put = ::send(pair.w, stream.data() + at, end - at, MSG_NOSIGNAL);
        if (put > 0) {
          at += static_cast<size_t>(put);
        } else {
          REQUIRE((errno == EAGAIN || errno == EWOULDBLOCK));
          if (step(room)) return true;
        }
      }
      if (step(room)) return true;
    }
    return false;
  }

  // Feeds stream[0, to) as write() does, then closes the writer and steps until the reader ends
  // or throws. Every step consumes a byte or delivers a completion, so a reader that still
  // neither ended nor failed after that many steps would hang.
  Outcome feed(const std::string& stream, size_t to, const std::vector<size_t>& pieces,
               size_t room) {
    Outcome o;
    try {
      if (write(stream, 0, to, pieces, room)) {
        o.ended = true;
        return o;
      }
      pair.close_writer();
      for (size_t i = 0; i < to + 16; ++i) {
        if (step(room)) {
          o.ended = true;
          return o;
        }
      }
      o.error = "no end: the reader neither ended nor failed after the close";
    } catch (const TransportError& e) {
      o.error = e.what();
      o.peer = e.peer();
    }
    return o;
  }

  Pair pair;
  StreamReader reader;
  Sink sink;
};

// Splits of a stream: piece sizes, cycled.
struct Split {
  std::string name;
  std::vector<size_t> pieces;
};

// `small`: also pieces of a few bytes (1, 31, 33, 1 to 40, random up to 64), for the smaller
// streams: the reader's rules scale with its buffer, so a small buffer shows them in few bytes.
std::vector<Split> splits(size_t cap, size_t stream_bytes, bool small) {
  std::vector<Split> v;
  std::vector<size_t> fixed = {cap / 2 - 1, cap / 2 + 1, cap - 1, cap + 1};
  if (small) {
    v.push_back({"1 byte at a time", {1}});
    fixed.insert(fixed.end(), {31, 33});
    v.push_back({"1, 2, 3, ... 40 bytes", {}});
    for (size_t k = 1; k <= 40; ++k) v.back().pieces.push_back(k);
  } else {
    // A sender's 64 KB staging buffer: its first carries a header, so payloads are cut 32 bytes
    // off the reader's threshold.
    fixed.push_back((size_t{64} << 10) - 32);
  }
  for (size_t k : fixed) v.push_back({fmt::format("{} bytes at a time", k), {k}});
  for (unsigned seed = 1; seed <= 6; ++seed) {
    if (!small && seed % 2 == 0) continue;
    std::mt19937 rng(seed);
    std::uniform_int_distribution<size_t> size(1, seed % 2 == 0 ? 64 : 2 * cap);
    Split s{fmt::format("random pieces (seed {})", seed), {}};
    for (size_t total = 0; total < stream_bytes; total += s.pieces.back()) {
      s.pieces.push_back(size(rng));
    }
    v.push_back(std::move(s));
  }
  v.push_back({"all at once", {stream_bytes}});
  return v;
}

// Every split, with room for 1, 2 (small streams) and 64 completions per step: the messages come
// exactly.
void check_every_split(size_t cap, const std::vector<int64_t>& sizes, bool small) {
  int64_t heap_size = 0;
  const std::vector<Msg> msgs = layout(sizes, heap_size);
  const std::string stream = encode(msgs, true);
  for (const Split& split : splits(cap, stream.size(), small)) {
    for (size_t room : {size_t{1}, size_t{2}, size_t{64}}) {
      // Room for 2 shows nothing room for 1 does not on the large streams: left out, for time.
      if (!small && room == 2) continue;
      CAPTURE(split.name);
      CAPTURE(room);
      Harness h(cap, heap_size);
      const Outcome o = h.feed(stream, stream.size(), split.pieces, room);
      CHECK(o.error == "");
      CHECK(o.ended);
      CHECK(h.reader.departed());
      CHECK(h.sink.problem == "");
      CHECK(h.sink.got == msgs);
      CHECK(h.sink.first_wrong_payload(msgs, msgs.size()) == -1);
      CHECK(h.sink.short_fragments == 0);
    }
  }
}

TEST_CASE("tcp stream: every split of small messages around a 256-byte buffer") {
  // Sizes about the header, the fragment threshold (128) and the buffer (256); empty messages
  // first, between and last.
  check_every_split(256, {0, 1, 8, 31, 32, 33, 127, 128, 129, 255, 256, 257, 1000, 0, 3, 0}, true);
}

TEST_CASE("tcp stream: every split of messages up to 2 MB around the transport's 1 MB buffer") {
  const int64_t half = 1 << 19;
  check_every_split(size_t{1} << 20,
                    {0, 8, 4096, half - 1, half, half + 1, 1 << 20, (2 << 20) + 5, 8}, false);
}

TEST_CASE("tcp stream: every header cut at every place, with the payloads cut too") {
  const size_t cap = 256;
  int64_t heap_size = 0;
  const std::vector<Msg> msgs = layout({0, 5, 200, 0, 600, 1}, heap_size);
  const std::string stream = encode(msgs, true);
  std::vector<size_t> starts = header_starts(msgs);
  starts.push_back(stream.size() - sizeof(tcp::WireHeader));  // the goodbye's
  for (size_t cut = 1; cut < sizeof(tcp::WireHeader); ++cut) {
    for (size_t room : {size_t{1}, size_t{64}}) {
      CAPTURE(cut);
      CAPTURE(room);
      // Pieces end at each header's byte `cut`, at its end, and in the payload's middle.
      std::vector<size_t> ends;
      for (size_t i = 0; i < starts.size(); ++i) {
        ends.push_back(starts[i] + cut);
        ends.push_back(starts[i] + sizeof(tcp::WireHeader));
        if (i < msgs.size() && msgs[i].bytes > 1) {
          ends.push_back(starts[i] + sizeof(tcp::WireHeader) +
                         static_cast<size_t>(msgs[i].bytes) / 2);
        }
      }
      ends.push_back(stream.size());
      std::vector<size_t> pieces;
      size_t at = 0;
      for (size_t e : ends) {
        pieces.push_back(e - at);
        at = e;
      }
      Harness h(cap, heap_size);
      const Outcome o = h.feed(stream, stream.size(), pieces, room);
      CHECK(o.error == "");
      CHECK(o.ended);
      CHECK(h.sink.problem == "");
      CHECK(h.sink.got == msgs);
      CHECK(h.sink.first_wrong_payload(msgs, msgs.size()) == -1);
    }
  }
}

TEST_CASE("tcp stream: a close at every byte is the end, or an error naming the peer") {
  const size_t cap = 256;
  int64_t heap_size = 0;
  // 300 bytes: a fragment of at least 128 goes out before the rest comes.
  const std::vector<Msg> msgs = layout({0, 40, 300}, heap_size);
  const std::string stream = encode(msgs, true);
  const std::vector<size_t> starts = header_starts(msgs);
  const size_t bye_at = stream.size() - sizeof(tcp::WireHeader);
  for (size_t to = 0; to <= stream.size(); ++to) {
    for (const std::vector<size_t>& pieces :
         {std::vector<size_t>{1}, std::vector<size_t>{to + 1}}) {
      CAPTURE(to);
      CAPTURE(pieces[0]);
      Harness h(cap, heap_size);
      const Outcome o = h.feed(stream, to, pieces, 64);
      CHECK(h.sink.problem == "");
      // The messages the prefix holds whole come, exactly.
      size_t whole = 0;
      while (whole < msgs.size() &&
             starts[whole] + sizeof(tcp::WireHeader) + static_cast<size_t>(msgs[whole].bytes) <=
                 to) {
        ++whole;
      }
      CHECK(h.sink.got == std::vector<Msg>(msgs.begin(), msgs.begin() + static_cast<long>(whole)));
      CHECK(h.sink.first_wrong_payload(msgs, whole) == -1);
      if (to == stream.size()) {
        CHECK(o.error == "");
        CHECK(o.ended);
        continue;
      }
      CHECK_FALSE(o.ended);
      CHECK(o.peer == kPeer);
      CHECK(o.error.rfind(std::string(kWho) + ": closed the connection ", 0) == 0);
      // Where the cut fell: at a header's start, in a header, or in a payload.
      const size_t start = to >= bye_at ? bye_at : starts[whole < msgs.size() ? whole : 0];
      if (to == start) {
        CHECK(contains(o.error, "without a goodbye"));
      } else if (to < start + sizeof(tcp::WireHeader)) {
        CHECK(contains(o.error, fmt::format("in the middle of a message header ({} of 32 bytes "
                                            "received)",
                                            to - start)));
      } else {
        const size_t got = to - start - sizeof(tcp::WireHeader);
        CHECK(contains(o.error, fmt::format("in the middle of a message ({} of {} payload bytes "
                                            "received)",
                                            got, msgs[whole].bytes)));
        // What came of the cut message was handed out before the error.
        CHECK(h.sink.open == (got > 0));
        if (got > 0) CHECK(h.sink.done == static_cast<int64_t>(got));
      }
    }
  }
}

TEST_CASE("tcp stream: a stall in a header or a payload times out on the reader's clock") {
  const size_t cap = 256;
  int64_t heap_size = 0;
  const std::vector<Msg> msgs = layout({1000}, heap_size);
  const std::string stream = encode(msgs, false);
  struct Case {
    size_t to;
    std::string what;
  };
  // In the header; the header whole; a payload under the fragment threshold (the reader keeps it
  // buffered: the case that hung); a fragment out and 72 bytes buffered.
  for (const Case& c : {Case{10, "message header (10 of 32 bytes received)"},
                        Case{32, "message (0 of 1000 payload bytes received)"},
                        Case{132, "message (100 of 1000 payload bytes received)"},
                        Case{232, "message (200 of 1000 payload bytes received)"}}) {
    CAPTURE(c.to);
    Harness h(cap, heap_size, 300ms);
    REQUIRE_FALSE(h.write(stream, 0, c.to, {1}, 64));
    CHECK(h.reader.mid_message());
    CHECK_FALSE(h.step(64, t0 + 300ms));
    try {
      h.step(64, t0 + 301ms);
      FAIL_CHECK("no timeout");
    } catch (const TransportError& e) {
      CHECK(e.peer() == kPeer);
      CHECK(std::string(e.what()) ==
            fmt::format("{}: sent nothing for 0.3 s in the middle of a {}: "
                        "it is stuck or gone",
                        kWho, c.what));
    }
  }
}

TEST_CASE("tcp stream: bytes that come reset the stall clock; a slow consumer is not a stall") {
  const size_t cap = 256;
  int64_t heap_size = 0;
  const std::vector<Msg> msgs = layout({8, 1000}, heap_size);
  const std::string stream = encode(msgs, false);
  const size_t second = header_starts(msgs)[1];
  {
    // A byte every 250 ms, the timeout 300 ms: never a stall.
    Harness h(cap, heap_size, 300ms);
    REQUIRE_FALSE(h.write(stream, 0, second + 40, {second + 40}, 64));
    for (int i = 1; i <= 20; ++i) {
      REQUIRE(::send(h.pair.w, stream.data() + second + 39 + i, 1, MSG_NOSIGNAL) == 1);
      CHECK_FALSE(h.step(64, t0 + i * 250ms));
    }
    CHECK(h.sink.got.size() == 1);
    CHECK_THROWS_WITH_AS(h.step(64, t0 + 20 * 250ms + 301ms),
                         doctest::Contains("(28 of 1000 payload bytes received)"), TransportError);
  }
  {
    // Everything here at t0, but the consumer has no room until t0 + 10 s: the peer is not to
    // blame, and its clock starts when the reader waits for it.
    Harness h(cap, heap_size, 300ms);
    REQUIRE(::send(h.pair.w, stream.data(), second + 40, MSG_NOSIGNAL) ==
            static_cast<ssize_t>(second + 40));
    CHECK_FALSE(h.step(0, t0));
    CHECK_FALSE(h.step(0, t0 + 10s));
    CHECK_FALSE(h.step(64, t0 + 10s));
    CHECK(h.sink.got == std::vector<Msg>{msgs[0]});
    CHECK_FALSE(h.step(64, t0 + 10s + 300ms));
    CHECK_THROWS_AS(h.step(64, t0 + 10s + 301ms), TransportError);
  }
  {
    // Between messages the peer may be silent for as long as it likes.
    Harness h(cap, heap_size, 300ms);
    REQUIRE_FALSE(h.write(stream, 0, second, {1}, 64));
    CHECK_FALSE(h.reader.mid_message());
    CHECK_FALSE(h.step(64, t0 + 1h));
  }
}

TEST_CASE("tcp stream: a bad header, in any split, is an error naming the peer") {
  const size_t cap = 256;
  int64_t heap_size = 0;
  const std::vector<Msg> msgs = layout({8, 100}, heap_size);
  const std::string good = encode({msgs[0]}, false);
  struct Case {
    std::string name;
    tcp::WireHeader header;
    std::string what;
  };
  tcp::WireHeader bad_magic = tcp::message_header({msgs[1].dst, 100, 1}, 1);
  bad_magic.magic = 0x12345678;
  const std::vector<Case> cases = {
      {"bad magic", bad_magic, "sent a bad message header (magic 0x12345678"},
      {"a sequence number skipped", tcp::message_header({msgs[1].dst, 100, 1}, 2),
       "seq 2 where 1 was due"},
      {"event -2", tcp::message_header({msgs[1].dst, 100, -2}, 1), "event -2"},
      {"past the heap's end", tcp::message_header({heap_size - 10, 100, 1}, 1),
       fmt::format("100 bytes at heap offset {} of {}", heap_size - 10, heap_size)},
      {"a negative size", tcp::message_header({0, -1, 1}, 1), "-1 bytes at heap offset 0"},
      {"a goodbye out of sequence", tcp::bye_header(5),
       "sent a bad message header (magic 0x4d4b4e42"},
  };
  for (const Case& c : cases) {
    for (size_t piece : {size_t{1}, size_t{7}, size_t{1000}}) {
      CAPTURE(c.name);
      CAPTURE(piece);
      std::string stream = good;
      append(stream, c.header);
      stream.append(100, 'x');
      Harness h(cap, heap_size);
      const Outcome o = h.feed(stream, stream.size(), {piece}, 64);
      CHECK(h.sink.got == std::vector<Msg>{msgs[0]});
      CHECK(o.peer == kPeer);
      CHECK(o.error.rfind(std::string(kWho) + ": sent a bad message header", 0) == 0);
      CHECK(contains(o.error, c.what));
    }
  }
  // Anything after the goodbye.
  std::string stream = encode({msgs[0]}, true);
  append(stream, tcp::message_header({msgs[1].dst, 100, 1}, 1));
  Harness h(cap, heap_size);
  const Outcome o = h.feed(stream, stream.size(), {1}, 64);
  CHECK(h.reader.departed());
  CHECK(o.peer == kPeer);
  CHECK(o.error == std::string(kWho) + ": sent data after its goodbye");
}

}  // namespace
}  // namespace mkc::rt::net
