#include "runtime/net/verbs.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "runtime/net/conn_details.h"

namespace mkc::rt::net {
namespace {

using Clock = std::chrono::steady_clock;

// ---- the real library ---------------------------------------------------------------------
// The exported ibv_query_port fills the old, shorter port attributes; verbs.h's inline version
// asks the provider for the full ones when it can, and falls back to it. The same here, with the
// exported function found by dlsym (kept process-wide: one libibverbs per process).
using CompatQueryPort = int (*)(ibv_context*, uint8_t, _compat_ibv_port_attr*);
std::atomic<CompatQueryPort> g_compat_query_port{nullptr};

int real_query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx == nullptr) {
    std::memset(attr, 0, sizeof(*attr));
    return g_compat_query_port.load()(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
  }
  return vctx->query_port(ctx, port, attr, sizeof(*attr));
}
int real_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  return ibv_post_send(qp, wr, bad);
}
int real_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return ibv_post_recv(qp, wr, bad);
}
int real_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  return ibv_poll_cq(cq, n, wc);
}

// ---- checked calls --------------------------------------------------------------------------
// Verbs calls return 0 or an errno value (some return -1 and set errno); pointer-returning calls
// return null and set errno.
[[noreturn]] void throw_call(const char* call, int err, int peer, const std::string& where,
                             const char* file, int line) {
  throw TransportError(peer, fmt::format("verbs: {}{} failed: {} at {}:{}", call, where,
                                         errno_text(err), file, line));
}

#define MKC_IBV(api, name, peer, where, ...)                                          \
  do {                                                                                \
    errno = 0;                                                                        \
    const int mkc_ibv_rc_ = (api).name(__VA_ARGS__);                                  \
    if (mkc_ibv_rc_ != 0) {                                                           \
      const int mkc_ibv_err_ = mkc_ibv_rc_ > 0 ? mkc_ibv_rc_ : (errno ? errno : EIO); \
      throw_call("ibv_" #name, mkc_ibv_err_, (peer), (where), __FILE__, __LINE__);    \
    }                                                                                 \
  } while (0)

template <typename T>
T* checked(T* p, const char* call, int peer, const std::string& where, const char* file, int line) {
  if (p == nullptr) throw_call(call, errno ? errno : EIO, peer, where, file, line);
  return p;
}
#define MKC_IBV_PTR(api, name, peer, where, ...) \
  (errno = 0, checked((api).name(__VA_ARGS__), "ibv_" #name, (peer), (where), __FILE__, __LINE__))

const char* port_state_name(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN:
      return "down";
    case IBV_PORT_INIT:
      return "init";
    case IBV_PORT_ARMED:
      return "armed";
    case IBV_PORT_ACTIVE:
      return "active";
    case IBV_PORT_ACTIVE_DEFER:
      return "active (deferred)";
    default:
      return "unknown";
  }
}

const char* wc_status_name(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR:
      return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR:
      return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_PROT_ERR:
      return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR:
      return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_REM_INV_REQ_ERR:
      return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR:
      return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR:
      return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR:
      return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "IBV_WC_RNR_RETRY_EXC_ERR";
    default:
      return "IBV_WC_?";
  }
}

const char* wc_status_hint(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
      return ": the peer's queue pair does not answer (its process exited, or the path to it is "
             "down)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return ": the peer had no receive posted (its proxy stopped)";
    case IBV_WC_REM_ACCESS_ERR:
      return ": the peer refused the write (its memory registration and this rank's view of it "
             "disagree)";
    case IBV_WC_WR_FLUSH_ERR:
      return ": the queue pair failed on an earlier request";
    case IBV_WC_LOC_PROT_ERR:
      return ": a local buffer is outside its memory registration";
    default:
      return "";
  }
}

std::string gid_text(const uint8_t* raw) {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, raw, buf, sizeof(buf));
  return buf;
}

// ---- the wire ------------------------------------------------------------------------------
// A verbs transport's all_gather blob: "MKNV", version 1 (bumped when the wire format changes).
constexpr DetailsFormat kDetails{"verbs", 0x4d4b4e56, 1};
constexpr uint32_t kMailMagic = 0x4d4b4d4c;  // "MKML"

