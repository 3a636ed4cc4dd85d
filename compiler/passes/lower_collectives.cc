// Lowering of communication: the collective algorithm selector (visible in Plan::decisions),
// allreduce and reducescatter (one-shot and two-shot, through symmetric receive slots),
// allgather, put and shift (sends), signal. Every data movement is a send task (abi.h "ranges").
#include <fmt/format.h>

#include <algorithm>

#include "compiler/passes/lowerer.h"

namespace mkc::plan {
namespace {

using compiler::CheckedSchedule;
using compiler::OpInstance;
using compiler::OpKind;
using compiler::TensorUse;

}  // namespace

int64_t eval_peer(const dsl::Expr& e, int64_t r, const CheckedSchedule& s) {
  const int64_t v = compiler::evaluate(e, r, s);
  return ((v % s.ranks) + s.ranks) % s.ranks;
}

// send: views {src, dst}; args {range}: copies the box [lo, hi) of src (view coordinates) to the
// same box of dst on another rank (or this one). The same task kind carries every put.
Task Lowerer::send(int i, int64_t r, View src, View dst, const std::vector<int64_t>& lo,
                   const std::vector<int64_t>& hi, const std::string& label) const {
  // Local or remote, a box copy is a send (the copy kind moves whole leading rows only).
  // Boxes and views are moved in, not copied from initializer lists: a plan of 64 ranks has a
  // quarter of a million sends, and each copy allocated the box's or view's vectors again.
  Task t = task(i, r, TaskKind::kSend, label);
  push_range(&t.args, lo, hi);
  t.reads.push_back(box(src, lo, hi));
  t.writes.push_back(box(dst, lo, hi));
  t.views.reserve(2);
  t.views.push_back(std::move(src));
  t.views.push_back(std::move(dst));
  return t;
}

std::string Lowerer::choose(const OpInstance& op, int64_t bytes) {
  std::string choice = op.algo, reason = "requested with algo(...)";
  if (R() == 1) {
    choice = "local";
    reason = "one rank";
  } else if (op.algo == "auto") {
    choice = bytes <= opts_.one_shot_max_bytes ? "one_shot" : "two_shot";
    reason = fmt::format("{} bytes per rank {} {} (one-shot threshold)", bytes,
                         bytes <= opts_.one_shot_max_bytes ? "<=" : ">", opts_.one_shot_max_bytes);
  } else if (op.algo == "ring") {
    choice = "two_shot";
    reason = "algo(ring) requested; ring is not implemented yet, two-shot moves the same bytes";
  }
  // Across nodes of several ranks each, an all-reduce under algo(auto) crosses the proxies once
  // per node and chunk, not once per rank.
  const int64_t L = per_node();
  if (op.kind == OpKind::kAllReduce && op.algo == "auto" && L > 1 && L < R()) {
    choice = "hierarchical";
    reason = fmt::format(
        "{} nodes of {} ranks: reduce-scatter in the node (NVLink), all-reduce of the node sums "
        "between nodes (proxy), all-gather in the node",
        R() / L, L);
  }
  plan_.decisions.push_back(Decision{name_of(op), choice, reason});
  return choice;
}

// allreduce and reducescatter. reduce_slots: views {own, slots, out}; args {abi::ReduceSlotsHead,
// x range, slot range}: out[box] = op(own[x box], slots[s][slot box] for every
// s != self), where out's box is the x box (all-reduce) or the slot box (reduce-scatter).
void Lowerer::lower_reduction(int i) {
  const OpInstance& op = s_.ops[i];
  const bool all = op.kind == OpKind::kAllReduce;
  const TensorUse& x = op.inputs[0];
  const TensorUse& y = op.outputs.empty() ? x : op.outputs[0];
  const compiler::Tensor& xt = s_.tensors[x.tensor];
  const int eb = compiler::dtype_bytes(xt.dtype);
  // The part each chunk grid covers: X for allreduce, Y (the shard) for reducescatter.
  const std::vector<int64_t>& part = all ? x.shape : y.shape;
  const std::string algo = choose(op, product(x.shape) * eb);
  if (algo == "hierarchical") return lower_hierarchical_allreduce(i);
  const auto chunks = chunk_grid(part, chunk_sizes(op, part, eb));
  if (algo == "local") {
    // One rank: an out-of-place all-reduce or a reduce-scatter is a copy; in place, nothing.
    if (&y == &x) return;
    for (int64_t c = 0; c < static_cast<int64_t>(chunks.size()); ++c) {
      emit(send(i, 0, view(x, 0), view(y, 0), chunks[c].first, chunks[c].second,
                fmt::format("{}.chunk({})", name_of(op), c)));
    }
    return;
  }
  std::vector<int64_t> slot_shape = {R()};
  slot_shape.insert(slot_shape.end(), part.begin(), part.end());
  const int slots = add_buffer(name_of(op) + ".slots", xt.dtype, slot_shape, true);
  const int64_t shard = all ? 0 : part[0];
  // Per chunk, in phases: every send, then every reduction, then the broadcasts. The order
  // matters: it is program order for the credit rule, so an in-place reduction (which
  // overwrites X) comes after every send that reads X.
  for (int64_t c = 0; c < static_cast<int64_t>(chunks.size()); ++c) {
    const size_t chunk_first = plan_.tasks.size();
    // Named, not a structured binding: clang 14 (tools/fuzz.sh) cannot capture those.
    const auto& lo = chunks[c].first;
    const auto& hi = chunks[c].second;
    // Owners of the chunk: every rank (one-shot all-reduce), c mod R (two-shot), or for
    // reduce-scatter every rank for its own shard.
    std::vector<int64_t> owners;
    for (int64_t o = 0; o < R(); ++o) {
      if (!all || algo == "one_shot" || c % R() == o) owners.push_back(o);
    }
    // The source box of this chunk inside X: for reduce-scatter, shifted to the owner's shard.
    const auto x_range = [&](int64_t o) {
      std::vector<int64_t> xlo = lo, xhi = hi;
      if (!all) {
        xlo[0] += o * shard;
        xhi[0] += o * shard;
      }
      return std::make_pair(xlo, xhi);
    };
    for (int64_t o : owners) {
      const auto [xlo, xhi] = x_range(o);
      for (int64_t s = 0; s < R(); ++s) {
        if (s == o) continue;
        Task t = send(i, s, view(x, s), slot(slots, o, s), xlo, xhi,
                      fmt::format("{}.chunk({}).to({})", name_of(op), c, o));
        // The destination slot is addressed in the part's coordinates, not X's.
        t.args.clear();
        push_range(&t.args, xlo, xhi);
        push_range(&t.args, lo, hi);
        t.writes = {box(slot(slots, o, s), lo, hi)};
        emit(std::move(t));
      }
    }
    for (int64_t o : owners) {
      const auto [xlo, xhi] = x_range(o);
      Task red =
          task(i, o, TaskKind::kReduceSlots, fmt::format("{}.chunk({}).reduce", name_of(op), c));
      red.views = {view(x, o), whole(slots, o), view(y, o)};
      set_args(red, abi::ReduceSlotsHead{reduce_code(op.reduce_op), o, all ? 1 : 0});
      push_range(&red.args, xlo, xhi);
      push_range(&red.args, lo, hi);
      red.reads = {box(view(x, o), xlo, xhi)};
      for (int64_t s = 0; s < R(); ++s) {
        if (s != o) red.reads.push_back(box(slot(slots, o, s), lo, hi));
      }
      red.writes = {box(view(y, o), all ? xlo : lo, all ? xhi : hi)};
      emit(std::move(red));
    }
    if (all && algo == "two_shot") {
      for (int64_t o : owners) {
        for (int64_t d = 0; d < R(); ++d) {
          if (d != o)
            emit(send(i, o, view(y, o), view(y, d), lo, hi,
                      fmt::format("{}.chunk({}).bcast({})", name_of(op), c, d)));
        }
      }
    }
    // Every rank's part in chunk c (its send, the owner's reduction and broadcast) on one CTA
    // index: the ranks' CTAs meet on the same chunks. Only this chunk's tasks: a sweep from the
    // operation's first task made 100,000 chunks take minutes, quadratically.
    for (size_t t = chunk_first; t < plan_.tasks.size(); ++t) {
      if (plan_.tasks[t].group < 0) plan_.tasks[t].group = c;
    }
  }
}

// The all-reduce across N nodes of L ranks (rank = node * L + local). Per chunk c, the owner in
// every node is local rank c mod L (chunks spread over a node's ranks), and per node, in order:
//   1. every other rank of the node sends its chunk to the owner's slot [L, ...] (NVLink);
//   2. the owner reduces its X with those slots into Y: the node's sum of the chunk;
//   3. the owner sends that sum to the owners of the other nodes, slots [N, ...] (proxy);
//   4. each owner reduces its node sum with the other nodes' into Y: the full sum;
//   5. the owner sends the result to the other ranks of its node (NVLink).
// Between nodes each chunk crosses N (N - 1) times, against R (R - 1) / ... for the flat
// algorithms, whose every rank sends to every other.
void Lowerer::lower_hierarchical_allreduce(int i) {
  const OpInstance& op = s_.ops[i];
  const TensorUse& x = op.inputs[0];
  const TensorUse& y = op.outputs.empty() ? x : op.outputs[0];
  const compiler::Tensor& xt = s_.tensors[x.tensor];
  const int eb = compiler::dtype_bytes(xt.dtype);
  const int64_t L = per_node(), N = R() / L;
  const auto chunks = chunk_grid(x.shape, chunk_sizes(op, x.shape, eb));
  const auto with_lead = [&](int64_t n) {
    std::vector<int64_t> shape = {n};
    shape.insert(shape.end(), x.shape.begin(), x.shape.end());
    return shape;
  };
  const int in_node = add_buffer(name_of(op) + ".node_slots", xt.dtype, with_lead(L), true);
  const int across = add_buffer(name_of(op) + ".node_sums", xt.dtype, with_lead(N), true);
  const abi::i64 code = reduce_code(op.reduce_op);
  for (int64_t c = 0; c < static_cast<int64_t>(chunks.size()); ++c) {
    const size_t chunk_first = plan_.tasks.size();
    // Named, not a structured binding: clang 14 (tools/fuzz.sh) cannot capture those.
    const auto& lo = chunks[c].first;
    const auto& hi = chunks[c].second;
    const int64_t o = c % L;
    const auto owner = [&](int64_t n) { return n * L + o; };
    const std::string name = fmt::format("{}.chunk({})", name_of(op), c);
    // 1. Into the owner's node slots.
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t l = 0; l < L; ++l) {
        if (l == o) continue;
        const int64_t s = n * L + l;
        Task t = send(i, s, view(x, s), slot(in_node, owner(n), l), lo, hi,
                      fmt::format("{}.to({})", name, owner(n)));
        emit(std::move(t));
      }
    }
    // 2. The node's sum, and 4. the full sum: own + every other slot of the buffer.
    const auto reduce = [&](int64_t g, const View& own, int slots, int64_t self, int64_t count,
                            const std::string& label) {
      Task red = task(i, g, TaskKind::kReduceSlots, label);
      red.views = {own, whole(slots, g), view(y, g)};
      set_args(red, abi::ReduceSlotsHead{code, self, 1});
      push_range(&red.args, lo, hi);
      push_range(&red.args, lo, hi);
      red.reads.reserve(static_cast<size_t>(count));
      red.reads.push_back(box(own, lo, hi));
      for (int64_t k = 0; k < count; ++k) {
        if (k != self) red.reads.push_back(box(slot(slots, g, k), lo, hi));
      }
      red.writes.push_back(box(view(y, g), lo, hi));
      emit(std::move(red));
    };
    for (int64_t n = 0; n < N; ++n)
      reduce(owner(n), view(x, owner(n)), in_node, o, L, name + ".node_reduce");
    // 3. Node sums between the nodes' owners.
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t m = 0; m < N; ++m) {
        if (m == n) continue;
        emit(send(i, owner(n), view(y, owner(n)), slot(across, owner(m), n), lo, hi,
                  fmt::format("{}.sum_to({})", name, owner(m))));
      }
    }
    // 4.
    for (int64_t n = 0; n < N; ++n)
      reduce(owner(n), view(y, owner(n)), across, n, N, name + ".reduce");
    // 5. The result to the node's other ranks.
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t l = 0; l < L; ++l) {
        if (l == o) continue;
        emit(send(i, owner(n), view(y, owner(n)), view(y, n * L + l), lo, hi,
                  fmt::format("{}.bcast({})", name, n * L + l)));
      }
    }
    for (size_t t = chunk_first; t < plan_.tasks.size(); ++t) {
      if (plan_.tasks[t].group < 0) plan_.tasks[t].group = c;
    }
  }
}

