// Lowering of MoE routing: alltoall (dispatch: the counts exchange, then the rows, then the
// received counts) and combine (rows back to their origin, then the weighted sum). The rows' places
// are data-dependent: their write boxes are `scatter` boxes (plan.h).
#include <fmt/format.h>

#include <algorithm>

#include "compiler/passes/lowerer.h"

namespace mkc::plan {

using compiler::OpInstance;

// alltoall (MoE dispatch), data-dependent. Compiler scratch: xcounts [R, E] i32 symmetric (every
// rank's row counts per expert, exchanged first) and origin [cap, 3] i32 symmetric (for each
// received row: source rank, source row, k), which combine uses to send rows back.
//   a2a_counts on s: views {route_s, xcounts_d for d in 0..R}; args {E, K}: counts s's rows per
//     expert and writes that row into every rank's xcounts[s].
//   a2a_send on s: views {X_s, route_s, xcounts_s, Y_d..., origin_d...[, sent_s, staged_s]};
//     args {r0, r1, E, K}: rows [r0, r1) of X go to their experts' ranks, at the row the
//     expert-major, then source-rank, then source-row order gives them. Across nodes (ranks per
//     node < R) the rows to another node go through the proxy, one request per expert: they are
//     first copied, grouped by expert inside the task's region [r0 * K, r1 * K), into
//     staged_s [T * K, H] (X's type) and their origin entries into sent_s [T * K, 3] i32,
//     compiler scratch of the sender (the proxy reads this rank's heap only).
//   a2a_finish on d: views {xcounts_d, counts_d}; args {E}: counts[s, e] = xcounts[s, d*E/R + e].
void Lowerer::lower_alltoall(int i) {
  const OpInstance& op = s_.ops[i];
  const int64_t E = op.ints.at("experts");
  const int route = op.tensor_args.at("route"), counts = op.tensor_args.at("counts");
  const int64_t K = s_.tensors[route].shape[1];
  const int64_t T = op.inputs[0].shape[0], cap = op.outputs[0].shape[0];
  choose(op, 0);
  const int xc = add_buffer(name_of(op) + ".xcounts", compiler::DType::kI32, {R(), E}, true);
  const int origin = add_buffer(name_of(op) + ".origin", compiler::DType::kI32, {cap, 3}, true);
  a2a_buffers_[i] = {xc, origin};
  const bool proxied = per_node() < R();
  const int sent = proxied ? add_buffer(name_of(op) + ".sent", compiler::DType::kI32,
                                        {std::max<int64_t>(1, T * K), 3}, false)
                           : -1;
  const int staged =
      proxied ? add_buffer(name_of(op) + ".staged", s_.tensors[op.inputs[0].tensor].dtype,
                           {std::max<int64_t>(1, T * K), op.inputs[0].shape[1]}, false)
              : -1;
  const int64_t max_tasks =
      proxied ? std::min(opts_.max_a2a_tasks_per_rank, opts_.max_a2a_tasks_per_rank_across_nodes)
              : opts_.max_a2a_tasks_per_rank;
  const int64_t rows_per = std::max<int64_t>(op.chunk.empty() ? T : op.chunk[0],
                                             cdiv(T, std::max<int64_t>(1, max_tasks)));
  // In phases over all ranks (program order for the dependency rules): counts, rows, finish.
  for (int64_t s = 0; s < R(); ++s) {
    Task ct = task(i, s, TaskKind::kA2aCounts, fmt::format("{}.counts", name_of(op)));
    ct.views = {whole(route, s)};
    ct.reads = {whole_box(ct.views[0])};
    for (int64_t d = 0; d < R(); ++d) {
      ct.views.push_back(whole(xc, d));
      ct.writes.push_back(box(whole(xc, d), {s}, {s + 1}));
    }
    set_args(ct, abi::A2aCountsArgs{E, K});
    emit(std::move(ct));
  }
  for (int64_t s = 0; s < R(); ++s) {
    for (int64_t r0 = 0; r0 < T; r0 += rows_per) {
      Task t =
          task(i, s, TaskKind::kA2aSend, fmt::format("{}.chunk({})", name_of(op), r0 / rows_per));
      const View xv = view(op.inputs[0], s);
      t.views = {xv, whole(route, s), whole(xc, s)};
      t.reads = {box(xv, {r0}, {std::min(T, r0 + rows_per)}),
                 box(t.views[1], {r0}, {std::min(T, r0 + rows_per)}), whole_box(t.views[2])};
      for (int64_t d = 0; d < R(); ++d) {
        t.views.push_back(view(op.outputs[0], d));
        t.writes.push_back(whole_box(t.views.back()));
        t.writes.back().scatter = true;
      }
      for (int64_t d = 0; d < R(); ++d) {
        t.views.push_back(whole(origin, d));
        t.writes.push_back(whole_box(t.views.back()));
        t.writes.back().scatter = true;
      }
      for (const int scratch : {sent, staged}) {
        if (scratch < 0) continue;
        t.views.push_back(whole(scratch, s));
        t.writes.push_back(whole_box(t.views.back()));
        t.writes.back().scatter = true;
      }
      set_args(t, abi::A2aSendArgs{r0, std::min(T, r0 + rows_per), E, K});
      emit(std::move(t));
    }
  }
  for (int64_t s = 0; s < R(); ++s) {
    Task f = task(i, s, TaskKind::kA2aFinish, fmt::format("{}.finish", name_of(op)));
    f.views = {whole(xc, s), whole(counts, s)};
    f.reads = {whole_box(f.views[0])};
    f.writes = {whole_box(f.views[1])};
    set_args(f, abi::ExpertsArgs{E});
    emit(std::move(f));
  }
}

// combine: rows go back to the rank and row they came from, into back [T, K, H] (compiler
// scratch, symmetric) of the source, which then sums them weighted by W.
//   combine_send on d, parts j = 0 .. P - 1: views {Y_d, origin_d, xcounts_d, back_s...}; args
//     {E, j, P}: part j of the received rows (as many as xcounts says, cut evenly at run time)
//     goes to back_s[t, k] of its origin. P as for the dispatch's sends, so every CTA can take
//     a part (plan/schedule.cc).
//   combine_reduce on s: views {back_s, W_s or none, Out_s}; args {r0, r1, has_weights}:
//     Out[t] = sum_k W[t, k] * back[t, k] for rows [r0, r1).
void Lowerer::lower_combine(int i) {
  const OpInstance& op = s_.ops[i];
  const OpInstance& disp = s_.ops[op.dispatch_op];
  const auto [xc, origin] = a2a_buffers_.at(op.dispatch_op);
  const int64_t K = s_.tensors[disp.tensor_args.at("route")].shape[1];
  const int64_t T = op.outputs[0].shape[0], H = op.outputs[0].shape[1];
  const int back =
      add_buffer(name_of(op) + ".back", s_.tensors[op.outputs[0].tensor].dtype, {T, K, H}, true);
  const auto w = op.tensor_args.find("weights");
  const int64_t cap = op.inputs[0].shape[0];
  const int64_t parts = std::max<int64_t>(1, std::min(cap, opts_.max_a2a_tasks_per_rank));
  for (int64_t d = 0; d < R(); ++d) {
    for (int64_t j = 0; j < parts; ++j) {
      Task t = task(i, d, TaskKind::kCombineSend, fmt::format("{}.send({})", name_of(op), j));
      t.views = {view(op.inputs[0], d), whole(origin, d), whole(xc, d)};
      t.reads = {whole_box(t.views[0]), whole_box(t.views[1]), whole_box(t.views[2])};
      for (int64_t s = 0; s < R(); ++s) {
        t.views.push_back(whole(back, s));
        t.writes.push_back(whole_box(t.views.back()));
        t.writes.back().scatter = true;
      }
      set_args(t, abi::CombineSendArgs{disp.ints.at("experts"), j, parts});
      emit(std::move(t));
    }
  }
  const int64_t rows_per = std::max<int64_t>(1, op.chunk.empty() ? T : op.chunk[0] * 64);
  for (int64_t s = 0; s < R(); ++s) {
    for (int64_t r0 = 0; r0 < T; r0 += rows_per) {
      const int64_t r1 = std::min(T, r0 + rows_per);
      Task t = task(i, s, TaskKind::kCombineReduce,
                    fmt::format("{}.chunk({})", name_of(op), r0 / rows_per));
      const View b = whole(back, s), out = view(op.outputs[0], s);
      t.views = {b, w != op.tensor_args.end() ? whole(w->second, s) : b, out};
      t.reads = {box(b, {r0}, {r1})};
      if (w != op.tensor_args.end()) t.reads.push_back(box(t.views[1], {r0}, {r1}));
      t.writes = {box(out, {r0}, {r1})};
      set_args(t, abi::CombineReduceArgs{r0, r1, w != op.tensor_args.end() ? 1 : 0});
      emit(std::move(t));
    }
  }
}

}  // namespace mkc::plan
