#include "runtime/net/tcp.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "runtime/net/conn_details.h"
#include "runtime/net/peers.h"
#include "runtime/net/tcp_stream.h"

namespace mkc::rt::net {
namespace {

using Clock = std::chrono::steady_clock;
using tcp::StreamReader;
using tcp::WireHeader;  // the message framing: runtime/net/tcp_stream.h

// A tcp transport's all_gather blob: "MKNT", version 1 (bumped when the wire format changes).
constexpr DetailsFormat kDetails{"tcp", 0x4d4b4e54, 1};
constexpr uint32_t kHelloMagic = 0x4d4b4e48;  // "MKNH": a dialling rank introduces itself
constexpr uint32_t kAckMagic = 0x4d4b4e41;    // "MKNA": the accepting rank took it

// How long an accepted connection may take to introduce itself before it is dropped.
constexpr auto kHelloTime = std::chrono::seconds(5);
// close(): how long it may spend flushing what is queued and saying goodbye, for all peers.
constexpr auto kCloseTime = std::chrono::milliseconds(200);
// At most this many staging buffers go out per connection and poll, so receiving keeps its turn.
constexpr int kRoundsPerPoll = 4;

// A rank's blob: who it is, where it listens, and whom it expects. Both ends are the same build
// and byte order (checked: the magic reads backwards otherwise).
struct BlobHead {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t world;
  uint32_t ipv4;  // network byte order
  uint16_t port;  // network byte order
  uint16_t pad;
  uint64_t nonce;  // a dialler shows it back: it learnt it from this job's all_gather
  uint32_t npeers;
  uint32_t pad2;
  // then npeers int32 ranks
};
static_assert(sizeof(BlobHead) == 40, "the blob head has no hidden padding");

struct Hello {
  uint32_t magic;
  int32_t rank;
  uint64_t nonce;
};
struct Ack {
  uint32_t magic;
  int32_t rank;
};

sockaddr_in ipv4_address(const std::string& text, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, text.c_str(), &a.sin_addr) != 1) {
    throw UserError(
        fmt::format("tcp: `{}` is not an IPv4 address (MKC_NET_ADDR, or the "
                    "transport's address option)",
                    text));
  }
  return a;
}

std::string address_text(uint32_t ipv4, uint16_t port) {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr a{};
  a.s_addr = ipv4;
  ::inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return fmt::format("{}:{}", buf, ntohs(port));
}

int seconds_left_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

void set_nodelay(int fd) {
  int one = 1;
  // Small messages (signals) must leave at once, not wait for Nagle's coalescing.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TcpOptions& options) : options_(options) {
    if (options_.chunk_bytes < 4096) options_.chunk_bytes = 4096;
    if (options_.queue < 1) options_.queue = 1;
  }
  ~TcpTransport() override {
    drop_all();
    for (Peer& p : peers_) {
      if (heap_ == nullptr) break;
      if (p.out) heap_->stage_end(p.out.get());
      if (p.in) heap_->stage_end(p.in->buffer());
    }
  }

  const char* name() const override { return "tcp"; }
  void connect(const ConnectParams& params, MemoryAccess& heap) override;
  bool send(int peer, const MessageHeader& header, int64_t src_offset, uint64_t cookie) override;
  size_t poll(Completion* out, size_t max) override;
  std::string peer_address(int peer) const override;
  void close() override;

 private:
  struct Peer {
    int rank = -1;
    std::string address;
    int fd = -1;
    bool gone = false;  // connection closed after the goodbye

    // Sending: queued messages (a ring), the one being copied out, the staging buffer.
    SendQueue queue;
    bool has_current = false;
    bool header_written = false;
    QueuedMessage current{};
    int64_t copied = 0;
    std::unique_ptr<char[]> out;
    size_t out_len = 0, out_pos = 0;
    Clock::time_point out_since{};
    uint64_t sent_seq = 0;

    // Receiving: the framing of the incoming stream (runtime/net/tcp_stream.h).
    std::unique_ptr<StreamReader> in;
  };

  [[noreturn]] void fail(const Peer& p, const std::string& what) const {
    throw TransportError(
        p.rank, fmt::format("tcp: rank {}: rank {} at {}: {}", rank_, p.rank, p.address, what));
  }
  void establish(Clock::time_point deadline, const std::vector<uint64_t>& nonces);
  void fill(Peer& p, Completion* out, size_t& n, size_t max);
  void transmit(Peer& p, Completion* out, size_t& n, size_t max, Clock::time_point now);
  void drop_all();

  TcpOptions options_;
  int rank_ = 0;
  int world_ = 1;
  std::chrono::milliseconds timeout_{30000};
  MemoryAccess* heap_ = nullptr;
  bool connected_ = false;
  bool closed_ = false;
  int listen_fd_ = -1;
  uint64_t nonce_ = 0;
  PeerTable<Peer> peers_;        // in rank order
  std::vector<pollfd> fds_;      // one per peer, same order
  std::vector<ReadSpan> reads_;  // fill()'s batch of payload copies
};

