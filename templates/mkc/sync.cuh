// mkc device synchronisation: event waits and signals, the task's deadline, and the error record.
//
// Events are 64-bit counters that only grow. A signal is a release add at the reader's scope (the
// GPU for a counter on this GPU, the system for a peer's or host-mapped counter); a wait is an
// acquire load by one thread, spinning until the counter reaches its target, followed by a CTA
// barrier so the whole CTA sees what the producer wrote, and a proxy fence so the TMA copies the
// task issues next see it too (TMA reads through the async proxy; the producer wrote through the
// generic one).
//
// No hang, ever: every task has one deadline (its start + KernelArgs::timeout_ns) that bounds its
// event waits and the pipeline (mbarrier) waits inside its tile code together. On expiry a thread
// records who waited for what in the host-mapped error record, marks the task failed, and the CTA
// leaves the kernel after the task instead of signalling. Other CTAs notice the record while they
// spin and leave too.
// Compiled by NVRTC only (no host code, no host headers).
#pragma once

#include <cuda/atomic>

#include "mkc/abi.h"

namespace mkc {

using abi::ErrorRecord;
using abi::KernelArgs;
using abi::Signal;
using abi::TaskRecord;
using abi::TensorMap;
using abi::View;
using abi::Wait;
typedef unsigned long long u64;

__device__ __forceinline__ u64 globaltimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The running task of this CTA: its table index, its deadline, and whether a thread gave up; and
// the launch's number (start_launch).
struct TaskState {
  u64 deadline;
  u64 epoch;
  int task;
  int failed;
};

__device__ __forceinline__ TaskState& task_state() {
  __shared__ TaskState state;
  return state;
}

// Records the first failure of the launch (later ones keep the first record) and marks the
// running task failed. Any thread may call it.
__device__ __forceinline__ void report_failure(const KernelArgs& a, unsigned kind, int event,
                                               u64 expected, u64 seen) {
  TaskState& st = task_state();
  if (atomicCAS(&a.error->flag, 0u, kind) == 0u) {
    a.error->rank = a.rank;
    a.error->task = st.task;
    a.error->event = event;
    a.error->expected = expected;
    a.error->seen = seen;
    __threadfence_system();
  }
  st.failed = 1;
}

// True once some CTA of this launch recorded a failure (a read of host memory: call it rarely).
__device__ __forceinline__ bool launch_failed(const KernelArgs& a) {
  return cuda::atomic_ref<unsigned, cuda::thread_scope_system>(a.error->flag)
             .load(cuda::memory_order_relaxed) != 0u;
}

// The launch's number, from 1 (KernelArgs::launches): one more than the launches this rank's
// kernel completed. Thread 0 reads it (it alone waits); called once at kernel start, before the
// first task. The last CTA to leave stores it (end_launch) only after every CTA has read it.
__device__ __forceinline__ void start_launch(const KernelArgs& a) {
  if (threadIdx.x == 0) {
    task_state().epoch = cuda::atomic_ref<u64, cuda::thread_scope_device>(a.launches[0])
                             .load(cuda::memory_order_relaxed) +
                         1;
  }
}

// In a kernel whose GEMM tiles store C by TMA (MKC_BULK_STORES, gemm_sm90.cuh's
// store_tile_tma, which leaves its stores under way while the next tile runs): every thread
// waits until its bulk stores are complete and visible, before anything may read C (the task's
// signals, the kernel's end). A thread without any passes at once.
__device__ __forceinline__ void bulk_stores_drain() {
#if defined(MKC_BULK_STORES) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group 0;\nfence.proxy.async.global;" ::: "memory");
#endif
}

// This CTA's part of the launch is over (after its last task, or a failure): the last CTA to
// leave records the launch as completed and resets the count for the next one. The next launch
// on the stream starts after this kernel ends, so it reads the new number.
__device__ __forceinline__ void end_launch(const KernelArgs& a) {
  bulk_stores_drain();
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence();
  if (atomicAdd(&a.launches[1], 1ull) == gridDim.x - 1) {
    cuda::atomic_ref<u64, cuda::thread_scope_device>(a.launches[1])
        .store(0, cuda::memory_order_relaxed);
    cuda::atomic_ref<u64, cuda::thread_scope_device>(a.launches[0])
        .store(task_state().epoch, cuda::memory_order_release);
  }
}

// The start of task `t`: its deadline begins now. The barrier publishes the state to the CTA.
__device__ __forceinline__ void begin_task(const KernelArgs& a, int t) {
  if (threadIdx.x == 0) {
    TaskState& st = task_state();
    st.deadline = globaltimer() + a.timeout_ns;
    st.task = t;
    st.failed = 0;
  }
  __syncthreads();
}

// Polling (experiments: -D through $MKC_NVRTC_OPTIONS). A waiting thread polls flat out (a 32 ns
// sleep between loads) for its first kPollFast polls, then doubles the sleep up to
// MKC_POLL_SLEEP_MAX_NS: a wait of microseconds costs nothing extra, and a hundred CTAs waiting
// milliseconds for a dispatch do not load the memory system the producers need. The host-mapped
// error flag (a PCIe read; such reads from every SM serialise) is read every MKC_FAILED_POLL_NS
// of waiting.
#ifndef MKC_POLL_SLEEP_MAX_NS
#define MKC_POLL_SLEEP_MAX_NS 1024
#endif
#ifndef MKC_FAILED_POLL_NS
#define MKC_FAILED_POLL_NS 100000
#endif
constexpr int kPollFast = 16;

// Thread 0 waits for every wait of the task; false (after recording it) when the task's deadline
// passes or another CTA already gave up (polling as above).
__device__ inline bool wait_all(const KernelArgs& a, const Wait* waits, int n) {
  if (n == 0) return true;
  TaskState& st = task_state();
  if (threadIdx.x == 0) {
    for (int i = 0; i < n && !st.failed; ++i) {
      const Wait w = waits[i];
      const u64 target = (st.epoch - w.lag) * static_cast<u64>(w.count);
      // Spin with relaxed loads and acquire once, after the count is reached: an acquire at
      // system scope per poll (a fence each) from a hundred waiting CTAs slowed the memory
      // traffic of the CTAs they wait for by two orders of magnitude (MoE dispatch rows at
      // 5 GB/s instead of 1.2 TB/s; docs/RESULTS.md, sixth session).
      cuda::atomic_ref<u64, cuda::thread_scope_system> c(a.events[a.rank][w.event]);
      // Raised from other nodes too: plus the proxy's counter (device memory, written by the
      // proxy's stream after the bytes it delivered).
#ifdef MKC_HAS_PROXY
      u64* const from_proxy = w.proxy ? a.proxy_events + w.event : nullptr;
#else
      u64* const from_proxy = nullptr;
#endif
      const auto count = [&] {
        u64 v = c.load(cuda::memory_order_relaxed);
        if (from_proxy != nullptr)
          v += cuda::atomic_ref<u64, cuda::thread_scope_system>(*from_proxy)
                   .load(cuda::memory_order_relaxed);
        return v;
      };
      u64 seen = count();
      u64 looked = 0;
      unsigned sleep_ns = 32;
      for (int polls = 0; seen < target; ++polls) {
        const u64 now = globaltimer();
        if (now > st.deadline) {
          report_failure(a, abi::kWaitTimeout, w.event, target, seen);
          break;
        }
        if (now - looked > MKC_FAILED_POLL_NS) {
          if (looked != 0 && launch_failed(a)) {
            st.failed = 1;
            break;
          }
          looked = now;
        }
        __nanosleep(sleep_ns);
        if (polls >= kPollFast && sleep_ns < MKC_POLL_SLEEP_MAX_NS) sleep_ns *= 2;
        seen = count();
      }
    }
    cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
  }
  __syncthreads();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(MKC_NO_PROXY_FENCE)
  // What the producers wrote with generic stores is read next by TMA (the async proxy).
  asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
  return st.failed == 0;
}

// A pipeline wait inside a task (an mbarrier phase, a stage of a tile's shared-memory ring) ran
// past the task's deadline: record it with the stage and phase. Returns false for the caller's
// `if (!...) break;`.
__device__ __forceinline__ bool pipeline_timeout(const KernelArgs& a, int stage, unsigned phase) {
  report_failure(a, abi::kPipelineTimeout, stage, phase, 0);
  return false;
}

// ---- requests to the host proxy (edges to other nodes; abi.h, ProxyRing) ----------------------
// Waits until the proxy's tail (KernelArgs::proxy_tail, device memory: the proxy writes it there
// with a stream memory operation) reaches `need`: false after recording a timeout (expected: need,
// seen: the tail) or seeing another CTA's failure. The host-mapped error flag is read every
// MKC_FAILED_POLL_NS only: a PCIe read per poll from many CTAs slows the proxy's own copies.
__device__ inline bool proxy_tail_reaches(const KernelArgs& a, u64 need) {
  cuda::atomic_ref<u64, cuda::thread_scope_system> tail(*a.proxy_tail);
  // Relaxed polls and one acquire at the end, as wait_all does.
  u64 seen = tail.load(cuda::memory_order_relaxed);
  u64 looked = 0;
  for (unsigned sleep_ns = 256; seen < need; seen = tail.load(cuda::memory_order_relaxed)) {
    const u64 now = globaltimer();
    if (now > task_state().deadline) {
      report_failure(a, abi::kProxyTimeout, -1, need, seen);
      return false;
    }
    if (now - looked > MKC_FAILED_POLL_NS) {
      if (looked != 0 && launch_failed(a)) {
        task_state().failed = 1;
        return false;
      }
      looked = now;
    }
    __nanosleep(sleep_ns);
    if (sleep_ns < 8192) sleep_ns *= 2;
  }
  cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
  return true;
}

// One thread claims `count` consecutive entries (count <= kProxySlots) and waits for their credit:
// the proxy must have taken every entry a lap before the last. Returns the first entry, or
// ~0ull after recording a timeout (the task's deadline) or seeing another CTA's failure.
__device__ inline u64 proxy_claim(const KernelArgs& a, u64 count) {
  const u64 first = atomicAdd(a.proxy_head, count);
  const u64 need = first + count > abi::kProxySlots ? first + count - abi::kProxySlots : 0;
  return proxy_tail_reaches(a, need) ? first : ~0ull;
}

// Writes entry n and publishes it (seq last, release at system scope). Any thread.
__device__ __forceinline__ void proxy_publish(const KernelArgs& a, u64 n, long long src_offset,
                                              long long dst_offset, long long bytes, int dst_rank,
                                              int event) {
  abi::ProxyRequest& e = a.proxy->entries[n % abi::kProxySlots];
  e.src_offset = src_offset;
  e.dst_offset = dst_offset;
  e.bytes = bytes;
  e.dst_rank = dst_rank;
  e.event = event;
  cuda::atomic_ref<u64, cuda::thread_scope_system>(e.seq).store(n + 1, cuda::memory_order_release);
}

// One thread waits until the proxy has taken entries [.., n]: their source bytes are read and may
// be overwritten. False after recording a timeout or seeing another CTA's failure.
__device__ inline bool proxy_drain(const KernelArgs& a, u64 n) {
  return proxy_tail_reaches(a, n + 1);
}

#ifdef MKC_HAS_PROXY
// Whether rank d is on another node than this rank: its memory is reached through the proxy only,
// and its entries in KernelArgs::buffers are heap offsets, not addresses (the code generator
// defines MKC_RANKS_PER_NODE with MKC_HAS_PROXY).
__device__ __forceinline__ bool other_node(const KernelArgs& a, long long d) {
  return d / MKC_RANKS_PER_NODE != a.rank / MKC_RANKS_PER_NODE;
}

// Heap offsets, for proxy requests: of this rank's memory, and of the start of a view of a rank of
// another node, whose buffer table entry holds its buffer's heap offset (abi.h,
// KernelArgs::buffers).
__device__ __forceinline__ long long own_heap_offset(const KernelArgs& a, const void* p) {
  return static_cast<const char*>(p) - a.heap;
}
template <typename T>
__device__ __forceinline__ long long remote_heap_offset(const KernelArgs& a, const View& v,
                                                        int nbuffers) {
  return static_cast<long long>(
             reinterpret_cast<unsigned long long>(a.buffers[v.rank * nbuffers + v.buffer])) +
         v.offset * static_cast<long long>(sizeof(T));
}

// Requests made one thread at a time from data-dependent places (the MoE routing tasks): every
// claim records its last entry here, and the task drains up to the highest before it ends (the
// proxy has then read every source byte). Thread 0 resets it before a barrier at the task's start.
__device__ __forceinline__ u64& proxy_task_end() {
  __shared__ u64 end;  // the highest entry claimed + 1; 0: none
  return end;
}

// One thread: one request (n = 1) or two to the same rank (n = 2: src1, dst1, bytes1 too), for
// proxy_task_drain. Inlined: as a call (__noinline__) the kernels that run it beside the wgmma
// tiles at 168 registers spill more (52-64 B against 32 B, nvcc 13.0 on moe_dispatch_gemm, 4 ranks
// of 2 per node), the live registers saved around the call.
struct ProxyPut {
  long long src, dst, bytes;
};
__device__ __forceinline__ void proxy_put_for_task(const KernelArgs& a, int dst_rank, int n,
                                                   ProxyPut p0, ProxyPut p1) {
  const u64 e = proxy_claim(a, static_cast<u64>(n));
  if (e == ~0ull) return;  // recorded; the task is marked failed
  atomicMax(&proxy_task_end(), e + n);
  proxy_publish(a, e, p0.src, p0.dst, p0.bytes, dst_rank, -1);
  if (n > 1) proxy_publish(a, e + 1, p1.src, p1.dst, p1.bytes, dst_rank, -1);
}

// The whole CTA, at the task's end: waits until the proxy has taken every entry the task claimed.
__device__ inline void proxy_task_drain(const KernelArgs& a) {
  __syncthreads();
  if (threadIdx.x == 0 && proxy_task_end() > 0 && task_state().failed == 0)
    proxy_drain(a, proxy_task_end() - 1);
}
#endif

// After a task: every thread's writes are done (barrier); a failed task stops the CTA (false),
// else thread 0 publishes its signals: counter adds, or for a rank of another node a request to
// the proxy (after the task's data requests to that rank, so delivered after them).
__device__ inline bool finish_task(const KernelArgs& a, const Signal* sigs, int n) {
  if (n > 0) bulk_stores_drain();
  __syncthreads();
  if (task_state().failed) return false;
  if (threadIdx.x == 0) {
    for (int i = 0; i < n; ++i) {
      const Signal s = sigs[i];
#ifdef MKC_HAS_PROXY
      if (s.scope == abi::kScopeProxy) {
        const u64 e = proxy_claim(a, 1);
        if (e == ~0ull) break;
        proxy_publish(a, e, 0, 0, 0, s.rank, s.event);
        continue;
      }
#endif
      u64* counter = &a.events[s.rank][s.event];
      if (s.scope == abi::kScopeGpu) {
        cuda::atomic_ref<u64, cuda::thread_scope_device>(*counter).fetch_add(
            1, cuda::memory_order_release);
      } else {
        cuda::atomic_ref<u64, cuda::thread_scope_system>(*counter).fetch_add(
            1, cuda::memory_order_release);
      }
    }
  }
#ifdef MKC_HAS_PROXY
  // A proxy request may have failed (the code generator defines this for kernels with edges to
  // other nodes; the others skip the barrier).
  __syncthreads();
  return task_state().failed == 0;
#else
  return true;
#endif
}

template <typename T>
__device__ __forceinline__ T* view_ptr(const KernelArgs& a, const View& v, int nbuffers) {
  return static_cast<T*>(a.buffers[v.rank * nbuffers + v.buffer]) + v.offset;
}

// A task's arguments as its kind's struct (templates/mkc/abi.h).
template <typename A>
__device__ __forceinline__ const A& args_as(const long long* args) {
  return *reinterpret_cast<const A*>(args);
}

}  // namespace mkc
