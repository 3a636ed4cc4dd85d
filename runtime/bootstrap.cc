#include "runtime/bootstrap.h"

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
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "support/error.h"

namespace mkc::rt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x6d6b6332;  // "mkc2": the introduction carries the job's token
constexpr uint64_t kMaxBlob = 64ull << 20;
constexpr uint32_t kMaxToken = 256;
// How long a connection may take to introduce itself before rank 0 drops it.
constexpr auto kHelloTime = std::chrono::seconds(5);

// A launcher's variables: which names carry which field.
struct Scheme {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

const Scheme kSchemes[] = {
    {"MKC_* variables", "MKC_RANK", "MKC_WORLD_SIZE", "MKC_LOCAL_RANK", "MKC_LOCAL_WORLD_SIZE"},
    {"torchrun/mkrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

int parse_int(const EnvFn& env, const char* name, int lo, int hi) {
  const char* text = env(name);
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    throw UserError(fmt::format("{}={} is not a number in [{}, {}]", name, text, lo, hi));
  }
  return static_cast<int>(v);
}

std::string errno_text() {
  return std::strerror(errno);
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Sends all of `data`; false when the peer is gone.
bool send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

enum class Recv { kOk, kClosed, kTimeout };

Recv recv_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, remaining_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return Recv::kTimeout;
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return Recv::kClosed;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return Recv::kOk;
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A rank's introduction: u32 magic, u32 rank, u32 world size, u32 token length, then the token.
struct Hello {
  uint32_t magic, rank, size, token_length;
};

// Equal strings, in a time that does not depend on where they differ.
bool same_token(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ (i < b.size() ? b[i] : 0);
  return diff == 0;
}

// MASTER_ADDR as an IPv4 address (a name is resolved), for rank 0 to listen on and the others to
// connect to.
sockaddr_in resolve(const World& w) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  const int g = ::getaddrinfo(w.master_addr.c_str(), nullptr, &hints, &res);
  if (g != 0 || res == nullptr) {
    throw EnvironmentError(fmt::format("rendezvous: cannot resolve MASTER_ADDR `{}`: {}",
                                       w.master_addr, gai_strerror(g)));
  }
  sockaddr_in a{};
  std::memcpy(&a, res->ai_addr, sizeof(a));
  ::freeaddrinfo(res);
  // The wildcard would have rank 0 listen on every interface: the job's rendezvous is reachable
  // only at the one address the ranks are told.
  if (a.sin_addr.s_addr == htonl(INADDR_ANY)) {
    throw EnvironmentError(fmt::format(
        "rendezvous: MASTER_ADDR `{}` is the wildcard address 0.0.0.0, which would listen on "
        "every interface; set MASTER_ADDR to rank 0's host (its name or address on the network "
        "the ranks share, 127.0.0.1 on one host)",
        w.master_addr));
  }
  a.sin_port = htons(static_cast<uint16_t>(w.master_port));
  return a;
}

std::string ip_text(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof(buf));
  return buf;
}

}  // namespace

