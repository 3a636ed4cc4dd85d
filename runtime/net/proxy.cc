#include "runtime/net/proxy.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstring>

namespace mkc::rt::net {
namespace {

using Clock = std::chrono::steady_clock;
using abi::kProxySlots;
constexpr uint64_t kSlots = static_cast<uint64_t>(kProxySlots);

// Completions taken per transport poll, and ring entries taken per turn of the loop: small enough
// that receiving and sending take turns, large enough that a burst costs few polls.
constexpr size_t kCompletionBatch = 64;
constexpr int kTakeBatch = 64;

// The proxy's own all_gather blob: what a sender checks its requests against.
struct SizesBlob {
  uint32_t magic;  // "MKPX"
  int32_t num_events;
  int64_t heap_bytes;
};
constexpr uint32_t kSizesMagic = 0x4d4b5058;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// The ring and the counters are abi::u64 (unsigned long long), shared with the device.
using Word = abi::u64;

inline Word load_acquire(const Word& word) {
  return std::atomic_ref<Word>(const_cast<Word&>(word)).load(std::memory_order_acquire);
}

inline void store_release(Word& word, Word value) {
  std::atomic_ref<Word>(word).store(value, std::memory_order_release);
}

// A single writer's counter: a relaxed load and store, no locked instruction.
inline void bump(std::atomic<uint64_t>& counter, uint64_t by) {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

}  // namespace

Proxy::Proxy(ProxySetup setup, std::unique_ptr<Transport> transport)
    : setup_(std::move(setup)), transport_(std::move(transport)) {
  const ProxySetup& s = setup_;
  if (transport_ == nullptr || s.ring == nullptr || s.heap == nullptr ||
      (s.events == nullptr && s.num_events > 0) || s.num_events < 0) {
    throw UserError(
        fmt::format("proxy of rank {}: needs a transport, a ring, a heap and its {} counters",
                    s.rank, s.num_events));
  }
  const auto check_word = [&](int64_t offset, int64_t bytes, const char* what) {
    if (offset == -1) return;
    if (offset < 0 || offset % 8 != 0 || !in_range(offset, bytes, s.heap->size())) {
      throw UserError(fmt::format(
          "proxy of rank {}: {} at heap offset {} ({} bytes) must be 8-byte aligned inside the "
          "heap of {} bytes",
          s.rank, what, offset, bytes, s.heap->size()));
    }
  };
  check_word(s.heap_events_offset, int64_t{8} * s.num_events, "the published counters");
  check_word(s.heap_tail_offset, 8, "the published tail");
  transport_name_ = transport_->name();
  ConnectParams params;
  params.rank = s.rank;
  params.world = s.world;
  params.peers = s.peers;
  params.all_gather = s.all_gather;
  params.timeout = s.options.timeout;
  check_peer_list(params);

  const SizesBlob mine{kSizesMagic, s.num_events, s.heap->size()};
  const std::vector<std::string> all =
      s.all_gather(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)));
  if (static_cast<int>(all.size()) != s.world) {
    throw InternalError(
        fmt::format("proxy: all_gather gave {} blobs for a world of {}", all.size(), s.world));
  }
  heap_bytes_.resize(static_cast<size_t>(s.world));
  event_count_.resize(static_cast<size_t>(s.world));
  for (int r = 0; r < s.world; ++r) {
    SizesBlob b{};
    const std::string& text = all[static_cast<size_t>(r)];
    if (text.size() == sizeof(b)) std::memcpy(&b, text.data(), sizeof(b));
    if (b.magic != kSizesMagic || b.num_events < 0 || b.heap_bytes < 0) {
      throw EnvironmentError(fmt::format(
          "proxy of rank {}: rank {}'s proxy sent no sizes it can read ({} bytes): every rank "
          "must run the same mkc",
          s.rank, r, text.size()));
    }
    heap_bytes_[static_cast<size_t>(r)] = b.heap_bytes;
    event_count_[static_cast<size_t>(r)] = b.num_events;
  }
  is_peer_.assign(static_cast<size_t>(s.world), 0);
  for (int q : s.peers) is_peer_[static_cast<size_t>(q)] = 1;

