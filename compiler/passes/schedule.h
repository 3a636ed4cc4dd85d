// Scheduling: CTA roles, a global topological order, and each CTA's task list.
//
// Tasks are ordered by a topological sort of their waits that prefers creation order (so a
// GEMM's rows_from order and a collective's chunk order survive): where every wait goes from a
// lower task id to a higher one, as in every lowered sample, that order is the ids' and no sort
// runs. Compute tasks go round-robin to
// the compute CTAs (by their load where the kind gives one, compiler/kinds/kind.h) and
// communication tasks to the comm CTAs, except the row moves of the kinds that runs_anywhere,
// which go round-robin to every CTA; each CTA's list is in that global order.
// With every CTA resident (one per SM), that order makes the kernel deadlock-free: the earliest
// unfinished task anywhere has all its producers finished, so it can always run. A wait cycle
// (possible in a hand-made plan) is rejected here, naming the tasks on it.
#pragma once

#include <map>
#include <string>

#include "compiler/plan/plan.h"

namespace mkc::plan {

struct ScheduleOptions {
  int64_t sms = 132;                     // CTAs available: one per SM
  std::map<std::string, int64_t> roles;  // from the schedule's `roles`; empty: chosen here
};

// The compute CTAs of a kernel with (or without) communication and compute work on `sms` SMs:
// the schedule's `roles` when it names them, else about one CTA in eight drives communication
// (16 of 132 on an H200, at least one) and the rest compute. The lowering sizes persistent
// workers (grouped GEMMs) by it.
int64_t compute_ctas(const std::map<std::string, int64_t>& roles, bool any_comm, bool any_compute,
                     int64_t sms);

// Throws UserError naming the cycle when the waits of `plan` form one.
void schedule(Plan& plan, const ScheduleOptions& options);

}  // namespace mkc::plan
