// rt::LocalJob, construction and what is left after the other concerns moved out: the GPUs of
// the job's local ranks, their contexts, modules and streams, the check that every CTA can be
// resident, release (also of a job half built), the accessors and trace mode. The symmetric heap,
// host conversion, launching and the device's errors each have a file of their own
// (local_job_internal.h lists them).
#include "runtime/local_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "runtime/local_job_internal.h"
#include "support/arch.h"
#include "support/error.h"

namespace mkc::rt {

LocalJob::LocalJob(const plan::Plan& plan, const std::string& cubin,
                   const codegen::Generated& kernel, LocalJobOptions options)
    : plan_(plan),
      kernel_(kernel.kernel_name),
      ctas_(kernel.ctas),
      threads_(kernel.threads),
      smem_(kernel.dynamic_smem),
      opts_(std::move(options)) {
  // A failure half way releases what was taken (the destructor does not run for a constructor
  // that throws): contexts, modules, memory, IPC mappings.
  try {
    init(cubin, kernel);
  } catch (...) {
    release(false);
    throw;
  }
}

void LocalJob::init(const std::string& cubin, const codegen::Generated& kernel) {
  const int ctas = ctas_, threads = threads_;
  const Driver& d = Driver::get();
  const int n = static_cast<int>(plan_.ranks);
  const int gpus = device_count();
  if (gpus == 0) throw EnvironmentError("no GPU: the CUDA driver sees no device");
  Rendezvous* group = opts_.group;
  if (group) {
    const World& w = group->world();
    if (w.size != n) {
      throw UserError(
          fmt::format("the plan is for {} ranks but the job has {} processes ({}); "
                      "compile with --ranks {}",
                      n, w.size, w.source, w.size));
    }
    // Ranks on other nodes are reached through the proxies only: the plan's nodes (every
    // ranks_per_node consecutive ranks) must lie inside the job's (emulated nodes may be smaller).
    const int64_t per_node = plan_.per_node();
    if (!w.single_node() && (per_node > w.local_size || w.local_size % per_node != 0)) {
      throw UserError(fmt::format(
          "the job spans nodes ({} ranks, {} per node) but the plan was compiled for nodes of {} "
          "ranks; compile with --ranks-per-node {} (edges between nodes then go through the "
          "host proxy)",
          w.size, w.local_size, per_node, w.local_size));
    }
    if (w.local_size > gpus && !opts_.share_gpus) {
      throw UserError(fmt::format(
          "{} processes on a node with {} GPU(s): rank {} would share a GPU; start at most {} "
          "processes, or allow sharing (--share-gpus; for tests, ranks on one GPU take turns)",
          w.local_size, gpus, w.rank, gpus));
    }
    local_ = {w.rank};
  } else {
    if (n > gpus && !opts_.share_gpus) {
      throw UserError(fmt::format(
          "the plan is for {} ranks but this machine has {} GPU(s); compile with --ranks {}, or "
          "allow ranks to share GPUs (--share-gpus; for tests, not for speed)",
          n, gpus, gpus));
    }
    for (int r = 0; r < n; ++r) local_.push_back(r);
  }
  // Without wgmma (before Hopper, or built for plain sm_90: MKC_ARCH) the GEMM and attention
  // tiles are the mma.sync ones, with their own (smaller) staging.
  if (!mkc::arch_has_wgmma(device_info(0).arch())) smem_ = kernel.portable_smem;
  // Paired GEMM tiles run in 2-CTA clusters on Hopper; before it the kernel has none to pair.
  cluster_ = device_info(0).cc_major >= 9 ? std::max(1, kernel.cluster) : 1;
  if (ctas_ % cluster_ != 0)
    throw InternalError(
        fmt::format("kernel `{}`: {} CTAs are not whole clusters of {}", kernel_, ctas_, cluster_));
  if (kernel.rank >= 0 && local_ != std::vector<int>{static_cast<int>(kernel.rank)}) {
    throw UserError(fmt::format(
        "kernel `{}` holds the tables of rank {} of {} alone (built with a rank: `mkc compile "
        "--rank`, or a launched process's own), but this process runs {}; build the kernel of "
        "the ranks it runs",
        kernel_, kernel.rank, n,
        local_.size() == 1 ? fmt::format("rank {}", local_[0]) : std::string("every rank")));
  }
  task_ids_ = kernel.task_ids;
  kernel_tasks_ = kernel.task_count(plan_);
  // What the processes must agree on, of which each one's plan may know only its own rank's part
  // (a plan of its neighbourhood): every rank's counter array is as long as the most counters any
  // rank has, and every rank runs a host proxy (their connection is collective) when any rank's
  // tasks cross nodes (on a ring across two nodes, only the ranks at the nodes' ends do).
  counters_ = plan_.max_counters();
  proxied_ = plan_.has_edges_between_nodes();
  if (group) {
    struct Card {
      int32_t counters;
      int32_t crosses_nodes;
    };
    const Card mine{plan_.counters_of(local_.at(0)), proxied_ ? 1 : 0};
    const std::vector<std::string> all =
        group->all_gather(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)));
    for (size_t r = 0; r < all.size(); ++r) {
      Card theirs{};
      if (all[r].size() != sizeof(theirs)) {
        throw EnvironmentError(fmt::format(
            "rank {} sent a {}-byte plan card, rank {} expects {}: are both the same mkc build?", r,
            all[r].size(), local_.at(0), sizeof(theirs)));
      }
      std::memcpy(&theirs, all[r].data(), sizeof(theirs));
      counters_ = std::max(counters_, static_cast<int>(theirs.counters));
      proxied_ = proxied_ || theirs.crosses_nodes != 0;
    }
  }
  const HeapLayout layout = heap_layout(plan_, counters_);
  offsets_ = layout.offsets;
  events_offset_ = layout.events_offset;
  proxy_head_offset_ = layout.proxy_head_offset;
  proxy_tail_offset_ = layout.proxy_tail_offset;
  proxy_events_offset_ = layout.proxy_events_offset;
  launch_offset_ = layout.launch_offset;
  heap_bytes_ = layout.bytes;

  for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<Rank>());
  // The device of each local rank, and how many of this process's ranks share it.
  std::vector<int> sharing(gpus, 0);
  for (int r : local_) {
    const int slot = group ? group->world().local_rank : r;
    ranks_[r]->dev = slot % gpus;
    ++sharing[slot % gpus];
  }
  for (int r : local_) {
    Rank& rk = *ranks_[r];
    rk.local = true;
    MKC_CU(d, cuDeviceGet, &rk.dev, static_cast<int>(rk.dev));
    MKC_CU(d, cuDevicePrimaryCtxRetain, &rk.ctx, rk.dev);
    CtxScope scope(d, rk.ctx);
    MKC_CU(d, cuModuleLoadData, &rk.mod, cubin.data());
    MKC_CU(d, cuModuleGetFunction, &rk.fn, rk.mod, kernel_.c_str());
    load_plan_tables(rk, kernel);
    if (smem_ > 0)
      MKC_CU(d, cuFuncSetAttribute, rk.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_);
    // Every CTA must be resident at once: a persistent kernel's CTAs wait on each other, and
    // ranks of this process on one GPU wait on each other too.
    int per_sm = 0, sms = 0;
    MKC_CU(d, cuOccupancyMaxActiveBlocksPerMultiprocessor, &per_sm, rk.fn, threads, smem_);
    MKC_CU(d, cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, rk.dev);
    const int k = sharing[static_cast<int>(rk.dev)];
    if (cluster_ > 1) {
      // In clusters, what counts is how many clusters fit at once (an SM a cluster cannot pair
      // with stays idle): the runtime's own count for this kernel and its launch.
      CUlaunchAttribute attr;
      const CUlaunchConfig cfg = cluster_launch(ctas, threads, smem_, cluster_, nullptr, &attr);
      int clusters = 0;
      MKC_CU(d, cuOccupancyMaxActiveClusters, &clusters, rk.fn, &cfg);
      if (static_cast<int64_t>(clusters) * cluster_ < static_cast<int64_t>(ctas) * k) {
        throw UserError(fmt::format(
            "the kernel's {} CTAs in clusters of {} cannot all be resident on GPU {}{} ({} "
            "clusters at once); compile with --sms {}, or without clustered GEMM tiles (a tuned "
            "entry's \"cluster\": 1)",
            ctas, cluster_, static_cast<int>(rk.dev),
            k > 1 ? fmt::format(" {} times over (it runs {} ranks)", k, k) : std::string(),
            clusters, clusters * cluster_ / k / cluster_ * cluster_));
      }
    }
    if (static_cast<int64_t>(per_sm) * sms < static_cast<int64_t>(ctas) * k) {
      throw UserError(fmt::format(
          "the kernel's {} CTAs cannot all be resident on GPU {}{} ({} per SM x {} SMs); compile "
          "with --sms {}",
          ctas, static_cast<int>(rk.dev),
          k > 1 ? fmt::format(" {} times over (it runs {} ranks)", k, k) : std::string(), per_sm,
          sms, sms / k));
    }
    MKC_CU(d, cuStreamCreate, &rk.stream, CU_STREAM_NON_BLOCKING);
    allocate_heap(rk);
  }
  enable_peer_access();
  if (group) swap_heaps();
  for (auto& rk : ranks_) rk->bound.assign(plan_.buffers.size(), 0);
  map_specs_ = kernel.tensor_maps;
  write_tables();
  if (proxied_) start_proxies();
}

