// The direct reference: what a checked schedule computes, evaluated operation by operation in
// program order over all ranks at once, with none of the plan's machinery (no tasks, chunks, slots
// or events). All-reduce is the sum of the ranks' tensors, attention with `accumulate` is one
// softmax over every K,V block it saw, all-to-all places rows by its definition. Tests compare the
// interpreter's results with it.
#pragma once

#include <vector>

#include "compiler/interpret.h"
#include "compiler/program.h"

namespace mkc::plan {

// data[rank][tensor]: the user tensors (index = CheckedSchedule::tensors), inputs filled, the rest
// NaN. Evaluates every operation in place.
void reference(const compiler::CheckedSchedule& s, const HostFns& fns,
               std::vector<std::vector<std::vector<double>>>& data);

}  // namespace mkc::plan
