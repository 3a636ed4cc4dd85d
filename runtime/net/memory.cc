#include "runtime/net/memory.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "support/error.h"

namespace mkc::rt::net {

void check_range(int64_t offset, int64_t bytes, int64_t size, const char* what) {
  if (!in_range(offset, bytes, size)) {
    throw InternalError(fmt::format("{}: bytes [{}, {} + {}) outside a heap of {} bytes", what,
                                    offset, offset, bytes, size));
  }
}

void HostMemory::Free::operator()(std::byte* p) const {
  std::free(p);
}

HostMemory::HostMemory(int64_t bytes) : size_(bytes) {
  if (bytes < 0) throw InternalError(fmt::format("HostMemory of {} bytes", bytes));
  // aligned_alloc wants a multiple of the alignment; at least one line so data() is never null.
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64 + 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    throw EnvironmentError(fmt::format("HostMemory: cannot allocate {} bytes", bytes));
  }
  std::memset(p, 0, rounded);
  data_.reset(static_cast<std::byte*>(p));
}

void HostMemory::read(int64_t offset, void* dst, int64_t bytes) {
  check_range(offset, bytes, size_, "HostMemory::read");
  if (bytes > 0) std::memcpy(dst, data_.get() + offset, static_cast<size_t>(bytes));
}

void HostMemory::write(int64_t offset, const void* src, int64_t bytes) {
  check_range(offset, bytes, size_, "HostMemory::write");
  if (bytes > 0) std::memcpy(data_.get() + offset, src, static_cast<size_t>(bytes));
}

void HostMemory::publish(int64_t offset, uint64_t value) {
  check_range(offset, sizeof(value), size_, "HostMemory::publish");
  if (offset % 8 != 0)
    throw InternalError(
        fmt::format("HostMemory::publish: offset {} is not 8-byte aligned", offset));
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(data_.get() + offset))
      .store(value, std::memory_order_release);
}

HeapRegistration HostMemory::registration() const {
  HeapRegistration r;
  if (registrable_) r.host_address = data_.get();
  return r;
}

}  // namespace mkc::rt::net