void TcpTransport::connect(const ConnectParams& params, MemoryAccess& heap) {
  check_connect(params, connected_, "tcp");
  rank_ = params.rank;
  world_ = params.world;
  timeout_ = params.timeout;
  heap_ = &heap;
  const auto deadline = Clock::now() + params.timeout;
  const std::string address = options_.address.empty() ? "127.0.0.1" : options_.address;
  sockaddr_in me = ipv4_address(address, 0);

  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) {
    throw TransportError(
        -1, fmt::format("tcp: rank {}: socket() failed: {}", rank_, errno_text(errno)));
  }
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&me), sizeof(me)) != 0 ||
      ::listen(listen_fd_, std::max(16, world_)) != 0) {
    const int e = errno;
    throw TransportError(
        -1, fmt::format("tcp: rank {} cannot listen on {}: {}{}", rank_, address, errno_text(e),
                        e == EADDRNOTAVAIL ? " (not an address of this host)" : ""));
  }
  socklen_t len = sizeof(me);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&me), &len);
  nonce_ = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();

  std::vector<int> mine = params.peers;
  std::sort(mine.begin(), mine.end());
  BlobHead head{};
  head.ipv4 = me.sin_addr.s_addr;
  head.port = me.sin_port;
  head.nonce = nonce_;
  const auto details = exchange_details(params, head, mine, kDetails);

  peers_.assign(world_, mine);
  std::vector<uint64_t> nonces;
  for (Peer& p : peers_) {
    const BlobHead& h = details[static_cast<size_t>(p.rank)].head;
    p.address = address_text(h.ipv4, h.port);
    nonces.push_back(h.nonce);
  }
  establish(deadline, nonces);
  ::close(listen_fd_);
  listen_fd_ = -1;

  for (Peer& p : peers_) {
    p.queue.set_capacity(options_.queue);
    p.out.reset(new char[options_.chunk_bytes]);
    p.in = std::make_unique<StreamReader>(
        options_.chunk_bytes, heap.size(), timeout_, p.rank,
        fmt::format("tcp: rank {}: rank {} at {}", rank_, p.rank, p.address));
    heap.stage_begin(p.out.get(), options_.chunk_bytes);
    heap.stage_begin(p.in->buffer(), p.in->capacity());
    fds_.push_back({p.fd, POLLIN, 0});
  }
  connected_ = true;
}

