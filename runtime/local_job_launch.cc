// rt::LocalJob's launches: one launch is the generated kernel enqueued on every local rank; the
// kernel numbers its launches itself on the GPU (abi::KernelArgs::launches; waits fold the number
// into their targets, so nothing is reset between launches, and a captured launch replays);
// launch() waits for it, launch_async() leaves it on the caller's streams until synchronize(),
// time_launches() enqueues many back to back between two CUDA events. Every wait ends in
// raise_errors (local_job_errors.cc).
#include <fmt/format.h>

#include <algorithm>

#include "runtime/local_job.h"
#include "runtime/local_job_internal.h"
#include "support/error.h"

namespace mkc::rt {

void LocalJob::enqueue(int r, CUstream stream) {
  const Driver& d = Driver::get();
  Rank& rk = *ranks_[r];
  CtxScope scope(d, rk.ctx);
  abi::KernelArgs args{};
  args.buffers = reinterpret_cast<void* const*>(rk.buffer_table);
  args.events = reinterpret_cast<abi::u64* const*>(rk.event_table);
  args.rank = r;
  args.epoch = epoch_;
  args.timeout_ns = opts_.timeout_ns;
  args.error = reinterpret_cast<abi::ErrorRecord*>(rk.error_dev);
  args.trace = reinterpret_cast<abi::u64*>(rk.trace);
  args.tensor_maps = reinterpret_cast<const abi::TensorMap*>(rk.tensor_maps);
  args.heap = reinterpret_cast<const char*>(rk.heap);
  args.launches = reinterpret_cast<abi::u64*>(rk.heap + launch_offset_);
  proxy_args(r, &args);
  if (rk.trace) MKC_CU(d, cuMemsetD8Async, rk.trace, 0, kernel_tasks_ * 16, stream);
  void* params[] = {&args};
  if (cluster_ > 1) {
    // Paired GEMM tiles (templates/mkc/gemm_sm90.cuh): CTAs 2c and 2c + 1 form a cluster.
    CUlaunchAttribute attr;
    const CUlaunchConfig cfg = cluster_launch(ctas_, threads_, smem_, cluster_, stream, &attr);
    MKC_CU(d, cuLaunchKernelEx, &cfg, rk.fn, params, nullptr);
    return;
  }
  MKC_CU(d, cuLaunchKernel, rk.fn, static_cast<unsigned>(ctas_), 1, 1,
         static_cast<unsigned>(threads_), 1, 1, static_cast<unsigned>(smem_), stream, params,
         nullptr);
}

void LocalJob::finish(const std::vector<int>& which) {
  const Driver& d = Driver::get();
  for (int r : which) {
    CtxScope scope(d, ranks_[r]->ctx);
    MKC_CU(d, cuStreamSynchronize, ranks_[r]->stream);
  }
  raise_errors(which);
}

void LocalJob::launch(const std::vector<int>& which) {
  const std::vector<int> ranks = which.empty() ? local_ : which;
  for (int r : ranks) local(r, "launch");
  synchronize();
  ++epoch_;
  for (int r : ranks) enqueue(r, ranks_[r]->stream);
  finish(ranks);
}

void LocalJob::launch_async(const std::vector<CUstream>& streams) {
  const Driver& d = Driver::get();
  if (streams.size() != local_.size()) {
    throw UserError(
        fmt::format("launch_async: {} stream(s) for {} local rank(s); give one per rank",
                    streams.size(), local_.size()));
  }
  // A wait that timed out in an earlier launch: report it now (its kernel is ending).
  for (int r : local_) {
    if (__atomic_load_n(&ranks_[r]->error->flag, __ATOMIC_ACQUIRE) != 0) synchronize();
  }
  for (size_t i = 0; i < local_.size(); ++i) {
    const CUstream s = streams[i];
    if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) continue;
    CUcontext ctx{};
    MKC_CU(d, cuStreamGetCtx, s, &ctx);
    if (ctx != ranks_[local_[i]]->ctx) {
      throw UserError(fmt::format(
          "launch_async: stream {} (for rank {}) belongs to another context than the rank's "
          "(GPU {}'s primary context, the CUDA runtime's); create it on that GPU",
          i, local_[i], static_cast<int>(ranks_[local_[i]]->dev)));
    }
  }
  ++epoch_;
  for (size_t i = 0; i < local_.size(); ++i) {
    enqueue(local_[i], streams[i]);
    pending_.emplace_back(local_[i], streams[i]);
  }
}

void LocalJob::synchronize() {
  if (pending_.empty()) return;
  const Driver& d = Driver::get();
  const auto pending = std::move(pending_);
  pending_.clear();
  std::vector<int> which;
  for (const auto& [r, s] : pending) {
    CtxScope scope(d, ranks_[r]->ctx);
    MKC_CU(d, cuStreamSynchronize, s);
    if (std::find(which.begin(), which.end(), r) == which.end()) which.push_back(r);
  }
  raise_errors(which);
}

uint64_t LocalJob::device_launches(int rank) {
  Rank& rk = local(rank, "device_launches");
  synchronize();
  const Driver& d = Driver::get();
  CtxScope scope(d, rk.ctx);
  MKC_CU(d, cuCtxSynchronize);  // graph replays on the caller's streams too
  abi::u64 n = 0;
  MKC_CU(d, cuMemcpyDtoH, &n, rk.heap + launch_offset_, sizeof(n));
  return n;
}

double LocalJob::time_launches(int iters) {
  const Driver& d = Driver::get();
  synchronize();
  const std::vector<int>& all = local_;
  Rank& first = *ranks_[all.at(0)];
  CUevent start{}, stop{};
  {
    CtxScope scope(d, first.ctx);
    MKC_CU(d, cuEventCreate, &start, CU_EVENT_DEFAULT);
    MKC_CU(d, cuEventCreate, &stop, CU_EVENT_DEFAULT);
    MKC_CU(d, cuEventRecord, start, first.stream);
  }
  for (int i = 0; i < iters; ++i) {
    ++epoch_;
    for (int r : all) enqueue(r, ranks_[r]->stream);
  }
  float ms = 0;
  {
    CtxScope scope(d, first.ctx);
    MKC_CU(d, cuEventRecord, stop, first.stream);
  }
  finish(all);
  {
    CtxScope scope(d, first.ctx);
    MKC_CU(d, cuEventElapsedTime, &ms, start, stop);
    d.cuEventDestroy(start);
    d.cuEventDestroy(stop);
  }
  return ms * 1000.0 / iters;
}

}  // namespace mkc::rt
