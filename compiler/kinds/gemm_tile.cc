// gemm_tile: C[m0:m1, n0:n1] = A[m0:m1, k0:k1] B[k0:k1, n0:n1] (+ bias[n0:n1]), then the
// epilogue function. Views {A, B, C[, bias]} (abi.h, GemmTileArgs); a split-K part also has
// {partials, tickets}: it stores its sums in its slice of the partials, and the part that takes
// the tile's last ticket of the launch writes C from every part's sums (templates/mkc/split_k.cuh).
// Device code: the TMA + wgmma tile (templates/mkc/gemm_sm90.cuh; swapped, Cᵀ = Bᵀ Aᵀ, for tiles of
// at most 32 rows) for 16-bit, 16-byte aligned operands, else the portable one
// (templates/mkc/gemm.cuh).
#include <fmt/format.h>

#include <algorithm>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"
#include "tune/gemm_model.h"

namespace mkc::kinds {
namespace {

class GemmTile final : public Kind {
 public:
  GemmTile() : Kind(TaskKind::kGemmTile) {}
  // templates/mkc/split_k.cuh (a split part's state and ticket) and, for the portable tiles,
  // gemm_simt.cuh's two 16 x 64 float tiles (beside gemm_sm80.cuh's dynamic stages).
  int static_smem(const Source& s, const Task& t) const override {
    const int split = plan::args_as<abi::GemmTileArgs>(t).parts > 1 ? 64 : 0;
    return split + (tma_n(s, t) ? 0 : 2 * 16 * 64 * 4);
  }

  size_t fixed_args() const override { return sizeof(abi::GemmTileArgs) / 8; }

  std::vector<Touch> touches(const Task& t) const override {
    const abi::GemmTileArgs g = plan::args_as<abi::GemmTileArgs>(t);
    std::vector<Touch> out;
    out.push_back(Touch{0, {g.m0, g.k0}, {g.m1, g.k1}, false});
    out.push_back(Touch{1, {g.k0, g.n0}, {g.k1, g.n1}, false});
    out.push_back(Touch{2, {g.m0, g.n0}, {g.m1, g.n1}, true});
    if (g.has_bias) out.push_back(Touch{3, {g.n0}, {g.n1}, false});
    // A split part writes its slice of the partials. What the last part reads of the others'
    // slices and the tickets it counts on are ordered by the tickets themselves, not by events,
    // so they are not boxes of the plan: every part of the tile writes C as one operation's
    // scatter box (one of them does, at run time), and the partials and tickets are the
    // operation's own buffers, which no other task touches.
    if (g.parts > 1) {
      const int pv = 3 + static_cast<int>(g.has_bias);
      out.push_back(Touch{pv, {g.part, g.m0, g.n0}, {g.part + 1, g.m1, g.n1}, true});
    }
    return out;
  }

  void execute(const Memory& mem, const Task& t) const override {
    const View &a = t.views[0], &b = t.views[1], &c = t.views[2];
    const abi::GemmTileArgs g = plan::args_as<abi::GemmTileArgs>(t);
    const std::vector<double>& av = mem.of(a);
    const std::vector<double>& bv = mem.of(b);
    std::vector<double>& cv = mem.of(c);
    const auto epilogue = [&](int64_t m, int64_t n, double acc) {
      if (g.has_bias) acc += mem.of(t.views[3])[flat(t.views[3], n)];
      if (g.fn >= 0) acc = mem.call(g.fn, {acc});
      cv[flat(c, m, n)] = acc;
    };
    const auto sum = [&](int64_t m, int64_t n) {
      double acc = 0;
      const int64_t arow = flat(a, m, 0), bcol = flat(b, 0, n), N = b.shape[1];
      for (int64_t k = g.k0; k < g.k1; ++k) acc += av[arow + k] * bv[bcol + k * N];
      return acc;
    };
    if (g.parts <= 1) {
      for (int64_t m = g.m0; m < g.m1; ++m)
        for (int64_t n = g.n0; n < g.n1; ++n) epilogue(m, n, sum(m, n));
      return;
    }
    // A split part (templates/mkc/split_k.cuh): its sums into its slice, a ticket on each half's
    // counter, and the part that completes the launch's count writes C from every part's sums.
    const View &pv = t.views[3 + g.has_bias], &tk = t.views[4 + g.has_bias];
    std::vector<double>& part = mem.of(pv);
    std::vector<double>& tickets = mem.of(tk);
    const int64_t M = c.shape[0], N = c.shape[1];
    const auto at = [&](int64_t q, int64_t m, int64_t n) {
      return pv.offset + (q * M + m) * N + n;
    };
    for (int64_t m = g.m0; m < g.m1; ++m)
      for (int64_t n = g.n0; n < g.n1; ++n) part[at(g.part, m, n)] = sum(m, n);
    const int64_t ticket = tk.offset + 2 * g.tile;
    tickets[ticket] += 1;
    tickets[ticket + 1] += 1;
    if (static_cast<int64_t>(tickets[ticket]) % g.parts != 0) return;
    for (int64_t m = g.m0; m < g.m1; ++m) {
      for (int64_t n = g.n0; n < g.n1; ++n) {
        double acc = 0;
        for (int64_t q = 0; q < g.parts; ++q) acc += part[at(q, m, n)];
        epilogue(m, n, acc);
      }
    }
  }