LocalJob::~LocalJob() {
  release(true);
}

// Destructors never throw: failures here are ignored (the process is usually ending). Safe on a
// job half built: every handle is checked before it is released.
void LocalJob::release(bool barrier) {
  const Driver& d = Driver::get();
  if (ranks_.empty()) return;            // nothing taken yet
  for (const auto& [r, s] : pending_) {  // the caller's streams, launched on but not waited for
    d.cuCtxSetCurrent(ranks_[r]->ctx);
    d.cuStreamSynchronize(s);
  }
  pending_.clear();
  for (int r : local_) {
    if (!ranks_[r]->ctx) continue;
    d.cuCtxSetCurrent(ranks_[r]->ctx);
    if (ranks_[r]->stream) d.cuStreamSynchronize(ranks_[r]->stream);
  }
  // No rank frees its heap while a peer's kernel may still write into it.
  if (barrier && opts_.group) {
    try {
      opts_.group->barrier();
    } catch (const std::exception&) {
    }
  }
  // Every rank's kernels are done (the barrier): no request is left for the proxies.
  stop_proxies();
  // Peers' heaps were mapped in this process's (one) local rank's context.
  if (opts_.group && !local_.empty() && ranks_[local_[0]]->ctx) {
    d.cuCtxSetCurrent(ranks_[local_[0]]->ctx);
    for (auto& rk : ranks_) {
      if (rk->ipc_mapped) d.cuIpcCloseMemHandle(rk->heap);
      rk->ipc_mapped = false;
    }
  }
  for (int r : local_) {
    Rank& rk = *ranks_[r];
    if (!rk.ctx) continue;
    d.cuCtxSetCurrent(rk.ctx);
    if (rk.heap) d.cuMemFree(rk.heap);
    if (rk.buffer_table) d.cuMemFree(rk.buffer_table);
    if (rk.event_table) d.cuMemFree(rk.event_table);
    if (rk.tensor_maps) d.cuMemFree(rk.tensor_maps);
    if (rk.trace) d.cuMemFree(rk.trace);
    if (rk.error) d.cuMemFreeHost(rk.error);
    if (rk.stream) d.cuStreamDestroy(rk.stream);
    if (rk.mod) d.cuModuleUnload(rk.mod);
    d.cuDevicePrimaryCtxRelease(rk.dev);
    rk = Rank{};
  }
  d.cuCtxSetCurrent(nullptr);
}

