#include "compiler/lower.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "support/check.h"
#include "support/error.h"

namespace mkc::plan {
namespace {

using compiler::CheckedSchedule;
using compiler::OpInstance;
using compiler::OpKind;
using compiler::TensorUse;

int64_t product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The rank a peer expression names, for rank `r` (modulo the world size).
int64_t eval_peer(const dsl::Expr& e, int64_t r, const CheckedSchedule& s) {
  const int64_t v = compiler::evaluate(e, r, s);
  return ((v % s.ranks) + s.ranks) % s.ranks;
}

class Lowerer {
 public:
  Lowerer(const CheckedSchedule& s, const LowerOptions& o) : s_(s), opts_(o) {
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

  Plan run() {
    // The launch fence comes first on every rank: peers may write into this rank's buffers only
    // once this rank has finished its previous launch (stream order) and announced the new one.
    for (int64_t r = 0; r < R(); ++r) {
      Task t = task(-1, r, TaskKind::kLaunchFence, "launch_fence");
      plan_.tasks.push_back(std::move(t));
    }
    for (size_t i = 0; i < s_.ops.size(); ++i) lower_op(static_cast<int>(i));
    // The launch end: a rank's kernel may exit only once every peer's write into it has landed
    // (compiler/dependencies.h makes it wait for them).
    for (int64_t r = 0; r < R(); ++r)
      plan_.tasks.push_back(task(-1, r, TaskKind::kLaunchEnd, "launch_end"));
    return std::move(plan_);
  }

 private:
  int64_t R() const { return s_.ranks; }

  Task task(int op, int64_t rank, TaskKind kind, std::string label) {
    Task t;
    t.op = op;
    t.rank = static_cast<int>(rank);
    t.kind = kind;
    t.label = std::move(label);
    return t;
  }

  int add_buffer(const std::string& name, compiler::DType dt, std::vector<int64_t> shape,
                 bool symmetric) {
    plan_.buffers.push_back(Buffer{name, dt, std::move(shape), symmetric, "compiler", -1});
    return static_cast<int>(plan_.buffers.size()) - 1;
  }

  // The view of a tensor use on a rank: the buffer at the flat offset of its index prefix.
  View view(const TensorUse& u, int64_t rank) const {
    const Buffer& b = plan_.buffers[u.tensor];
    int64_t offset = 0;
    for (size_t i = 0; i < u.index.size(); ++i) offset += u.index[i] * product(b.shape, i + 1);
    return View{static_cast<int>(rank), u.tensor, offset, u.shape};
  }

  View whole(int buffer, int64_t rank) const {
    return View{static_cast<int>(rank), buffer, 0, plan_.buffers[buffer].shape};
  }

  // A sub-view: rows [i, i+1) of the leading dimension removed (`slot` of a [R, ...] buffer).
  View slot(int buffer, int64_t rank, int64_t i) const {
    const std::vector<int64_t>& sh = plan_.buffers[buffer].shape;
    return View{static_cast<int>(rank), buffer, i * product(sh, 1),
                std::vector<int64_t>(sh.begin() + 1, sh.end())};
  }

  // The box of a view's sub-range [lo, hi) (in the view's coordinates; missing trailing dims
  // whole).
  Box box(const View& v, std::vector<int64_t> lo, std::vector<int64_t> hi) const {
    const Buffer& b = plan_.buffers[v.buffer];
    while (lo.size() < v.shape.size()) {
      lo.push_back(0);
      hi.push_back(v.shape[lo.size() - 1]);
    }
    // The view's leading (indexed) dimensions: recover their indices from the offset.
    const size_t lead = b.shape.size() - v.shape.size();
    Box out;
    out.rank = v.rank;
    out.buffer = v.buffer;
    int64_t rem = v.offset;
    for (size_t i = 0; i < lead; ++i) {
      const int64_t stride = product(b.shape, i + 1);
      const int64_t idx = rem / stride;
      rem %= stride;
      out.lo.push_back(idx);
      out.hi.push_back(idx + 1);
    }
    // A view of a buffer at an offset inside its first view dimension (rows of a flat block).
    const int64_t inner = v.shape.empty() ? 1 : product(v.shape, 1);
    const int64_t row_off = inner > 0 ? rem / inner : 0;
    for (size_t i = 0; i < v.shape.size(); ++i) {
      out.lo.push_back(lo[i] + (i == 0 ? row_off : 0));
      out.hi.push_back(hi[i] + (i == 0 ? row_off : 0));
    }
    return out;
  }

  Box whole_box(const View& v) const { return box(v, {}, {}); }

  // The grid of chunks (or tiles) of `sizes` over the trailing dims of `shape`: a list of [lo, hi).
  static std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> grid(
      const std::vector<int64_t>& shape, std::vector<int64_t> sizes) {
    // Sizes align with the trailing dimensions; leading ones are cut one by one.
    while (sizes.size() < shape.size()) sizes.insert(sizes.begin(), 1);
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> out;
    std::vector<int64_t> idx(shape.size(), 0);
    for (;;) {
      std::vector<int64_t> lo(shape.size()), hi(shape.size());
      for (size_t d = 0; d < shape.size(); ++d) {
        lo[d] = idx[d] * sizes[d];
        hi[d] = std::min(shape[d], lo[d] + sizes[d]);
      }
      out.push_back({lo, hi});
      size_t d = shape.size();
      while (d > 0) {
        --d;
        if (++idx[d] < cdiv(shape[d], sizes[d])) break;
        idx[d] = 0;
        if (d == 0) return out;
      }
      if (shape.empty()) return out;
    }
  }

  // Default chunk: whole trailing rows of up to 64 KiB.
  std::vector<int64_t> chunk_sizes(const OpInstance& op, const std::vector<int64_t>& shape,
                                   int elem_bytes) const {
    if (!op.chunk.empty()) return op.chunk;
    std::vector<int64_t> sizes = shape;
    const int64_t row = product(shape, 1) * elem_bytes;
    sizes[0] =
        std::max<int64_t>(1, std::min<int64_t>(shape[0], (64 << 10) / std::max<int64_t>(1, row)));
    return sizes;
  }

  static void push_range(std::vector<int64_t>* args, const std::vector<int64_t>& lo,
                         const std::vector<int64_t>& hi) {
    args->push_back(static_cast<int64_t>(lo.size()));
    args->insert(args->end(), lo.begin(), lo.end());
    args->insert(args->end(), hi.begin(), hi.end());
  }

  std::string name_of(const OpInstance& op) const {
    return op.iteration >= 0 ? fmt::format("{}[{}]", op.name, op.iteration) : op.name;
  }

  int64_t reduce_code(const std::string& op) const { return op == "sum" ? 0 : op == "max" ? 1 : 2; }

  void lower_op(int i) {
    const OpInstance& op = s_.ops[i];
    switch (op.kind) {
      case OpKind::kGemm:
        lower_gemm(i);
        break;
      case OpKind::kGroupedGemm:
        lower_grouped_gemm(i);
        break;
      case OpKind::kMap:
      case OpKind::kCopy:
        lower_rows(i);
        break;
      case OpKind::kReduce:
        lower_reduce(i);
        break;
      case OpKind::kAttention:
        lower_attention(i);
        break;
      case OpKind::kAllReduce:
      case OpKind::kReduceScatter:
        lower_reduction(i);
        break;
      case OpKind::kAllGather:
        lower_allgather(i);
        break;
      case OpKind::kShift:
      case OpKind::kPut:
        lower_put(i);
        break;
      case OpKind::kSignal:
        lower_signal(i);
        break;
      case OpKind::kAllToAll:
        lower_alltoall(i);
        break;
      case OpKind::kCombine:
        lower_combine(i);
        break;
    }
  }

  // gemm_tile: views {A, B, C[, bias]}; args {m0, m1, n0, n1, k_step, epilogue fn or -1, has_bias}.
  void lower_gemm(int i) {
    const OpInstance& op = s_.ops[i];
    const int64_t M = op.outputs[0].shape[0], N = op.outputs[0].shape[1];
    int64_t bm = 128, bn = 128, bk = 64;
    if (op.tile.empty()) {
      // The default: the wide tile (half the operand traffic per flop of 128 x 128) when there
      // are enough of them to occupy every SM; else the narrow one, for twice the parallelism.
      // Few rows: 64-row tiles, twice as many CTAs busy (decode-like shapes, skinny GEMMs).
      const int64_t wide = cdiv(M, 128) * cdiv(N, 256), square = cdiv(M, 128) * cdiv(N, 128);
      std::string why;
      if (wide >= opts_.sms) {
        bn = 256;
        why = fmt::format("{} tiles of 128 x 256 >= {} SMs", wide, opts_.sms);
      } else if (square >= opts_.sms) {
        why = fmt::format("{} tiles of 128 x 256 < {} SMs <= {} of 128 x 128", wide, opts_.sms,
                          square);
      } else {
        bm = 64;
        why = fmt::format("{} tiles of 128 x 128 < {} SMs", square, opts_.sms);
      }
      plan_.decisions.push_back(
          Decision{name_of(op), fmt::format("tile({}, {}, {})", bm, bn, bk), "default: " + why});
    } else {
      bm = op.tile[0];
      bn = op.tile.size() > 1 ? op.tile[1] : bn;
      bk = op.tile.size() > 2 ? op.tile[2] : bk;
    }
    const int64_t mb = cdiv(M, bm), nb = cdiv(N, bn);
    const auto bias = op.tensor_args.find("bias");
    for (int64_t r = 0; r < R(); ++r) {
      const int64_t start =
          op.has_rows_from ? ((compiler::evaluate(op.rows_from, r, s_) % mb) + mb) % mb : 0;
      // Tiles in groups of kGroup row blocks, column by column within a group: the CTAs that run
      // at the same time (consecutive tasks, dealt round-robin) then share A rows and B columns
      // in L2. A rotated start (rows_from) keeps plain row order: chunks arrive in that order.
      const int64_t group = op.has_rows_from ? 1 : 8;
      for (int64_t idx = 0; idx < mb * nb; ++idx) {
        const int64_t g0 = idx / (group * nb) * group, gsize = std::min(group, mb - g0);
        const int64_t within = idx - g0 * nb;
        const int64_t b = (start + g0 + within % gsize) % mb, bj = within / gsize;
        {
          Task t =
              task(i, r, TaskKind::kGemmTile, fmt::format("{}.tile({}, {})", name_of(op), b, bj));
          const View a = view(op.inputs[0], r), bv = view(op.inputs[1], r),
                     c = view(op.outputs[0], r);
          const int64_t m0 = b * bm, m1 = std::min(M, m0 + bm), n0 = bj * bn,
                        n1 = std::min(N, n0 + bn);
          t.views = {a, bv, c};
          t.args = {m0, m1, n0, n1, bk, op.device_fn, bias != op.tensor_args.end() ? 1 : 0};
          t.reads = {box(a, {m0, 0}, {m1, a.shape[1]}), box(bv, {0, n0}, {bv.shape[0], n1})};
          if (bias != op.tensor_args.end()) {
            const View bb = whole(bias->second, r);
            t.views.push_back(bb);
            t.reads.push_back(box(bb, {n0}, {n1}));
          }
          t.writes = {box(c, {m0, n0}, {m1, n1})};
          plan_.tasks.push_back(std::move(t));
        }
      }
    }
  }

  // grouped_gemm_tile: views {X, W, Y, counts}; args {r0, r1, n0, n1, epilogue fn or -1}. Rows of X
  // are grouped by group in order; counts (summed over its leading dims) says how many rows each
  // group has. Rows past the total are not computed.
  void lower_grouped_gemm(int i) {
    const OpInstance& op = s_.ops[i];
    const int64_t rows = op.outputs[0].shape[0], N = op.outputs[0].shape[1];
    const int64_t bm = op.tile.size() > 0 ? op.tile[0] : 128,
                  bn = op.tile.size() > 1 ? op.tile[1] : 128;
    const int counts = op.tensor_args.at("counts");
    for (int64_t r = 0; r < R(); ++r) {
      for (int64_t b = 0; b < cdiv(rows, bm); ++b) {
        for (int64_t bj = 0; bj < cdiv(N, bn); ++bj) {
          Task t = task(i, r, TaskKind::kGroupedGemmTile,
                        fmt::format("{}.tile({}, {})", name_of(op), b, bj));
          const View x = view(op.inputs[0], r), w = view(op.inputs[1], r),
                     y = view(op.outputs[0], r), c = whole(counts, r);
          const int64_t r0 = b * bm, r1 = std::min(rows, r0 + bm), n0 = bj * bn,
                        n1 = std::min(N, n0 + bn);
          t.views = {x, w, y, c};
          t.args = {r0, r1, n0, n1, op.device_fn};
          t.reads = {box(x, {r0, 0}, {r1, x.shape[1]}), whole_box(w), whole_box(c)};
          t.writes = {box(y, {r0, n0}, {r1, n1})};
          plan_.tasks.push_back(std::move(t));
        }
      }
    }
  }

  // map_tile: views {X1, ..., Xn, Y}; args {r0, r1, fn}. copy: views {X, Y}; args {r0, r1}.
  // Both work on rows [r0, r1) of the leading dimension.
  void lower_rows(int i) {
    const OpInstance& op = s_.ops[i];
    const std::vector<int64_t>& shape = op.outputs[0].shape;
    const int64_t row = product(shape, 1);
    const int64_t rows_per =
        op.tile.empty()
            ? std::max<int64_t>(1, std::min<int64_t>(shape[0], 16384 / std::max<int64_t>(1, row)))
            : op.tile[0];
    const bool is_map = op.kind == OpKind::kMap;
    for (int64_t r = 0; r < R(); ++r) {
      for (int64_t r0 = 0; r0 < shape[0]; r0 += rows_per) {
        const int64_t r1 = std::min(shape[0], r0 + rows_per);
        Task t = task(i, r, is_map ? TaskKind::kMapTile : TaskKind::kCopy,
                      fmt::format("{}.tile({})", name_of(op), r0 / rows_per));
        for (const TensorUse& u : op.inputs) {
          t.views.push_back(view(u, r));
          t.reads.push_back(box(t.views.back(), {r0}, {r1}));
        }
        t.views.push_back(view(op.outputs[0], r));
        t.writes.push_back(box(t.views.back(), {r0}, {r1}));
        t.args = {r0, r1};
        if (is_map) t.args.push_back(op.device_fn);
        plan_.tasks.push_back(std::move(t));
      }
    }
  }

  // reduce_tile: views {X, Y}; args {y_flat0, y_flat1, axis, op}: elements [y0, y1) of Y (flat).
  void lower_reduce(int i) {
    const OpInstance& op = s_.ops[i];
    const int64_t total = product(op.outputs[0].shape);
    const int64_t per = op.tile.empty() ? 4096 : product(op.tile);
    for (int64_t r = 0; r < R(); ++r) {
      for (int64_t y0 = 0; y0 < total; y0 += per) {
        Task t =
            task(i, r, TaskKind::kReduceTile, fmt::format("{}.tile({})", name_of(op), y0 / per));
        const View x = view(op.inputs[0], r), y = view(op.outputs[0], r);
        t.views = {x, y};
        t.args = {y0, std::min(total, y0 + per), op.ints.at("axis"), reduce_code(op.reduce_op)};
        t.reads = {whole_box(x)};
        t.writes = {whole_box(y)};
        plan_.tasks.push_back(std::move(t));
      }
    }
  }

  // attention_tile: views {Q, K, V, O[, acc, m, l]}; args {lead, q0, q1, causal, accumulate,
  // first, last, scale (double bits)}. Leading dims of Q are flattened to `lead`. With accumulate,
  // acc/m/l (f32, compiler scratch per declaration) carry the online softmax over the loop.
  void lower_attention(int i) {
    const OpInstance& op = s_.ops[i];
    const TensorUse& q = op.inputs[0];
    const size_t n = q.shape.size();
    const int64_t L = product(std::vector<int64_t>(q.shape.begin(), q.shape.end() - 2));
    const int64_t Sq = q.shape[n - 2], Dv = op.outputs[0].shape[n - 1];
    // The device tile holds the row statistics of at most 256 queries.
    const int64_t bq = std::min<int64_t>(op.tile.empty() ? 64 : op.tile[0], 256);
    const bool acc = op.ints.count("accumulate") && op.ints.at("accumulate");
    const double scale = op.floats.at("scale");  // the checker sets the default
    int64_t scale_bits = 0;
    std::memcpy(&scale_bits, &scale, sizeof(scale));
    // Instances of one declaration share the state: the first sets it up, the last writes O.
    const bool first = !acc || op.first_of_decl, last = !acc || op.last_of_decl;
    int state = -1;
    if (acc) {
      auto it = attention_state_.find(op.decl);
      if (it == attention_state_.end()) {
        const int a = add_buffer(op.name + ".acc", compiler::DType::kF32, {L, Sq, Dv}, false);
        add_buffer(op.name + ".max", compiler::DType::kF32, {L, Sq}, false);
        add_buffer(op.name + ".sum", compiler::DType::kF32, {L, Sq}, false);
        it = attention_state_.emplace(op.decl, a).first;
      }
      state = it->second;
    }
    const int64_t causal = op.ints.count("causal") ? op.ints.at("causal") : 0;
    for (int64_t r = 0; r < R(); ++r) {
      const View qv = view(q, r), kv = view(op.inputs[1], r), vv = view(op.inputs[2], r),
                 ov = view(op.outputs[0], r);
      // Flattened 3-D views: [L, S, D].
      const auto flat = [&](View v) {
        const size_t m = v.shape.size();
        v.shape = {product(std::vector<int64_t>(v.shape.begin(), v.shape.end() - 2)),
                   v.shape[m - 2], v.shape[m - 1]};
        return v;
      };
      for (int64_t l = 0; l < L; ++l) {
        for (int64_t q0 = 0; q0 < Sq; q0 += bq) {
          const int64_t q1 = std::min(Sq, q0 + bq);
          Task t = task(i, r, TaskKind::kAttentionTile,
                        fmt::format("{}.tile({}, {})", name_of(op), l, q0 / bq));
          t.views = {flat(qv), flat(kv), flat(vv), flat(ov)};
          t.args = {l, q0, q1, causal, acc ? 1 : 0, first ? 1 : 0, last ? 1 : 0, scale_bits};
          t.reads = {box(t.views[0], {l, q0}, {l + 1, q1}), box(t.views[1], {l}, {l + 1}),
                     box(t.views[2], {l}, {l + 1})};
          if (acc) {
            for (int k = 0; k < 3; ++k) t.views.push_back(whole(state + k, r));
            t.views[5].shape = {L, Sq, 1};
            t.views[6].shape = {L, Sq, 1};
            for (int k = 0; k < 3; ++k) {
              const Box b = box(whole(state + k, r), {l, q0}, {l + 1, q1});
              if (!first) t.reads.push_back(b);
              t.writes.push_back(b);
            }
          }
          if (last) t.writes.push_back(box(t.views[3], {l, q0}, {l + 1, q1}));
          plan_.tasks.push_back(std::move(t));
        }
      }
    }
  }

  // send: views {src, dst}; args {range}: copies the box [lo, hi) of src (view coordinates) to the
  // same box of dst on another rank (or this one). The same task kind carries every put.
  Task send(int i, int64_t r, const View& src, const View& dst, const std::vector<int64_t>& lo,
            const std::vector<int64_t>& hi, const std::string& label) {
    // Local or remote, a box copy is a send (the copy kind moves whole leading rows only).
    Task t = task(i, r, TaskKind::kSend, label);
    t.views = {src, dst};
    push_range(&t.args, lo, hi);
    t.reads = {box(src, lo, hi)};
    t.writes = {box(dst, lo, hi)};
    return t;
  }

  std::string choose(const OpInstance& op, int64_t bytes) {
    std::string choice = op.algo, reason = "requested with algo(...)";
    if (R() == 1) {
      choice = "local";
      reason = "one rank";
    } else if (op.algo == "auto") {
      choice = bytes <= opts_.one_shot_max_bytes ? "one_shot" : "two_shot";
      reason =
          fmt::format("{} bytes per rank {} {} (one-shot threshold)", bytes,
                      bytes <= opts_.one_shot_max_bytes ? "<=" : ">", opts_.one_shot_max_bytes);
    } else if (op.algo == "ring") {
      choice = "two_shot";
      reason = "algo(ring) requested; ring is not implemented yet, two-shot moves the same bytes";
    }
    plan_.decisions.push_back(Decision{name_of(op), choice, reason});
    return choice;
  }

  // allreduce and reducescatter. reduce_slots: views {own, slots, out}; args {op, self,
  // out_in_x_coords, x range, slot range}: out[box] = op(own[x box], slots[s][slot box] for every
  // s != self), where out's box is the x box (all-reduce) or the slot box (reduce-scatter).
  void lower_reduction(int i) {
    const size_t first_task = plan_.tasks.size();
    const OpInstance& op = s_.ops[i];
    const bool all = op.kind == OpKind::kAllReduce;
    const TensorUse& x = op.inputs[0];
    const TensorUse& y = op.outputs.empty() ? x : op.outputs[0];
    const compiler::Tensor& xt = s_.tensors[x.tensor];
    const int eb = compiler::dtype_bytes(xt.dtype);
    // The part each chunk grid covers: X for allreduce, Y (the shard) for reducescatter.
    const std::vector<int64_t>& part = all ? x.shape : y.shape;
    const std::string algo = choose(op, product(x.shape) * eb);
    const auto chunks = grid(part, chunk_sizes(op, part, eb));
    if (algo == "local") {
      // One rank: an out-of-place all-reduce or a reduce-scatter is a copy; in place, nothing.
      if (&y == &x) return;
      for (int64_t c = 0; c < static_cast<int64_t>(chunks.size()); ++c) {
        plan_.tasks.push_back(send(i, 0, view(x, 0), view(y, 0), chunks[c].first, chunks[c].second,
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
      const auto& [lo, hi] = chunks[c];
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
          plan_.tasks.push_back(std::move(t));
        }
      }
      for (int64_t o : owners) {
        const auto [xlo, xhi] = x_range(o);
        Task red =
            task(i, o, TaskKind::kReduceSlots, fmt::format("{}.chunk({}).reduce", name_of(op), c));
        red.views = {view(x, o), whole(slots, o), view(y, o)};
        red.args = {reduce_code(op.reduce_op), o, all ? 1 : 0};
        push_range(&red.args, xlo, xhi);
        push_range(&red.args, lo, hi);
        red.reads = {box(view(x, o), xlo, xhi)};
        for (int64_t s = 0; s < R(); ++s) {
          if (s != o) red.reads.push_back(box(slot(slots, o, s), lo, hi));
        }
        red.writes = {box(view(y, o), all ? xlo : lo, all ? xhi : hi)};
        plan_.tasks.push_back(std::move(red));
      }
      if (all && algo == "two_shot") {
        for (int64_t o : owners) {
          for (int64_t d = 0; d < R(); ++d) {
            if (d != o)
              plan_.tasks.push_back(send(i, o, view(y, o), view(y, d), lo, hi,
                                         fmt::format("{}.chunk({}).bcast({})", name_of(op), c, d)));
          }
        }
      }
      // Every rank's part in chunk c (its send, the owner's reduction and broadcast) on one CTA
      // index: the ranks' CTAs meet on the same chunks.
      for (size_t t = first_task; t < plan_.tasks.size(); ++t) {
        if (plan_.tasks[t].group < 0) plan_.tasks[t].group = c;
      }
    }
  }

  void lower_allgather(int i) {
    const OpInstance& op = s_.ops[i];
    const TensorUse& x = op.inputs[0];
    const int eb = compiler::dtype_bytes(s_.tensors[x.tensor].dtype);
    choose(op, product(x.shape) * eb * R());
    const auto chunks = grid(x.shape, chunk_sizes(op, x.shape, eb));
    const int64_t m = x.shape[0];
    for (int64_t s = 0; s < R(); ++s) {
      for (int64_t c = 0; c < static_cast<int64_t>(chunks.size()); ++c) {
        const auto& [lo, hi] = chunks[c];
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
          plan_.tasks.push_back(std::move(t));
        }
      }
    }
  }

  void lower_put(int i) {
    const OpInstance& op = s_.ops[i];
    const TensorUse& x = op.inputs[0];
    const auto chunks =
        grid(x.shape, chunk_sizes(op, x.shape, compiler::dtype_bytes(s_.tensors[x.tensor].dtype)));
    for (int64_t s = 0; s < R(); ++s) {
      const int64_t d = op.kind == OpKind::kShift ? (((s + op.ints.at("by")) % R()) + R()) % R()
                                                  : eval_peer(op.outputs[0].peer, s, s_);
      for (int64_t c = 0; c < static_cast<int64_t>(chunks.size()); ++c) {
        plan_.tasks.push_back(send(i, s, view(x, s), view(op.outputs[0], d), chunks[c].first,
                                   chunks[c].second,
                                   fmt::format("{}.chunk({}).to({})", name_of(op), c, d)));
        plan_.tasks.back().group = c;
      }
    }
  }

  // signal: no views; args {peer}.
  void lower_signal(int i) {
    const OpInstance& op = s_.ops[i];
    for (int64_t s = 0; s < R(); ++s) {
      Task t =
          task(i, s, TaskKind::kSignalOnly,
               fmt::format("{}.to({})", name_of(op), eval_peer(op.decl->inputs[0].peer, s, s_)));
      t.args = {eval_peer(op.decl->inputs[0].peer, s, s_)};
      plan_.tasks.push_back(std::move(t));
    }
  }

  // alltoall (MoE dispatch), data-dependent. Compiler scratch: xcounts [R, E] i32 symmetric (every
  // rank's row counts per expert, exchanged first) and origin [cap, 3] i32 symmetric (for each
  // received row: source rank, source row, k), which combine uses to send rows back.
  //   a2a_counts on s: views {route_s, xcounts_d for d in 0..R}; args {E, K}: counts s's rows per
  //     expert and writes that row into every rank's xcounts[s].
  //   a2a_send on s: views {X_s, route_s, xcounts_s, Y_d..., origin_d...}; args {r0, r1, E, K}:
  //   rows
  //     [r0, r1) of X go to their experts' ranks, at the row the expert-major, then source-rank,
  //     then source-row order gives them.
  //   a2a_finish on d: views {xcounts_d, counts_d}; args {E}: counts[s, e] = xcounts[s, d*E/R + e].
  void lower_alltoall(int i) {
    const OpInstance& op = s_.ops[i];
    const int64_t E = op.ints.at("experts");
    const int route = op.tensor_args.at("route"), counts = op.tensor_args.at("counts");
    const int64_t K = s_.tensors[route].shape[1];
    const int64_t T = op.inputs[0].shape[0], cap = op.outputs[0].shape[0];
    choose(op, 0);
    const int xc = add_buffer(name_of(op) + ".xcounts", compiler::DType::kI32, {R(), E}, true);
    const int origin = add_buffer(name_of(op) + ".origin", compiler::DType::kI32, {cap, 3}, true);
    a2a_buffers_[i] = {xc, origin};
    const int64_t rows_per = std::max<int64_t>(op.chunk.empty() ? T : op.chunk[0],
                                               cdiv(T, opts_.max_a2a_tasks_per_rank));
    // In phases over all ranks (program order for the dependency rules): counts, rows, finish.
    for (int64_t s = 0; s < R(); ++s) {
      Task ct = task(i, s, TaskKind::kA2aCounts, fmt::format("{}.counts", name_of(op)));
      ct.views = {whole(route, s)};
      ct.reads = {whole_box(ct.views[0])};
      for (int64_t d = 0; d < R(); ++d) {
        ct.views.push_back(whole(xc, d));
        ct.writes.push_back(box(whole(xc, d), {s}, {s + 1}));
      }
      ct.args = {E, K};
      plan_.tasks.push_back(std::move(ct));
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
        }
        for (int64_t d = 0; d < R(); ++d) {
          t.views.push_back(whole(origin, d));
          t.writes.push_back(whole_box(t.views.back()));
        }
        t.args = {r0, std::min(T, r0 + rows_per), E, K};
        plan_.tasks.push_back(std::move(t));
      }
    }
    for (int64_t s = 0; s < R(); ++s) {
      Task f = task(i, s, TaskKind::kA2aFinish, fmt::format("{}.finish", name_of(op)));
      f.views = {whole(xc, s), whole(counts, s)};
      f.reads = {whole_box(f.views[0])};
      f.writes = {whole_box(f.views[1])};
      f.args = {E};
      plan_.tasks.push_back(std::move(f));
    }
  }

