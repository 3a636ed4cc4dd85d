// grouped_gemm_tile: one worker's share of a grouped GEMM whose group sizes are known only at run
// time: Y[rows of group g] = X[rows of group g] W[g], then the epilogue function. Views
// {X [rows, K], W [groups, K, N], Y, counts} (abi.h, GroupedGemmTileArgs). Device code: the TMA +
// wgmma pipeline (templates/mkc/grouped_gemm_sm90.cuh) for 16-bit aligned operands, else SIMT.
#include <fmt/format.h>

#include <array>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"

namespace mkc::kinds {
namespace {

class GroupedGemmTile final : public Kind {
 public:
  GroupedGemmTile() : Kind(TaskKind::kGroupedGemmTile) {}
  // templates/mkc/grouped_gemm*.cuh: a batch of kWorkerItems work items (5 words each) and the
  // portable worker's count.
  int static_smem(const Source&, const Task&) const override { return 64 * 5 * 8 + 8; }

  size_t fixed_args() const override { return sizeof(abi::GroupedGemmTileArgs) / 8; }

  std::vector<Touch> touches(const Task&) const override {
    // Its rows are found at run time: any of X's and Y's.
    return {Touch{0, {}, {}, false}, Touch{1, {}, {}, false}, Touch{3, {}, {}, false},
            Touch{2, {}, {}, true}};
  }

  void execute(const Memory& mem, const Task& t) const override {
    const View &x = t.views[0], &w = t.views[1], &y = t.views[2], &cn = t.views[3];
    const abi::GroupedGemmTileArgs ga = plan::args_as<abi::GroupedGemmTileArgs>(t);
    const int64_t G = w.shape[0], K = x.shape[1], N = w.shape[2];
    const int64_t lead = product(cn.shape) / G, nblocks = (N + ga.bn - 1) / ga.bn;
    // The work items in their order (abi.h): by group, then column block, then tile of bm
    // rows; (group, first row, end row, column block). Counts clamp to [0, capacity].
    const int64_t cap = std::min(x.shape[0], y.shape[0]);
    std::vector<std::array<int64_t, 4>> tiles;
    for (int64_t g = 0, first = 0; g < G; ++g) {
      int64_t n = 0;
      for (int64_t l = 0; l < lead; ++l)
        n += static_cast<int64_t>(mem.of(cn)[cn.offset + l * G + g]);
      n = std::max<int64_t>(n, 0);
      for (int64_t bj = 0; bj < nblocks; ++bj) {
        for (int64_t m0 = first; m0 < first + n; m0 += ga.bm)
          tiles.push_back(std::array<int64_t, 4>{
              g, m0, std::min<int64_t>({first + n, m0 + ga.bm, std::max(m0, cap)}), bj});
      }
      first += n;
    }
    const int64_t items = static_cast<int64_t>(tiles.size());
    for (int64_t item = ga.worker; item < items; item += ga.workers) {
      const auto [g, m0, m1, bj] = tiles[item];
      const int64_t n0 = bj * ga.bn, n1 = std::min<int64_t>(N, n0 + ga.bn);
      for (int64_t r = m0; r < m1; ++r) {
        for (int64_t c = n0; c < n1; ++c) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k)
            acc += mem.of(x)[flat(x, r, k)] * mem.of(w)[flat(w, g, k, c)];
          if (ga.fn >= 0) acc = mem.call(ga.fn, {acc});
          mem.of(y)[flat(y, r, c)] = acc;
        }
      }
    }
  }

  double interpreter_work(const Task& t, double) const override {
    const abi::GroupedGemmTileArgs g = plan::args_as<abi::GroupedGemmTileArgs>(t);
    // A worker's share of the most items there can be.
    const double items = static_cast<double>(t.views[0].shape[0]) / static_cast<double>(g.bm) +
                         static_cast<double>(t.views[1].shape[0]);
    return items / static_cast<double>(g.workers) * static_cast<double>(g.bm) *
           static_cast<double>(t.views[1].shape[2]) * static_cast<double>(t.views[0].shape[1]);
  }

