// The neighbour relation of a schedule's ranks (neighbours.h) from a footprint lowering.
#include "compiler/passes/neighbours.h"

#include <algorithm>
#include <set>

#include "compiler/passes/lower.h"
#include "compiler/passes/lowerer.h"

namespace mkc::plan {

// A compute operation's footprint: one task per rank reading its inputs and writing its outputs
// whole, each on the rank its use names (a compute stage touches only what its uses name; its
// tiles differ in where, not in whose memory).
void Lowerer::lower_footprint(int i) {
  const compiler::OpInstance& op = s_.ops[i];
  for (int64_t r = 0; r < R(); ++r) {
    if (!lowered(r)) continue;
    Task t = task(i, r, TaskKind::kMapTile, name_of(op) + ".footprint");
    auto rank_of = [&](const compiler::TensorUse& u) {
      return u.on_peer ? eval_peer(u.peer, r, s_) : r;
    };
    for (const compiler::TensorUse& u : op.inputs)
      t.reads.push_back(whole_box(view(u, rank_of(u))));
    for (const compiler::TensorUse& u : op.outputs)
      t.writes.push_back(whole_box(view(u, rank_of(u))));
    emit(std::move(t));
  }
}

std::vector<std::vector<int64_t>> neighbours(const compiler::CheckedSchedule& s) {
  LowerOptions o;
  o.footprint = true;
  o.max_a2a_tasks_per_rank = 1;
  o.max_a2a_tasks_per_rank_across_nodes = 1;
  const Plan p = lower(s, o);
  std::vector<std::set<int64_t>> n(static_cast<size_t>(s.ranks));
  auto link = [&](int64_t a, int64_t b) {
    if (a == b) return;
    n[a].insert(b);
    n[b].insert(a);
  };
  for (const Task& t : p.tasks) {
    if (t.op < 0) continue;
    for (const std::vector<Box>* boxes : {&t.reads, &t.writes}) {
      for (const Box& b : *boxes) link(t.rank, b.rank);
    }
    if (t.kind == TaskKind::kSignalOnly) link(t.rank, args_as<abi::SignalArgs>(t).peer);
  }
  std::vector<std::vector<int64_t>> out;
  out.reserve(n.size());
  for (const std::set<int64_t>& x : n) out.emplace_back(x.begin(), x.end());
  return out;
}

std::vector<char> private_ops(const compiler::CheckedSchedule& s) {
  LowerOptions o;
  o.footprint = true;
  o.max_a2a_tasks_per_rank = 1;
  o.max_a2a_tasks_per_rank_across_nodes = 1;
  const Plan p = lower(s, o);
  // (rank, buffer) pairs some task of another rank touches; launch fences and ends touch nothing.
  std::set<std::pair<int, int>> shared;
  for (const Task& t : p.tasks) {
    for (const std::vector<Box>* boxes : {&t.reads, &t.writes}) {
      for (const Box& b : *boxes) {
        if (b.rank != t.rank) shared.insert({b.rank, b.buffer});
      }
    }
  }
  std::vector<char> out(s.ops.size(), 0);
  for (size_t i = 0; i < s.ops.size(); ++i) {
    switch (s.ops[i].kind) {
      case compiler::OpKind::kGemm:
      case compiler::OpKind::kGroupedGemm:
      case compiler::OpKind::kMap:
      case compiler::OpKind::kCopy:
      case compiler::OpKind::kReduce:
      case compiler::OpKind::kAttention:
        out[i] = 1;
        break;
      default:
        break;
    }
  }
  // A tensor argument (a grouped GEMM's counts) is read on the task's own rank; the footprint
  // leaves it out, so it counts as shared when any rank's peers touch it.
  for (size_t i = 0; i < s.ops.size(); ++i) {
    for (const auto& arg : s.ops[i].tensor_args) {
      for (int64_t r = 0; r < s.ranks; ++r) {
        if (shared.count({static_cast<int>(r), arg.second})) out[i] = 0;
      }
    }
  }
  for (const Task& t : p.tasks) {
    if (t.op < 0 || !out[t.op]) continue;
    for (const std::vector<Box>* boxes : {&t.reads, &t.writes}) {
      for (const Box& b : *boxes) {
        if (b.rank != t.rank || shared.count({b.rank, b.buffer})) out[t.op] = 0;
      }
    }
  }
  return out;
}

std::vector<int64_t> ranks_within(const std::vector<std::vector<int64_t>>& neighbours, int64_t rank,
                                  int steps) {
  std::set<int64_t> seen = {rank};
  std::vector<int64_t> frontier = {rank};
  for (int s = 0; s < steps && !frontier.empty(); ++s) {
    std::vector<int64_t> next;
    for (const int64_t x : frontier) {
      for (const int64_t y : neighbours[x]) {
        if (seen.insert(y).second) next.push_back(y);
      }
    }
    frontier = std::move(next);
  }
  return {seen.begin(), seen.end()};
}

}  // namespace mkc::plan