World detect_world(const EnvFn& env) {
  World w;
  for (const Scheme& s : kSchemes) {
    const bool has_rank = env(s.rank) != nullptr, has_size = env(s.size) != nullptr;
    if (!has_rank && !has_size) continue;
    if (has_rank != has_size) {
      throw UserError(fmt::format("{} is set but {} is not: a {} job needs both",
                                  has_rank ? s.rank : s.size, has_rank ? s.size : s.rank,
                                  s.source));
    }
    w.source = s.source;
    w.size = parse_int(env, s.size, 1, 1 << 20);
    w.rank = parse_int(env, s.rank, 0, w.size - 1);
    const bool has_lr = env(s.local_rank) != nullptr;
    const bool has_ls = env(s.local_size) != nullptr;
    // Slurm gives tasks per node as "4" or "4(x2)"; take the leading count.
    if (has_ls && std::string(s.local_size) == "SLURM_NTASKS_PER_NODE") {
      w.local_size = std::atoi(env(s.local_size));
      if (w.local_size < 1) throw UserError("SLURM_NTASKS_PER_NODE is not a positive count");
    } else if (has_ls) {
      w.local_size = parse_int(env, s.local_size, 1, w.size);
    } else {
      w.local_size = w.size;  // one node unless told otherwise
    }
    if (w.size % w.local_size != 0) {
      throw UserError(
          fmt::format("{} = {} is not a multiple of {} = {}: mkc needs the same "
                      "number of ranks on every node",
                      s.size, w.size, has_ls ? s.local_size : s.size, w.local_size));
    }
    w.local_rank =
        has_lr ? parse_int(env, s.local_rank, 0, w.local_size - 1) : w.rank % w.local_size;
    break;
  }
  const char* addr = env("MKC_MASTER_ADDR") ? env("MKC_MASTER_ADDR") : env("MASTER_ADDR");
  const char* port_name = env("MKC_MASTER_PORT") ? "MKC_MASTER_PORT" : "MASTER_PORT";
  if (addr != nullptr) {
    w.master_addr = addr;
  } else if (!w.single_node()) {
    throw UserError(
        fmt::format("a {}-node job ({} variables) needs rank 0's address: set MASTER_ADDR (or "
                    "MKC_MASTER_ADDR) to the host of rank 0, and MASTER_PORT to a free port there",
                    w.size / w.local_size, w.source));
  }
  if (env(port_name) != nullptr) w.master_port = parse_int(env, port_name, 1, 65535);
  if (const char* token = env("MKC_JOB_TOKEN")) w.token = token;
  return w;
}

World detect_world() {
  return detect_world([](const char* name) { return std::getenv(name); });
}

int64_t ranks_per_node(const World& world, int64_t requested, const EnvFn& env) {
  if (requested > 0) return requested;
  if (const char* v = env("MKC_RANKS_PER_NODE"); v != nullptr && *v != 0) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    if (*end != 0 || n <= 0)
      throw UserError(fmt::format("MKC_RANKS_PER_NODE={}: expected a positive count", v));
    return n;
  }
  return world.single_node() ? 0 : world.local_size;
}

int64_t planned_rank(const World& world, const EnvFn& env) {
  const char* v = env("MKC_PLAN");
  const std::string mode = v == nullptr ? "" : v;
  if (mode != "" && mode != "rank" && mode != "world") {
    throw UserError(fmt::format(
        "MKC_PLAN={}: expected `rank` (a process of a launched job plans its own rank and builds "
        "its kernel alone: the default) or `world` (every rank's plan, in every process)",
        mode));
  }
  return world.size > 1 && mode != "world" ? world.rank : -1;
}

int job_size(const World& world, int requested) {
  if (requested < 0)
    throw UserError(fmt::format("{} ranks asked for: give a positive count", requested));
  if (world.size > 1) {
    if (requested != 0 && requested != world.size) {
      throw UserError(fmt::format(
          "{} ranks asked for (--ranks), but this process is rank {} of a job of {} ({}); leave "
          "the rank count out under a launcher",
          requested, world.rank, world.size, world.source));
    }
    return world.size;
  }
  return requested;
}

Placement place_ranks(const World& world, int requested, int gpus, bool share_gpus) {
  Placement p;
  p.ranks = job_size(world, requested);
  if (world.size > 1) return p;  // one rank per process; processes may share GPUs (LocalJob)
  if (p.ranks == 0) p.ranks = gpus;
  if (p.ranks > gpus && !share_gpus) {
    throw UserError(fmt::format(
        "{} ranks asked for, this machine has {} GPU(s): one process runs one rank per GPU; start "
        "one process per rank (tools/mkrun), or let ranks share GPUs (--share-gpus, "
        "KernelOptions::share_gpus: for tests, not speed)",
        p.ranks, gpus));
  }
  p.per_gpu = (p.ranks + gpus - 1) / gpus;
  return p;
}

