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
#include "tune/gemm_model.h"

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

// The operands a GEMM copies before its tiles read them (lower_compute.cc, lower_gemm): TMA loads
// only rows that start 16 bytes apart on 16-byte boundaries (compiler/kinds/kinds.h,
// tma_rows_ok), so a 16-bit A or B whose rows do not would run the SIMT tile, some 50x slower
// than the tensor cores. Such an operand is staged: copied into a buffer of the compiler's whose
// rows are `pitch` elements apart (a multiple of 64: 128 bytes, where B's loads run at full
// speed, tune/gemm_model.cc). 0: not staged.
struct GemmStaging {
  int64_t a_pitch = 0;  // A [M, K] into [M, a_pitch]
  int64_t b_pitch = 0;  // B [K, N] into [K, b_pitch]
  // Bytes the copies read and write.
  int64_t bytes(int64_t M, int64_t N, int64_t K) const {
    return 4 * ((a_pitch > 0 ? M * K : 0) + (b_pitch > 0 ? K * N : 0));
  }
};
GemmStaging gemm_staging(const compiler::CheckedSchedule& s, const compiler::OpInstance& op);

// The cost model's problem (tune/gemm_model.h) for GEMM `op` with `compute_ctas` of `sms` CTAs
// and split-K allowed or not: the one the lowering ranks candidates by, and `mkc tune` too.
tune::GemmProblem gemm_problem(const compiler::CheckedSchedule& s, const compiler::OpInstance& op,
                               int64_t compute_ctas, int64_t sms, bool split_k);

// The queries per task the compiler gives attention `op` of `s` without a tile(...): 192 at head
// dim 64 (the tensor-core tile's three consumer warpgroups, 512 threads) when no GEMM and no
// other attention, unless it asks for tile(192) at head dim 64 too, shares the kernel (their
// tensor-core tiles run 384), else 128. The lowering's default, and the choice `mkc tune`
// measures the others against.
int64_t attention_default_rows(const compiler::CheckedSchedule& s, const compiler::OpInstance& op);

}  // namespace mkc::plan
