// Lowering, the driver: the plan's buffers (one per tensor), a launch fence and a launch end on
// every rank, and in between the tasks of every operation instance in program order. The kinds of
// operations are lowered in their own files (compiler/lowerer.h lists them).
#include "compiler/lower.h"

#include <fmt/format.h>

#include "compiler/lowerer.h"
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
  plan_.source = &s;
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
  for (int64_t r = 0; r < R(); ++r)
    plan_.tasks.push_back(task(-1, r, TaskKind::kLaunchFence, "launch_fence"));
  for (size_t i = 0; i < s_.ops.size(); ++i) lower_op(static_cast<int>(i));
  // The launch end: a rank's kernel may exit only once every peer's write into it has landed
  // (compiler/dependencies.h makes it wait for them).
  for (int64_t r = 0; r < R(); ++r)
    plan_.tasks.push_back(task(-1, r, TaskKind::kLaunchEnd, "launch_end"));
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

void Lowerer::lower_op(int i) {
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
