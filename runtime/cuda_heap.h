// A rank's symmetric heap in GPU memory as its proxy reaches it (net::MemoryAccess on the CUDA
// driver): copies on a stream of the heap's own, never the legacy default stream (which would wait
// for the persistent kernel that waits for these bytes), each synchronised before it returns.
// Used from the proxy's thread: the context is made current on every call. rt::LocalJob gives one
// to each rank's proxy; bench/proxy_gpu_bench uses the same.
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
  // Page-locks a transport's staging buffer (cuMemHostRegister), or leaves it as it is when the
  // driver refuses (the copies still work, through the driver's bounce buffers).
  void stage_begin(void* buffer, size_t bytes) override;
  void stage_end(void* buffer) override;

 private:
  CUstream enter();
  CUcontext ctx_;
  CUdeviceptr base_;
  int64_t bytes_;
  CUstream stream_ = nullptr;
  std::vector<void*> locked_;  // staging buffers this heap page-locked
};

}  // namespace mkc::rt
