// Lowering of compute stages: one task per tile of the output, on compute CTAs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "compiler/kinds/kinds.h"
#include "compiler/passes/lowerer.h"
#include "compiler/passes/schedule.h"
#include "tune/gemm_model.h"

namespace mkc::plan {

using compiler::OpInstance;
using compiler::OpKind;
using compiler::TensorUse;

// The K and V bytes of the slices whose causal attention tiles are ordered together (below,
// lower_attention): a third of the 50 MB L2 of an H100 or H200, so that the slices of one group
// stay there while its tiles run beside the group before's last.
constexpr int64_t kAttentionL2Bytes = int64_t{16} << 20;

// The compute CTAs of the kernel this schedule becomes (schedule.h, compute_ctas), as the
// schedule pass will find them from the tasks: an in-place all-reduce or reduce-scatter at one
// rank lowers to nothing (lower_collectives.cc, "local"), so it takes no comm CTAs (GEMM +
// all-reduce at R = 1 had its tiles picked for 116 CTAs and ran on 132).
static int64_t kernel_compute_ctas(const compiler::CheckedSchedule& s, int64_t sms) {
  bool any_comm = false;
  for (const OpInstance& o : s.ops) {
    if (!compiler::op_is_comm(o.kind)) continue;
    const bool nothing = s.ranks == 1 && o.outputs.empty() &&
                         (o.kind == OpKind::kAllReduce || o.kind == OpKind::kReduceScatter);
    any_comm = any_comm || !nothing;
  }
  return plan::compute_ctas(s.roles, any_comm, true, sms);
}

GemmStaging gemm_staging(const compiler::CheckedSchedule& s, const OpInstance& op) {
  GemmStaging st;
  const compiler::DType ta = s.tensors[op.inputs[0].tensor].dtype,
                        tb = s.tensors[op.inputs[1].tensor].dtype;
  // The tensor-core tiles take two 16-bit operands of one type (compiler/kinds/gemm_tile.cc);
  // other GEMMs run the SIMT tile whatever their rows.
  if (ta != tb || !kinds::is_16bit(ta)) return st;
  // What the kinds ask of a TMA operand (kinds::tma_rows_ok), of the use's view: its start is the
  // flat offset of its index prefix (Lowerer::view).
  const auto misaligned = [&](const TensorUse& u) {
    const std::vector<int64_t>& shape = s.tensors[u.tensor].shape;
    int64_t offset = 0;
    for (size_t i = 0; i < u.index.size(); ++i) offset += u.index[i] * product(shape, i + 1);
    return !kinds::tma_rows_ok(View{0, u.tensor, offset, u.shape});
  };
  const auto padded = [](int64_t n) { return cdiv(n, 64) * 64; };
  if (misaligned(op.inputs[0])) st.a_pitch = padded(op.inputs[0].shape[1]);
  if (misaligned(op.inputs[1])) st.b_pitch = padded(op.inputs[1].shape[1]);
  return st;
}

tune::GemmProblem gemm_problem(const compiler::CheckedSchedule& s, const OpInstance& op,
                               int64_t compute_ctas, int64_t sms, bool split_k) {
  tune::GemmProblem p;
  p.M = op.outputs[0].shape[0];
  p.N = op.outputs[0].shape[1];
  p.K = op.inputs[0].shape[1];
  p.ctas = compute_ctas;
  p.splittable = split_k && tune::split_allowed(p.K, op.has_rows_from);
  const GemmStaging st = gemm_staging(s, op);
  p.b_pitch = st.b_pitch;
  p.staged_bytes = st.bytes(p.M, p.N, p.K);
  // Pairs keep their halves first on their CTAs with nothing to wait for (plan/schedule.cc, the
  // pair rule): tiles ordered by arriving chunks, or waiting for staged operands, do not.
  p.pairs = !op.has_rows_from && sms % 2 == 0 && p.staged_bytes == 0;
  return p;
}

// gemm_tile (abi::GemmTileArgs): views {A, B, C[, bias]}; C[m0:m1, n0:n1] = fn(A[m0:m1, k0:k1] x
// B[k0:k1, n0:n1] (+ bias)). Without tile(...) or with tile(auto), the tile and split are the
// cost model's pick (tune/gemm_model.h), or a tuning database's entry; the decision is in the
// plan.
//
// Split-K: where the model (or the database) picks it, or, with tile(...), where the tiles would
// keep at most half the compute CTAs busy (skinny GEMMs: decode, small batches: most SMs would
// sit idle while a few stream the whole of B). K is then cut into S parts of whole 64-wide steps,
// each a gemm_tile task of its own: it stores its f32 sums in its slice of the compiler's buffer
// `<op>.partials` [S, M, N] and takes a ticket from `<op>.tickets` (two counters per tile, zero
// at load); the part that completes the tile's count sums every part's slice and writes C with
// the bias and epilogue function (templates/mkc/split_k.cuh). No task waits for another part:
// every part declares C's tile as a scatter write (one of them writes it), so C's consumers wait
// for all of them. Only with K >= 2048 (each part keeps a pipeline's worth of steps) and plain
// row order (rows_from orders tiles by arriving chunks).
//
// Staging (GemmStaging in lower.h): a 16-bit A or B whose rows TMA cannot load is first copied,
// by copy tasks of this operation, into a buffer of the compiler's with padded rows,
// `<op>.a_staged` [M, pitch] or `<op>.b_staged` [K, pitch], and the tiles read that.
void Lowerer::lower_gemm(int i) {
  const OpInstance& op = s_.ops[i];
  const int64_t M = op.outputs[0].shape[0], N = op.outputs[0].shape[1];
  const int64_t K = op.inputs[0].shape[1];
  const auto bias = op.tensor_args.find("bias");
  const int64_t ctas = kernel_compute_ctas(s_, opts_.sms);
  int64_t bm = 128, bn = 128, bk = 64;
  std::string why;
  const LowerOptions::Tuned* tuned = nullptr;
  int64_t model_parts = 0;    // the model's split, when it picked the tile
  int64_t model_cluster = 1;  // and its clusters
  // The cost model's candidates, fastest first (tune/gemm_model.h): its pick, and the runner-up
  // the decision names.
  const tune::GemmProblem problem = gemm_problem(s_, op, ctas, opts_.sms, opts_.split_k);
  const GemmStaging staging = gemm_staging(s_, op);
  const std::vector<tune::GemmCandidate> candidates = tune::gemm_candidates(problem);
  if (op.tile.empty() && opts_.tuned != nullptr) {
    const auto it = opts_.tuned->find(op.name);
    if (it != opts_.tuned->end()) tuned = &it->second;
  }
  if (tuned != nullptr) {
    const std::vector<int64_t>& t = tuned->tile;
    bm = t.at(0);
    bn = t.size() > 1 ? t[1] : bn;
    bk = t.size() > 2 ? t[2] : bk;
    why = "measured fastest by `mkc tune` (the tuning database)";
  } else if (op.tile.empty()) {
    const tune::GemmCandidate& c = candidates.front();
    bm = c.bm;
    bn = c.bn;
    bk = c.bk;
    model_parts = c.split_k;
    model_cluster = c.cluster;
    why = "the cost model's pick";
  } else {
    bm = op.tile[0];
    bn = op.tile.size() > 1 ? op.tile[1] : bn;
    bk = op.tile.size() > 2 ? op.tile[2] : bk;
    why = "tile(...)";
  }
  const int64_t mb = cdiv(M, bm), nb = cdiv(N, bn);
  // Split-K parts: the database's or the model's; with tile(...), as many as the idle compute
  // CTAs allow, each at least 1024 deep, at most 8.
  const bool splittable = problem.splittable;
  int64_t parts = 1, part_k = K;
  const int64_t chosen_parts = tuned != nullptr ? tuned->split_k : model_parts;
  if (tuned != nullptr || model_parts > 0) {
    if (splittable && chosen_parts > 1) {
      parts = tune::split_parts(K, chosen_parts);
      part_k = cdiv(cdiv(K, parts), 64) * 64;
      if (parts > 1) why += fmt::format("; split-K: {} parts of {} (of K {})", parts, part_k, K);
    }
  } else if (splittable && 2 * mb * nb <= ctas) {
    const int64_t step = std::max<int64_t>(64, bk);
    parts = std::clamp<int64_t>(std::min(ctas / (mb * nb), K / 1024), 1, 8);
    part_k = cdiv(cdiv(K, parts), step) * step;
    parts = cdiv(K, part_k);
    if (parts > 1)
      why += fmt::format("; split-K: {} parts of {} (of K {}) for {} tiles on {} compute CTAs",
                         parts, part_k, K, mb * nb, ctas);
  }
  // 2-CTA clusters (templates/mkc/gemm_sm90.cuh, load_stage_pair): row blocks 2p and 2p + 1 of
  // one column block run on CTAs 2c and 2c + 1 of a cluster, which load B's boxes once for both
  // (TMA multicast) and so halve the B bytes each SM pulls from L2. The tile order below deals
  // such row blocks out consecutively (groups of 8 rows; an even row count keeps every group
  // even), and round robin over an even number of compute CTAs puts the two of a pair on CTAs
  // 2c and 2c + 1, at the same place in their lists (the scheduler checks it: plan/schedule.cc).
  int64_t cluster = tuned != nullptr ? tuned->cluster : model_cluster;
  if (cluster > 1) {
    std::string no;
    if (bm != 128 || (bn != 128 && bn != 256) || bk != 64)
      no = fmt::format("they take 128-row tiles of 128 or 256 columns, not {} x {}", bm, bn);
    else if (parts > 1)
      no = "the tiles are split over K";
    else if (M <= 64)
      no = fmt::format("{} rows run 64-row or swapped tiles", M);
    else if (mb % 2 != 0)
      no = fmt::format("{} row blocks do not pair up", mb);
    else if (ctas % 2 != 0 || opts_.sms % 2 != 0)
      no = fmt::format("{} compute CTAs of {} do not pair up", ctas, opts_.sms);
    else if (op.has_rows_from)
      no = "rows_from orders the tiles by arriving chunks";
    else if (staging.a_pitch > 0 || staging.b_pitch > 0)
      no = "the tiles wait for staged operands";
    if (no.empty()) {
      why += "; 2-CTA clusters sharing B (TMA multicast)";
    } else {
      why += "; no 2-CTA clusters: " + no;
      cluster = 1;
    }
  }
  // What the cost model predicts for the pick and for its best alternative (tune/gemm_model.h).
  if (bk == 64 && (bm == 64 || bm == 128) && (bn == 64 || bn == 128 || bn == 256)) {
    for (const tune::GemmCandidate& c : candidates) {
      if (c.bm == bm && c.bn == bn && c.split_k == parts && c.cluster == cluster) continue;
      why += fmt::format("; model: {:.0f} us, runner-up {} {:.0f} us",
                         tune::predict_gemm_us(problem, bm, bn, parts, cluster), c.text(),
                         c.predicted_us);
      break;
    }
  }
  // Staging (GemmStaging): A is copied in the tiles' row blocks, each cut in two while that
  // leaves a copy for every other compute CTA (a tile waits for its own rows' copies only), B in
  // blocks of rows spread over the compute CTAs (each tile waits for all of them): the copies
  // together run at HBM's rate (2.6 TB/s on an H100), which one CTA alone is far from.
  // The staged buffers are zero from the load on and their padding is never written, so the
  // tiles' k steps past K multiply zeros.
  const auto stage = [&](int64_t pitch, const TensorUse& u, const char* what, const char* name) {
    if (pitch == 0) return -1;
    const compiler::Tensor& t = s_.tensors[u.tensor];
    why += fmt::format("; {} staged: its rows ({} bytes{}) copied to rows of {} bytes for TMA",
                       what, u.shape[1] * 2, u.index.empty() ? "" : " in a slice", pitch * 2);
    const int b = add_buffer(name_of(op) + name, t.dtype, {u.shape[0], pitch}, false);
    plan_.buffers[b].zeroed = true;
    return b;
  };
  const int a_staged = stage(staging.a_pitch, op.inputs[0], "A", ".a_staged");
  const int b_staged = stage(staging.b_pitch, op.inputs[1], "B", ".b_staged");
  int64_t a_stage_rows = bm;
  while (a_stage_rows % 2 == 0 && a_stage_rows > 16 && 2 * cdiv(M, a_stage_rows) <= ctas)
    a_stage_rows /= 2;
  const int64_t b_stage_rows = cdiv(cdiv(K, ctas), 16) * 16;
  plan_.decisions.push_back(
      Decision{name_of(op), fmt::format("tile({}, {}, {})", bm, bn, bk),
               (op.tile.empty() && tuned == nullptr ? "default: " : "") + why});
  const int partials =
      parts > 1 ? add_buffer(name_of(op) + ".partials", compiler::DType::kF32, {parts, M, N}, false)
                : -1;
  const int tickets =
      parts > 1 ? add_buffer(name_of(op) + ".tickets", compiler::DType::kI64, {mb * nb * 2}, false)
                : -1;
  if (tickets >= 0) plan_.buffers[tickets].zeroed = true;
  for (int64_t r = 0; r < R(); ++r) {
    if (!lowered(r)) continue;
    const int64_t start =
        op.has_rows_from ? ((compiler::evaluate(op.rows_from, r, s_) % mb) + mb) % mb : 0;
    // Tiles in groups of kGroup row blocks, column by column within a group: the CTAs that run
    // at the same time (consecutive tasks, dealt round-robin) then share A rows and B columns
    // in L2. A rotated start (rows_from) keeps plain row order: chunks arrive in that order.
    const int64_t group = op.has_rows_from ? 1 : 8;
    View a = view(op.inputs[0], r), bv = view(op.inputs[1], r);
    const View c = view(op.outputs[0], r);
    // A copy task of rows [r0, r1) of `from` into the staged buffer; the tiles then read that.
    const auto copy = [&](const View& from, const View& to, int64_t r0, int64_t r1,
                          const std::string& label) {
      Task t = task(i, r, TaskKind::kCopy, label);
      t.views = {from, to};
      t.reads = {box(from, {r0}, {r1})};
      t.writes = {box(to, {r0}, {r1})};
      set_args(t, abi::CopyArgs{r0, r1});
      emit(std::move(t));
    };
    if (a_staged >= 0) {
      const View to{static_cast<int>(r), a_staged, 0, {M, staging.a_pitch}};
      for (int64_t j = 0; j < mb; ++j) {
        const int64_t b = (start + j) % mb;  // in the tiles' row order
        for (int64_t r0 = b * bm; r0 < std::min(M, (b + 1) * bm); r0 += a_stage_rows)
          copy(a, to, r0, std::min({M, (b + 1) * bm, r0 + a_stage_rows}),
               fmt::format("{}.stage_a({})", name_of(op), r0 / a_stage_rows));
      }
      a = to;
    }
    if (b_staged >= 0) {
      const View to{static_cast<int>(r), b_staged, 0, {K, staging.b_pitch}};
      for (int64_t k0 = 0; k0 < K; k0 += b_stage_rows)
        copy(bv, to, k0, std::min(K, k0 + b_stage_rows),
             fmt::format("{}.stage_b({})", name_of(op), k0 / b_stage_rows));
      bv = to;
    }
    for (int64_t idx = 0; idx < mb * nb; ++idx) {
      const int64_t g0 = idx / (group * nb) * group, gsize = std::min(group, mb - g0);
      const int64_t within = idx - g0 * nb;
      const int64_t b = (start + g0 + within % gsize) % mb, bj = within / gsize;
      for (int64_t part = 0; part < parts; ++part) {
        Task t = task(i, r, TaskKind::kGemmTile,
                      parts > 1 ? fmt::format("{}.tile({}, {}, k{})", name_of(op), b, bj, part)
                                : fmt::format("{}.tile({}, {})", name_of(op), b, bj));
        abi::GemmTileArgs g{};
        g.m0 = b * bm;
        g.m1 = std::min<int64_t>(M, g.m0 + bm);
        g.n0 = bj * bn;
        g.n1 = std::min<int64_t>(N, g.n0 + bn);
        g.k_step = bk;
        g.fn = op.device_fn;
        g.has_bias = bias != op.tensor_args.end() ? 1 : 0;
        g.map_a = g.map_b = g.map_c = abi::kNoMap;  // code generation assigns TMA descriptors
        g.k0 = part * part_k;
        g.k1 = std::min<int64_t>(K, g.k0 + part_k);
        g.parts = parts;
        g.part = part;
        g.tile = b * nb + bj;
        g.cluster = cluster > 1 ? 1 : 0;
        t.views = {a, bv, c};
        // Pushed, not assigned from a list (which copied each box).
        t.reads.reserve(3);
        t.reads.push_back(box(a, {g.m0, g.k0}, {g.m1, g.k1}));
        t.reads.push_back(box(bv, {g.k0, g.n0}, {g.k1, g.n1}));
        if (g.has_bias) {
          const View bb = whole(bias->second, r);
          t.views.push_back(bb);
          t.reads.push_back(box(bb, {g.n0}, {g.n1}));
        }
        t.writes.push_back(box(c, {g.m0, g.n0}, {g.m1, g.n1}));
        if (parts > 1) {
          // Whichever part ends last writes C's tile (scatter: the parts do not order among
          // themselves); each writes its own slice of the partials.
          t.writes.back().scatter = true;
          const View pv{static_cast<int>(r), partials, 0, {parts, M, N}};
          t.views.push_back(pv);
          t.views.push_back(View{static_cast<int>(r), tickets, 0, {mb * nb * 2}});
          t.writes.push_back(box(pv, {part, g.m0, g.n0}, {part + 1, g.m1, g.n1}));
        }
        set_args(t, g);
        emit(std::move(t));
      }
    }
  }
}

// grouped_gemm_tile (abi::GroupedGemmTileArgs): views {X, W, Y, counts}. Rows of X are grouped by
// group in order; counts (summed over its leading dims) says how many rows each group has, at run
// time. Each group's rows are cut into tiles of bm rows and each tile into column blocks of bn;
// persistent workers, as many as the kernel has compute CTAs (schedule.h, compute_ctas), share
// those items, each finding its items' groups and rows from counts when it runs. A rank has at
// most min(rows, cdiv(rows, bm) + groups) tiles (every group adds at most one partial tile, and
// every tile has a row), so no more workers than items are made.
//
// Where a worker's rows are is known only at run time, so its boxes are conservative: it reads all
// of X, W and counts and writes Y as a scatter box (the workers of one operation write disjoint
// elements by construction). Consumers of Y then wait for the whole operation through one
// counter.
void Lowerer::lower_grouped_gemm(int i) {
  const OpInstance& op = s_.ops[i];
  const int64_t rows = op.outputs[0].shape[0], N = op.outputs[0].shape[1];
  const int64_t groups = op.inputs[1].shape[0];
  int64_t bm = 128, bn = 128;
  if (op.tile.empty()) {
    bn = N >= 256 ? 256 : 128;
  } else {
    bm = op.tile[0];
    bn = op.tile.size() > 1 ? op.tile[1] : bn;
  }
  const int64_t items = std::min(rows, cdiv(rows, bm) + groups) * cdiv(N, bn);
  const int64_t workers = std::max<int64_t>(1, std::min(items, kernel_compute_ctas(s_, opts_.sms)));
  plan_.decisions.push_back(Decision{
      name_of(op), fmt::format("tile({}, {}), {} workers", bm, bn, workers),
      fmt::format("{}up to {} tiles x {} column blocks; one worker per compute CTA",
                  op.tile.empty() ? "default tile; " : "", items / cdiv(N, bn), cdiv(N, bn))});
  const int counts = op.tensor_args.at("counts");
  for (int64_t r = 0; r < R(); ++r) {
    if (!lowered(r)) continue;
    for (int64_t w = 0; w < workers; ++w) {
      Task t = task(i, r, TaskKind::kGroupedGemmTile, fmt::format("{}.worker({})", name_of(op), w));
      const View x = view(op.inputs[0], r), wv = view(op.inputs[1], r), y = view(op.outputs[0], r),
                 c = whole(counts, r);
      abi::GroupedGemmTileArgs g{};
      g.worker = w;
      g.workers = workers;
      g.bm = bm;
      g.bn = bn;
      g.fn = op.device_fn;
      g.map_x = g.map_w = abi::kNoMap;  // code generation assigns TMA descriptors
      t.views = {x, wv, y, c};
      set_args(t, g);
      t.reads = {whole_box(x), whole_box(wv), whole_box(c)};
      t.writes = {whole_box(y)};
      t.writes.back().scatter = true;
      emit(std::move(t));
    }
  }
}

// map_tile (abi::MapTileArgs): views {X1, ..., Xn, Y}; copy (abi::CopyArgs): views {X, Y}. Both
// work on rows [r0, r1) of their views' leading dimension.
//
// With tile(rows, ...), a task takes `rows` rows of the tensor's leading dimension. Without it, a
// task takes about 16K elements as one contiguous block: whole trailing dimensions and a range
// of the first one that fits (dimensions before it one index at a time, like chunks), so that a
// tensor whose leading dimension is short ([2, B, H, S, D]: ring attention's K,V) still spreads
// over many CTAs; the device then sees the block as a flat 1-D view (its rows are elements), and
// the boxes stay in the tensor's dimensions.
void Lowerer::lower_rows(int i) {
  const OpInstance& op = s_.ops[i];
  const std::vector<int64_t>& shape = op.outputs[0].shape;
  const bool is_map = op.kind == OpKind::kMap;
  const auto args = [&](Task& t, int64_t r0, int64_t r1) {
    if (is_map) {
      set_args(t, abi::MapTileArgs{r0, r1, op.device_fn});
    } else {
      set_args(t, abi::CopyArgs{r0, r1});
    }
  };
  if (!op.tile.empty()) {
    const int64_t rows_per = op.tile[0];
    for (int64_t r = 0; r < R(); ++r) {
      if (!lowered(r)) continue;
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
        args(t, r0, r1);
        emit(std::move(t));
      }
    }
    return;
  }
  // The block: dims after `k` whole, up to `per` rows of dim k, one index of the dims before.
  constexpr int64_t kTarget = 16384;
  size_t k = shape.size() - 1;
  while (k > 0 && product(shape, k) <= kTarget) --k;
  const int64_t inner = product(shape, k + 1);
  std::vector<int64_t> sizes(shape.size(), 1);
  sizes[k] =
      std::max<int64_t>(1, std::min<int64_t>(shape[k], kTarget / std::max<int64_t>(1, inner)));
  for (size_t d = k + 1; d < shape.size(); ++d) sizes[d] = shape[d];
  const auto blocks = chunk_grid(shape, sizes);
  for (int64_t r = 0; r < R(); ++r) {
    if (!lowered(r)) continue;
    for (size_t c = 0; c < blocks.size(); ++c) {
      // Named, not a structured binding: clang 14 (tools/fuzz.sh) cannot capture those.
      const auto& lo = blocks[c].first;
      const auto& hi = blocks[c].second;
      int64_t first = 0, count = 1;
      for (size_t d = 0; d < shape.size(); ++d) {
        first = first * shape[d] + lo[d];
        count *= hi[d] - lo[d];
      }
      Task t = task(i, r, is_map ? TaskKind::kMapTile : TaskKind::kCopy,
                    fmt::format("{}.tile({})", name_of(op), c));
      const auto flat = [&](const TensorUse& u, std::vector<Box>* boxes) {
        const View v = view(u, r);
        boxes->push_back(box(v, lo, hi));
        t.views.push_back(View{v.rank, v.buffer, v.offset + first, {count}});
      };
      for (const TensorUse& u : op.inputs) flat(u, &t.reads);
      flat(op.outputs[0], &t.writes);
      args(t, 0, count);
      emit(std::move(t));
    }
  }
}

