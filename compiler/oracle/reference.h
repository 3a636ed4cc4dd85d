// The direct reference: what a checked schedule computes, evaluated operation by operation in
// program order over all ranks at once, with none of the plan's machinery (no tasks, chunks, slots
// or events). All-reduce is the sum of the ranks' tensors, attention with `accumulate` is one
// softmax over every K,V block it saw, all-to-all places rows by its definition. Tests compare the
// interpreter's results with it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compiler/oracle/interpret.h"
#include "compiler/sema/program.h"

namespace mkc::plan {

// A device function over n argument tuples at once: args[e * arity + k] is argument k of tuple e;
// returns the n results. For evaluators that pay per call, not per element (a GPU kernel:
// runtime/device_fn_eval.h).
using BatchFn = std::function<std::vector<double>(const std::vector<double>& args, size_t n)>;
using BatchFns = std::map<std::string, BatchFn>;

// data[rank][tensor]: the user tensors (index = CheckedSchedule::tensors), inputs filled, the rest
// NaN. Evaluates every operation in place. A device function is taken from `batch` where it is
// there, else from `fns`; one in neither is a UserError.
void reference(const compiler::CheckedSchedule& s, const HostFns& fns, const BatchFns& batch,
               std::vector<std::vector<std::vector<double>>>& data);
void reference(const compiler::CheckedSchedule& s, const HostFns& fns,
               std::vector<std::vector<std::vector<double>>>& data);

}  // namespace mkc::plan
