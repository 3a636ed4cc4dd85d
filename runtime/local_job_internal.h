// What the files of rt::LocalJob share and nothing else sees: one rank's handles (LocalJob::Rank),
// the scoped current-context guard, and the symmetric heap's layout. The job is split by concern:
//   local_job.cc          construction (GPUs, modules, occupancy), release, accessors, tracing
//   local_job_heap.cc     the symmetric heap: layout, allocation, peer access, the IPC handle swap
//                         between processes, the kernel's address tables and bind()
//   local_job_convert.cc  host-side conversion: upload, download, poison, element types
//   local_job_launch.cc   enqueue, launch, launch_async, synchronize, time_launches
//   local_job_errors.cc   the device's error record turned into a LaunchError
//   local_job_proxy.cc    the host proxies of plans with edges between nodes
#pragma once

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "compiler/plan/plan.h"
#include "runtime/cuda_driver.h"
#include "runtime/cuda_heap.h"
#include "runtime/local_job.h"
#include "runtime/net/memory.h"
#include "runtime/net/proxy.h"
#include "templates/mkc/abi.h"

namespace mkc::rt {

// The launch of a kernel in clusters of `cluster` CTAs along x (`attr`, the caller's, holds the
// cluster dimension the config points at): for cuLaunchKernelEx and the residency check
// (cuOccupancyMaxActiveClusters) alike.
inline CUlaunchConfig cluster_launch(int ctas, int threads, int smem, int cluster, CUstream stream,
                                     CUlaunchAttribute* attr) {
  *attr = CUlaunchAttribute{};
  attr->id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr->value.clusterDim.x = static_cast<unsigned>(cluster);
  attr->value.clusterDim.y = attr->value.clusterDim.z = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = static_cast<unsigned>(ctas);
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = static_cast<unsigned>(threads);
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = static_cast<unsigned>(smem);
  cfg.hStream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

struct LocalJob::Rank {
  bool local = false;
  CUdevice dev{};
  CUcontext ctx{};
  CUmodule mod{};
  CUfunction fn{};
  CUstream stream{};
  CUdeviceptr heap = 0;            // buffers, then event counters; a remote rank's as mapped here
  std::vector<CUdeviceptr> bound;  // per buffer: the caller's memory (bind), or 0: the heap's
  bool ipc_mapped = false;
  CUdeviceptr buffer_table = 0;
  CUdeviceptr event_table = 0;
  CUdeviceptr tensor_maps = 0;
  CUdeviceptr trace = 0;
  abi::ErrorRecord* error = nullptr;
  CUdeviceptr error_dev = 0;
};

// A local rank's proxy (plans with edges between nodes): its ring, host-mapped (here, and as the
// device sees it), the host's copy of its counters (the kernel polls the heap's: HeapLayout), its
// heap as the proxy reaches it, the thread.
struct LocalJob::ProxyRank {
  abi::ProxyRing* ring = nullptr;
  CUdeviceptr ring_dev = 0;
  std::vector<abi::u64> events;  // [plan events]
  std::unique_ptr<CudaHeap> heap;
  std::unique_ptr<net::Proxy> proxy;
};

// The symmetric heap of a plan: every buffer at the same offset on every rank, then the event
// counters (8 bytes each), then the proxy's words (abi::KernelArgs): the claim counter, the tail
// as the proxy publishes it (a line further), the kernel's launch record (a line further:
// KernelArgs::launches), and the proxy's counters (a line further, 8 bytes per event). Buffer
// offsets are 512-byte aligned, which covers 16-byte vector accesses and TMA's global address rule.
struct HeapLayout {
  std::vector<size_t> offsets;  // each buffer's offset
  size_t events_offset = 0;
  size_t proxy_head_offset = 0;
  size_t proxy_tail_offset = 0;
  size_t launch_offset = 0;
  size_t proxy_events_offset = 0;
  size_t bytes = 0;
};
// `counters`: the length of every rank's counter array, the most counters any rank of the job has.
HeapLayout heap_layout(const plan::Plan& plan, int counters);

}  // namespace mkc::rt
