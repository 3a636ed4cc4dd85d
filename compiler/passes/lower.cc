// Lowering, the driver: the plan's buffers (one per tensor), a launch fence and a launch end on
// every rank, and in between the tasks of every operation instance in program order. The kinds of
// operations are lowered in their own files (compiler/passes/lowerer.h lists them).
#include "compiler/passes/lower.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/passes/lowerer.h"
#include "support/error.h"

namespace mkc::plan {

using compiler::OpKind;

int64_t product(const std::vector<int64_t>& v, size_t from) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int64_t reduce_code(const std::string& op) {
  return op == "sum" ? abi::kSum : op == "max" ? abi::kMax : abi::kMin;
}

Lowerer::Lowerer(const compiler::CheckedSchedule& s, const LowerOptions& o) : s_(s), opts_(o) {
  plan_.schedule = s.name;
  plan_.ranks = s.ranks;
  plan_.ranks_per_node = s.ranks_per_node;
  plan_.source = &s;
  if (!o.ranks.empty()) {
    lowered_.assign(static_cast<size_t>(s.ranks), 0);
    for (const int64_t r : o.ranks) {
      if (r < 0 || r >= s.ranks) {
        throw InternalError(fmt::format("lowering rank {} of a world of {}", r, s.ranks));
      }
      lowered_[static_cast<size_t>(r)] = 1;
    }
    plan_.lowered = lowered_;
  }
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const compiler::Tensor& t = s.tensors[i];
    static const char* kOrigin[] = {"input", "output", "scratch"};
    plan_.buffers.push_back(Buffer{t.name, t.dtype, t.shape,
                                   t.placement == dsl::Placement::kSymmetric,
                                   kOrigin[static_cast<int>(t.kind)], static_cast<int>(i)});
  }
}

Plan Lowerer::run() {
  // The launch fence comes first on every rank: peers may write into this rank's buffers only
  // once this rank has finished its previous launch (stream order) and announced the new one.
  for (int64_t r = 0; r < R(); ++r) emit(task(-1, r, TaskKind::kLaunchFence, "launch_fence"));
  for (size_t i = 0; i < s_.ops.size(); ++i) lower_op(static_cast<int>(i));
  // The launch end: a rank's kernel may exit only once every peer's write into it has landed
  // (compiler/passes/dependencies.h makes it wait for them).
  for (int64_t r = 0; r < R(); ++r) emit(task(-1, r, TaskKind::kLaunchEnd, "launch_end"));
  return std::move(plan_);
}

Task Lowerer::task(int op, int64_t rank, TaskKind kind, std::string label) const {
  Task t;
  t.op = op;
  t.rank = static_cast<int>(rank);
  t.kind = kind;
  t.label = std::move(label);
  return t;
}

int Lowerer::add_buffer(const std::string& name, compiler::DType dt, std::vector<int64_t> shape,
                        bool symmetric) {
  plan_.buffers.push_back(Buffer{name, dt, std::move(shape), symmetric, "compiler", -1});
  return static_cast<int>(plan_.buffers.size()) - 1;
}

std::string Lowerer::name_of(const compiler::OpInstance& op) const {
  return op.iteration >= 0 ? fmt::format("{}[{}]", op.name, op.iteration) : op.name;
}

void Lowerer::emit(Task t) {
  // Another rank's task, when only some are lowered: the loops skip most of them before they
  // are built; this drops the rest.
  if (!lowered(t.rank) && t.op >= 0) return;
  if (rank_tasks_.empty()) rank_tasks_.assign(R(), 0);
  if (++rank_tasks_[t.rank] > opts_.max_tasks_per_rank)
    over_budget(t.rank, static_cast<double>(rank_tasks_[t.rank]));
  entries_ += static_cast<int64_t>(t.views.size() + t.reads.size() + t.writes.size());
  if (entries_ > opts_.max_plan_entries) over_budget(-1, static_cast<double>(entries_));
  plan_.tasks.push_back(std::move(t));
}