  int pair_half(const Task& t) const override {
    const abi::GemmTileArgs g = plan::args_as<abi::GemmTileArgs>(t);
    return g.cluster ? static_cast<int>((g.m0 / 128) % 2) : -1;
  }
  void unpair(Task& t) const override {
    abi::GemmTileArgs g = plan::args_as<abi::GemmTileArgs>(t);
    g.cluster = 0;
    t.args = plan::args_words(g);
  }

  double interpreter_work(const Task& t, double) const override {
    const abi::GemmTileArgs g = plan::args_as<abi::GemmTileArgs>(t);
    return static_cast<double>(g.m1 - g.m0) * static_cast<double>(g.n1 - g.n0) *
           static_cast<double>(g.k1 - g.k0);
  }

  std::string key_variant(const Source& s, const Task& t) const override {
    const abi::GemmTileArgs g = plan::args_as<abi::GemmTileArgs>(t);
    std::string key = fmt::format(":fn{}:bias{}{}", g.fn, g.has_bias, g.parts > 1 ? ":split" : "");
    if (const int bn = tma_n(s, t))
      key += fmt::format(":tma{}x{}{}{}", tma_m(t), bn, g.cluster ? ":pair" : "",
                         store_tma(s, t) ? ":store" : "");
    return key;
  }

  // The tile the kernel runs on the target (support/arch.h).
  std::string path(const Source& s, const Task& t) const override {
    const int bn = tma_n(s, t);
    if (bn == 0) return std::string(name()) + ": SIMT (operands not 16-bit or not 16-byte aligned)";
    switch (tile_target(s.arch())) {
      case TileTarget::kWgmma:
        return fmt::format(
            "{}: sm_90a wgmma + TMA {}x{}{}{}", name(), tma_m(t), bn,
            plan::args_as<abi::GemmTileArgs>(t).cluster ? " in 2-CTA clusters, B multicast" : "",
            store_tma(s, t) ? ", C stored by TMA" : "");
      case TileTarget::kMmaSync:
        // templates/mkc/gemm_sm80.cuh: K and N multiples of 8 and 16-byte aligned operands.
        return fmt::format(
            "{}: mma.sync 128x128 ({} has no wgmma; SIMT where K or N is not a "
            "multiple of 8)",
            name(), s.arch());
      case TileTarget::kSimt:
        break;
    }
    return fmt::format("{}: SIMT ({} has no mma.sync)", name(), s.arch());
  }

  Launch launch(const Source& s, const Task& t) const override {
    Launch l;
    if (const int bn = tma_n(s, t)) {
      l.threads = 384;
      l.dynamic_smem = gemm_ring_bytes(tma_m(t), bn, store_tma(s, t));
      l.bulk_stores = store_tma(s, t);
      if (plan::args_as<abi::GemmTileArgs>(t).cluster) l.cluster = 2;
      // templates/mkc/gemm_sm80.cuh: two stages of A 128 x 40 and B 32 x 136 elements.
      l.portable_smem = 2 * (128 * 40 + 32 * 136) * 2 + 128;
    }
    return l;
  }

