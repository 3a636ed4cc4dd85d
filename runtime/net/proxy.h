// The host proxy: one thread per rank that carries the kernel's requests for edges to other nodes.
//
// The kernel (templates/mkc, abi::ProxyRing) claims ring entry n, waits for credit
// (n - tail < kProxySlots), writes the request and publishes it last, seq = n + 1, with a
// system-scope release. The proxy thread takes entries strictly in order: it reads entry tail's seq
// with acquire ordering (seq == n + 1: complete; the previous lap's value: not yet; anything else
// is a broken ring and an error), checks the request, and hands it to the transport. Once the
// transport no longer needs the source bytes (copied out, or written by the NIC) the entry is
// done; `tail` advances over done entries in order, with a release store, and is the credit the
// kernel waits on when the ring is full.
//
// On the receiving side the same thread writes arriving bytes into its rank's heap (MemoryAccess)
// and, once a message is complete and in place, adds 1 to this rank's proxy counter `event` with a
// release store (plain load + store: the proxy is the counters' only writer).
//
// Errors (a bad request, a transport failure, a peer that went away) stop the thread and are kept
// in a status the runtime polls (failed(), status(), check()), naming the ring entry, its
// destination, bytes and event; nothing crashes and nothing waits without a deadline. stop() is
// seen within a poll and a sleep (microseconds).
//
// Hot path: no allocation, no lock, no system call of its own (the transport's poll is the only
// one); between polls a pause instruction while work came recently, short sleeps after
// ProxyOptions::spin without any.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/net/memory.h"
#include "runtime/net/transport.h"
#include "templates/mkc/abi.h"

namespace mkc::rt::net {

struct ProxyOptions {
  // The deadline of connecting, and of every wait on a peer that makes no progress.
  std::chrono::milliseconds timeout{30000};
  // After its last piece of work the thread polls flat out for this long, then sleeps `sleep`
  // between polls until work comes again (a request after a long quiet pays up to one sleep).
  std::chrono::microseconds spin{200};
  std::chrono::microseconds sleep{20};
  // Pin the thread to this CPU (near the NIC, away from the launch thread); -1: leave it be.
  int cpu = -1;
  // Bytes of the bounce buffer a request to the rank itself is copied through.
  size_t local_chunk_bytes = size_t{1} << 20;
};

struct ProxySetup {
  int rank = 0;
  int world = 1;
  // The ranks on other nodes this rank exchanges with (symmetric across ranks).
  std::vector<int> peers;
  // This rank's ring (host-mapped in the runtime; zeroed before its first use) and its proxy
  // counters [num_events] (host memory: the proxy's own copy, for tests and the host). Both must
  // outlive the Proxy.
  abi::ProxyRing* ring = nullptr;
  abi::u64* events = nullptr;
  int num_events = 0;
  // This rank's symmetric heap; must outlive the Proxy.
  MemoryAccess* heap = nullptr;
  // Where in the heap the proxy also publishes (MemoryAccess::publish) its counters [num_events]
  // and the ring's tail, 8-byte aligned: the words the kernel polls (abi::KernelArgs::proxy_events,
  // proxy_tail), in device memory where the heap is. -1: not published.
  int64_t heap_events_offset = -1;
  int64_t heap_tail_offset = -1;
  AllGatherFn all_gather;
  ProxyOptions options;
};

enum class ProxyState { kConnected, kRunning, kStopped, kFailed };

struct ProxyStats {
  uint64_t requests = 0;           // ring entries taken
  uint64_t bytes_sent = 0;         // payload bytes of those entries
  uint64_t messages_received = 0;  // messages from peers, complete
  uint64_t bytes_received = 0;
};

struct ProxyStatus {
  ProxyState state = ProxyState::kConnected;
  std::string error;  // kFailed: what failed, naming the request and the peer
  ProxyStats stats;
};

class Proxy {
 public:
  // Collective: every rank of the job constructs its Proxy at the same time (two all_gathers:
  // the heaps' and counters' sizes, then the transport's connections). Throws UserError for a bad
  // setup, EnvironmentError (TransportError) when connecting fails.
  Proxy(ProxySetup setup, std::unique_ptr<Transport> transport);
  // stop().
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // Starts the thread; the ring is taken from its current tail.
  void start();
  // Stops the thread (within microseconds) and closes the transport with a goodbye to every
  // peer. Call it once every rank's kernel has finished (after a barrier): a peer that still
  // sends to this rank afterwards fails, naming it. Idempotent.
  void stop();

  // Cheap enough to call while spinning on a launch.
  bool failed() const { return state_.load(std::memory_order_acquire) == ProxyState::kFailed; }
  ProxyStatus status() const;
  // Throws EnvironmentError with the error when the proxy failed.
  void check() const;

  const char* transport_name() const { return transport_name_; }

 private:
  // A taken ring entry, kept until tail passes it.
  struct Taken {
    int64_t src_offset = 0;
    int64_t dst_offset = 0;
    int64_t bytes = 0;
    int dst_rank = -1;
    int event = -1;
    bool done = false;
  };

  void run();
  bool take();
  bool release();
  void deliver(size_t n);
  void handle(const Completion& c);
  void copy_local(const Taken& t);
  void raise(int event);
  [[noreturn]] void reject(uint64_t entry, const Taken& t, const std::string& why) const;
  std::string describe(uint64_t entry, const Taken& t) const;
  std::string in_flight_to(int peer) const;
  void fail(const std::string& what);

  ProxySetup setup_;
  std::unique_ptr<Transport> transport_;
  const char* transport_name_ = "";
  std::vector<int64_t> heap_bytes_;  // per rank
  std::vector<int> event_count_;     // per rank
  std::vector<char> is_peer_;        // per rank
  std::vector<Taken> taken_;         // [kProxySlots], by entry % kProxySlots
  std::vector<Completion> completions_;
  std::vector<WriteSpan> writes_;  // deliver()'s batch
  std::unique_ptr<char[]> bounce_;
  uint64_t next_ = 0;  // the next entry to take
  uint64_t tail_ = 0;  // entries done, in order (published as ring->tail)

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<ProxyState> state_{ProxyState::kConnected};
  struct Counters {
    std::atomic<uint64_t> requests{0}, bytes_sent{0}, messages_received{0}, bytes_received{0};
  } counters_;
  mutable std::mutex error_mutex_;
  std::string error_;
};

}  // namespace mkc::rt::net