// reduce_tile (abi::ReduceTileArgs): views {X, Y}; elements [y0, y1) of Y (flat), whole rows of
// Y's leading dimension, so that each tile reads and writes only its own rows (the rows of X they
// come from: X's leading rows, or its second dimension's when the reduction is over the first).
void Lowerer::lower_reduce(int i) {
  const OpInstance& op = s_.ops[i];
  const std::vector<int64_t>& ys = op.outputs[0].shape;
  const int64_t axis = op.ints.at("axis");
  const int64_t rows = ys.empty() ? 1 : ys[0], row = product(ys, 1);
  const int64_t per = op.tile.empty() ? 4096 : product(op.tile);
  const int64_t rows_per = std::max<int64_t>(1, per / std::max<int64_t>(1, row));
  for (int64_t r = 0; r < R(); ++r) {
    if (!lowered(r)) continue;
    for (int64_t r0 = 0; r0 < rows; r0 += rows_per) {
      const int64_t r1 = std::min(rows, r0 + rows_per);
      Task t =
          task(i, r, TaskKind::kReduceTile, fmt::format("{}.tile({})", name_of(op), r0 / rows_per));
      const View x = view(op.inputs[0], r), y = view(op.outputs[0], r);
      t.views = {x, y};
      set_args(t, abi::ReduceTileArgs{r0 * row, r1 * row, axis, reduce_code(op.reduce_op)});
      if (ys.empty()) {
        t.reads = {whole_box(x)};
        t.writes = {whole_box(y)};
      } else {
        t.reads = {axis == 0 ? box(x, {0, r0}, {x.shape[0], r1}) : box(x, {r0}, {r1})};
        t.writes = {box(y, {r0}, {r1})};
      }
      emit(std::move(t));
    }
  }
}

