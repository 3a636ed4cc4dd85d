// The compiler's driver from a checked schedule to a scheduled plan: a short, flat list of passes,
// each followed by the plan verifier when verification is on (PassOptions::verify).
// MKC_DUMP_PASSES=1 prints, after each pass, its time and a summary of the plan (or "unchanged"),
// MKC_DUMP_PASSES=json the whole plan as JSON, to stderr.
#pragma once

#include "compiler/oracle/verifier.h"
#include "compiler/passes/lower.h"
#include "compiler/passes/schedule.h"
#include "compiler/plan/plan.h"
#include "support/phases.h"

namespace mkc::plan {

struct PassOptions {
  LowerOptions lower;
  int64_t sms = 132;
  // Run the plan verifier (compiler/oracle/verifier.h) after every pass; a finding throws
  // VerifyError naming the pass. Default: verify_by_default() (MKC_VERIFY, or on in builds without
  // NDEBUG).
  bool verify = verify_by_default();
  // The schedule's file, for places in the verifier's findings.
  const dsl::SourceFile* file = nullptr;
  // Where each pass's time (and the verifier's after it) is recorded; none when null.
  Phases* phases = nullptr;
};

Plan build_plan(const compiler::CheckedSchedule& schedule, const PassOptions& options);

}  // namespace mkc::plan