  transport_->connect(params, *s.heap);

  taken_.resize(kSlots);
  completions_.resize(kCompletionBatch);
  bounce_.reset(new char[std::max<size_t>(s.options.local_chunk_bytes, 4096)]);
  next_ = tail_ = load_acquire(s.ring->tail);
  // The published words start as the host's copies.
  if (s.heap_tail_offset >= 0) s.heap->publish(s.heap_tail_offset, tail_);
  if (s.heap_events_offset >= 0) {
    for (int e = 0; e < s.num_events; ++e)
      s.heap->publish(s.heap_events_offset + int64_t{8} * e, load_acquire(s.events[e]));
  }
}

Proxy::~Proxy() {
  stop();
}

void Proxy::start() {
  ProxyState expected = ProxyState::kConnected;
  if (!state_.compare_exchange_strong(expected, ProxyState::kRunning)) {
    throw InternalError("proxy: start() on a proxy that already ran");
  }
  thread_ = std::thread([this] { run(); });
}

void Proxy::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
  // Never started: close here, with the goodbye, as the thread would have.
  if (transport_ != nullptr) {
    try {
      transport_->close();
    } catch (...) {
      // Closing is best effort: the job is ending either way.
    }
    transport_.reset();
  }
  ProxyState s = state_.load();
  if (s == ProxyState::kConnected || s == ProxyState::kRunning) state_.store(ProxyState::kStopped);
}

ProxyStatus Proxy::status() const {
  ProxyStatus st;
  st.state = state_.load(std::memory_order_acquire);
  {
    std::lock_guard lock(error_mutex_);
    st.error = error_;
  }
  st.stats.requests = counters_.requests.load(std::memory_order_relaxed);
  st.stats.bytes_sent = counters_.bytes_sent.load(std::memory_order_relaxed);
  st.stats.messages_received = counters_.messages_received.load(std::memory_order_relaxed);
  st.stats.bytes_received = counters_.bytes_received.load(std::memory_order_relaxed);
  return st;
}

void Proxy::check() const {
  if (!failed()) return;
  std::lock_guard lock(error_mutex_);
  throw EnvironmentError(error_);
}

void Proxy::fail(const std::string& what) {
  {
    std::lock_guard lock(error_mutex_);
    error_ = what;
  }
  state_.store(ProxyState::kFailed, std::memory_order_release);
}

void Proxy::run() {
  try {
    // Sleeps of microseconds mean what they say only without the default 50 us of timer slack.
    ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    if (setup_.options.cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(setup_.options.cpu, &set);
      ::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set);
    }
    const auto spin = setup_.options.spin;
    const auto sleep = setup_.options.sleep;
    bool idle = false;
    Clock::time_point idle_since{};
    unsigned idle_polls = 0;
    while (!stop_.load(std::memory_order_acquire)) {
      // New requests first, so that this poll already sends them (one turn sooner).
      const bool took = take();
      const size_t n = transport_->poll(completions_.data(), completions_.size());
      deliver(n);
      const bool released = release();
      if (n > 0 || took || released) {
        idle = false;
        continue;
      }
      const auto now = Clock::now();
      if (!idle) {
        idle = true;
        idle_since = now;
        idle_polls = 0;
      }
      if (now - idle_since >= spin) {
        std::this_thread::sleep_for(sleep);
      } else if (++idle_polls % 32 == 0) {
        // On a core of its own this returns at once; on a host with more busy threads than
        // cores it lets the others (the peer's proxy, the launch thread) run.
        std::this_thread::yield();
      } else {
        cpu_relax();
      }
    }
    transport_->close();
    transport_.reset();
    state_.store(ProxyState::kStopped, std::memory_order_release);
  } catch (const TransportError& e) {
    fail(fmt::format("proxy of rank {}: {}{}", setup_.rank, e.what(),
                     e.peer() >= 0 ? in_flight_to(e.peer()) : ""));
    // Dropped without a goodbye: the peers see this rank as gone and fail too, naming it.
    transport_.reset();
  } catch (const std::exception& e) {
    fail(fmt::format("proxy of rank {}: {}{}", setup_.rank, e.what(), in_flight_to(-1)));
    transport_.reset();
  }
}