Rendezvous::Rendezvous(const World& world, std::chrono::milliseconds timeout)
    : world_(world), timeout_(timeout) {
  if (world_.size == 1) return;
  if (world_.token.size() > kMaxToken)
    throw UserError(
        fmt::format("MKC_JOB_TOKEN is {} bytes; at most {}", world_.token.size(), kMaxToken));
  const auto deadline = Clock::now() + timeout_;
  const std::string where = fmt::format("{}:{}", world_.master_addr, world_.master_port);
  const sockaddr_in addr = resolve(world_);
  // A constructor that throws runs no destructor: close what was opened.
  try {
    if (world_.rank == 0) {
      accept_ranks(addr, deadline);
    } else {
      connect_to_rank0(addr, deadline, where);
    }
  } catch (...) {
    close_all();
    throw;
  }
}

// Rank 0: listens on MASTER_ADDR's address and takes the other ranks as they introduce themselves.
// Connections are read side by side (poll), each given kHelloTime, so one that stays silent or
// sends a wrong token delays nobody.
void Rendezvous::accept_ranks(const sockaddr_in& addr, Clock::time_point deadline) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw EnvironmentError("rendezvous: socket() failed: " + errno_text());
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, world_.size) != 0) {
    const int e = errno;
    const std::string text = errno_text();
    ::close(listen_fd_);
    listen_fd_ = -1;
    throw EnvironmentError(
        fmt::format("rendezvous: rank 0 cannot listen on {}:{} (MASTER_ADDR `{}`): {}; {}",
                    ip_text(addr), world_.master_port, world_.master_addr, text,
                    e == EADDRNOTAVAIL ? "MASTER_ADDR must be an address of rank 0's host"
                                       : "pick another MASTER_PORT"));
  }
  struct Pending {
    int fd;
    std::string bytes;  // the introduction so far
    Clock::time_point until;
  };
  std::vector<Pending> pending;
  const auto drop = [&](size_t i) {
    ::close(pending[i].fd);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
  };
  int refused = 0;
  peers_.assign(world_.size, -1);
  int joined = 1;
  try {
    while (joined < world_.size) {
      const auto now = Clock::now();
      for (size_t i = pending.size(); i-- > 0;) {
        if (now >= pending[i].until) {
          drop(i);  // silent too long: not one of ours, or stuck
          ++refused;
        }
      }
      if (now >= deadline) {
        std::string missing;
        for (int k = 1; k < world_.size; ++k) {
          if (peers_[k] < 0) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", k);
        }
        throw EnvironmentError(fmt::format(
            "rendezvous: rank 0 waited {:.1f} s on {}:{} and rank(s) {} of {} never came "
            "(not started, crashed, or pointed at another MASTER_ADDR/MASTER_PORT{}){}",
            timeout_.count() / 1e3, ip_text(addr), world_.master_port, missing, world_.size,
            world_.token.empty() ? "" : ", or given another MKC_JOB_TOKEN",
            refused > 0 ? fmt::format("; {} connection(s) refused (a wrong token, a bad or no "
                                      "introduction)",
                                      refused)
                        : ""));
      }
      std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
      for (const Pending& p : pending) fds.push_back({p.fd, POLLIN, 0});
      auto wake = deadline;
      for (const Pending& p : pending) wake = std::min(wake, p.until);
      const int r = ::poll(fds.data(), fds.size(), std::max(1, remaining_ms(wake)));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) continue;
      // Read what the pending connections sent; back to front, so dropping one keeps the
      // indices of those still to visit.
      for (size_t i = pending.size(); i-- > 0;) {
        if ((fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        Pending& p = pending[i];
        Hello h{};
        size_t want = sizeof(h);
        if (p.bytes.size() >= sizeof(h)) {
          std::memcpy(&h, p.bytes.data(), sizeof(h));
          want += h.token_length;
        }
        char buf[512];
        const ssize_t k =
            ::recv(p.fd, buf, std::min(sizeof(buf), want - p.bytes.size()), MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) {
          drop(i);  // gone before it said who it is
          continue;
        }
        p.bytes.append(buf, static_cast<size_t>(k));
        if (p.bytes.size() < sizeof(h)) continue;
        std::memcpy(&h, p.bytes.data(), sizeof(h));
        if (h.magic != kMagic || h.token_length > kMaxToken) {
          drop(i);  // not one of ours (a port scanner, an older mkc, a stale process)
          ++refused;
          continue;
        }
        if (p.bytes.size() < sizeof(h) + h.token_length) continue;
        if (!same_token(p.bytes.substr(sizeof(h)), world_.token)) {
          drop(i);  // another job's rank, or not a rank at all
          ++refused;
          continue;
        }
        if (static_cast<int>(h.size) != world_.size || h.rank == 0 ||
            static_cast<int>(h.rank) >= world_.size) {
          drop(i);
          throw EnvironmentError(fmt::format(
              "rendezvous: a process said it is rank {} of {}, but this job is {} ranks: two "
              "jobs on one MASTER_PORT, or inconsistent launcher variables",
              h.rank, h.size, world_.size));
        }
        // The acknowledgement: a rank that reached a listener about to close (the previous
        // job's, in this process) gets none and connects again.
        const char ack = 'k';
        const int fd = p.fd;
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        if (!send_all(fd, &ack, 1)) {
          ::close(fd);
          continue;
        }
        set_nodelay(fd);
        // A rank that connects again gave up waiting for the acknowledgement of its first
        // connection: the newer one is the live one.
        if (peers_[h.rank] >= 0) {
          ::close(peers_[h.rank]);
        } else {
          ++joined;
        }
        peers_[h.rank] = fd;
      }
      if (fds[0].revents & POLLIN) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) pending.push_back({fd, std::string(), Clock::now() + kHelloTime});
      }
    }
  } catch (...) {
    for (const Pending& p : pending) ::close(p.fd);
    throw;
  }
  for (const Pending& p : pending) ::close(p.fd);
}

