// A rank's symmetric heap in GPU memory as its proxy reaches it (net::MemoryAccess on the CUDA
// driver): copies on a stream of the heap's own, never the legacy default stream (which would wait
// for the persistent kernel that waits for these bytes), each synchronised before it returns.
// Used from the proxy's thread: the context is made current on every call. A batch of copies
// (read_all, write_all) is one cuMemcpyBatchAsync where the driver has it (MKC_HEAP_BATCH=0: one
// call per copy), and one synchronise. publish() is a stream memory operation
// (cuStreamWriteValue64) after the copies, so the proxy does not wait for it; where the driver has
// no 64-bit memory operations, or MKC_HEAP_PUBLISH=copy, an 8-byte copy.
// rt::LocalJob gives one to each rank's proxy; bench/proxy_gpu_bench uses the same.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "runtime/net/memory.h"

namespace mkc::rt {

class CudaHeap final : public net::MemoryAccess {
 public:
  // `bytes` of device memory at `base`, allocated in `ctx`; both stay the caller's.
  CudaHeap(CUcontext ctx, CUdeviceptr base, int64_t bytes)
      : ctx_(ctx), base_(base), bytes_(bytes) {}
  ~CudaHeap() override;
  CudaHeap(const CudaHeap&) = delete;
  CudaHeap& operator=(const CudaHeap&) = delete;

  int64_t size() const override { return bytes_; }
  void read(int64_t offset, void* dst, int64_t bytes) override;
  void write(int64_t offset, const void* src, int64_t bytes) override;
  // Every copy of the batch on the heap's stream, then one synchronise.
  void read_all(const net::ReadSpan* spans, size_t n) override;
  void write_all(const net::WriteSpan* spans, size_t n) override;
  // Page-locks a transport's staging buffer (cuMemHostRegister), or leaves it as it is when the
  // driver refuses (the copies still work, through the driver's bounce buffers).
  void publish(int64_t offset, uint64_t value) override;
  void stage_begin(void* buffer, size_t bytes) override;
  void stage_end(void* buffer) override;

  // Time spent in the copies and publishes so far (the proxy's thread writes, read after it
  // stopped): what MKC_PROXY_STATS=1 prints at a job's end.
  struct Stats {
    struct Copies {
      int64_t copies = 0;          // a batch counts each of its spans
      int64_t waits = 0;           // synchronisations: one per call or batch
      int64_t ns = 0, max_ns = 0;  // per wait
      int64_t bytes = 0;
    };
    Copies reads, writes;
    int64_t publishes = 0, publish_ns = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Copy {
    CUdeviceptr dst, src;  // a host address as an integer on the host side
    size_t bytes;
  };
  CUstream enter();
  void copy_pending(bool to_host);
  CUcontext ctx_;
  CUdeviceptr base_;
  int64_t bytes_;
  CUstream stream_ = nullptr;
  int memops_ = -1;  // whether publish() uses cuStreamWriteValue64; -1: not yet decided
  int batch_ = -1;   // whether copies go through cuMemcpyBatchAsync; -1: not yet decided
  CUdevice dev_ = 0;
  std::vector<Copy> pending_;  // the batch being copied
  std::vector<CUdeviceptr> dsts_, srcs_;
  std::vector<size_t> sizes_;
  std::vector<void*> locked_;  // staging buffers this heap page-locked
  Stats stats_;
};

}  // namespace mkc::rt