bool LocalJob::is_local(int rank) const {
  return rank >= 0 && rank < ranks() && ranks_[rank]->local;
}

LocalJob::Rank& LocalJob::local(int rank, const char* what) const {
  if (!is_local(rank)) {
    throw UserError(fmt::format(
        "{}: rank {} {}", what, rank,
        rank < 0 || rank >= ranks()
            ? fmt::format("is not in [0, {})", ranks())
            : fmt::format("runs in another process (this one runs rank {})", local_.at(0))));
  }
  return *ranks_[rank];
}

void LocalJob::set_trace(bool on) {
  const Driver& d = Driver::get();
  synchronize();
  for (int r : local_) {
    Rank& rk = *ranks_[r];
    CtxScope scope(d, rk.ctx);
    if (on && !rk.trace) {
      MKC_CU(d, cuMemAlloc, &rk.trace, std::max<size_t>(1, kernel_tasks_) * 16);
    } else if (!on && rk.trace) {
      d.cuMemFree(rk.trace);
      rk.trace = 0;
    }
  }
}

std::vector<uint64_t> LocalJob::trace(int rank) {
  const Driver& d = Driver::get();
  Rank& rk = local(rank, "trace");
  synchronize();
  std::vector<uint64_t> out(plan_.tasks.size() * 2, 0);
  if (!rk.trace || kernel_tasks_ == 0) return out;
  CtxScope scope(d, rk.ctx);
  MKC_CU(d, cuStreamSynchronize, rk.stream);
  std::vector<uint64_t> got(kernel_tasks_ * 2, 0);
  MKC_CU(d, cuMemcpyDtoH, got.data(), rk.trace, got.size() * 8);
  // The kernel numbers its tasks its own way (a kernel of one rank: Generated::task_ids).
  for (size_t t = 0; t < kernel_tasks_; ++t) {
    const size_t p = task_ids_.empty() ? t : static_cast<size_t>(task_ids_[t]);
    out[2 * p] = got[2 * t];
    out[2 * p + 1] = got[2 * t + 1];
  }
  return out;
}

CUcontext LocalJob::context(int rank) const {
  return local(rank, "context").ctx;
}
CUstream LocalJob::stream(int rank) const {
  return local(rank, "stream").stream;
}
CUdeviceptr LocalJob::buffer_address(int rank, int buffer) const {
  local(rank, "buffer_address");
  return address(rank, buffer);
}

}  // namespace mkc::rt
