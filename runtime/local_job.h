// A job's ranks as this process sees them. Two forms:
//  - every rank in this process (the default): rank r on local GPU r, peers reached through CUDA
//    peer access over NVLink;
//  - one rank per process (options.group set: mkrun, torchrun, mpirun, srun on one node): this
//    process runs rank group->world().rank; the other ranks' memory is mapped through CUDA IPC
//    handles swapped over the rendezvous.
// Every rank's buffers and event counters live in one allocation, its symmetric heap: every buffer
// at the same offset on every rank. The job uploads inputs, launches the generated kernel on its
// ranks (launch e waits for counts folded with e, so nothing is reset between launches) and turns a
// timed-out wait into an exception that names the rank, the task, the event, the expected and seen
// counts and the .mks line of the operation.
// With options.share_gpus, ranks may outnumber GPUs (rank r on GPU r % G): ranks of one process
// on one GPU run side by side (the kernel must fit k times: compile for SMs / k), ranks of
// different processes on one GPU take turns in time slices. That is for tests, not for speed.
#pragma once

#include <cuda.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/plan/plan.h"
#include "dsl/source.h"
#include "runtime/bootstrap.h"
#include "runtime/cuda_driver.h"
#include "runtime/net/proxy.h"

namespace mkc::rt {

class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LocalJobOptions {
  uint64_t timeout_ns = 5'000'000'000ull;       // per wait inside the kernel
  std::shared_ptr<const dsl::SourceFile> file;  // for messages naming the .mks line
  bool share_gpus = false;                      // allow more ranks than GPUs (tests)
  Rendezvous* group = nullptr;                  // one process per rank (outlives the job)
};

class LocalJob {
 public:
  // `plan` must have been built for the job's world size (the local GPU count, or the group's
  // size) and for at most the GPU's SM count of CTAs (divided by the ranks sharing a GPU in this
  // process); `kernel` was generated from it and `cubin` is its compiled image (grid, block,
  // shared memory and tensor maps are taken from `kernel`). Under a group every rank constructs
  // its job at the same time (the heaps are swapped), and destroys it at the same time.
  LocalJob(const plan::Plan& plan, const std::string& cubin, const codegen::Generated& kernel,
           LocalJobOptions options = {});
  ~LocalJob();
  LocalJob(const LocalJob&) = delete;
  LocalJob& operator=(const LocalJob&) = delete;

  int ranks() const { return static_cast<int>(ranks_.size()); }  // the world size
  // The ranks this process runs (all of them without a group), in order.
  const std::vector<int>& local_ranks() const { return local_; }
  bool is_local(int rank) const;
  Rendezvous* group() const { return opts_.group; }

  // Values in double, converted to the buffer's element type (bf16 rounds to nearest even).
  // These, poison, trace and the accessors below take a local rank (UserError otherwise).
  void upload(int rank, int buffer, const std::vector<double>& values);
  std::vector<double> download(int rank, int buffer);
  // Fills a buffer with 0xFF bytes (NaN for floats) so unwritten elements show.
  void poison(int rank, int buffer);

  // Launches the next launch on the local ranks in `which` (all local ranks when empty) and waits
  // for them. Throws LaunchError when a wait timed out, EnvironmentError when a CUDA call failed.
  void launch(const std::vector<int>& which = {});
  // Enqueues the next launch on every local rank, on the caller's streams (one per local rank, in
  // local_ranks() order; a null stream is the rank's context's default stream), and returns. A
  // stream must belong to its rank's GPU's primary context (the CUDA runtime's). A launch may be
  // captured in a CUDA graph: the kernel counts its launches on the GPU (abi::KernelArgs::
  // launches), so each replay is the next launch; the rank's memory stays bound as it was at the
  // capture. Throws LaunchError for an earlier such launch seen to have timed out.
  void launch_async(const std::vector<CUstream>& streams);
  // Waits for the launches of launch_async and throws LaunchError if a wait timed out in one.
  // Every other call that touches the job's memory or launches synchronizes first.
  void synchronize();

