// The host C++ JIT API: a schedule (a file or a string, with parameter values) compiled for this
// machine's GPUs and bound to a job, with tensors addressed by name. Started once per machine, the
// process runs one rank per local GPU; started under a launcher (tools/mkrun, torchrun, mpirun,
// srun on one node: runtime/bootstrap.h), each process runs its own rank, and every process makes
// the same calls in the same order (construction, launches and traces are collective).
//
//   mkc::Kernel k = mkc::Kernel::from_file("samples/gemm_allreduce.mks",
//                                          {.defines = {{"M", 256}, {"N", 1024}, {"K", 512}}});
//   k.set("A", /*rank=*/0, a_values);        // sizes checked against the tensor's shape
//   k.launch();                              // every rank; throws rt::LaunchError on a timeout
//   std::vector<double> c = k.get("C", 0);
//   double us = k.time(100);                 // per launch, back to back
//   k.trace("trace.json");                   // one traced launch, Chrome/Perfetto JSON
//
// Everything the CLI's `mkc run` does goes through the same calls (compiler/pipeline.h, the NVRTC
// JIT with its disk cache, runtime/local_job.h). Errors: UserError for the caller's mistakes (a
// schedule with errors — the rendered diagnostics are the message —, an unknown tensor, a wrong
// element count, more ranks than GPUs, a rank of another process), EnvironmentError for the
// machine (no driver, a failed CUDA or NVRTC call, a peer that never came).
//
// Working on the caller's GPU memory and streams (the way a training framework calls it):
//   k.bind("A", rank, a_dev, DType::kBf16, {M, K});  // the kernel reads A there (no copy)
//   bf16* c = static_cast<bf16*>(k.data("C", rank));  // symmetric tensors live in the job's heap
//   k.launch_async({stream});                         // one stream per local rank; returns
//   k.synchronize();                                  // waits; throws LaunchError on a timeout
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/plan/plan.h"
#include "jit/jit.h"
#include "runtime/local_job.h"

namespace mkc {

struct KernelOptions {
  std::map<std::string, int64_t> defines = {};  // -D NAME=VALUE
  int ranks = 0;                                // 0: one per local GPU (or the launcher's job size)
  int ranks_per_node = 0;                       // nodes of this many ranks, emulated on one host
                                                // too (edges between them through the host
                                                // proxies); 0: $MKC_RANKS_PER_NODE, else the
                                                // launcher's ranks per host
  uint64_t timeout_ms = 5000;                   // per wait inside the kernel
  bool share_gpus = false;                      // allow more ranks than GPUs (tests, not speed)
  bool use_launcher = true;                     // one rank per process when a launcher's variables
                                                // say so (runtime/bootstrap.h detect_world)
  int bootstrap_timeout_s = 120;                // how long processes wait for each other
  std::optional<rt::World> world = {};          // this process's place in the job, given instead of
                                                // read from a launcher's variables
  rt::BlockGatherFn all_gather = {};            // the caller's all-gather (MPI, a torch process
                                                // group): the processes find each other through
                                                // it instead of mkc's TCP rendezvous (no port);
                                                // needs `world`, whose master_addr still picks
                                                // the interface between nodes
  std::string tune_db = {};                     // the tuning database (docs/TUNING.md); empty:
                                                // $MKC_TUNE_DB, else tune.json beside the JIT
                                                // cache. Its entry for this compile, if any, sets
  // the tiles of GEMMs without tile(...); MKC_TUNE=off
  // ignores it
};

// Kernel::tune's budget (docs/TUNING.md).
struct TuneOptions {
  int candidates = 6;     // per GEMM, the cost model's best this many are measured
  double budget_s = 600;  // no new measurement after this long (the best so far wins)
  int iters = 20;         // launches timed per measurement
};

struct TensorInfo {
  std::string name;
  compiler::DType dtype = compiler::DType::kF32;
  std::vector<int64_t> shape;
  bool input = false;  // filled by the caller (the others are written by the kernel)
  int64_t elements() const;
};

class Kernel {
 public:
  static Kernel from_file(const std::string& path, const KernelOptions& options = {});
  // `name` is the file name diagnostics and #line directives use.
  static Kernel from_string(const std::string& name, const std::string& text,
                            const KernelOptions& options = {});
  Kernel(Kernel&&) noexcept;
  Kernel& operator=(Kernel&&) noexcept;
  ~Kernel();

  int ranks() const;                     // the world size
  std::vector<int> local_ranks() const;  // the ranks this process runs
  std::vector<TensorInfo> tensors() const;
  TensorInfo tensor(const std::string& name) const;

  // Values in double, rounded to the tensor's element type.
  void set(const std::string& tensor, int rank, const std::vector<double>& values);
  std::vector<double> get(const std::string& tensor, int rank);
  // Every input of every rank from a seeded generator (what `mkc run` uses).
  void set_random_inputs(uint64_t seed);

  // Rank `rank`'s tensor in the caller's device memory from the next launch on, no copy: dtype
  // and shape must be the schedule's; the memory must be on the rank's GPU, 16-byte aligned, and
  // outlive the binding (UserError naming what is wrong otherwise). A symmetric tensor (peers
  // read or write it) can be bound only when every rank runs in this process; with one process
  // per rank, fill it in place at data(). set/get read and write the bound memory.
  void bind(const std::string& tensor, int rank, void* data, compiler::DType dtype,
            const std::vector<int64_t>& shape);
  void unbind(const std::string& tensor, int rank);       // back to the job's heap
  void* data(const std::string& tensor, int rank) const;  // the device address the kernel uses

  void launch();  // every local rank, on the job's streams; waits for it
  // Enqueues the next launch on the caller's streams (cudaStream_t or CUstream: one per local
  // rank, in local_ranks() order, on that rank's GPU; nullptr: the default stream) and returns.
  // May be captured into a CUDA graph (after a first launch outside it): the kernel numbers its
  // launches on the GPU, so every replay is the next launch; the tensors bound at the capture
  // stay bound (copy fresh inputs into them between replays).
  void launch_async(const std::vector<CUstream>& streams);
  // Waits for launch_async's launches; throws rt::LaunchError if one timed out.
  void synchronize();
  double time(int iters);  // mean µs per launch, launches back to back
  // Measures the cost model's candidates for this kernel's GEMMs without tile(...) on this
  // process's GPUs, stores the fastest in the tuning database (KernelOptions::tune_db's) and
  // rebuilds the kernel with it, as `mkc tune` then a new Kernel would. Every rank must be in this
  // process (UserError under a launcher or a process group: each would measure). Bindings and
  // tensor contents do not survive. A line per measurement on `progress` (null: none). Returns the
  // winner's µs per launch, or 0 when there is no GEMM to tune (the kernel is left as it was).
  // With MKC_TUNE=on, construction does this for a kernel the database has no entry for.
  double tune(const TuneOptions& options = {}, std::ostream* progress = nullptr);
  int trace(const std::string& path);  // one traced launch; returns the events written

  // The parts, for tools that want more.
  const plan::Plan& plan() const;
  const codegen::Generated& generated() const;
  const jit::JitOutput& binary() const;
  rt::LocalJob& job();

 private:
  struct Impl;
  explicit Kernel(std::unique_ptr<Impl> impl);
  int index_of(const std::string& tensor) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mkc
