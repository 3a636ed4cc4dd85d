// Chrome / Perfetto trace JSON (the "Trace Event Format") from a traced launch: one process per
// rank, one thread per CTA (named with its role), one complete event per task from its start (its
// waits done) to its end (its signals sent), named by the task's label and categorised by kind.
// Open it in ui.perfetto.dev or chrome://tracing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/plan/plan.h"
#include "runtime/local_job.h"

namespace mkc::rt {

// `per_rank[r]` is LocalJob::trace(r). Times are shown in microseconds from the earliest start.
// Returns the number of events written; throws EnvironmentError when the file cannot be written.
int write_chrome_trace(const std::string& path, const plan::Plan& plan,
                       const std::vector<std::vector<uint64_t>>& per_rank);

// One traced launch of `job` (built from `plan`) on every rank, written to `path`; returns the
// number of task events. Tracing is off again afterwards.
int traced_launch(LocalJob& job, const plan::Plan& plan, const std::string& path);

}  // namespace mkc::rt