struct BlobHead {
  uint64_t heap_base, heap_bytes, ctrl_base, stage_base, chunk_bytes;
  uint32_t magic, version;
  int32_t rank, world;
  uint32_t port, link_layer, active_mtu, lid, gid_index, direct;
  uint32_t heap_rkey, ctrl_rkey, stage_rkey, mailbox_slots, staging_slots, npeers;
  uint8_t gid[16];
  char device[64];
};
static_assert(sizeof(BlobHead) == 184, "the blob head has no hidden padding");

// One per peer in a rank's blob: the queue pair it made for that peer, where that peer's areas
// are in its control and staging regions.
struct BlobPeer {
  uint64_t ctrl_offset, stage_offset;
  int32_t rank;
  uint32_t qpn, psn, pad;
};
static_assert(sizeof(BlobPeer) == 32, "a blob peer entry has no hidden padding");

// A fragment's header, written into the receiver's mailbox slot seq % mailbox_slots.
struct Mail {
  uint64_t seq;
  int64_t dst_offset;
  int64_t bytes;
  int32_t event;
  uint32_t flags;
  uint32_t stage_slot;
  uint32_t magic;
  uint64_t pad[3];
};
static_assert(sizeof(Mail) == 64, "a mailbox slot is one line");
constexpr uint32_t kLast = 1, kStaged = 2, kBye = 4;

// Per peer in the control region: mailbox [M], outgoing headers [M], credits in, credits out.
struct Credits {
  uint64_t mailbox;  // mailbox slots the receiver has freed
  uint64_t staging;  // staging slots it has freed
  uint64_t pad[6];
};
static_assert(sizeof(Credits) == 64, "credit words on a line of their own");

// A work request's id: what it is, for which peer (index in peers_), which fragment.
enum WrKind : uint64_t { kPayloadWr = 1, kHeaderWr = 2, kCreditWr = 3, kRecvWr = 4 };
constexpr uint64_t wr_id(WrKind kind, size_t peer, uint64_t seq) {
  return (static_cast<uint64_t>(kind) << 61) | (static_cast<uint64_t>(peer) << 40) |
         (seq & ((uint64_t{1} << 40) - 1));
}
constexpr WrKind wr_kind(uint64_t id) {
  return static_cast<WrKind>(id >> 61);
}
constexpr size_t wr_peer(uint64_t id) {
  return static_cast<size_t>((id >> 40) & ((uint64_t{1} << 21) - 1));
}
constexpr uint64_t wr_seq(uint64_t id) {
  return id & ((uint64_t{1} << 40) - 1);
}

template <typename T>
T load_acquire(const T& v) {
  return std::atomic_ref<T>(const_cast<T&>(v)).load(std::memory_order_acquire);
}

// Host memory for the NIC: page aligned, zeroed.
struct PageBuffer {
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data;
  size_t bytes = 0;
  void allocate(size_t n) {
    bytes = (std::max<size_t>(n, 1) + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(4096, bytes);
    if (p == nullptr) throw EnvironmentError(fmt::format("verbs: cannot allocate {} bytes", n));
    std::memset(p, 0, bytes);
    data.reset(static_cast<char*>(p));
  }
};

class VerbsTransport final : public Transport {
 public:
  VerbsTransport(const VerbsApi& api, const VerbsOptions& options) : api_(api), options_(options) {
    options_.mailbox_slots = std::clamp(options_.mailbox_slots, 2, 4096);
    options_.staging_slots = std::clamp(options_.staging_slots, 1, 1024);
    options_.chunk_bytes = std::max<size_t>(options_.chunk_bytes, 4096);
    options_.queue = std::max<size_t>(options_.queue, 1);
  }
  ~VerbsTransport() override { release(); }

  const char* name() const override { return "verbs"; }
  void connect(const ConnectParams& params, MemoryAccess& heap) override;
  bool send(int peer, const MessageHeader& header, int64_t src_offset, uint64_t cookie) override;
  size_t poll(Completion* out, size_t max) override;
  std::string peer_address(int peer) const override;
  void close() override;

 private:
  struct Pending {
    MessageHeader header;
    int64_t src_offset;
    uint64_t cookie;
  };
  struct SlotRecord {
    uint64_t cookie = 0;
    Clock::time_point posted{};
    int wrs = 0;
    bool emit_sent = false;
    bool used_local_stage = false;
  };
  struct Peer {
    int rank = -1;
    std::string address;
    ibv_qp* qp = nullptr;
    uint32_t psn = 0;
    bool departed = false;