  // Rank `rank`'s buffer in the caller's memory from the next launch on: `address` must be device
  // memory of the rank's GPU, 16-byte aligned, with the buffer's bytes behind it (UserError
  // naming what is wrong otherwise); 0 returns the buffer to the heap. A symmetric buffer (one
  // that peers read or write) can be bound only when every rank runs in this process. The job
  // neither copies nor frees the memory; it must outlive the job or the binding.
  void bind(int rank, int buffer, CUdeviceptr address);
  // Launches `iters` times back to back on every local rank and returns the mean time per launch
  // in microseconds (CUDA events on the first local rank's stream, after all local ranks
  // finished).
  double time_launches(int iters);

  // Launches enqueued from this process (a captured launch counts once, at its capture).
  uint64_t launches() const { return epoch_; }
  // Launches local rank `rank`'s kernel has completed, as the kernel counted them on the GPU
  // (abi::KernelArgs::launches; replays of a captured launch count). Waits for all work in the
  // rank's context first.
  uint64_t device_launches(int rank);

  // Plans with edges between nodes (compiled with ranks per node below the world size, real
  // nodes or emulated ones): every local rank runs a host proxy (runtime/net/proxy.h) over the
  // transport MKC_NET picks; its state and counts. UserError for a job without proxies.
  bool has_proxies() const { return !proxies_.empty(); }
  net::ProxyStatus proxy_status(int rank) const;

  // Trace mode: from the next launch on, every task's start and end (%globaltimer, ns, after its
  // waits and after its signals) are recorded per rank; trace(r) reads the last launch's,
  // two entries per task of the plan (0 where rank r does not run the task).
  void set_trace(bool on);
  std::vector<uint64_t> trace(int rank);

  // For benchmarks and baselines that work on the job's memory directly: rank r's context, its
  // stream and the device address of one of its buffers.
  CUcontext context(int rank) const;
  CUstream stream(int rank) const;
  // (The bound memory, where the caller bound some.)
  CUdeviceptr buffer_address(int rank, int buffer) const;

 private:
  struct Rank;
  Rank& local(int rank, const char* what) const;
  void init(const std::string& cubin, const codegen::Generated& kernel);
  void release(bool barrier);
  // local_job_heap.cc
  void allocate_heap(Rank& rank);
  void enable_peer_access();
  void enqueue(int r, CUstream stream);
  void finish(const std::vector<int>& which);
  void raise_errors(const std::vector<int>& which);
  void swap_heaps();
  void write_tables();
  void load_plan_tables(const Rank& rank, const codegen::Generated& kernel) const;
  CUdeviceptr address(int rank, int buffer) const;
  // local_job_proxy.cc
  struct ProxyRank;
  void start_proxies();
  void stop_proxies();
  std::string proxy_errors() const;
  void print_proxy_stats(int rank) const;
  std::chrono::milliseconds proxy_timeout() const;
  void proxy_args(int rank, abi::KernelArgs* args) const;

  const plan::Plan& plan_;
  std::string kernel_;
  // The kernel's tasks: the plan's index of each (a kernel of one rank, Generated::task_ids;
  // empty: the plan's own numbering), and how many.
  std::vector<int> task_ids_;
  size_t kernel_tasks_ = 0;
  int counters_ = 0;  // each rank's counter array: the most counters any rank of the job has
  int ctas_, threads_, smem_;
  int cluster_ = 1;  // CTAs per cluster (codegen::Generated::cluster; 1 before Hopper)
  LocalJobOptions opts_;
  uint64_t epoch_ = 0;
  std::vector<size_t> offsets_;  // each buffer's offset in the heap
  size_t events_offset_ = 0, proxy_head_offset_ = 0, heap_bytes_ = 0;
  size_t proxy_tail_offset_ = 0, proxy_events_offset_ = 0, launch_offset_ = 0;
  bool proxied_ = false;  // some rank's tasks cross nodes: every rank runs a proxy
  std::vector<std::unique_ptr<ProxyRank>> proxies_;  // [rank]: local ranks', when proxied_
  std::vector<std::unique_ptr<Rank>> ranks_;  // every rank of the world; the remote ones hold
                                              // only their heap's address as mapped here
  std::vector<int> local_;
  std::vector<codegen::TensorMapSpec> map_specs_;  // the kernel's TMA descriptors, to re-encode
  std::vector<std::pair<int, CUstream>> pending_;  // launch_async's, until synchronize()
};

// Host conversions used for uploads and downloads (local_job_convert.h has the others).
uint16_t to_bf16(float f);
float from_bf16(uint16_t h);

}  // namespace mkc::rt