// Dials the lower-ranked peers and accepts the higher-ranked ones, side by side (one poll loop),
// until every connection is introduced and acknowledged or the deadline passes.
void TcpTransport::establish(Clock::time_point deadline, const std::vector<uint64_t>& nonces) {
  enum class State { kIdle, kConnecting, kAwaitAck, kDone };
  struct Dial {
    size_t peer;
    int fd = -1;
    State state = State::kIdle;
    Ack ack{};
    size_t got = 0;
    Clock::time_point retry_at{};
    std::string last_error = "no answer";
  };
  struct Incoming {
    int fd;
    Hello hello{};
    size_t got = 0;
    Clock::time_point until;
  };
  std::vector<Dial> dials;
  size_t expected_in = 0;
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i].rank < rank_) {
      dials.push_back(Dial{i});
    } else {
      ++expected_in;
    }
  }
  std::vector<Incoming> incoming;
  size_t accepted = 0;
  const auto close_all = [&] {
    for (Dial& d : dials) {
      if (d.fd >= 0 && d.state != State::kDone) ::close(d.fd);
    }
    for (Incoming& in : incoming) ::close(in.fd);
  };
  try {
    while (true) {
      const bool dials_done = std::all_of(dials.begin(), dials.end(),
                                          [](const Dial& d) { return d.state == State::kDone; });
      if (dials_done && accepted == expected_in) break;
      auto now = Clock::now();
      if (now >= deadline) {
        std::string missing;
        for (const Dial& d : dials) {
          if (d.state == State::kDone) continue;
          const Peer& p = peers_[d.peer];
          missing += fmt::format("{}rank {} at {} ({})", missing.empty() ? "" : "; ", p.rank,
                                 p.address, d.last_error);
        }
        for (const Peer& p : peers_) {
          if (p.rank > rank_ && p.fd < 0) {
            missing += fmt::format("{}rank {} at {} (never connected here)",
                                   missing.empty() ? "" : "; ", p.rank, p.address);
          }
        }
        throw TransportError(
            -1, fmt::format("tcp: rank {} could not connect to its peers within {:.1f} "
                            "s: {} (not started, failed, or unreachable at that address)",
                            rank_, timeout_.count() / 1e3, missing));
      }
      for (Dial& d : dials) {
        if (d.state != State::kIdle || now < d.retry_at) continue;
        const Peer& p = peers_[d.peer];
        d.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (d.fd < 0) {
          throw TransportError(
              p.rank, fmt::format("tcp: rank {}: socket() failed: {}", rank_, errno_text(errno)));
        }
        const auto colon = p.address.rfind(':');
        const sockaddr_in to =
            ipv4_address(p.address.substr(0, colon),
                         static_cast<uint16_t>(std::stoi(p.address.substr(colon + 1))));
        if (::connect(d.fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) == 0 ||
            errno == EINPROGRESS) {
          d.state = State::kConnecting;
        } else {
          d.last_error = "connect: " + errno_text(errno);
          ::close(d.fd);
          d.fd = -1;
          d.retry_at = now + std::chrono::milliseconds(20);
        }
      }
      std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
      for (const Incoming& in : incoming) fds.push_back({in.fd, POLLIN, 0});
      const size_t dial_base = fds.size();
      for (const Dial& d : dials) {
        const short ev = d.state == State::kConnecting ? POLLOUT
                         : d.state == State::kAwaitAck ? POLLIN
                                                       : 0;
        fds.push_back({ev != 0 ? d.fd : -1, ev, 0});
      }
      const int r = ::poll(fds.data(), fds.size(), std::min(20, seconds_left_ms(deadline)));
      if (r < 0 && errno != EINTR) {
        throw TransportError(
            -1, fmt::format("tcp: rank {}: poll() failed: {}", rank_, errno_text(errno)));
      }
      now = Clock::now();
      for (size_t k = 0; k < dials.size(); ++k) {
        Dial& d = dials[k];
        const short rev = fds[dial_base + k].revents;
        if (rev == 0) continue;
        const Peer& p = peers_[d.peer];
        const auto retry = [&](const std::string& why) {
          d.last_error = why;
          ::close(d.fd);
          d.fd = -1;
          d.got = 0;
          d.state = State::kIdle;
          d.retry_at = now + std::chrono::milliseconds(20);
        };
        if (d.state == State::kConnecting) {
          int err = 0;
          socklen_t elen = sizeof(err);
          ::getsockopt(d.fd, SOL_SOCKET, SO_ERROR, &err, &elen);
          if (err != 0) {
            retry("connect: " + errno_text(err));
            continue;
          }
          const Hello hello{kHelloMagic, rank_, nonces[d.peer]};
          // A fresh connection's send buffer takes 16 bytes whole.
          if (::send(d.fd, &hello, sizeof(hello), MSG_NOSIGNAL) != sizeof(hello)) {
            retry("sending the introduction: " + errno_text(errno));
            continue;
          }
          d.state = State::kAwaitAck;
        } else if (d.state == State::kAwaitAck) {
          const ssize_t got = ::recv(d.fd, reinterpret_cast<char*>(&d.ack) + d.got,
                                     sizeof(d.ack) - d.got, MSG_DONTWAIT);
          if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
          if (got <= 0) {
            retry(got == 0 ? "it closed the connection during the introduction"
                           : "reading the acknowledgement: " + errno_text(errno));
            continue;
          }
          d.got += static_cast<size_t>(got);
          if (d.got < sizeof(d.ack)) continue;
          if (d.ack.magic != kAckMagic || d.ack.rank != p.rank) {
            throw TransportError(p.rank,
                                 fmt::format("tcp: rank {}: what answers at {} for rank {} is not "
                                             "rank {}'s proxy (another job on that port?)",
                                             rank_, p.address, p.rank, p.rank));
          }
          set_nodelay(d.fd);
          peers_[d.peer].fd = d.fd;
          d.state = State::kDone;
        }
      }
      for (size_t i = incoming.size(); i-- > 0;) {
        Incoming& in = incoming[i];
        const auto drop = [&] {
          ::close(in.fd);
          incoming.erase(incoming.begin() + static_cast<std::ptrdiff_t>(i));
        };
        if (fds[1 + i].revents == 0) {
          if (now >= in.until) drop();
          continue;
        }
        const ssize_t got = ::recv(in.fd, reinterpret_cast<char*>(&in.hello) + in.got,
                                   sizeof(in.hello) - in.got, MSG_DONTWAIT);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (got <= 0) {
          drop();
          continue;
        }
        in.got += static_cast<size_t>(got);
        if (in.got < sizeof(in.hello)) continue;
        Peer* p = peers_.find(in.hello.rank);
        // Not one of ours: a stray connection, another job, or a rank that should dial no one
        // here. Dropped, and the job goes on waiting for the real one.
        if (in.hello.magic != kHelloMagic || in.hello.nonce != nonce_ || p == nullptr ||
            p->rank < rank_) {
          drop();
          continue;
        }
        const Ack ack{kAckMagic, rank_};
        if (::send(in.fd, &ack, sizeof(ack), MSG_NOSIGNAL) != sizeof(ack)) {
          drop();
          continue;
        }
        set_nodelay(in.fd);
        // A rank that dials again gave up on its first connection: the newer is the live one.
        if (p->fd >= 0) {
          ::close(p->fd);
        } else {
          ++accepted;
        }
        p->fd = in.fd;
        incoming.erase(incoming.begin() + static_cast<std::ptrdiff_t>(i));
      }
      if (fds[0].revents & POLLIN) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
          incoming.push_back(
              Incoming{fd, {}, 0, now + std::min<Clock::duration>(kHelloTime, timeout_)});
        }
      }
    }
  } catch (...) {
    close_all();
    throw;
  }
  close_all();
}

