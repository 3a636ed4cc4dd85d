// The compiler's driver from a checked schedule to a scheduled plan: a short, flat list of passes.
// MKC_DUMP_PASSES=1 prints, after each pass, its time and a summary of the plan (or "unchanged"),
// MKC_DUMP_PASSES=json the whole plan as JSON, to stderr.
#pragma once

#include "compiler/lower.h"
#include "compiler/plan.h"
#include "compiler/schedule.h"

namespace mkc::plan {

struct PassOptions {
  LowerOptions lower;
  int64_t sms = 132;
};

Plan build_plan(const compiler::CheckedSchedule& schedule, const PassOptions& options);

}  // namespace mkc::plan
