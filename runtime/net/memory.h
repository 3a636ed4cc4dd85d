// How the proxy and the transports reach a rank's symmetric heap, without knowing where it lives.
//
// In the runtime the heap is GPU memory: the CUDA driver implements MemoryAccess there (copies on a
// stream of its own, a dma-buf of the allocation for RDMA registration). Tests, the benchmark and
// any CPU-only use give a HostMemory: a host buffer. Offsets are bytes from the heap's start; a
// range outside [0, size()) is refused by every implementation (callers check first, this is the
// second line).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace mkc::rt::net {

// What RDMA may register for the heap. The verbs transport takes the first that exists: a dma-buf
// (GPU memory, ibv_reg_dmabuf_mr: the NIC reads and writes the heap itself), then a host address
// (host memory or host-mapped memory, ibv_reg_mr), else it stages through host buffers of its own.
struct HeapRegistration {
  // The heap as memory this process can address (a host buffer, or host-mapped memory), or null.
  void* host_address = nullptr;
  // A dma-buf file descriptor covering the heap, or -1. It stays the caller's: the transport
  // registers it and never closes it.
  int dmabuf_fd = -1;
  // Where the heap starts inside that dma-buf.
  uint64_t dmabuf_offset = 0;
  // The address RDMA uses for the heap's first byte in a dma-buf registration (its iova): the
  // heap's device virtual address, so that NIC addresses read like the kernel's pointers.
  uint64_t device_address = 0;
};

// One piece of a batch of copies between the heap and host memory.
struct ReadSpan {
  int64_t offset;  // in the heap
  void* dst;       // host memory
  int64_t bytes;
};
struct WriteSpan {
  int64_t offset;   // in the heap
  const void* src;  // host memory
  int64_t bytes;
};

class MemoryAccess {
 public:
  virtual ~MemoryAccess() = default;

  // The heap's size in bytes.
  virtual int64_t size() const = 0;

  // Copies `bytes` at `offset` of the heap into `dst` (host memory). Returns once they are there.
  virtual void read(int64_t offset, void* dst, int64_t bytes) = 0;

  // Copies `bytes` of host memory into the heap at `offset`. Returns once they are visible to the
  // GPU's loads: the proxy raises a counter the kernel polls right after. (An implementation on
  // the CUDA driver must not use the legacy default stream: it would wait for the persistent
  // kernel, which waits for these bytes.)
  virtual void write(int64_t offset, const void* src, int64_t bytes) = 0;

  // Batches: as read() / write() of every span, in order, returning once all are done. On the
  // CUDA driver one wait for the whole batch instead of one per copy. The defaults loop.
  virtual void read_all(const ReadSpan* spans, size_t n) {
    for (size_t i = 0; i < n; ++i) read(spans[i].offset, spans[i].dst, spans[i].bytes);
  }
  virtual void write_all(const WriteSpan* spans, size_t n) {
    for (size_t i = 0; i < n; ++i) write(spans[i].offset, spans[i].src, spans[i].bytes);
  }

  // Stores the 8-byte `value` at `offset` (8-byte aligned) once every write() before it is
  // visible: a word the GPU polls (the proxy's counters and its copy of the ring's tail). Need
  // not wait for the store itself; stores of one word land in the order they were made. The
  // default writes through write().
  virtual void publish(int64_t offset, uint64_t value) { write(offset, &value, sizeof(value)); }

  // A transport's staging buffer (host memory it copies payloads through) starts or ends being
  // used with read() and write(). An implementation on GPU memory page-locks it meanwhile, so
  // the copies run by DMA at PCIe speed instead of through the driver's own bounce buffers. Best
  // effort: a buffer that cannot be locked stays usable. `stage_end` comes before the buffer is
  // freed, with the heap still alive. The defaults do nothing.
  virtual void stage_begin(void* buffer, size_t bytes) {
    (void)buffer;
    (void)bytes;
  }
  virtual void stage_end(void* buffer) { (void)buffer; }

  // What RDMA may register; the default: nothing (stage through host buffers).
  virtual HeapRegistration registration() const { return {}; }

  // The NIC wrote into the heap directly (a dma-buf registration) and a counter is about to tell
  // the GPU: make those writes visible to the GPU's own loads first (on the CUDA driver:
  // cuFlushGPUDirectRDMAWrites). The default does nothing, right for host memory.
  virtual void flush_inbound() {}
};

// A heap in host memory (64-byte aligned, zeroed): for tests, the benchmark and CPU-only jobs.
class HostMemory : public MemoryAccess {
 public:
  explicit HostMemory(int64_t bytes);

  int64_t size() const override { return size_; }
  void read(int64_t offset, void* dst, int64_t bytes) override;
  void write(int64_t offset, const void* src, int64_t bytes) override;
  // A release store: a thread polling the word with an acquire load sees the writes before it.
  void publish(int64_t offset, uint64_t value) override;
  // The buffer itself may be registered (ibv_reg_mr) unless `registrable` is false, which makes a
  // transport stage through buffers of its own as it would for GPU memory without a dma-buf.
  HeapRegistration registration() const override;
  void set_registrable(bool registrable) { registrable_ = registrable; }

  std::byte* data() { return data_.get(); }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  int64_t size_;
  std::unique_ptr<std::byte, Free> data_;
  bool registrable_ = true;
};

// Throws InternalError unless [offset, offset + bytes) lies in [0, size); no overflow.
void check_range(int64_t offset, int64_t bytes, int64_t size, const char* what);

// True when [offset, offset + bytes) lies in [0, size), computed without overflow.
inline bool in_range(int64_t offset, int64_t bytes, int64_t size) {
  return offset >= 0 && bytes >= 0 && offset <= size && bytes <= size - offset;
}

}  // namespace mkc::rt::net