void Lowerer::over_budget(int64_t rank, double tasks) const {
  std::string where;
  std::string what = "the plan";
  if (current_op_ >= 0) {
    const compiler::OpInstance& op = s_.ops[current_op_];
    what = fmt::format("operation `{}`", name_of(op));
    if (opts_.file && op.decl) {
      const dsl::LineCol lc = opts_.file->line_col(op.decl->span.begin);
      where = fmt::format("{}:{}:{}: ", opts_.file->path(), lc.line, lc.col);
    }
  }
  if (rank < 0) {
    throw UserError(fmt::format(
        "{}{} brings the plan to {:.4g} views and boxes over its {} ranks, over mkc's limit of {} "
        "(every task addresses its operands on every rank it touches: the plan's memory grows "
        "with ranks x tasks); use fewer ranks, larger tile(...) or chunk(...) sizes, or fewer "
        "loop iterations",
        where, what, tasks, R(), opts_.max_plan_entries));
  }
  throw UserError(fmt::format(
      "{}{} brings rank {}'s part of the plan to {:.4g} tasks, over mkc's limit of {} per rank "
      "(the kernel's task tables and its compile time grow with the tasks); use larger tile(...) "
      "or chunk(...) sizes, or fewer loop iterations",
      where, what, rank, tasks, opts_.max_tasks_per_rank));
}

std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> Lowerer::chunk_grid(
    const std::vector<int64_t>& shape, std::vector<int64_t> sizes, bool rotating) const {
  while (sizes.size() < shape.size()) sizes.insert(sizes.begin(), 1);
  double count = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    count *= static_cast<double>(cdiv(shape[d], std::max<int64_t>(1, sizes[d])));
  if (count > static_cast<double>(opts_.max_tasks_per_rank)) over_budget(0, count);
  auto chunks = grid(shape, std::move(sizes));
  // A footprint asks whose memory, not where in it: the first R chunks, as roles that rotate
  // with the chunk (a hierarchical all-reduce's owner is the chunk's index mod the node's ranks)
  // all appear among them; one where no role rotates.
  const size_t keep = rotating ? static_cast<size_t>(R()) : 1;
  if (opts_.footprint && chunks.size() > keep) chunks.resize(keep);
  return chunks;
}

void Lowerer::lower_op(int i) {
  current_op_ = i;
  if (!lowered_.empty() && opts_.own_rank >= 0 &&
      static_cast<size_t>(i) < opts_.private_ops.size() && opts_.private_ops[i] &&
      lowered(opts_.own_rank)) {
    // A private operation: the planned rank's tasks alone (LowerOptions::private_ops).
    std::vector<char> all(static_cast<size_t>(R()), 0);
    all[static_cast<size_t>(opts_.own_rank)] = 1;
    std::swap(all, lowered_);
    lower_kind(i);
    std::swap(all, lowered_);
    return;
  }
  lower_kind(i);
}

void Lowerer::lower_kind(int i) {
  if (opts_.footprint) {
    switch (s_.ops[i].kind) {
      case OpKind::kGemm:
      case OpKind::kGroupedGemm:
      case OpKind::kMap:
      case OpKind::kCopy:
      case OpKind::kReduce:
      case OpKind::kAttention:
        return lower_footprint(i);
      default:
        break;
    }
  }
  switch (s_.ops[i].kind) {
    case OpKind::kGemm:
      return lower_gemm(i);
    case OpKind::kGroupedGemm:
      return lower_grouped_gemm(i);
    case OpKind::kMap:
    case OpKind::kCopy:
      return lower_rows(i);
    case OpKind::kReduce:
      return lower_reduce(i);
    case OpKind::kAttention:
      return lower_attention(i);
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter:
      return lower_reduction(i);
    case OpKind::kAllGather:
      return lower_allgather(i);
    case OpKind::kShift:
    case OpKind::kPut:
      return lower_put(i);
    case OpKind::kSignal:
      return lower_signal(i);
    case OpKind::kAllToAll:
      return lower_alltoall(i);
    case OpKind::kCombine:
      return lower_combine(i);
  }
}

Plan lower(const compiler::CheckedSchedule& schedule, const LowerOptions& options) {
  return Lowerer(schedule, options).run();
}

}  // namespace mkc::plan
