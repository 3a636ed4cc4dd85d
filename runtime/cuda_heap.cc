#include "runtime/cuda_heap.h"

#include <algorithm>

#include "runtime/cuda_driver.h"

namespace mkc::rt {

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
  net::check_range(offset, bytes, bytes_, "heap read");
  if (bytes == 0) return;
  const CUstream s = enter();
  const Driver& d = Driver::get();
  MKC_CU(d, cuMemcpyDtoHAsync, dst, base_ + static_cast<CUdeviceptr>(offset),
         static_cast<size_t>(bytes), s);
  MKC_CU(d, cuStreamSynchronize, s);
}

void CudaHeap::write(int64_t offset, const void* src, int64_t bytes) {
  net::check_range(offset, bytes, bytes_, "heap write");
  if (bytes == 0) return;
  const CUstream s = enter();
  const Driver& d = Driver::get();
  MKC_CU(d, cuMemcpyHtoDAsync, base_ + static_cast<CUdeviceptr>(offset), src,
         static_cast<size_t>(bytes), s);
  MKC_CU(d, cuStreamSynchronize, s);
}

}  // namespace mkc::rt