// Takes the published entries from next_ on, in order, and hands them to the transport.
bool Proxy::take() {
  abi::ProxyRing& ring = *setup_.ring;
  bool any = false;
  for (int k = 0; k < kTakeBatch; ++k) {
    // The kernel cannot have published an entry a lap ahead of the credits it was given.
    if (next_ - tail_ >= kSlots) break;
    const abi::ProxyRequest& e = ring.entries[next_ % kSlots];
    const uint64_t seq = load_acquire(e.seq);
    if (seq != next_ + 1) {
      const uint64_t previous_lap = next_ + 1 > kSlots ? next_ + 1 - kSlots : 0;
      if (seq != previous_lap) {
        throw EnvironmentError(fmt::format(
            "ring entry {} holds seq {}, where {} (published) or {} (not yet) can be: the kernel "
            "wrote past its credits (tail {}), or the ring was not zeroed before its first use",
            next_, seq, next_ + 1, previous_lap, tail_));
      }
      break;
    }
    // Plain reads: the kernel wrote these before its release of seq, which the acquire saw.
    Taken& t = taken_[next_ % kSlots];
    t.src_offset = e.src_offset;
    t.dst_offset = e.dst_offset;
    t.bytes = e.bytes;
    t.dst_rank = e.dst_rank;
    t.event = e.event;
    t.done = false;
    const int world = setup_.world;
    if (t.dst_rank < 0 || t.dst_rank >= world) {
      reject(next_, t, fmt::format("no rank {} in a world of {}", t.dst_rank, world));
    }
    const size_t d = static_cast<size_t>(t.dst_rank);
    if (t.dst_rank != setup_.rank && !is_peer_[d]) {
      reject(next_, t,
             fmt::format("rank {} is not one of this rank's peers on other nodes", t.dst_rank));
    }
    if (t.event < -1 || t.event >= event_count_[d]) {
      reject(next_, t, fmt::format("rank {} has {} proxy counters", t.dst_rank, event_count_[d]));
    }
    if (!in_range(t.src_offset, t.bytes, setup_.heap->size())) {
      reject(
          next_, t,
          fmt::format("the source lies outside this rank's heap of {} bytes", setup_.heap->size()));
    }
    if (!in_range(t.dst_offset, t.bytes, heap_bytes_[d])) {
      reject(next_, t,
             fmt::format("the destination lies outside rank {}'s heap of {} bytes", t.dst_rank,
                         heap_bytes_[d]));
    }
    if (t.dst_rank == setup_.rank) {
      copy_local(t);
      t.done = true;
    } else {
      const MessageHeader h{t.dst_offset, t.bytes, t.event};
      try {
        if (!transport_->send(t.dst_rank, h, t.src_offset, next_)) break;
      } catch (const TransportError& err) {
        throw TransportError(err.peer(), fmt::format("{}: {}", describe(next_, t), err.what()));
      }
    }
    bump(counters_.requests, 1);
    bump(counters_.bytes_sent, static_cast<uint64_t>(t.bytes));
    ++next_;
    any = true;
  }
  return any;
}

// Advances tail over the done entries, in order, and publishes it (release: the kernel may reuse
// the entries, and the source bytes, once it sees the new tail).
bool Proxy::release() {
  uint64_t t = tail_;
  while (t < next_ && taken_[t % kSlots].done) {
    taken_[t % kSlots].done = false;
    ++t;
  }
  if (t == tail_) return false;
  tail_ = t;
  store_release(setup_.ring->tail, t);
  if (setup_.heap_tail_offset >= 0) setup_.heap->publish(setup_.heap_tail_offset, t);
  return true;
}

// The bytes of every received fragment of the poll into the heap, as one batch, then each
// completion in order (counters after their bytes). The fragments stay valid until the next poll.
void Proxy::deliver(size_t n) {
  writes_.clear();
  for (size_t i = 0; i < n; ++i) {
    const Completion& c = completions_[i];
    if (c.kind == Completion::kReceived && c.data != nullptr && c.bytes > 0)
      writes_.push_back({c.dst_offset, c.data, c.bytes});
  }
  if (!writes_.empty()) setup_.heap->write_all(writes_.data(), writes_.size());
  for (size_t i = 0; i < n; ++i) handle(completions_[i]);
}