void Lowerer::lower_allgather(int i) {
  const OpInstance& op = s_.ops[i];
  const TensorUse& x = op.inputs[0];
  const int eb = compiler::dtype_bytes(s_.tensors[x.tensor].dtype);
  choose(op, product(x.shape) * eb * R());
  const auto chunks = chunk_grid(x.shape, chunk_sizes(op, x.shape, eb));
  const int64_t m = x.shape[0];
  for (int64_t s = 0; s < R(); ++s) {
    for (int64_t c = 0; c < static_cast<int64_t>(chunks.size()); ++c) {
      // Named, not a structured binding: clang 14 (tools/fuzz.sh) cannot capture those.
      const auto& lo = chunks[c].first;
      const auto& hi = chunks[c].second;
      std::vector<int64_t> ylo = lo, yhi = hi;
      ylo[0] += s * m;
      yhi[0] += s * m;
      for (int64_t d = 0; d < R(); ++d) {
        Task t = send(i, s, view(x, s), view(op.outputs[0], d), lo, hi,
                      fmt::format("{}.chunk({}).to({})", name_of(op), c, d));
        t.args.clear();
        push_range(&t.args, lo, hi);
        push_range(&t.args, ylo, yhi);
        t.writes = {box(view(op.outputs[0], d), ylo, yhi)};
        t.group = c * R() + d;
        emit(std::move(t));
      }
    }
  }
}

