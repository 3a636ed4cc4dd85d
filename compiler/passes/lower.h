// Lowering: a checked schedule (for one world size) becomes a plan's buffers and tasks.
//
// Each operation instance becomes tasks on every rank: compute operations one task per tile,
// communication one or more per chunk. Collectives are lowered here through a selector
// (one-shot for small messages, two-shot for large ones, or what `algo(...)` asks), recorded in
// Plan::decisions. Every task lists the boxes it reads and writes; dependencies are not made here
// (compiler/passes/dependencies.h derives them from those boxes).
#pragma once

#include "compiler/plan/plan.h"
#include "dsl/source.h"

namespace mkc::plan {

struct LowerOptions {
  // Collectives of at most this many bytes per rank go one-shot under algo(auto).
  int64_t one_shot_max_bytes = 1 << 20;
  // Upper bound of a2a_send tasks per rank (row blocks of the dispatched tensor).
  int64_t max_a2a_tasks_per_rank = 128;
  // The same bound for plans with edges between nodes: fewer, larger row blocks, so that a task's
  // rows for one expert on another node make one proxy request, not one each (every request costs
  // the proxy a copy; docs/NET.md, MoE across nodes).
  int64_t max_a2a_tasks_per_rank_across_nodes = 16;
  // Multiprocessors of the target: a GEMM without tile(...) takes 128 x 256 tiles when they fill
  // every SM at least once, else 128 x 128.
  int64_t sms = 132;
  // Split K over the compute CTAs that a skinny GEMM's tiles would leave idle
  // (compiler/passes/lower_compute.cc, lower_gemm).
  bool split_k = true;
  // The most tasks a rank's part of the plan may have: the kernel's task tables, the source NVRTC
  // compiles and the compile time grow with them. Past it, lowering stops with a UserError
  // naming the operation, at its .mks place when `file` is given.
  int64_t max_tasks_per_rank = compiler::kMaxTasksPerRank;
  // The most views and boxes all tasks of the plan may hold together (its memory).
  int64_t max_plan_entries = int64_t{1} << 22;
  const dsl::SourceFile* file = nullptr;
  // Knobs `mkc tune` measured fastest (tune/db.h), by operation name: a GEMM without tile(...)
  // runs with this tile and split-K instead of the rule's. Null: none. (Behind a pointer: GCC 12
  // under the sanitizers warns of a map default-built inside `{}` options, a false positive.)
  struct Tuned {
    std::vector<int64_t> tile;
    int64_t split_k = 1;
    int64_t cluster = 1;  // 2: the tiles run in 2-CTA clusters sharing B (lower_compute.cc)
  };
  std::shared_ptr<const std::map<std::string, Tuned>> tuned;
  // Lower only these ranks' tasks (ascending; empty: every rank's), each exactly as the whole
  // world's lowering makes it, in the same order: a rank's part of the plan without the others'
  // (issue 35, per-rank planning; tests/compiler/rank_plan_test.cc holds it to that). Every
  // rank's launch fence and end stay (the dependency pass orders writes into a rank after its
  // fence); buffers and decisions are the whole world's; Plan::lowered says whose tasks are
  // there. The budgets count the lowered ranks' tasks only.
  std::vector<int64_t> ranks;
  // With `ranks`: operations (by index, 1 = private) lowered on `own_rank` alone, not on the other
  // ranks of `ranks`. Those ranks are there for their edges with own_rank; a compute operation
  // that touches only its rank's memory, in buffers no other rank's task touches
  // (private_ops() in compiler/passes/neighbours.h), makes none, and the counters a peer signals
  // are numbered without it (plan::Event::slot). Empty: every operation on every rank of `ranks`.
  std::vector<char> private_ops;
  int64_t own_rank = -1;
  // A footprint, not a plan (compiler/passes/neighbours.h): each compute operation one task per
  // rank touching what its uses name, communication in at most R chunks per operation. Whose
  // memory each rank's tasks touch is the plan's; nothing else is.
  bool footprint = false;
};

Plan lower(const compiler::CheckedSchedule& schedule, const LowerOptions& options = {});

}  // namespace mkc::plan
