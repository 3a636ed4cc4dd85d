// The lowering's internals, shared by its files (compiler/passes/lower*.cc); the interface is
// lower.h.
//
//   lower.cc              the driver: buffers, launch fences and ends, one call per operation
//   lower_views.cc        views of tensor uses and the boxes tasks read and write in them
//   lower_compute.cc      compute stages: gemm, grouped_gemm, map, copy, reduce, attention
//   lower_collectives.cc  the algorithm selector, allreduce / reducescatter, allgather, put,
//                         shift, signal
//   lower_moe.cc          alltoall (MoE dispatch) and combine
//
// Boxes are derived from the tensor use's indices, never recovered from a view's flat offset: a
// view may be reshaped for the device (attention flattens [B, H, S, D] to [B * H, S, D]) while its
// boxes stay in the buffer's own dimensions, which is what the dependency pass and the verifier
// compare.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/passes/lower.h"
#include "compiler/plan/plan.h"

namespace mkc::plan {

int64_t product(const std::vector<int64_t>& v, size_t from = 0);
// The rank a peer expression names, for rank `r` (modulo the world size).
int64_t eval_peer(const dsl::Expr& e, int64_t r, const compiler::CheckedSchedule& s);
int64_t cdiv(int64_t a, int64_t b);

// The grid of chunks (or tiles) of `sizes` over the trailing dims of `shape`: a list of [lo, hi).
// Sizes align with the trailing dimensions; leading ones are cut one by one. The last chunk of a
// dimension the size does not divide is partial.
std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> grid(
    const std::vector<int64_t>& shape, std::vector<int64_t> sizes);

// Appends a range {n, lo[n], hi[n]} (templates/mkc/abi.h, "ranges") to a task's arguments.
void push_range(std::vector<int64_t>* args, const std::vector<int64_t>& lo,
                const std::vector<int64_t>& hi);

class Lowerer {
 public:
  Lowerer(const compiler::CheckedSchedule& s, const LowerOptions& o);
  Plan run();

 private:
  int64_t R() const { return s_.ranks; }
  // Whether rank r's tasks are lowered (LowerOptions::ranks).
  bool lowered(int64_t r) const { return lowered_.empty() || lowered_[r]; }
  Task task(int op, int64_t rank, TaskKind kind, std::string label) const;
  // Appends a task to the plan, within the budget of LowerOptions::max_tasks_per_rank (a located
  // UserError naming the operation being lowered past it).
  void emit(Task t);
  [[noreturn]] void over_budget(int64_t rank, double tasks) const;
  // grid() for the chunks of the operation being lowered, refused (over_budget) before it is
  // built when it would hold more chunks than a rank may have tasks. In a footprint
  // (LowerOptions::footprint) only the first R chunks, or the first one where the ranks a chunk
  // touches do not depend on its index (`rotating` false).
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> chunk_grid(
      const std::vector<int64_t>& shape, std::vector<int64_t> sizes, bool rotating = true) const;
  int add_buffer(const std::string& name, compiler::DType dt, std::vector<int64_t> shape,
                 bool symmetric);
  std::string name_of(const compiler::OpInstance& op) const;
  void lower_op(int i);
  void lower_kind(int i);  // lower_op's dispatch on the operation's kind

  // lower_views.cc. A view is a tensor use's region on a rank: the buffer at the flat offset of
  // its index prefix, with the shape after indexing (a tail of the buffer's shape).
  View view(const compiler::TensorUse& u, int64_t rank) const;
  View whole(int buffer, int64_t rank) const;
  View slot(int buffer, int64_t rank, int64_t i) const;  // [i, ...] of a [R, ...] buffer
  // The box of a view's sub-range [lo, hi) in the view's coordinates (missing trailing dims whole),
  // in the buffer's coordinates. The view's shape must be a tail of its buffer's.
  Box box(const View& v, std::vector<int64_t> lo, std::vector<int64_t> hi) const;
  Box whole_box(const View& v) const { return box(v, {}, {}); }
  // Default chunk: whole trailing rows of up to 64 KiB.
  std::vector<int64_t> chunk_sizes(const compiler::OpInstance& op,
                                   const std::vector<int64_t>& shape, int elem_bytes) const;

  // lower_compute.cc
  void lower_gemm(int i);
  void lower_grouped_gemm(int i);
  void lower_rows(int i);
  void lower_reduce(int i);
  void lower_attention(int i);

  // lower_collectives.cc
  Task send(int i, int64_t r, View src, View dst, const std::vector<int64_t>& lo,
            const std::vector<int64_t>& hi, const std::string& label) const;
  std::string choose(const compiler::OpInstance& op, int64_t bytes);
  void lower_reduction(int i);
  void lower_hierarchical_allreduce(int i);
  // Ranks per node (the world size when the job is one node).
  int64_t per_node() const { return plan_.per_node(); }
  void lower_allgather(int i);
  void lower_put(int i);
  void lower_signal(int i);

  // lower_moe.cc
  void lower_alltoall(int i);
  void lower_combine(int i);

  // neighbours.cc: a compute operation's footprint (LowerOptions::footprint).
  void lower_footprint(int i);

  const compiler::CheckedSchedule& s_;
  const LowerOptions& opts_;
  Plan plan_;
  // An accumulating attention's output slice (tensor, index) -> its acc buffer (max, sum follow).
  std::map<std::pair<int, std::vector<int64_t>>, int> attention_state_;
  std::map<int, std::pair<int, int>> a2a_buffers_;  // alltoall op -> {xcounts, origin}
  int current_op_ = -1;                             // the operation being lowered
  std::vector<int64_t> rank_tasks_;                 // tasks per rank so far
  int64_t entries_ = 0;                             // views and boxes of all tasks so far
  std::vector<char> lowered_;                       // rank -> lowered (empty: every rank)
  // (attention instance, rank, query rows) -> the query row from which it sees keys
  // (lower_attention): each instance of a merge group (2R of a causal ring) asks it of every other,
  // per rank.
  std::map<std::tuple<int, int64_t, int64_t>, int64_t> sees_from_;  // (.., .., its Sq)
};

// abi::ReduceOp of a reduction's name.
int64_t reduce_code(const std::string& op);

}  // namespace mkc::plan
