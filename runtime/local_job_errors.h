// The device's error record (templates/mkc/abi.h: a wait that passed its deadline, or a tile's
// shared-memory pipeline that never completed) turned into the message of a LaunchError: the
// launch, the rank, the task, the event with its expected and seen counts, and the .mks place of
// the operation (or of the edge a bookkeeping task waited for). A pure function of the record and
// the plan, so it is tested without a GPU.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/plan/plan.h"
#include "dsl/source.h"
#include "templates/mkc/abi.h"

namespace mkc::rt {

// `file` (may be null) names the .mks lines; `epoch` is the launch; `timeout_ns` the deadline.
std::string launch_error_message(const abi::ErrorRecord& e, const plan::Plan& plan,
                                 const dsl::SourceFile* file, uint64_t epoch, uint64_t timeout_ns);

}  // namespace mkc::rt
