// One checked launch: fresh random inputs (quantised to their element types) on every rank,
// outputs and scratch poisoned, one launch of the job, then every user tensor of every rank
// compared with the direct reference (compiler/oracle/reference.h). Used by `mkc run --check` and
// the GPU tests.
#pragma once

#include <string>
#include <vector>

#include "compiler/oracle/interpret.h"
#include "compiler/plan/plan.h"
#include "runtime/local_job.h"

namespace mkc::rt {

struct TensorCheck {
  int rank = 0;
  std::string tensor;
  double rel_error = 0;   // relative L2 error against the reference
  int64_t unwritten = 0;  // elements the reference wrote and the kernel did not
  int64_t inexact = 0;    // written elements that differ from the reference rounded to the
                          // element type (0: bitwise equal; expected for moves and 2-rank sums)
  double tolerance = 0;
  bool ok() const { return unwritten == 0 && rel_error <= tolerance; }
};

// Relative L2 tolerance by element type: 1e-2 for 16-bit floats, 1e-4 for f32, exact otherwise.
double tolerance_for(compiler::DType t);

// Launches once with inputs drawn from `seed` and returns one check per local rank and user
// tensor (under a group, every process calls it and checks its own rank).
// Device functions that `fns` does not implement run on the GPU (runtime/device_fn_eval.h).
std::vector<TensorCheck> checked_launch(LocalJob& job, const plan::Plan& plan,
                                        const plan::HostFns& fns, uint64_t seed);
// The same with inputs from `inputs` (e.g. read from files).
std::vector<TensorCheck> checked_launch(LocalJob& job, const plan::Plan& plan,
                                        const plan::HostFns& fns, const plan::InputFn& inputs);

// Uploads inputs (no check), poisons the other tensors: for timing runs.
void upload_random_inputs(LocalJob& job, const plan::Plan& plan, uint64_t seed);
void upload_inputs(LocalJob& job, const plan::Plan& plan, const plan::InputFn& inputs);

}  // namespace mkc::rt