    // The peer's side, from its blob.
    bool remote_direct = false;
    uint64_t remote_heap_base = 0;
    uint32_t remote_heap_rkey = 0;
    uint64_t remote_mailbox = 0, remote_credits = 0, remote_stage = 0;
    uint32_t remote_ctrl_rkey = 0, remote_stage_rkey = 0;

    // This rank's areas for the peer.
    Mail* mailbox = nullptr;         // the peer writes headers here
    Mail* headers = nullptr;         // headers this rank writes from
    Credits* credits_in = nullptr;   // the peer writes its freed slots here
    Credits* credits_out = nullptr;  // this rank's freed slots, written from here
    uint64_t ctrl_offset = 0, stage_offset = 0;
    char* recv_stage = nullptr;
    char* send_stage = nullptr;

    // Sending.
    std::vector<Pending> queue;
    size_t queue_head = 0, queue_size = 0;
    bool has_current = false;
    Pending current{};
    int64_t posted_bytes = 0;       // of the current message
    uint64_t msg_seq = 0;           // fragments posted
    uint64_t hdr_done = 0;          // fragments whose header write completed
    uint64_t remote_stage_seq = 0;  // peer's staging slots used
    uint64_t local_stage_seq = 0, local_stage_done = 0;
    std::vector<SlotRecord> slots;
    int sq_used = 0;
    bool credit_in_flight = false;
    uint64_t credit_sent_mailbox = 0, credit_sent_staging = 0;
    bool blocked = false;
    Clock::time_point blocked_since{};

    // Receiving.
    uint64_t recv_seq = 0;
    uint64_t recv_stage_seq = 0;
    uint64_t freed_mailbox = 0, freed_staging = 0;      // credits to return
    uint32_t to_free_mailbox = 0, to_free_staging = 0;  // handed out last poll, freed at the next
    bool message_placed = false;
  };

  [[noreturn]] void fail(const Peer& p, const std::string& what) const {
    throw TransportError(
        p.rank, fmt::format("verbs: rank {}: rank {} at {}: {}", rank_, p.rank, p.address, what));
  }
  std::string for_peer(int rank) const {
    return fmt::format(" (rank {}, for rank {})", rank_, rank);
  }
  Peer* find(int rank) {
    if (rank < 0 || rank >= world_ || slot_of_.empty()) return nullptr;
    const int s = slot_of_[static_cast<size_t>(rank)];
    return s < 0 ? nullptr : &peers_[static_cast<size_t>(s)];
  }
  void register_heap();
  void to_init(Peer& p);
  void to_rtr_rts(Peer& p, const BlobHead& remote, const BlobPeer& entry);
  void post_recv(Peer& p, size_t index);
  bool post_fragment(Peer& p, size_t index, Completion* out, size_t& n, size_t max,
                     Clock::time_point now);
  void return_credits(Peer& p, size_t index);
  void on_completion(const ibv_wc& wc, Completion* out, size_t& n);
  void on_receive(Peer& p, size_t index, const ibv_wc& wc, Completion* out, size_t& n);
  void release();

  const VerbsApi& api_;
  VerbsOptions options_;
  int rank_ = 0;
  int world_ = 1;
  std::chrono::milliseconds timeout_{30000};
  MemoryAccess* heap_ = nullptr;
  bool connected_ = false;
  bool closed_ = false;

