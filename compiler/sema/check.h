// Semantic checks: from a parsed Module to CheckedSchedules, or diagnostics saying why not.
//
// For each schedule and world size it resolves names, evaluates parameters (with -D overrides),
// shapes and loop bounds in 64-bit checked arithmetic, unrolls loops, checks every operation's
// operands (kinds, dtypes, shapes), clauses (tile/chunk sizes, algorithms) and dependencies, and
// rejects schedules that would race (a read of data another operation writes with no `after`) or
// deadlock (a cycle of waits, within a rank or across ranks: every rank runs the same schedule, so
// a cycle through a communication edge is rank r waiting on rank s waiting on rank r).
//
// Without an explicit world size the schedule is checked for R = 1, 2, 4 and 8, stopping at the
// first size with errors, so `mkc check` finds sizes that do not divide.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/sema/program.h"
#include "dsl/ast.h"
#include "dsl/diagnostics.h"

namespace mkc::compiler {

// What checking proves of every schedule it accepts, before anything is unrolled, so that no
// input makes checking (or what follows it) slow: each loop runs at most kMaxLoopIterations
// iterations in all (a nested loop once per iteration of the loops around it), and a schedule
// unrolls to at most kMaxOpInstances operation instances, those `when` switches off included.
inline constexpr int64_t kMaxLoopIterations = 4096;
inline constexpr int64_t kMaxOpInstances = 4096;
// The largest world size a schedule is checked, compiled or run for. With kMaxOpInstances it
// keeps checking fast on any input (the waits are quadratic in the instances at worst; the race
// and cycle checks are near-linear in the instances and waits, check_deps.cc).
inline constexpr int64_t kMaxRanks = 4096;

struct CheckOptions {
  // World sizes to check; empty: {1, 2, 4, 8}.
  std::vector<int64_t> ranks;
  // Ranks per node; 0: all ranks on one node.
  int64_t ranks_per_node = 0;
  // -D NAME=VALUE overrides.
  std::map<std::string, int64_t> defines;
  // Multiprocessors of the target GPU: role counts must fit (one persistent CTA per SM).
  int64_t sms = 132;
  // The NVRTC target the kernel is built for (support/arch.h): the source is the same for any,
  // but the tiles the compile summary names (Generated::paths) are the target's.
  std::string arch = "sm_90a";
  // Parse every device function with Clang and hold it to its contract (compiler/sema/
  // clang_check.h); where the plugin is missing, a warning says so. The CLI sets it.
  bool clang_device_fns = false;
  // Plan one rank (0-based), not the world: the lowering, dependencies and scheduling of the ranks
  // within two steps of it (compiler/passes/neighbours.h), which give it the world's tasks,
  // waits, signals and CTA lists (tests/compiler/rank_plan_test.cc), and that rank's kernel only
  // (codegen::CodegenOptions::rank), for a process that runs that rank alone. -1: every rank.
  int64_t plan_rank = -1;
};

// Adds the override `text` (what follows -D: "NAME=VALUE") to `options`. VALUE is an integer as
// the language writes it (4096, 4_096, 0x1000; dsl::parse_integer_value). Throws UserError, with
// the text and the reason, when it is not NAME=VALUE, when VALUE is not such an integer or does
// not fit 64 bits, and when NAME is set already: a repeated -D is a mistake, not "last wins".
void add_define(std::string_view text, CheckOptions* options);

// Checks every schedule of `module`; returns them checked for the last world size tried (empty
// when there were errors). Diagnostics go to `diags`.
std::vector<CheckedSchedule> check(const dsl::Module& module, const CheckOptions& options,
                                   dsl::Diagnostics& diags);

}  // namespace mkc::compiler
