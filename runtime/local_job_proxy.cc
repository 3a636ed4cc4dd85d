// rt::LocalJob's host proxies, for plans with edges between nodes (real nodes, or nodes emulated on
// one host: every ranks_per_node consecutive ranks are one, whatever the hardware). Each local rank
// gets its request ring in host-mapped memory, its claim counter, tail and proxy counters in device
// memory (the heap's last words: HeapLayout), and a proxy thread (runtime/net/proxy.h) over the
// transport MKC_NET picks (runtime/net/net.h), connected to the ranks of the other nodes. The
// kernel's side is templates/mkc/sync.cuh (proxy_claim, proxy_publish, proxy_drain) and
// movement.cuh (proxy_send_box); the protocol is docs/NET.md.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string_view>
#include <thread>

#include "runtime/cuda_heap.h"
#include "runtime/local_job.h"
#include "runtime/local_job_internal.h"
#include "runtime/net/all_gather.h"
#include "runtime/net/memory.h"
#include "runtime/net/net.h"
#include "runtime/net/proxy.h"
#include "support/error.h"

namespace mkc::rt {

// Rings, counters and one connected, running proxy per local rank. Collective: in-process ranks
// connect from threads of their own (each Proxy constructor waits for its peers'), a rank of a
// multi-process job through the rendezvous.
void LocalJob::start_proxies() {
  const Driver& d = Driver::get();
  const int n = ranks();
  const int num_events = counters_;  // a proxy counter per slot (plan::Event)
  proxies_.resize(n);
  for (int r : local_) {
    Rank& rk = *ranks_[r];
    auto pr = std::make_unique<ProxyRank>();
    CtxScope scope(d, rk.ctx);
    void* host = nullptr;
    MKC_CU(d, cuMemHostAlloc, &host, sizeof(abi::ProxyRing),
           CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
    pr->ring = static_cast<abi::ProxyRing*>(host);
    std::memset(pr->ring, 0, sizeof(abi::ProxyRing));
    MKC_CU(d, cuMemHostGetDevicePointer, &pr->ring_dev, host, 0);
    pr->events.assign(static_cast<size_t>(std::max(1, num_events)), 0);
    pr->heap = std::make_unique<CudaHeap>(rk.ctx, rk.heap, static_cast<int64_t>(heap_bytes_));
    proxies_[r] = std::move(pr);
  }
  std::unique_ptr<net::LocalAllGather> threads;
  if (!opts_.group) threads = std::make_unique<net::LocalAllGather>(n, proxy_timeout());
  const auto make = [&](int r) {
    net::ProxySetup setup;
    setup.rank = r;
    setup.world = n;
    for (int p = 0; p < n; ++p)
      if (plan_.crosses_node(r, p)) setup.peers.push_back(p);
    setup.ring = proxies_[r]->ring;
    setup.events = proxies_[r]->events.data();
    setup.num_events = num_events;
    setup.heap = proxies_[r]->heap.get();
    // The kernel polls these (device memory), not host-mapped words (abi.h, ProxyRing).
    setup.heap_events_offset = static_cast<int64_t>(proxy_events_offset_);
    setup.heap_tail_offset = static_cast<int64_t>(proxy_tail_offset_);
    if (opts_.group) {
      Rendezvous* group = opts_.group;
      setup.all_gather = [group](const std::string& mine) { return group->all_gather(mine); };
    } else {
      setup.all_gather = threads->for_rank(r);
    }
    setup.options.timeout = proxy_timeout();
    net::NetSetup ns;
    if (opts_.group) ns.route_to = opts_.group->world().master_addr;
    proxies_[r]->proxy = std::make_unique<net::Proxy>(std::move(setup), net::make_transport(ns));
  };
  if (opts_.group) {
    make(local_.at(0));
  } else {
    std::vector<std::exception_ptr> failed(n);
    std::vector<std::thread> connecting;
    for (int r : local_) {
      connecting.emplace_back([&, r] {
        try {
          make(r);
        } catch (...) {
          failed[r] = std::current_exception();
        }
      });
    }
    for (std::thread& t : connecting) t.join();
    for (int r : local_)
      if (failed[r]) std::rethrow_exception(failed[r]);
  }
  for (int r : local_) proxies_[r]->proxy->start();
}

// How long a proxy waits for its peers (connecting, or a message cut short): the kernel's own
// deadline, at least 5 s (connecting takes longer than a wait inside a launch may).
std::chrono::milliseconds LocalJob::proxy_timeout() const {
  return std::chrono::milliseconds(std::max<uint64_t>(5000, opts_.timeout_ns / 1'000'000));
}

// The proxies' part of the kernel's arguments for local rank r (null without proxies).
void LocalJob::proxy_args(int r, abi::KernelArgs* args) const {
  if (r >= static_cast<int>(proxies_.size()) || !proxies_[r]) return;
  const ProxyRank& pr = *proxies_[r];
  args->proxy = reinterpret_cast<abi::ProxyRing*>(pr.ring_dev);
  args->proxy_events = reinterpret_cast<abi::u64*>(ranks_[r]->heap + proxy_events_offset_);
  args->proxy_head = reinterpret_cast<abi::u64*>(ranks_[r]->heap + proxy_head_offset_);
  args->proxy_tail = reinterpret_cast<abi::u64*>(ranks_[r]->heap + proxy_tail_offset_);
}

// Stops every local proxy (after the barrier of the job's end, when there is one) and frees the
// rings. Never throws.
void LocalJob::stop_proxies() {
  const Driver& d = Driver::get();
  for (auto& pr : proxies_) {
    if (pr && pr->proxy) pr->proxy->stop();
  }
  const char* stats = std::getenv("MKC_PROXY_STATS");
  if (stats != nullptr && std::string_view(stats) == "1") {
    for (size_t r = 0; r < proxies_.size(); ++r)
      if (proxies_[r] && proxies_[r]->proxy) print_proxy_stats(static_cast<int>(r));
  }
  for (size_t r = 0; r < proxies_.size(); ++r) {
    if (!proxies_[r]) continue;
    ProxyRank& pr = *proxies_[r];
    pr.proxy.reset();
    pr.heap.reset();
    if (ranks_[r]->ctx) d.cuCtxSetCurrent(ranks_[r]->ctx);
    if (pr.ring) d.cuMemFreeHost(pr.ring);
    proxies_[r].reset();
  }
  proxies_.clear();
}

// MKC_PROXY_STATS=1: one line per local proxy at the job's end, to stderr: requests, messages,
// and the time its heap copies and publishes took (docs/NET.md).
void LocalJob::print_proxy_stats(int r) const {
  const ProxyRank& pr = *proxies_[static_cast<size_t>(r)];
  const net::ProxyStats st = pr.proxy->status().stats;
  const CudaHeap::Stats& h = pr.heap->stats();
  const auto mean_us = [](int64_t ns, int64_t n) { return n > 0 ? ns * 1e-3 / n : 0.0; };
  fmt::print(stderr,
             "mkc: proxy of rank {}: {} requests ({} B), {} messages in ({} B); heap reads {} in "
             "{} waits (mean {:.1f} us, max {:.1f} us a wait), writes {} in {} waits (mean "
             "{:.1f} us, max {:.1f} us), publishes {} (mean {:.1f} us)\n",
             r, st.requests, st.bytes_sent, st.messages_received, st.bytes_received, h.reads.copies,
             h.reads.waits, mean_us(h.reads.ns, h.reads.waits), h.reads.max_ns * 1e-3,
             h.writes.copies, h.writes.waits, mean_us(h.writes.ns, h.writes.waits),
             h.writes.max_ns * 1e-3, h.publishes, mean_us(h.publish_ns, h.publishes));
}

// "; proxy of rank r: <error>" for every local proxy that failed, else "".
std::string LocalJob::proxy_errors() const {
  std::string out;
  for (const auto& pr : proxies_) {
    if (pr && pr->proxy && pr->proxy->failed()) out += "; " + pr->proxy->status().error;
  }
  return out;
}

net::ProxyStatus LocalJob::proxy_status(int rank) const {
  local(rank, "proxy_status");
  const ProxyRank* pr = rank < static_cast<int>(proxies_.size()) ? proxies_[rank].get() : nullptr;
  if (!pr || !pr->proxy) throw UserError("proxy_status: the job has no edges between nodes");
  return pr->proxy->status();
}

}  // namespace mkc::rt
