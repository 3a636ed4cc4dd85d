// `mkc verify`: how a user without a GPU cluster trusts a schedule before running it. For each
// world size asked for, the schedule is checked, lowered and scheduled with the plan verifier after
// every pass (compiler/oracle/verifier.h: boxes, counts, races, deadlocks, launch fences), then
// executed by the CPU interpreter (compiler/oracle/interpret.h) over several random interleavings
// and two launches, and every rank's every tensor is compared with the direct reference
// (compiler/oracle/reference.h).
//
// Device functions: where the checker held them to the contract with Clang
// (CheckOptions::clang_device_fns) and mkc's plugin compiles them for the CPU
// (compiler/oracle/clang_eval.h), the interpreter and the reference run them as written. Otherwise
// both evaluate each one as the same smooth stand-in function of its arguments (see
// stand_in_function): what is checked then is the schedule's data flow (which elements reach which
// function, in which order), not the functions' bodies, and the summary says which it was.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "compiler/oracle/interpret.h"
#include "compiler/sema/check.h"
#include "dsl/source.h"

namespace mkc::compiler {

struct VerifyScheduleOptions {
  int interleavings = 4;  // random CTA interleavings (interpreter seeds)
  int launches = 2;       // back-to-back launches per interleaving
  uint64_t seed = 1;      // the first interleaving's seed and the inputs' seed
  // Above this many element operations (an estimate of the interpreter's work per launch and
  // interleaving) the interpreter is not run and verification fails with the reason: the CPU
  // interpreter is for small shapes.
  double max_work = 4e8;
  // Above this many bytes of buffers the interpreter would hold (every buffer of every rank as
  // doubles, the reference's copy, and one snapshot of the user tensors per launch), it is not
  // run either: an unused `scratch S : f32[2^28]` must not take the machine's memory.
  double max_bytes = 1e9;
  bool color = false;
  // Put every verified plan, as JSON with each task's read and write boxes (plan.h, to_json), in
  // VerifyScheduleResult::plans.
  bool emit_plan = false;
};

struct VerifyScheduleResult {
  int exit_code = 0;   // 0 verified, 1 a finding (race, deadlock, wrong output, bad schedule)
  std::string output;  // what to print on stdout (the summary) ...
  std::string errors;  // ... and on stderr (findings, diagnostics)
  std::string plans;   // with emit_plan: a JSON array of the plans
};

VerifyScheduleResult verify_schedule(std::shared_ptr<const dsl::SourceFile> file,
                                     const CheckOptions& check,
                                     const VerifyScheduleOptions& options = {});

// The stand-in for a device function of `arity` arguments: a fixed smooth non-linear function,
// the same in the interpreter and the reference.
plan::HostFn stand_in_function(size_t arity);

}  // namespace mkc::compiler