// Every other rank: connects to rank 0, introduces itself with the token and waits for the
// acknowledgement; until then any failure (rank 0 not listening yet, or a listener of a job that
// is ending) means: try again.
void Rendezvous::connect_to_rank0(const sockaddr_in& addr, Clock::time_point deadline,
                                  const std::string& where) {
  const Hello h{kMagic, static_cast<uint32_t>(world_.rank), static_cast<uint32_t>(world_.size),
                static_cast<uint32_t>(world_.token.size())};
  const std::string hello =
      std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + world_.token;
  int fd = -1;
  while (true) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
      set_nodelay(fd);
      char ack = 0;
      const auto ack_by = std::min(deadline, Clock::now() + std::chrono::seconds(2));
      if (send_all(fd, hello.data(), hello.size()) && recv_all(fd, &ack, 1, ack_by) == Recv::kOk &&
          ack == 'k')
        break;
    }
    if (fd >= 0) ::close(fd);
    fd = -1;
    if (remaining_ms(deadline) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (fd < 0) {
    throw EnvironmentError(fmt::format(
        "rendezvous: rank {} could not reach rank 0 at {} within {:.1f} s (is rank 0 running, "
        "and MASTER_ADDR/MASTER_PORT{} the same for every rank?)",
        world_.rank, where, timeout_.count() / 1e3,
        world_.token.empty() ? "" : " and MKC_JOB_TOKEN"));
  }
  peers_ = {fd};
}

Rendezvous::~Rendezvous() {
  close_all();
}