  VerbsPort port_;
  union ibv_gid gid_ {};
  int gid_index_ = 0;
  int64_t max_fragment_ = int64_t{1} << 30;
  int sq_depth_ = 0;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* heap_mr_ = nullptr;
  ibv_mr* ctrl_mr_ = nullptr;
  ibv_mr* stage_mr_ = nullptr;
  bool direct_ = false;  // the heap is registered
  uint64_t heap_base_ = 0;
  PageBuffer ctrl_, stage_;
  std::vector<Peer> peers_;
  std::vector<int> slot_of_;
  std::vector<ibv_wc> wcs_;
};

VerbsPort choose_port_impl(const VerbsApi& api, const std::string& hca) {
  errno = 0;
  int n = 0;
  ibv_device** list = api.get_device_list(&n);
  if (list == nullptr) {
    throw EnvironmentError(fmt::format(
        "verbs: no RDMA device: ibv_get_device_list failed: {} (no RDMA driver in this kernel?)",
        errno_text(errno ? errno : ENODEV)));
  }
  struct FreeList {
    const VerbsApi& api;
    ibv_device** list;
    ~FreeList() { api.free_device_list(list); }
  } free_list{api, list};
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(api.get_device_name(list[i]));
  if (n == 0) {
    throw EnvironmentError(
        "verbs: no RDMA device: libibverbs found none (no NIC here, or its kernel driver or "
        "rdma-core provider is not installed)");
  }
  // The devices to look at, in order, with the port each is restricted to (0: any).
  std::vector<std::pair<int, int>> wanted;
  if (hca.empty()) {
    for (int i = 0; i < n; ++i) wanted.push_back({i, 0});
  } else {
    size_t start = 0;
    while (start <= hca.size()) {
      size_t comma = hca.find(',', start);
      if (comma == std::string::npos) comma = hca.size();
      std::string item = hca.substr(start, comma - start);
      start = comma + 1;
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      if (item.empty()) continue;
      int port = 0;
      if (const auto colon = item.find(':'); colon != std::string::npos) {
        char* end = nullptr;
        const long p = std::strtol(item.c_str() + colon + 1, &end, 10);
        if (end == item.c_str() + colon + 1 || *end != '\0' || p < 1 || p > 255) {
          throw UserError(
              fmt::format("MKC_IB_HCA={}: `{}` is not a device or device:port", hca, item));
        }
        port = static_cast<int>(p);
        item.resize(colon);
      }
      const auto it = std::find(names.begin(), names.end(), item);
      if (it == names.end()) {
        std::string found;
        for (const std::string& s : names) found += (found.empty() ? "" : ", ") + s;
        throw EnvironmentError(fmt::format(
            "verbs: MKC_IB_HCA={} names `{}`, which is not an RDMA device here; found: {}", hca,
            item, found));
      }
      wanted.push_back({static_cast<int>(it - names.begin()), port});
    }
    if (wanted.empty()) throw UserError(fmt::format("MKC_IB_HCA=`{}` names no device", hca));
  }
  std::string seen;
  for (const auto& [index, only_port] : wanted) {
    const std::string& dev = names[static_cast<size_t>(index)];
    errno = 0;
    ibv_context* ctx = api.open_device(list[index]);
    if (ctx == nullptr) {
      seen += fmt::format("{}{}: cannot open ({})", seen.empty() ? "" : "; ", dev,
                          errno_text(errno ? errno : EIO));
      continue;
    }
    struct Close {
      const VerbsApi& api;
      ibv_context* ctx;
      ~Close() { api.close_device(ctx); }
    } close{api, ctx};
    ibv_device_attr attr{};
    if (const int rc = api.query_device(ctx, &attr); rc != 0) {
      seen += fmt::format("{}{}: ibv_query_device failed ({})", seen.empty() ? "" : "; ", dev,
                          errno_text(rc > 0 ? rc : errno));
      continue;
    }
    for (int p = 1; p <= attr.phys_port_cnt; ++p) {
      if (only_port != 0 && p != only_port) continue;
      ibv_port_attr pa{};
      if (const int rc = api.query_port(ctx, static_cast<uint8_t>(p), &pa); rc != 0) {
        seen += fmt::format("{}{} port {}: ibv_query_port failed ({})", seen.empty() ? "" : "; ",
                            dev, p, errno_text(rc > 0 ? rc : errno));
        continue;
      }
      if (pa.state == IBV_PORT_ACTIVE) return VerbsPort{dev, p, pa};
      seen += fmt::format("{}{} port {}: {}", seen.empty() ? "" : "; ", dev, p,
                          port_state_name(pa.state));
    }
    if (only_port > attr.phys_port_cnt) {
      seen += fmt::format("{}{} has no port {} ({} port(s))", seen.empty() ? "" : "; ", dev,
                          only_port, attr.phys_port_cnt);
    }
  }
  throw EnvironmentError(fmt::format("verbs: no active RDMA port{}: {}",
                                     hca.empty() ? "" : " among MKC_IB_HCA=" + hca, seen));
}

void VerbsTransport::connect(const ConnectParams& params, MemoryAccess& heap) {
  if (connected_) throw InternalError("verbs: connect() called twice");
  check_peer_list(params);
  rank_ = params.rank;
  world_ = params.world;
  timeout_ = params.timeout;
  heap_ = &heap;
  try {
    port_ = choose_port_impl(api_, options_.hca);
    const std::string here = fmt::format(" (rank {}, {} port {})", rank_, port_.device, port_.port);
    {
      int n = 0;
      ibv_device** list = MKC_IBV_PTR(api_, get_device_list, -1, here, &n);
      for (int i = 0; i < n && ctx_ == nullptr; ++i) {
        if (port_.device == api_.get_device_name(list[i])) {
          errno = 0;
          ctx_ = api_.open_device(list[i]);
          if (ctx_ == nullptr) {
            const int e = errno ? errno : EIO;
            api_.free_device_list(list);
            throw_call("ibv_open_device", e, -1, here, __FILE__, __LINE__);
          }
        }
      }
      api_.free_device_list(list);
      if (ctx_ == nullptr) {
        throw TransportError(-1, fmt::format("verbs: device {} went away{}", port_.device, here));
      }
    }
    ibv_device_attr dev{};
    MKC_IBV(api_, query_device, -1, here, ctx_, &dev);
    MKC_IBV(api_, query_port, -1, here, ctx_, static_cast<uint8_t>(port_.port), &port_.attr);
    gid_index_ = std::max(0, options_.gid_index);
    MKC_IBV(api_, query_gid, -1, here, ctx_, static_cast<uint8_t>(port_.port), gid_index_, &gid_);
    if (port_.attr.max_msg_sz > 0) {
      max_fragment_ = std::min<int64_t>(max_fragment_, static_cast<int64_t>(port_.attr.max_msg_sz));
    }
    pd_ = MKC_IBV_PTR(api_, alloc_pd, -1, here, ctx_);

    std::vector<int> mine = params.peers;
    std::sort(mine.begin(), mine.end());
    const size_t npeers = mine.size();
    const int m = options_.mailbox_slots;
    // Fragments (payload + header), one credit update, one goodbye.
    sq_depth_ = std::min(2 * m + 2, std::max(8, dev.max_qp_wr));
    const int cqe =
        std::min(std::max(16, dev.max_cqe), static_cast<int>(npeers) * (sq_depth_ + m) + 16);
    cq_ = MKC_IBV_PTR(api_, create_cq, -1, here, ctx_, cqe, nullptr, nullptr, 0);
    wcs_.resize(64);

    register_heap();
    const size_t per_peer_ctrl = 2 * static_cast<size_t>(m) * sizeof(Mail) + 2 * sizeof(Credits);
    ctrl_.allocate(per_peer_ctrl * std::max<size_t>(npeers, 1));
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    ctrl_mr_ = MKC_IBV_PTR(api_, reg_mr, -1, here, pd_, ctrl_.data.get(), ctrl_.bytes, access);
    const size_t chunk = options_.chunk_bytes;
    const size_t stage_slots = static_cast<size_t>(options_.staging_slots);
    if (!direct_ && npeers > 0) {
      stage_.allocate(2 * stage_slots * chunk * npeers);
      stage_mr_ = MKC_IBV_PTR(api_, reg_mr, -1, here, pd_, stage_.data.get(), stage_.bytes, access);
    }

    slot_of_.assign(static_cast<size_t>(world_), -1);
    peers_.resize(npeers);
    std::mt19937 rng(std::random_device{}());
    for (size_t i = 0; i < npeers; ++i) {
      Peer& p = peers_[i];
      p.rank = mine[i];
      slot_of_[static_cast<size_t>(p.rank)] = static_cast<int>(i);
      p.ctrl_offset = i * per_peer_ctrl;
      char* base = ctrl_.data.get() + p.ctrl_offset;
      p.mailbox = reinterpret_cast<Mail*>(base);
      p.headers = reinterpret_cast<Mail*>(base + static_cast<size_t>(m) * sizeof(Mail));
      p.credits_in = reinterpret_cast<Credits*>(base + 2 * static_cast<size_t>(m) * sizeof(Mail));
      p.credits_out = p.credits_in + 1;
      if (!direct_) {
        p.stage_offset = i * 2 * stage_slots * chunk;
        p.recv_stage = stage_.data.get() + p.stage_offset;
        p.send_stage = p.recv_stage + stage_slots * chunk;
      }
      p.psn = rng() & 0xffffff;
      p.queue.resize(options_.queue);
      p.slots.resize(static_cast<size_t>(m));
      ibv_qp_init_attr init{};
      init.send_cq = cq_;
      init.recv_cq = cq_;
      init.qp_type = IBV_QPT_RC;
      init.sq_sig_all = 0;
      init.cap.max_send_wr = static_cast<uint32_t>(sq_depth_);
      init.cap.max_recv_wr = static_cast<uint32_t>(m);
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      p.qp = MKC_IBV_PTR(api_, create_qp, p.rank, for_peer(p.rank), pd_, &init);
      to_init(p);
      for (int k = 0; k < m; ++k) post_recv(p, i);
    }

    BlobHead head{};
    head.port = static_cast<uint32_t>(port_.port);
    head.link_layer = port_.attr.link_layer;
    head.active_mtu = static_cast<uint32_t>(port_.attr.active_mtu);
    head.lid = port_.attr.lid;
    head.gid_index = static_cast<uint32_t>(gid_index_);
    head.direct = direct_ ? 1 : 0;
    head.heap_base = heap_base_;
    head.heap_bytes = static_cast<uint64_t>(heap.size());
    head.heap_rkey = heap_mr_ != nullptr ? heap_mr_->rkey : 0;
    head.ctrl_base = reinterpret_cast<uintptr_t>(ctrl_.data.get());
    head.ctrl_rkey = ctrl_mr_->rkey;
    head.stage_base = reinterpret_cast<uintptr_t>(stage_.data.get());
    head.stage_rkey = stage_mr_ != nullptr ? stage_mr_->rkey : 0;
    head.mailbox_slots = static_cast<uint32_t>(m);
    head.staging_slots = static_cast<uint32_t>(stage_slots);
    head.chunk_bytes = chunk;
    std::memcpy(head.gid, gid_.raw, sizeof(head.gid));
    std::snprintf(head.device, sizeof(head.device), "%s", port_.device.c_str());
    std::vector<BlobPeer> entries;
    for (const Peer& p : peers_) {
      entries.push_back(BlobPeer{p.ctrl_offset, p.stage_offset, p.rank, p.qp->qp_num, p.psn, 0});
    }
    auto details = exchange_details(params, head, entries, kDetails);
    for (Peer& p : peers_) {
      BlobHead& h = details[static_cast<size_t>(p.rank)].head;
      h.device[sizeof(h.device) - 1] = '\0';
      const std::vector<BlobPeer>& es = details[static_cast<size_t>(p.rank)].entries;
      const auto e =
          std::find_if(es.begin(), es.end(), [&](const BlobPeer& x) { return x.rank == rank_; });
      const bool ethernet = h.link_layer == IBV_LINK_LAYER_ETHERNET;
      p.address =
          ethernet
              ? fmt::format("{}:{} gid {} qpn {:#x}", h.device, h.port, gid_text(h.gid), e->qpn)
              : fmt::format("{}:{} lid {:#x} qpn {:#x}", h.device, h.port, h.lid, e->qpn);
      if (h.mailbox_slots != static_cast<uint32_t>(m) || h.staging_slots != stage_slots ||
          h.chunk_bytes != chunk) {
        fail(p,
             fmt::format("its proxy has {} mailbox slots, {} staging slots of {} bytes; this "
                         "rank {}, {} of {}: every rank must have the same settings",
                         h.mailbox_slots, h.staging_slots, h.chunk_bytes, m, stage_slots, chunk));
      }
      if (h.link_layer != port_.attr.link_layer) {
        fail(p, "its port's link layer (InfiniBand or Ethernet) differs from this rank's");
      }
      p.remote_direct = h.direct != 0;
      p.remote_heap_base = h.heap_base;
      p.remote_heap_rkey = h.heap_rkey;
      p.remote_ctrl_rkey = h.ctrl_rkey;
      p.remote_stage_rkey = h.stage_rkey;
      p.remote_mailbox = h.ctrl_base + e->ctrl_offset;
      p.remote_credits = p.remote_mailbox + 2 * static_cast<uint64_t>(m) * sizeof(Mail);
      p.remote_stage = h.stage_base + e->stage_offset;
      to_rtr_rts(p, h, *e);
    }
    // Every queue pair is ready to receive before anyone writes.
    params.all_gather(std::string());
  } catch (...) {
    release();
    throw;
  }
  connected_ = true;
}

// The heap, registered as a dma-buf when it has one and the library can, else as host memory
// when it is addressable; else not at all (staging).
void VerbsTransport::register_heap() {
  const HeapRegistration reg = heap_->registration();
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  const size_t bytes = static_cast<size_t>(heap_->size());
  if (bytes == 0) return;
  if (reg.dmabuf_fd >= 0 && api_.reg_dmabuf_mr != nullptr) {
    errno = 0;
    heap_mr_ = api_.reg_dmabuf_mr(pd_, reg.dmabuf_offset, bytes, reg.device_address, reg.dmabuf_fd,
                                  access);
    if (heap_mr_ != nullptr) {
      direct_ = true;
      heap_base_ = reg.device_address;
      return;
    }
    // The GPU driver or the NIC may not do dma-buf (no peer memory support): staging still works.
    std::fprintf(stderr,
                 "mkc: verbs: rank %d: ibv_reg_dmabuf_mr of the heap failed (%s); staging "
                 "through host memory instead\n",
                 rank_, errno_text(errno ? errno : EIO).c_str());
  }
  if (reg.host_address != nullptr) {
    heap_mr_ = MKC_IBV_PTR(api_, reg_mr, -1, fmt::format(" of the heap (rank {})", rank_), pd_,
                           reg.host_address, bytes, access);
    direct_ = true;
    heap_base_ = reinterpret_cast<uintptr_t>(reg.host_address);
  }
}

void VerbsTransport::to_init(Peer& p) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(port_.port);
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  MKC_IBV(api_, modify_qp, p.rank, for_peer(p.rank) + " to INIT", p.qp, &a,
          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

void VerbsTransport::to_rtr_rts(Peer& p, const BlobHead& remote, const BlobPeer& entry) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min<uint32_t>(port_.attr.active_mtu, remote.active_mtu));
  a.dest_qp_num = entry.qpn;
  a.rq_psn = entry.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = static_cast<uint8_t>(port_.port);
  a.ah_attr.dlid = static_cast<uint16_t>(remote.lid);
  // RoCE has no LIDs: the GID addresses the peer (and on InfiniBand when its LID is not set).
  if (remote.link_layer == IBV_LINK_LAYER_ETHERNET || remote.lid == 0) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, sizeof(remote.gid));
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index_);
    a.ah_attr.grh.hop_limit = 64;
  }
  MKC_IBV(api_, modify_qp, p.rank, fmt::format(" to RTR, toward rank {} at {}", p.rank, p.address),
          p.qp, &a,
          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.timeout = static_cast<uint8_t>(options_.ack_timeout);
  s.retry_cnt = static_cast<uint8_t>(options_.retry_count);
  s.rnr_retry = static_cast<uint8_t>(options_.rnr_retry);
  s.sq_psn = p.psn;
  s.max_rd_atomic = 1;
  MKC_IBV(api_, modify_qp, p.rank, fmt::format(" to RTS, toward rank {} at {}", p.rank, p.address),
          p.qp, &s,
          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
              IBV_QP_MAX_QP_RD_ATOMIC);
}

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
  Peer* p = find(peer);
  if (!connected_ || closed_ || p == nullptr) {
    throw TransportError(peer, fmt::format("verbs: rank {} has no queue pair to rank {}{}", rank_,
                                           peer, connected_ ? " (not one of its peers)" : ""));
  }
  if (p->departed)
    fail(*p, "has stopped its proxy (said goodbye), yet this rank sends it a message");
  if (p->queue_size == p->queue.size()) return false;
  p->queue[(p->queue_head + p->queue_size) % p->queue.size()] = Pending{header, src_offset, cookie};
  ++p->queue_size;
  return true;
}

