#include "runtime/cuda_heap.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string_view>

#include "runtime/cuda_driver.h"
#include "support/error.h"

namespace mkc::rt {

namespace {

using Clock = std::chrono::steady_clock;

int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

}  // namespace

CudaHeap::~CudaHeap() {
  if (stream_ == nullptr) return;
  const Driver& d = Driver::get();
  d.cuCtxSetCurrent(ctx_);
  d.cuStreamDestroy(stream_);
}

CUstream CudaHeap::enter() {
  const Driver& d = Driver::get();
  MKC_CU(d, cuCtxSetCurrent, ctx_);
  if (stream_ == nullptr) MKC_CU(d, cuStreamCreate, &stream_, CU_STREAM_NON_BLOCKING);
  return stream_;
}

void CudaHeap::publish(int64_t offset, uint64_t value) {
  net::check_range(offset, sizeof(value), bytes_, "heap publish");
  const auto t0 = Clock::now();
  const CUstream s = enter();
  const Driver& d = Driver::get();
  if (memops_ < 0) {
    CUdevice dev = 0;
    int can = 0;
    MKC_CU(d, cuCtxGetDevice, &dev);
    MKC_CU(d, cuDeviceGetAttribute, &can, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev);
    const char* env = std::getenv("MKC_HEAP_PUBLISH");
    memops_ = can != 0 && !(env != nullptr && std::string_view(env) == "copy") ? 1 : 0;
  }
  const CUdeviceptr at = base_ + static_cast<CUdeviceptr>(offset);
  if (memops_ == 0) {
    // Synchronous: `value` lives on this stack.
    MKC_CU(d, cuMemcpyHtoDAsync, at, &value, sizeof(value), s);
    MKC_CU(d, cuStreamSynchronize, s);
  } else {
    // Without CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER: the copies before it are visible first.
    MKC_CU(d, cuStreamWriteValue64, s, at, value, CU_STREAM_WRITE_VALUE_DEFAULT);
  }
  ++stats_.publishes;
  stats_.publish_ns += ns_since(t0);
}

void CudaHeap::stage_begin(void* buffer, size_t bytes) {
  if (buffer == nullptr || bytes == 0) return;
  enter();
  if (Driver::get().cuMemHostRegister(buffer, bytes, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS)
    locked_.push_back(buffer);
}

void CudaHeap::stage_end(void* buffer) {
  const auto it = std::find(locked_.begin(), locked_.end(), buffer);
  if (it == locked_.end()) return;
  locked_.erase(it);
  const Driver& d = Driver::get();
  d.cuCtxSetCurrent(ctx_);
  d.cuMemHostUnregister(buffer);
}

void CudaHeap::read(int64_t offset, void* dst, int64_t bytes) {
  const net::ReadSpan span{offset, dst, bytes};
  read_all(&span, 1);
}

void CudaHeap::write(int64_t offset, const void* src, int64_t bytes) {
  const net::WriteSpan span{offset, src, bytes};
  write_all(&span, 1);
}

void CudaHeap::read_all(const net::ReadSpan* spans, size_t n) {
  pending_.clear();
  for (size_t i = 0; i < n; ++i) {
    const net::ReadSpan& r = spans[i];
    net::check_range(r.offset, r.bytes, bytes_, "heap read");
    if (r.bytes > 0)
      pending_.push_back({reinterpret_cast<CUdeviceptr>(r.dst),
                          base_ + static_cast<CUdeviceptr>(r.offset),
                          static_cast<size_t>(r.bytes)});
  }
  copy_pending(true);
}

void CudaHeap::write_all(const net::WriteSpan* spans, size_t n) {
  pending_.clear();
  for (size_t i = 0; i < n; ++i) {
    const net::WriteSpan& w = spans[i];
    net::check_range(w.offset, w.bytes, bytes_, "heap write");
    if (w.bytes > 0)
      pending_.push_back({base_ + static_cast<CUdeviceptr>(w.offset),
                          reinterpret_cast<CUdeviceptr>(w.src), static_cast<size_t>(w.bytes)});
  }
  copy_pending(false);
}

// pending_ on the heap's stream, then one synchronise, counted in stats_. With cuMemcpyBatchAsync a
// run of copies is one call; a batch's copies may run in any order, so a copy whose destination
// overlaps one already in the run starts the next run (runs keep stream order). Without it (or
// MKC_HEAP_BATCH=0), one cuMemcpy*Async per copy.
void CudaHeap::copy_pending(bool to_host) {
  if (pending_.empty()) return;
  const auto t0 = Clock::now();
  const CUstream s = enter();
  const Driver& d = Driver::get();
  if (batch_ < 0) {
    const char* env = std::getenv("MKC_HEAP_BATCH");
    batch_ = d.cuMemcpyBatchAsync != nullptr && !(env != nullptr && std::string_view(env) == "0");
    MKC_CU(d, cuCtxGetDevice, &dev_);
  }
  if (batch_ == 0 || pending_.size() == 1) {
    for (const Copy& c : pending_) {
      if (to_host) {
        MKC_CU(d, cuMemcpyDtoHAsync, reinterpret_cast<void*>(c.dst), c.src, c.bytes, s);
      } else {
        MKC_CU(d, cuMemcpyHtoDAsync, c.dst, reinterpret_cast<const void*>(c.src), c.bytes, s);
      }
    }
  } else {
    CUmemcpyAttributes attr{};
    attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    CUmemLocation device{}, host{};
    device.type = CU_MEM_LOCATION_TYPE_DEVICE;
    device.id = static_cast<int>(dev_);
    host.type = CU_MEM_LOCATION_TYPE_HOST;
    attr.srcLocHint = to_host ? device : host;
    attr.dstLocHint = to_host ? host : device;
    // Copy engines, not copy kernels: the persistent kernel holds the SMs.
    attr.flags = CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
    size_t first = 0;
    while (first < pending_.size()) {
      size_t end = first + 1;
      for (; end < pending_.size(); ++end) {
        bool overlaps = false;
        for (size_t k = first; k < end && !overlaps; ++k)
          overlaps = pending_[end].dst < pending_[k].dst + pending_[k].bytes &&
                     pending_[k].dst < pending_[end].dst + pending_[end].bytes;
        if (overlaps) break;
      }
      dsts_.clear();
      srcs_.clear();
      sizes_.clear();
      for (size_t k = first; k < end; ++k) {
        dsts_.push_back(pending_[k].dst);
        srcs_.push_back(pending_[k].src);
        sizes_.push_back(pending_[k].bytes);
      }
      size_t attr_index = 0, failed = 0;
      const CUresult r = d.cuMemcpyBatchAsync(dsts_.data(), srcs_.data(), sizes_.data(),
                                              dsts_.size(), &attr, &attr_index, 1, &failed, s);
      if (r != CUDA_SUCCESS) {
        throw EnvironmentError(fmt::format(
            "{} (copy {} of a batch of {} {} bytes; MKC_HEAP_BATCH=0 copies one at a time)",
            describe_cu_error(d, r, "cuMemcpyBatchAsync", __FILE__, __LINE__), failed, dsts_.size(),
            to_host ? "heap -> host" : "host -> heap"));
      }
      first = end;
    }
  }
  MKC_CU(d, cuStreamSynchronize, s);
  const int64_t ns = ns_since(t0);
  Stats::Copies& st = to_host ? stats_.reads : stats_.writes;
  for (const Copy& c : pending_) st.bytes += static_cast<int64_t>(c.bytes);
  st.copies += static_cast<int64_t>(pending_.size());
  ++st.waits;
  st.ns += ns;
  st.max_ns = std::max(st.max_ns, ns);
}

}  // namespace mkc::rt