// At head dim 64 three consumer warpgroups of 64 rows ran 1.5-11% faster than two on an H100
// (2026-12-07, causal and not, S 2K-16K, batches of 1-16; docs/RESULTS.md). Only where no GEMM
// and no other attention without its own tile(192) is in the schedule: their tensor-core tiles
// run 384 threads, and one kernel has one CTA size; with one attention to choose for, `mkc tune`
// moves all its instances together.
int64_t attention_default_rows(const compiler::CheckedSchedule& s, const OpInstance& op) {
  const auto head_dim_64 = [](const OpInstance& m) {
    return m.inputs.at(0).shape.back() == 64 && m.outputs.at(0).shape.back() == 64;
  };
  const bool alone = std::all_of(s.ops.begin(), s.ops.end(), [&](const OpInstance& m) {
    if (m.kind == OpKind::kGemm || m.kind == OpKind::kGroupedGemm) return false;
    if (m.kind != OpKind::kAttention || m.name == op.name) return true;
    // Another attention that asks for 192 queries at head dim 64 runs 512 threads too.
    return !m.tile.empty() && m.tile[0] == 192 && head_dim_64(m);
  });
  return head_dim_64(op) && alone ? 192 : 128;
}

// attention_tile (abi::AttentionTileArgs): views {Q, K, V, O[, acc, m, l][, L]}, each flattened for
// the device to [L, S, D] (L the product of the leading dims). With accumulate, acc/m/l (f32,
// compiler scratch per declaration, [L, Sq, Dv] / [L, Sq, 1] / [L, Sq, 1]) carry the online softmax
// over the instances of a loop. The boxes stay in the tensors' own dimensions: slice l of the
// leading dims is one index per dimension (unravelled), so they meet the boxes the K,V shift
// writes. With `seqlens`, L (i32 [n + 1], whole) is the last view and args.seqlens its index.
void Lowerer::lower_attention(int i) {
  const OpInstance& op = s_.ops[i];
  const TensorUse& q = op.inputs[0];
  const size_t n = q.shape.size();
  const std::vector<int64_t> lead_shape(q.shape.begin(), q.shape.end() - 2);
  const int64_t L = product(lead_shape);
  const int64_t Sq = q.shape[n - 2], Dv = op.outputs[0].shape[n - 1];
  // The tile an attention asked for, or without one (tile(auto)) what `mkc tune` measured
  // fastest, if anything.
  const auto tile_of = [&](const OpInstance& m) {
    if (m.tile.empty() && opts_.tuned != nullptr) {
      const auto it = opts_.tuned->find(m.name);
      if (it != opts_.tuned->end()) return it->second.tile;
    }
    return m.tile;
  };
  // Queries per task: the tile's first size (the SIMT tile holds the row statistics of at most
  // 256), else the compiler's.
  const auto rows_of = [&](const OpInstance& m) -> int64_t {
    const std::vector<int64_t> t = tile_of(m);
    return t.empty() ? attention_default_rows(s_, m) : std::min<int64_t>(t[0], 256);
  };
  const std::vector<int64_t> tile = tile_of(op);
  if (op.tile.empty() && !tile.empty()) {
    // From the tuning database: said once per declaration.
    const bool noted = std::any_of(plan_.decisions.begin(), plan_.decisions.end(),
                                   [&](const Decision& d) { return d.op == name_of(op); });
    if (!noted) {
      plan_.decisions.push_back(Decision{name_of(op),
                                         fmt::format("tile({})", fmt::join(tile, ", ")),
                                         "measured fastest by `mkc tune` (the tuning database)"});
    }
  }
  const int64_t bq = rows_of(op);
  // Keys per block of the tensor-core tile as asked (tile(q, k)), 0: the kind's choice.
  const int64_t key_block = tile.size() > 1 ? tile[1] : 0;
  // A merge group of one instance (a loop of one step: ring attention at R = 1) has nothing to
  // merge: no state.
  const bool acc = compiler::accumulates(op) && !(op.first_of_group && op.last_of_group);
  const double scale = op.floats.at("scale");  // the checker sets the default
  int64_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, sizeof(scale));
  // The instances that merge into one slice of O share the state: the first sets it up, the last
  // writes O. The buffers are named after the group's first instance and the slice.
  const bool first = !acc || op.first_of_group, last = !acc || op.last_of_group;
  int state = -1;
  if (acc) {
    const TensorUse& o = op.outputs[0];
    const std::pair<int, std::vector<int64_t>> slice{o.tensor, o.index};
    auto it = attention_state_.find(slice);
    if (it == attention_state_.end()) {
      std::string name = op.name;
      for (size_t d = 0; d < o.index.size(); ++d)
        name += fmt::format("{}{}", d == 0 ? "[" : ", ", o.index[d]);
      if (!o.index.empty()) name += "]";
      const int a = add_buffer(name + ".acc", compiler::DType::kF32, {L, Sq, Dv}, false);
      add_buffer(name + ".max", compiler::DType::kF32, {L, Sq, 1}, false);
      add_buffer(name + ".sum", compiler::DType::kF32, {L, Sq, 1}, false);
      it = attention_state_.emplace(slice, a).first;
    }
    state = it->second;
  }
  const int64_t causal = op.ints.count("causal") ? op.ints.at("causal") : 0;
  // Packed sequences: their cumulative lengths, a view after the others (the checker keeps
  // `seqlens` from merged attentions, which have the state's three).
  const auto seqlens_arg = op.tensor_args.find("seqlens");
  const int seqlens = seqlens_arg != op.tensor_args.end() ? seqlens_arg->second : -1;
  // The merge group's instances in program order, when they cut O into the same query tiles:
  // per tile, the first instance that sees a key of it sets the state up and the last writes O,
  // so the instances of fully masked blocks around them (causal ring attention) return at once
  // instead of setting up or finishing the state without any key.
  std::vector<int> group;
  if (acc) {
    for (int j = 0; j < static_cast<int>(s_.ops.size()); ++j) {
      const OpInstance& m = s_.ops[j];
      if (compiler::accumulates(m) && m.outputs[0].tensor == op.outputs[0].tensor &&
          m.outputs[0].index == op.outputs[0].index)
        group.push_back(j);
    }
    for (int j : group) {
      const OpInstance& m = s_.ops[j];
      if (rows_of(m) != bq) group.clear();
      if (group.empty()) break;
    }
  }
  const auto position = std::find(group.begin(), group.end(), i) - group.begin();
  // The first query row (exclusive end q1) instance j of the group sees keys from on rank r:
  // instance j sees a key of the tile ending at q1 when q1 > that. Evaluated once per instance
  // and rank (the schedule's expressions; cached across the group's instances), not per tile: a
  // causal ring's group has 2R instances.
  const auto sees_from = [&](int j, int64_t r) -> int64_t {
    const auto [it, added] = sees_from_.emplace(std::make_tuple(j, r, Sq), 0);
    if (!added) return it->second;
    const OpInstance& m = s_.ops[j];
    const size_t mn = m.inputs[1].shape.size();
    it->second = m.ints.count("causal") && m.ints.at("causal")
                     ? -compiler::causal_offset(m, r, s_, Sq, m.inputs[1].shape[mn - 2])
                     : std::numeric_limits<int64_t>::min();
    return it->second;
  };
  // The device's [L, S, D] view of a [..., S, D] one.
  const auto flat = [&](View v) {
    const size_t m = v.shape.size();
    v.shape = {L, v.shape[m - 2], v.shape[m - 1]};
    return v;
  };
  // Slice l of the leading dims as one index each.
  const auto unravel = [&](int64_t l) {
    std::vector<int64_t> idx(lead_shape.size());
    for (size_t d = lead_shape.size(); d-- > 0;) {
      idx[d] = l % lead_shape[d];
      l /= lead_shape[d];
    }
    return idx;
  };
  // The box of rows [r0, r1) (all of the last dim) of slice l of view v.
  const auto rows = [&](const View& v, const std::vector<int64_t>& at, int64_t r0, int64_t r1) {
    std::vector<int64_t> lo = at, hi = at;
    for (int64_t& h : hi) ++h;
    lo.push_back(r0);
    hi.push_back(r1);
    return box(v, lo, hi);
  };
  for (int64_t r = 0; r < R(); ++r) {
    if (!lowered(r)) continue;
    const View qv = view(q, r), kv = view(op.inputs[1], r), vv = view(op.inputs[2], r),
               ov = view(op.outputs[0], r);
    const int64_t tiles = (Sq + bq - 1) / bq;
    const int64_t offset = causal ? compiler::causal_offset(op, r, s_, Sq, kv.shape[n - 2]) : 0;
    // Per query tile (by q0 / bq): this instance's place among those of the group that see a key
    // of it, the same for every slice l — {opens, closes, ahead of the opener}; the group's own
    // first and last when none does.
    std::vector<std::array<bool, 3>> ends(tiles, std::array<bool, 3>{first, last, false});
    if (!group.empty()) {
      std::vector<int64_t> from(group.size());
      for (size_t g = 0; g < group.size(); ++g) from[g] = sees_from(group[g], r);
      for (int64_t k = 0; k < tiles; ++k) {
        const int64_t q1 = std::min(Sq, (k + 1) * bq);
        int64_t f = -1, e = -1;
        for (size_t g = 0; g < group.size(); ++g) {
          if (q1 <= from[g]) continue;
          if (f < 0) f = static_cast<int64_t>(g);
          e = static_cast<int64_t>(g);
        }
        if (f >= 0) ends[k] = {position == f, position == e, position < f};
      }
    }
    // The tiles' order, which the scheduler's least-loaded placement (schedule.cc) follows:
    // slice after slice (groups of one), so that the slices whose K and V are read at one time fit
    // in L2. Causal (without packed sequences): dearest first within groups of slices whose K and
    // V together take at most kAttentionL2Bytes (FlashAttention-3's sections), each slice's last
    // tiles (the most keys) first, so that every group ends with light tiles. Dearest first over
    // all slices was measured 44% slower at 16 x 16 x 2048 x 128 (H100, 2026-12-07: 132 slices'
    // K and V in the first wave, 1 MB each); slice after slice leaves each slice's light tiles for
    // the end of the slice, where the next slice's heavy ones wait behind them.
    const int64_t kv_bytes = std::max<int64_t>(
        1, kv.shape[n - 2] *
               (kv.shape[n - 1] * compiler::dtype_bytes(s_.tensors[op.inputs[1].tensor].dtype) +
                vv.shape[n - 1] * compiler::dtype_bytes(s_.tensors[op.inputs[2].tensor].dtype)));
    const int64_t group =
        causal && seqlens < 0 ? std::max<int64_t>(1, kAttentionL2Bytes / kv_bytes) : 1;
    for (int64_t g0 = 0; g0 < L; g0 += group) {
      for (int64_t qi = 0; qi < tiles; ++qi) {
        for (int64_t l = g0; l < std::min(L, g0 + group); ++l) {
          const std::vector<int64_t> at = unravel(l);
          // Causal: a slice's last tiles see the most keys and come first.
          const int64_t q0 = (causal ? tiles - 1 - qi : qi) * bq, q1 = std::min(Sq, q0 + bq);
          Task t = task(i, r, TaskKind::kAttentionTile,
                        fmt::format("{}.tile({}, {})", name_of(op), l, q0 / bq));
          t.views = {flat(qv), flat(kv), flat(vv), flat(ov)};
          const auto [tile_first, tile_last, before] = ends[q0 / bq];
          set_args(t, abi::AttentionTileArgs{l, q0, q1, causal, offset, acc ? 1 : 0,
                                             tile_first ? 1 : 0, tile_last ? 1 : 0, scale_bits,
                                             abi::kNoMap, abi::kNoMap, abi::kNoMap, key_block, bq,
                                             seqlens >= 0 ? (acc ? 7 : 4) : 0});
          t.reads = {rows(qv, at, q0, q1), rows(kv, at, 0, kv.shape[n - 2]),
                     rows(vv, at, 0, vv.shape[n - 2])};
          if (acc) {
            for (int k = 0; k < 3; ++k) t.views.push_back(whole(state + k, r));
            for (int k = 0; k < 3; ++k) {
              const Box b = box(whole(state + k, r), {l, q0}, {l + 1, q1});
              if (!tile_first && !before) t.reads.push_back(b);
              t.writes.push_back(b);
            }
          }
          if (seqlens >= 0) {
            const View lv = whole(seqlens, r);
            t.views.push_back(lv);
            t.reads.push_back(whole_box(lv));
          }
          // The group's last instance is said to write O too, whichever instance does: what waits
          // for it (`after att[R - 1].tile`) waits for the tile's real last through the chain.
          if (tile_last || last) t.writes.push_back(rows(ov, at, q0, q1));
          emit(std::move(t));
        }
      }
    }
  }
}

}  // namespace mkc::plan