// Posts the current message's next fragment when the credits allow: payload write (unless
// empty), then the header write with immediate. Returns whether it posted.
bool VerbsTransport::post_fragment(Peer& p, size_t index, Completion* out, size_t& n, size_t max,
                                   Clock::time_point now) {
  const uint64_t m = static_cast<uint64_t>(options_.mailbox_slots);
  const uint64_t s = static_cast<uint64_t>(options_.staging_slots);
  const int64_t chunk = static_cast<int64_t>(options_.chunk_bytes);
  const Pending& msg = p.current;
  const bool local_staged = !direct_, remote_staged = !p.remote_direct;
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
      psge.lkey = stage_mr_->lkey;
      ++p.local_stage_seq;
    } else {
      psge.addr = heap_base_ + static_cast<uint64_t>(msg.src_offset + p.posted_bytes);
      psge.lkey = heap_mr_->lkey;
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
  hsge.lkey = ctrl_mr_->lkey;
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
  sge.lkey = ctrl_mr_->lkey;
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
        if (p.queue_size == 0) break;
        p.current = p.queue[p.queue_head];
        p.queue_head = (p.queue_head + 1) % p.queue.size();
        --p.queue_size;
        p.has_current = true;
        p.posted_bytes = 0;
      }
      if (!post_fragment(p, i, out, n, max, now)) break;
    }
  }
  while (n < max) {
    const int want = static_cast<int>(std::min(wcs_.size(), max - n));
    const int got = api_.poll_cq(cq_, want, wcs_.data());
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
    if (direct_ || h.stage_slot != p.recv_stage_seq % s ||
        h.bytes > static_cast<int64_t>(options_.chunk_bytes)) {
      fail(p, fmt::format("staged {} bytes in slot {} where slot {} of {} bytes was due", h.bytes,
                          h.stage_slot, p.recv_stage_seq % s, options_.chunk_bytes));
    }
    data = p.recv_stage + h.stage_slot * options_.chunk_bytes;
    ++p.recv_stage_seq;
    ++p.to_free_staging;
  } else if (h.bytes > 0) {
    if (!direct_) fail(p, "wrote into this rank's heap, which it did not register");
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
  if (peer < 0 || peer >= world_ || slot_of_.empty() || slot_of_[static_cast<size_t>(peer)] < 0)
    return "not a peer";
  return peers_[static_cast<size_t>(slot_of_[static_cast<size_t>(peer)])].address;
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
      ibv_sge sge{reinterpret_cast<uintptr_t>(&h), sizeof(Mail), ctrl_mr_->lkey};
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
      const int got = api_.poll_cq(cq_, static_cast<int>(wcs_.size()), wcs_.data());
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
  if (heap_mr_ != nullptr) api_.dereg_mr(heap_mr_);
  if (ctrl_mr_ != nullptr) api_.dereg_mr(ctrl_mr_);
  if (stage_mr_ != nullptr) api_.dereg_mr(stage_mr_);
  heap_mr_ = ctrl_mr_ = stage_mr_ = nullptr;
  if (cq_ != nullptr) api_.destroy_cq(cq_);
  cq_ = nullptr;
  if (pd_ != nullptr) api_.dealloc_pd(pd_);
  pd_ = nullptr;
  if (ctx_ != nullptr) api_.close_device(ctx_);
  ctx_ = nullptr;
}

}  // namespace