bool TcpTransport::send(int peer, const MessageHeader& header, int64_t src_offset,
                        uint64_t cookie) {
  Peer* p = peers_.find(peer);
  if (!connected_ || closed_ || p == nullptr) {
    throw TransportError(peer, fmt::format("tcp: rank {} has no connection to rank {}{}", rank_,
                                           peer, connected_ ? " (not one of its peers)" : ""));
  }
  if (p->in->departed())
    fail(*p, "has stopped its proxy (said goodbye), yet this rank sends it a message");
  return p->queue.push(QueuedMessage{header, src_offset, cookie});
}

// Fills the (drained) staging buffer: headers and payloads of the queued messages, copied from
// the heap in one batch (one wait on the GPU, not one per message); a message whose payload is
// all copied is reported sent (the report is read after the batch is done: fill returns first).
void TcpTransport::fill(Peer& p, Completion* out, size_t& n, size_t max) {
  const size_t cap = options_.chunk_bytes;
  reads_.clear();
  while (n < max) {
    if (!p.has_current) {
      if (!p.queue.pop(p.current)) break;
      p.has_current = true;
      p.header_written = false;
      p.copied = 0;
    }
    if (!p.header_written) {
      if (cap - p.out_len < sizeof(WireHeader)) break;
      const MessageHeader& h = p.current.header;
      const WireHeader w = tcp::message_header(h, p.sent_seq++);
      std::memcpy(p.out.get() + p.out_len, &w, sizeof(w));
      p.out_len += sizeof(w);
      p.header_written = true;
    }
    const int64_t left = p.current.header.bytes - p.copied;
    const int64_t room = static_cast<int64_t>(cap - p.out_len);
    const int64_t take = std::min(left, room);
    if (take > 0) {
      reads_.push_back({p.current.src_offset + p.copied, p.out.get() + p.out_len, take});
      p.copied += take;
      p.out_len += static_cast<size_t>(take);
    }
    if (p.copied < p.current.header.bytes) break;
    Completion& c = out[n++];
    c = Completion{};
    c.kind = Completion::kSent;
    c.peer = p.rank;
    c.cookie = p.current.cookie;
    p.has_current = false;
  }
  if (!reads_.empty()) heap_->read_all(reads_.data(), reads_.size());
}