// One completion whose bytes (if any) deliver() has written.
void Proxy::handle(const Completion& c) {
  if (c.kind == Completion::kSent) {
    const uint64_t entry = c.cookie;
    if (entry < tail_ || entry >= next_) {
      throw InternalError(
          fmt::format("proxy: the {} transport reported entry {} sent, outside "
                      "the entries in flight [{}, {})",
                      transport_name_, entry, tail_, next_));
    }
    taken_[entry % kSlots].done = true;
    return;
  }
  if (c.event < -1 || c.event >= setup_.num_events) {
    throw TransportError(
        c.peer, fmt::format("rank {} ({}) sent a message for proxy counter {}, "
                            "but this rank has {} counters",
                            c.peer, transport_->peer_address(c.peer), c.event, setup_.num_events));
  }
  bump(counters_.bytes_received, static_cast<uint64_t>(c.bytes));
  if (!c.last) return;
  if (c.placed) setup_.heap->flush_inbound();
  if (c.event >= 0) raise(c.event);
  bump(counters_.messages_received, 1);
}

void Proxy::raise(int event) {
  Word& counter = setup_.events[event];
  // The proxy is the only writer: a load and a release store, no read-modify-write. The release
  // orders the heap writes above before the kernel's acquire of the counter.
  const Word v = std::atomic_ref<Word>(counter).load(std::memory_order_relaxed);
  store_release(counter, v + 1);
  // After the heap writes of the message (write() returned once they were visible).
  if (setup_.heap_events_offset >= 0)
    setup_.heap->publish(setup_.heap_events_offset + int64_t{8} * event, v + 1);
}

// A request to the rank itself (the emulation of nodes may make them): through the bounce buffer,
// backwards when the ranges overlap with the destination above, then the counter.
void Proxy::copy_local(const Taken& t) {
  const int64_t chunk =
      static_cast<int64_t>(std::max<size_t>(setup_.options.local_chunk_bytes, 4096));
  const bool backwards = t.dst_offset > t.src_offset && t.dst_offset < t.src_offset + t.bytes;
  for (int64_t done = 0; done < t.bytes;) {
    const int64_t n = std::min(chunk, t.bytes - done);
    const int64_t at = backwards ? t.bytes - done - n : done;
    setup_.heap->read(t.src_offset + at, bounce_.get(), n);
    setup_.heap->write(t.dst_offset + at, bounce_.get(), n);
    done += n;
  }
  if (t.event >= 0) raise(t.event);
  bump(counters_.messages_received, 1);
  bump(counters_.bytes_received, static_cast<uint64_t>(t.bytes));
}

std::string Proxy::describe(uint64_t entry, const Taken& t) const {
  return fmt::format(
      "ring entry {} (rank {} -> rank {}: {} bytes from heap offset {} to {}, event {})", entry,
      setup_.rank, t.dst_rank, t.bytes, t.src_offset, t.dst_offset, t.event);
}

void Proxy::reject(uint64_t entry, const Taken& t, const std::string& why) const {
  throw EnvironmentError(
      fmt::format("{} is not a request this proxy can carry: {}", describe(entry, t), why));
}

// "; in flight to rank 3: ring entry 57 (...)": the oldest request a failed peer leaves undone;
// for peer -1 (a failure of no one peer: the heap, say) the oldest of all.
std::string Proxy::in_flight_to(int peer) const {
  for (uint64_t e = tail_; e < next_; ++e) {
    const Taken& t = taken_[e % kSlots];
    if (!t.done && (peer < 0 || t.dst_rank == peer)) {
      return peer < 0 ? fmt::format("; oldest in flight: {}", describe(e, t))
                      : fmt::format("; in flight to rank {}: {}", peer, describe(e, t));
    }
  }
  return "";
}

}  // namespace mkc::rt::net
