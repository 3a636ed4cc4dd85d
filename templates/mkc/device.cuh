// mkc device primitives: the kernel's view of buffers, events (counters) and errors.
//
// Events are 64-bit counters that only grow. A signal is a release add at the reader's scope (the
// GPU for a counter on this GPU, the system for a peer's or host-mapped counter); a wait is an
// acquire load by one thread, spinning until the counter reaches its target, followed by a CTA
// barrier so the whole CTA sees what the producer wrote. Every wait has a deadline (%globaltimer);
// on expiry the CTA records who waited for what in host-mapped memory and gives up: no hang.
// This header is compiled by NVRTC only (no host code, no host headers).
#pragma once

#include <cuda/atomic>

namespace mkc {

typedef unsigned long long u64;

// A contiguous sub-tensor of a buffer on some rank (up to 6 dimensions).
struct View {
  int rank;
  int buffer;
  long long offset;
  int ndim;
  long long shape[6];
};

struct Wait {
  int event;
  int count;
  int lag;
};

// scope: 0 = this GPU, 1 = system (a peer GPU or the host).
struct Signal {
  int event;
  int rank;
  int scope;
};

// Written once, by the first CTA that gives up; the host turns it into an exception.
struct ErrorRecord {
  unsigned int flag;  // 0: no error; 1: a wait timed out
  int rank;
  int task;
  int event;
  u64 expected;
  u64 seen;
};

// A host-built CUtensorMap (runtime/tensor_map.h): 128 opaque bytes, 64-byte aligned.
struct alignas(64) TensorMap {
  u64 raw[16];
};

struct KernelArgs {
  void* const* buffers;  // [ranks * buffers]: this process's address of each rank's buffer
  u64* const* events;    // [ranks]: each rank's counter array, mapped here
  int rank;
  u64 epoch;                     // launch number, from 1
  u64 timeout_ns;                // per wait
  ErrorRecord* error;            // host-mapped
  u64* trace;                    // optional: [tasks * 2] start/end %globaltimer, or null
  const TensorMap* tensor_maps;  // the plan's TMA descriptors (device memory), or null
};

__device__ __forceinline__ u64 globaltimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <typename T>
__device__ __forceinline__ T* view_ptr(const KernelArgs& a, const View& v, int nbuffers) {
  return static_cast<T*>(a.buffers[v.rank * nbuffers + v.buffer]) + v.offset;
}

// Thread 0 waits for every wait of a task; returns false (after recording it) on a timeout, or
// when another CTA already gave up. A task without waits costs nothing here: no barrier, no read
// of the host-mapped error flag. That flag is read only while spinning, and rarely: a read of host
// memory crosses PCIe, and such reads from every SM serialise (one per task cost a 132-CTA GEMM
// about 130 us per wave of tiles). The barrier below shares the answer with the CTA.
__device__ inline bool wait_all(const KernelArgs& a, const Wait* waits, int n, int task) {
  if (n == 0) return true;
  __shared__ int ok;
  if (threadIdx.x == 0) {
    ok = 1;
    for (int i = 0; i < n && ok; ++i) {
      const Wait w = waits[i];
      const u64 target = (a.epoch - w.lag) * static_cast<u64>(w.count);
      cuda::atomic_ref<u64, cuda::thread_scope_system> c(a.events[a.rank][w.event]);
      u64 seen = c.load(cuda::memory_order_acquire);
      if (seen >= target) continue;
      const u64 start = globaltimer();
      u64 looked = start;
      while (seen < target) {
        const u64 now = globaltimer();
        if (now - start > a.timeout_ns) {
          if (atomicCAS(&a.error->flag, 0u, 1u) == 0u) {
            a.error->rank = a.rank;
            a.error->task = task;
            a.error->event = w.event;
            a.error->expected = target;
            a.error->seen = seen;
            __threadfence_system();
          }
          ok = 0;
          break;
        }
        // Another CTA gave up: give up too (looked at every 50 us of spinning).
        if (now - looked > 50000) {
          looked = now;
          if (cuda::atomic_ref<unsigned int, cuda::thread_scope_system>(a.error->flag)
                  .load(cuda::memory_order_relaxed) != 0u) {
            ok = 0;
            break;
          }
        }
        __nanosleep(32);
        seen = c.load(cuda::memory_order_acquire);
      }
    }
  }
  __syncthreads();
  return ok != 0;
}

// After a task: every thread's writes are done (barrier), then thread 0 publishes them.
__device__ inline void signal_all(const KernelArgs& a, const Signal* sigs, int n) {
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 0; i < n; ++i) {
      const Signal s = sigs[i];
      u64* counter = &a.events[s.rank][s.event];
      if (s.scope == 0) {
        cuda::atomic_ref<u64, cuda::thread_scope_device>(*counter).fetch_add(
            1, cuda::memory_order_release);
      } else {
        cuda::atomic_ref<u64, cuda::thread_scope_system>(*counter).fetch_add(
            1, cuda::memory_order_release);
      }
    }
  }
}

}  // namespace mkc