  // combine: rows go back to the rank and row they came from, into back [T, K, H] (compiler
  // scratch, symmetric) of the source, which then sums them weighted by W.
  //   combine_send on d: views {Y_d, origin_d, xcounts_d, back_s...}; args {E}: every received row
  //     (as many as xcounts says) goes to back_s[t, k] of its origin.
  //   combine_reduce on s: views {back_s, W_s or none, Out_s}; args {r0, r1, has_weights}:
  //     Out[t] = sum_k W[t, k] * back[t, k] for rows [r0, r1).
  void lower_combine(int i) {
    const OpInstance& op = s_.ops[i];
    const OpInstance& disp = s_.ops[op.dispatch_op];
    const auto [xc, origin] = a2a_buffers_.at(op.dispatch_op);
    const int64_t K = s_.tensors[disp.tensor_args.at("route")].shape[1];
    const int64_t T = op.outputs[0].shape[0], H = op.outputs[0].shape[1];
    const int back =
        add_buffer(name_of(op) + ".back", s_.tensors[op.outputs[0].tensor].dtype, {T, K, H}, true);
    const auto w = op.tensor_args.find("weights");
    for (int64_t d = 0; d < R(); ++d) {
      Task t = task(i, d, TaskKind::kCombineSend, fmt::format("{}.send", name_of(op)));
      t.views = {view(op.inputs[0], d), whole(origin, d), whole(xc, d)};
      t.reads = {whole_box(t.views[0]), whole_box(t.views[1]), whole_box(t.views[2])};
      for (int64_t s = 0; s < R(); ++s) {
        t.views.push_back(whole(back, s));
        t.writes.push_back(whole_box(t.views.back()));
      }
      t.args = {disp.ints.at("experts")};
      plan_.tasks.push_back(std::move(t));
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
        t.args = {r0, r1, w != op.tensor_args.end() ? 1 : 0};
        plan_.tasks.push_back(std::move(t));
      }
    }
  }

