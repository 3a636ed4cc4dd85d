// A job on the GPUs of this process: one rank per local GPU (rank r on device r), peers reached
// through CUDA peer access over NVLink. It allocates every rank's buffers and event counters,
// uploads inputs, launches the generated kernel on every rank (launch e waits for counts folded
// with e, so nothing is reset between launches) and turns a timed-out wait into an exception that
// names the rank, the task, the event, the expected and seen counts and the .mks line of the
// operation. One process per GPU (torchrun, mpirun, mkrun) with a shared symmetric heap is the
// runtime issue's next step; this is the single-process form, used by `mkc run` and GPU tests.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen.h"
#include "compiler/plan.h"
#include "dsl/source.h"
#include "runtime/cuda_driver.h"

namespace mkc::rt {

class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LocalJobOptions {
  uint64_t timeout_ns = 5'000'000'000ull;       // per wait inside the kernel
  std::shared_ptr<const dsl::SourceFile> file;  // for messages naming the .mks line
};

class LocalJob {
 public:
  // `plan` must have been built for as many ranks as the job uses (at most the local GPU count)
  // and for at most the GPUs' SM count of CTAs; `kernel` was generated from it and `cubin` is
  // its compiled image (grid, block, shared memory and tensor maps are taken from `kernel`).
  LocalJob(const plan::Plan& plan, const std::string& cubin, const codegen::Generated& kernel,
           LocalJobOptions options = {});
  ~LocalJob();
  LocalJob(const LocalJob&) = delete;
  LocalJob& operator=(const LocalJob&) = delete;

  int ranks() const { return static_cast<int>(ranks_.size()); }

  // Values in double, converted to the buffer's element type (bf16 rounds to nearest even).
  void upload(int rank, int buffer, const std::vector<double>& values);
  std::vector<double> download(int rank, int buffer);
  // Fills a buffer with 0xFF bytes (NaN for floats) so unwritten elements show.
  void poison(int rank, int buffer);

  // Launches the next launch on the ranks in `which` (all when empty) and waits for them. Throws
  // LaunchError when a wait timed out, EnvironmentError when a CUDA call failed.
  void launch(const std::vector<int>& which = {});
  // Launches `iters` times back to back on every rank and returns the mean time per launch in
  // microseconds (CUDA events on rank 0's stream, after all ranks finished).
  double time_launches(int iters);

  uint64_t launches() const { return epoch_; }

  // Trace mode: from the next launch on, every task's start and end (%globaltimer, ns, after its
  // waits and after its signals) are recorded per rank; trace(r) reads the last launch's,
  // two entries per task of the plan (0 where rank r does not run the task).
  void set_trace(bool on);
  std::vector<uint64_t> trace(int rank);

  // For benchmarks and baselines that work on the job's memory directly: rank r's context, its
  // stream and the device address of one of its buffers.
  CUcontext context(int rank) const;
  CUstream stream(int rank) const;
  CUdeviceptr buffer_address(int rank, int buffer) const;

 private:
  struct Rank;
  void enqueue(int r);
  void finish(const std::vector<int>& which);

  const plan::Plan& plan_;
  std::string kernel_;
  int ctas_, threads_, smem_;
  LocalJobOptions opts_;
  uint64_t epoch_ = 0;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

// Host conversions used for uploads and downloads.
uint16_t to_bf16(float f);
float from_bf16(uint16_t h);

}  // namespace mkc::rt