VerbsApi load_verbs(const char* library) {
  void* handle = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw EnvironmentError(
        fmt::format("verbs: dlopen(\"{}\") failed: {} (rdma-core's "
                    "libibverbs1 is not installed)",
                    library, why != nullptr ? why : "unknown error"));
  }
  // The handle is never closed: the function pointers live for the process.
  VerbsApi api;
  api.library = library;
#define MKC_RESOLVE(name)                                                     \
  {                                                                           \
    void* fn = ::dlsym(handle, "ibv_" #name);                                 \
    if (fn == nullptr) {                                                      \
      throw EnvironmentError(                                                 \
          fmt::format("verbs: {} has no ibv_{} (a libibverbs too old or not " \
                      "rdma-core's)",                                         \
                      library, #name));                                       \
    }                                                                         \
    api.name = reinterpret_cast<decltype(api.name)>(fn);                      \
  }
  MKC_VERBS_ENTRY_POINTS(MKC_RESOLVE)
#undef MKC_RESOLVE
  api.reg_dmabuf_mr =
      reinterpret_cast<decltype(api.reg_dmabuf_mr)>(::dlsym(handle, "ibv_reg_dmabuf_mr"));
  auto compat = reinterpret_cast<CompatQueryPort>(::dlsym(handle, "ibv_query_port"));
  if (compat == nullptr) {
    throw EnvironmentError(fmt::format("verbs: {} has no ibv_query_port", library));
  }
  g_compat_query_port.store(compat);
  api.query_port = real_query_port;
  api.post_send = real_post_send;
  api.post_recv = real_post_recv;
  api.poll_cq = real_poll_cq;
  return api;
}

VerbsPort choose_port(const VerbsApi& api, const std::string& hca) {
  return choose_port_impl(api, hca);
}

std::unique_ptr<Transport> make_verbs_transport(const VerbsApi& api, const VerbsOptions& options) {
  return std::make_unique<VerbsTransport>(api, options);
}

std::string describe_wc_status(const VerbsApi& api, ibv_wc_status status) {
  const char* text = api.wc_status_str != nullptr ? api.wc_status_str(status) : nullptr;
  return fmt::format("{} ({}, status {}){}", text != nullptr ? text : "no description",
                     wc_status_name(status), static_cast<int>(status), wc_status_hint(status));
}

}  // namespace mkc::rt::net