  const CheckedSchedule& s_;
  const LowerOptions& opts_;
  Plan plan_;
  std::map<const dsl::OpDecl*, int> attention_state_;
  std::map<int, std::pair<int, int>> a2a_buffers_;
};

}  // namespace

int64_t Buffer::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool Box::overlaps(const Box& o) const {
  if (rank != o.rank || buffer != o.buffer) return false;
  for (size_t d = 0; d < lo.size() && d < o.lo.size(); ++d) {
    if (hi[d] <= o.lo[d] || o.hi[d] <= lo[d]) return false;
  }
  return true;
}

const char* handoff_name(HandOff h) {
  switch (h) {
    case HandOff::kLocal:
      return "local_counter";
    case HandOff::kPeerFlag:
      return "nvlink_flag";
    case HandOff::kProxy:
      return "proxy_rdma";
  }
  return "?";
}

const char* task_kind_name(TaskKind k) {
  switch (k) {
#define MKC_TK_NAME(e, name, is_comm) \
  case TaskKind::e:                   \
    return name;
    MKC_TASK_KINDS(MKC_TK_NAME)
#undef MKC_TK_NAME
  }
  return "?";
}

bool task_kind_is_comm(TaskKind k) {
  switch (k) {
#define MKC_TK_COMM(e, name, is_comm) \
  case TaskKind::e:                   \
    return is_comm;
    MKC_TASK_KINDS(MKC_TK_COMM)
#undef MKC_TK_COMM
  }
  return false;
}

Plan lower(const compiler::CheckedSchedule& schedule, const LowerOptions& options) {
  return Lowerer(schedule, options).run();
}

}  // namespace mkc::plan