void Lowerer::lower_put(int i) {
  const OpInstance& op = s_.ops[i];
  const TensorUse& x = op.inputs[0];
  // Every chunk goes to the same peer: a footprint needs one.
  const auto chunks = chunk_grid(
      x.shape, chunk_sizes(op, x.shape, compiler::dtype_bytes(s_.tensors[x.tensor].dtype)),
      /*rotating=*/false);
  for (int64_t s = 0; s < R(); ++s) {
    if (!lowered(s)) continue;
    const int64_t d = op.kind == OpKind::kShift ? (((s + op.ints.at("by")) % R()) + R()) % R()
                                                : eval_peer(op.outputs[0].peer, s, s_);
    for (int64_t c = 0; c < static_cast<int64_t>(chunks.size()); ++c) {
      Task t = send(i, s, view(x, s), view(op.outputs[0], d), chunks[c].first, chunks[c].second,
                    fmt::format("{}.chunk({}).to({})", name_of(op), c, d));
      t.group = c;
      emit(std::move(t));
    }
  }
}

// signal: no views; args {peer}.
void Lowerer::lower_signal(int i) {
  const OpInstance& op = s_.ops[i];
  for (int64_t s = 0; s < R(); ++s) {
    Task t = task(i, s, TaskKind::kSignalOnly,
                  fmt::format("{}.to({})", name_of(op), eval_peer(op.decl->inputs[0].peer, s, s_)));
    set_args(t, abi::SignalArgs{eval_peer(op.decl->inputs[0].peer, s, s_)});
    emit(std::move(t));
  }
}

}  // namespace mkc::plan