void Rendezvous::close_all() {
  for (int fd : peers_) {
    if (fd >= 0) ::close(fd);
  }
  peers_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

Rendezvous::Rendezvous(const World& world, BlockGatherFn gather)
    : world_(world), timeout_(0), gather_(std::move(gather)) {
  if (!gather_) throw UserError("Rendezvous: the caller's all-gather is empty");
  if (world_.size < 1 || world_.rank < 0 || world_.rank >= world_.size) {
    throw UserError(
        fmt::format("Rendezvous: rank {} is not in a world of {}", world_.rank, world_.size));
  }
}

// Through the caller's gather: every rank's size (8 bytes each), then every blob in a block of
// the largest size. Each step checks that this rank's own block came back where it belongs.
std::vector<std::string> Rendezvous::gather_blobs(const std::string& mine) {
  const size_t n = static_cast<size_t>(world_.size);
  const auto check_own = [&](const char* all, const void* own, size_t bytes, const char* what) {
    if (std::memcmp(all + static_cast<size_t>(world_.rank) * bytes, own, bytes) != 0) {
      throw EnvironmentError(fmt::format(
          "rendezvous: the caller's all-gather did not return rank {}'s own {} at its place "
          "(block {} of {}): it must gather every rank's block in rank order",
          world_.rank, what, world_.rank, n));
    }
  };
  const uint64_t my_size = mine.size();
  std::vector<uint64_t> sizes(n);
  gather_(&my_size, sizeof(my_size), sizes.data());
  check_own(reinterpret_cast<const char*>(sizes.data()), &my_size, sizeof(my_size), "size");
  uint64_t largest = 0;
  for (size_t r = 0; r < n; ++r) {
    if (sizes[r] > kMaxBlob) {
      throw EnvironmentError(fmt::format(
          "rendezvous: the caller's all-gather gave rank {} a blob of {} bytes (at most {})", r,
          sizes[r], kMaxBlob));
    }
    largest = std::max(largest, sizes[r]);
  }
  std::string block(largest, '\0'), all(n * largest, '\0');
  std::copy(mine.begin(), mine.end(), block.begin());
  if (largest > 0) {
    gather_(block.data(), largest, all.data());
    check_own(all.data(), block.data(), largest, "blob");
  }
  std::vector<std::string> out(n);
  for (size_t r = 0; r < n; ++r) out[r] = all.substr(r * largest, sizes[r]);
  return out;
}

std::vector<std::string> Rendezvous::all_gather(const std::string& mine) {
  if (world_.size == 1) return {mine};
  if (mine.size() > kMaxBlob) throw InternalError("rendezvous blob over 64 MiB");
  if (gather_) return gather_blobs(mine);
  const auto deadline = Clock::now() + timeout_;
  std::vector<std::string> all(world_.size);
  const auto lost = [&](int rank, Recv why) {
    return EnvironmentError(
        why == Recv::kTimeout
            ? fmt::format("rendezvous: rank {} waited {:.1f} s for rank {} in all_gather (it is "
                          "stuck, or out of step: every rank must make the same calls)",
                          world_.rank, timeout_.count() / 1e3, rank)
            : fmt::format("rendezvous: rank {} lost rank {} during all_gather (it exited or "
                          "crashed)",
                          world_.rank, rank));
  };
  if (world_.rank == 0) {
    all[0] = mine;
    for (int r = 1; r < world_.size; ++r) {
      uint64_t n = 0;
      Recv st = recv_all(peers_[r], &n, sizeof(n), deadline);
      if (st == Recv::kOk && n > kMaxBlob) st = Recv::kClosed;
      if (st == Recv::kOk) {
        all[r].resize(n);
        st = recv_all(peers_[r], all[r].data(), n, deadline);
      }
      if (st != Recv::kOk) throw lost(r, st);
    }
    std::string packed;
    for (const std::string& b : all) {
      const uint64_t n = b.size();
      packed.append(reinterpret_cast<const char*>(&n), sizeof(n));
      packed += b;
    }
    for (int r = 1; r < world_.size; ++r) {
      if (!send_all(peers_[r], packed.data(), packed.size())) throw lost(r, Recv::kClosed);
    }
  } else {
    const uint64_t n = mine.size();
    if (!send_all(peers_[0], &n, sizeof(n)) || !send_all(peers_[0], mine.data(), mine.size()))
      throw lost(0, Recv::kClosed);
    for (int r = 0; r < world_.size; ++r) {
      uint64_t len = 0;
      Recv st = recv_all(peers_[0], &len, sizeof(len), deadline);
      if (st == Recv::kOk && len > kMaxBlob) st = Recv::kClosed;
      if (st == Recv::kOk) {
        all[r].resize(len);
        st = recv_all(peers_[0], all[r].data(), len, deadline);
      }
      if (st != Recv::kOk) throw lost(0, st);
    }
  }
  return all;
}

}  // namespace mkc::rt