  void emit(Source& s, const Task& t) const override {
    const abi::GemmTileArgs g = plan::args_as<abi::GemmTileArgs>(t);
    if (const int bn = tma_n(s, t)) {
      s.line("  extern __shared__ unsigned char mkc_smem[];");
      s.line(fmt::format(
          "  mkc::sm90::gemm_tile_tma<{}, {}, {}, {}, {}{}>(a, v, args, kBuffers, mkc_smem, "
          "next_args, next_v, {}{{}});",
          s.type_of(t, 0), s.type_of(t, 2), g.has_bias ? s.type_of(t, 3) : s.type_of(t, 2),
          tma_m(t), bn,
          g.parts > 1       ? ", true"
          : store_tma(s, t) ? (g.cluster ? ", false, true, true" : ", false, false, true")
          : g.cluster       ? ", false, true"
                            : "",
          s.fn_type(g.fn)));
    } else {
      s.line(fmt::format("  mkc::{}<{}, {}, {}, {}>(a, v, args, kBuffers, {}{{}});",
                         g.parts > 1 ? "gemm_tile_split" : "gemm_tile", s.type_of(t, 0),
                         s.type_of(t, 1), s.type_of(t, 2),
                         g.has_bias ? s.type_of(t, 3) : s.type_of(t, 2), s.fn_type(g.fn)));
    }
  }

  std::vector<int64_t> device_args(Source& s, const Task& t) const override {
    if (!tma_n(s, t)) return t.args;
    // The tensor maps of A (BM x 64 boxes) and B (64 x 64 boxes).
    abi::GemmTileArgs g = plan::args_as<abi::GemmTileArgs>(t);
    g.map_a = s.tensor_map(t.views[0], tma_m(t), 64);
    g.map_b = s.tensor_map(t.views[1], 64, 64);
    if (store_tma(s, t)) g.map_c = s.tensor_map(t.views[2], 64, 64);
    return plan::args_words(g);
  }

 private:
  // The TMA + wgmma tile's N (128 or 256; 64 for a swapped tile of at most 64 columns) when the
  // operands allow it, else 0. TMA needs 16-byte aligned starts and row strides; wgmma takes bf16
  // or f16 A and B alike.
  static int tma_n(const Source& s, const Task& t) {
    if (!s.tensor_cores()) return 0;
    const View &a = t.views[0], &b = t.views[1];
    const compiler::DType ta = s.dtype(t, 0), tb = s.dtype(t, 1);
    if (ta != tb || !is_16bit(ta)) return 0;
    if (a.shape.size() != 2 || b.shape.size() != 2) return 0;
    if (!tma_rows_ok(a) || !tma_rows_ok(b)) return 0;
    const abi::GemmTileArgs g = plan::args_as<abi::GemmTileArgs>(t);
    if (g.m1 - g.m0 <= 32 && g.n1 - g.n0 <= 64 && !g.cluster) return 64;
    return g.n1 - g.n0 > 128 ? 256 : 128;
  }
  // Whether the TMA tile stores C through shared memory and TMA (templates/mkc/gemm_sm90.cuh,
  // store_tile_tma): an unsplit, unswapped tile of a 16-bit C whose rows TMA takes, and whose
  // 64 x 64 boxes are each whole or end where C ends (the map clips there, but not at a task's
  // edge inside C: a box past the task would write another task's part).
  static bool store_tma(const Source& s, const Task& t) {
    const int bn = tma_n(s, t);
    const int bm = tma_m(t);
    if (bn == 0 || bm < 64) return false;
    const abi::GemmTileArgs g = plan::args_as<abi::GemmTileArgs>(t);
    const View& c = t.views[2];
    if (g.parts > 1 || !is_16bit(s.dtype(t, 2)) || c.shape.size() != 2 || !tma_rows_ok(c))
      return false;
    const bool rows = (g.m1 - g.m0) % 64 == 0 || g.m1 == c.shape[0];
    const bool cols = (g.n1 - g.n0) % 64 == 0 || g.n1 == c.shape[1];
    // The staging must fit beside the kernel's static shared memory (a kernel with an MoE
    // dispatch's histograms keeps the stores from registers).
    return rows && cols &&
           gemm_ring_bytes(bm, bn, true) + s.static_smem_bound() <= kHopperSmemPerCta;
  }
  // Its rows: tune::hopper_tile_rows of the task's (swapped up to 32, 64, else 128); a pair's
  // half runs the pair's 128 rows, however few its own are (the last row block).
  static int tma_m(const Task& t) {
    const abi::GemmTileArgs g = plan::args_as<abi::GemmTileArgs>(t);
    if (g.cluster) return 128;
    return static_cast<int>(tune::hopper_tile_rows(g.m1 - g.m0));
  }
};

}  // namespace

template <>
const Kind& kind<TaskKind::kGemmTile>() {
  static const GemmTile k;
  return k;
}

}  // namespace mkc::kinds