void TcpTransport::transmit(Peer& p, Completion* out, size_t& n, size_t max,
                            Clock::time_point now) {
  for (int round = 0; round < kRoundsPerPoll; ++round) {
    if (p.out_pos == p.out_len) {
      p.out_pos = p.out_len = 0;
      fill(p, out, n, max);
      if (p.out_len == 0) return;
      p.out_since = now;
    }
    const ssize_t k =
        ::send(p.fd, p.out.get() + p.out_pos, p.out_len - p.out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p.out_pos += static_cast<size_t>(k);
      p.out_since = now;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    fail(p, fmt::format("sending failed: {} (its process exited or crashed?)", errno_text(errno)));
  }
  if (p.out_pos < p.out_len && now - p.out_since > timeout_) {
    fail(p, fmt::format("took none of {} bytes for {:.1f} s (its proxy is stuck or gone)",
                        p.out_len - p.out_pos, timeout_.count() / 1e3));
  }
}

size_t TcpTransport::poll(Completion* out, size_t max) {
  if (!connected_ || closed_ || max == 0) return 0;
  for (size_t i = 0; i < peers_.size(); ++i) {
    const Peer& p = peers_[i];
    fds_[i].fd = p.gone ? -1 : p.fd;
    fds_[i].events = static_cast<short>(POLLIN | (p.out_pos < p.out_len ? POLLOUT : 0));
    fds_[i].revents = 0;
  }
  if (::poll(fds_.data(), fds_.size(), 0) < 0 && errno != EINTR) {
    throw TransportError(-1,
                         fmt::format("tcp: rank {}: poll() failed: {}", rank_, errno_text(errno)));
  }
  const auto now = Clock::now();
  size_t n = 0;
  for (size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    if (p.gone) continue;
    const bool readable = (fds_[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
    if (p.in->step(p.fd, readable, out, n, max, now)) {
      ::close(p.fd);
      p.fd = -1;
      p.gone = true;
      continue;
    }
    transmit(p, out, n, max, now);
  }
  return n;
}

std::string TcpTransport::peer_address(int peer) const {
  return peers_.address(peer);
}

void TcpTransport::close() {
  if (closed_) return;
  closed_ = true;
  const auto deadline = Clock::now() + kCloseTime;
  for (Peer& p : peers_) {
    if (p.fd < 0) continue;
    // What a peer already sent is of no use now; read it away so that closing sends an orderly
    // end of stream, not a reset that could overtake the goodbye.
    char sink[4096];
    while (Clock::now() < deadline && ::recv(p.fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
    }
    // The goodbye goes after what is staged, and only at a message boundary: after a message cut
    // short the peer would read it as payload (and then sees the close mid-message: a failure,
    // as it should be).
    if (!p.has_current) {
      if (p.out_pos > 0) {
        std::memmove(p.out.get(), p.out.get() + p.out_pos, p.out_len - p.out_pos);
        p.out_len -= p.out_pos;
        p.out_pos = 0;
      }
      if (options_.chunk_bytes - p.out_len >= sizeof(WireHeader)) {
        const WireHeader bye = tcp::bye_header(p.sent_seq);
        std::memcpy(p.out.get() + p.out_len, &bye, sizeof(bye));
        p.out_len += sizeof(bye);
      }
    }
    while (p.out_pos < p.out_len) {
      const ssize_t k =
          ::send(p.fd, p.out.get() + p.out_pos, p.out_len - p.out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        p.out_pos += static_cast<size_t>(k);
        continue;
      }
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
        pollfd pfd{p.fd, POLLOUT, 0};
        if (::poll(&pfd, 1, std::max(1, seconds_left_ms(deadline))) <= 0 ||
            Clock::now() >= deadline)
          break;
        continue;
      }
      break;
    }
    ::shutdown(p.fd, SHUT_WR);
    ::close(p.fd);
    p.fd = -1;
    p.gone = true;
  }
}

void TcpTransport::drop_all() {
  for (Peer& p : peers_) {
    if (p.fd >= 0) ::close(p.fd);
    p.fd = -1;
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

}  // namespace

std::unique_ptr<Transport> make_tcp_transport(const TcpOptions& options) {
  return std::make_unique<TcpTransport>(options);
}

std::string local_address_toward(const std::string& host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  const int g = ::getaddrinfo(host.c_str(), "9", &hints, &res);
  if (g != 0 || res == nullptr) {
    throw EnvironmentError(fmt::format("tcp: cannot resolve `{}`: {}", host, gai_strerror(g)));
  }
  sockaddr_in to{};
  std::memcpy(&to, res->ai_addr, sizeof(to));
  ::freeaddrinfo(res);
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw EnvironmentError("tcp: socket() failed: " + errno_text(errno));
  // Connecting a datagram socket sends nothing: it only asks the kernel for the route.
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0) {
    const int e = errno;
    ::close(fd);
    throw EnvironmentError(
        fmt::format("tcp: no route from this host to {}: {}", host, errno_text(e)));
  }
  sockaddr_in me{};
  socklen_t len = sizeof(me);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len);
  ::close(fd);
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &me.sin_addr, buf, sizeof(buf));
  return buf;
}

}  // namespace mkc::rt::net
