// A schedule's device functions evaluated on the GPU, for the check's reference. Their bodies are
// CUDA C++ that only NVRTC compiles, so `mkc run --check` (and any checked launch) runs them as
// they are: each becomes a small kernel, built by the JIT (with its cache) for the job's GPU, that
// applies the function to a batch of argument tuples. Arguments arrive as double and are converted
// to the parameter types as the generated kernel converts them (mkc::convert: 16- and 8-bit floats
// through f32, f32, f64 and integers directly); the result comes back as double. The reference
// around it stays in f64 on the host: this checks the schedule's data flow through the user's
// function, not the function itself.
#pragma once

#include <cuda.h>

#include <string>

#include "compiler/oracle/interpret.h"
#include "compiler/oracle/reference.h"
#include "compiler/sema/program.h"

namespace mkc::rt {

// Batch evaluators, on the GPU of `ctx`, for every device function of `s` that `have` does not
// already implement on the host. Compiles when called (one NVRTC compile for all of them); each
// call of an evaluator copies its arguments to the GPU, launches, checks the launch and copies the
// results back. Throws NvrtcCompileError / EnvironmentError naming the function or the failed CUDA
// call.
plan::BatchFns gpu_device_functions(const compiler::CheckedSchedule& s, CUcontext ctx,
                                    const plan::HostFns& have = {});

// The CUDA C++ source of those evaluators (one `extern "C"` kernel per function, named
// mkc_eval_<name>): exposed so CPU tests can compile it with NVRTC.
std::string device_function_eval_source(const compiler::CheckedSchedule& s);

}  // namespace mkc::rt
