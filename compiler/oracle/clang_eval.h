// A schedule's device functions run on the CPU as written: compiled for the host by mkc's Clang
// plugin (compiler/sema/clang_check.h, ClangPlugin::compile) after the checker has held them to
// the contract, so that the reference and the interpreter (`mkc verify`) compute what the kernel
// computes, on any machine. Arguments are converted to the parameter types as the generated kernel
// converts them (mkc::convert: 16- and 8-bit floats rounded through f32, f32, f64 and integers
// directly) and the result comes back as double, like the GPU's evaluator
// (runtime/device_fn_eval.h), so both agree within the arithmetic's rounding.
//
// Where the plugin (or LLVM) is absent nothing fails: the result says why and holds no functions,
// and the caller falls back to its stand-in.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/oracle/interpret.h"
#include "compiler/sema/program.h"

namespace mkc::plan {

struct ClangFunctions {
  HostFns fns;      // every device function of the schedule, or none
  std::string why;  // when none: why (the plugin is missing, Clang or LLVM failed)
};

// Loop iterations one call of a device function may run before it is stopped (a function whose
// loop never ends must not hang `mkc verify`).
constexpr uint64_t kDeviceFnMaxSteps = uint64_t{1} << 26;

// Every device function of `s` compiled for the CPU (one module per schedule text, kept for the
// process). A call that divides an integer by zero or runs over `max_steps` loop iterations throws
// UserError naming the function and its arguments.
ClangFunctions clang_device_functions(const compiler::CheckedSchedule& s,
                                      uint64_t max_steps = kDeviceFnMaxSteps);

// The text the plugin compiles for `s`: mkc's prelude, every device function as code generation
// writes it, then one `extern "C" double mkc_host_NAME(const double*)` per function.
std::string clang_eval_text(const compiler::CheckedSchedule& s);

}  // namespace mkc::plan
