// rt::LocalJob's host proxies, for plans with edges between nodes (real nodes, or nodes emulated on
// one host: every ranks_per_node consecutive ranks are one, whatever the hardware). Each local rank
// gets its request ring and proxy counters in host-mapped memory, its claim counter in device
// memory (the heap's last counter), and a proxy thread (runtime/net/proxy.h) over the transport
// MKC_NET picks (runtime/net/net.h), connected to the ranks of the other nodes. The kernel's side
// is templates/mkc/sync.cuh (proxy_claim, proxy_publish, proxy_drain) and movement.cuh
// (proxy_send_box); the protocol is docs/NET.md.
#include <fmt/format.h>

#include <cstring>
#include <exception>
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
  const int num_events = static_cast<int>(plan_.events.size());
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
    MKC_CU(d, cuMemHostAlloc, &host, std::max(1, num_events) * sizeof(abi::u64),
           CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
    pr->events = static_cast<abi::u64*>(host);
    std::memset(pr->events, 0, std::max(1, num_events) * sizeof(abi::u64));
    MKC_CU(d, cuMemHostGetDevicePointer, &pr->events_dev, host, 0);
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
      if (plan_.node_of(p) != plan_.node_of(r)) setup.peers.push_back(p);
    setup.ring = proxies_[r]->ring;
    setup.events = proxies_[r]->events;
    setup.num_events = num_events;
    setup.heap = proxies_[r]->heap.get();
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
  args->proxy_events = reinterpret_cast<abi::u64*>(pr.events_dev);
  args->proxy_head = reinterpret_cast<abi::u64*>(ranks_[r]->heap + proxy_head_offset_);
}

// Stops every local proxy (after the barrier of the job's end, when there is one) and frees the
// rings. Never throws.
void LocalJob::stop_proxies() {
  const Driver& d = Driver::get();
  for (auto& pr : proxies_) {
    if (pr && pr->proxy) pr->proxy->stop();
  }
  for (size_t r = 0; r < proxies_.size(); ++r) {
    if (!proxies_[r]) continue;
    ProxyRank& pr = *proxies_[r];
    pr.proxy.reset();
    pr.heap.reset();
    if (ranks_[r]->ctx) d.cuCtxSetCurrent(ranks_[r]->ctx);
    if (pr.ring) d.cuMemFreeHost(pr.ring);
    if (pr.events) d.cuMemFreeHost(pr.events);
    proxies_[r].reset();
  }
  proxies_.clear();
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
