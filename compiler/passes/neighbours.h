// Which ranks a rank's plan needs, from the schedule alone (issue 35, per-rank planning): two
// ranks are neighbours when a task of one reads or writes the other's memory or signals it. A
// rank's waits and signals, event numbers included, follow from the tasks of the ranks within two
// steps of it (tests/compiler/rank_plan_test.cc), so a process that plans its own rank lowers
// those ranks only (LowerOptions::ranks). The relation comes from a footprint lowering of the
// whole world (LowerOptions::footprint): one task per compute operation and rank, communication
// in at most R chunks per operation, so it costs the world's operations, not its tasks.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/sema/program.h"

namespace mkc::plan {

// neighbours(s)[x]: the ranks y != x such that a task of x reads, writes or signals y's memory,
// or a task of y does x's; ascending.
std::vector<std::vector<int64_t>> neighbours(const compiler::CheckedSchedule& s);

// private_ops(s)[i]: whether operation i is a compute operation that, on every rank, reads and
// writes only that rank's memory, in buffers no task of another rank touches there (the
// footprint's). Its tasks wait and are waited for on their own rank only: a plan of rank r lowers
// it on r alone (LowerOptions::private_ops).
std::vector<char> private_ops(const compiler::CheckedSchedule& s);

// The ranks within `steps` steps of `rank` in that relation (it included), ascending.
std::vector<int64_t> ranks_within(const std::vector<std::vector<int64_t>>& neighbours, int64_t rank,
                                  int steps);

}  // namespace mkc::plan