  std::string key_variant(const Source& s, const Task& t) const override {
    const abi::GroupedGemmTileArgs g = plan::args_as<abi::GroupedGemmTileArgs>(t);
    std::string key = fmt::format(":fn{}", g.fn);
    if (const int bn = tma_n(s, t)) key += fmt::format(":tma{}x{}", g.bm, bn);
    return key;
  }

  std::string path(const Source& s, const Task& t) const override {
    if (const int bn = tma_n(s, t))
      return arch_has_wgmma(s.arch())
                 ? fmt::format("{}: sm_90a wgmma + TMA {}x{}", name(),
                               plan::args_as<abi::GroupedGemmTileArgs>(t).bm, bn)
                 : fmt::format("{}: SIMT ({} has no wgmma)", name(), s.arch());
    return std::string(name()) +
           ": SIMT (operands not 16-bit, not 16-byte aligned, or tiles not 64/128 rows)";
  }

  Launch launch(const Source& s, const Task& t) const override {
    Launch l;
    if (const int bn = tma_n(s, t)) {
      // The GEMM's pipeline (templates/mkc/grouped_gemm_sm90.cuh).
      l.threads = 384;
      l.dynamic_smem =
          gemm_ring_bytes(static_cast<int>(plan::args_as<abi::GroupedGemmTileArgs>(t).bm), bn);
    }
    return l;
  }

  void emit(Source& s, const Task& t) const override {
    const abi::GroupedGemmTileArgs g = plan::args_as<abi::GroupedGemmTileArgs>(t);
    if (const int bn = tma_n(s, t)) {
      s.line("  extern __shared__ unsigned char mkc_smem[];");
      s.line(
          fmt::format("  mkc::sm90::grouped_gemm_tile_tma<{}, {}, {}, {}>(a, v, args, kBuffers, "
                      "mkc_smem, {}{{}});",
                      s.type_of(t, 0), s.type_of(t, 2), g.bm, bn, s.fn_type(g.fn)));
    } else {
      s.line(fmt::format("  mkc::grouped_gemm_tile<{}, {}, {}>(a, v, args, kBuffers, {}{{}});",
                         s.type_of(t, 0), s.type_of(t, 1), s.type_of(t, 2), s.fn_type(g.fn)));
    }
  }

  std::vector<int64_t> device_args(Source& s, const Task& t) const override {
    if (!tma_n(s, t)) return t.args;
    // X in bm x 64 boxes, W [groups, K, N] in 64 x 64 boxes of one slice.
    abi::GroupedGemmTileArgs g = plan::args_as<abi::GroupedGemmTileArgs>(t);
    g.map_x = s.tensor_map(t.views[0], static_cast<int>(g.bm), 64);
    g.map_w = s.tensor_map(t.views[1], 64, 64);
    return plan::args_words(g);
  }

 private:
  // The wgmma tile's N (128 or 256) for X [rows, K] and W [groups, K, N] of one 16-bit type, rows
  // 16-byte aligned, tiles of 64 or 128 rows and at most 256 columns; else 0.
  static int tma_n(const Source& s, const Task& t) {
    if (!s.tensor_cores()) return 0;
    const View &x = t.views[0], &w = t.views[1];
    const compiler::DType tx = s.dtype(t, 0), tw = s.dtype(t, 1);
    if (tx != tw || !is_16bit(tx)) return 0;
    if (x.shape.size() != 2 || w.shape.size() != 3) return 0;
    if (!tma_rows_ok(x) || !tma_rows_ok(w)) return 0;
    const abi::GroupedGemmTileArgs g = plan::args_as<abi::GroupedGemmTileArgs>(t);
    if ((g.bm != 64 && g.bm != 128) || g.bn > 256) return 0;
    return g.bn > 128 ? 256 : 128;
  }
};

}  // namespace

template <>
const Kind& kind<TaskKind::kGroupedGemmTile>() {
  static const GroupedGemmTile k;
  return k;
}

}  // namespace mkc::kinds
