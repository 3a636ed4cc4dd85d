#include "tune/gemm_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace mkc::tune {
namespace {

// Fitted to issue 36's sweep on an H100 (132 SMs; 2026-12-05, `gemm_bench --sweep --tune 3`,
// docs/RESULTS.md): the 132 measured (shape, tile, split) points of 33 shapes, where these
// constants pick a candidate within 2% of the fastest measured on 32 of the 33 (4096 x 1280 x
// 8192: 9% slower) and predict a point within 12% on average (the H200 peak figures before: 46%).
// Tensor cores: about 780 TFLOP/s dense bf16 over 132 SMs (cuBLAS 8192^3 reaches 760-780).
constexpr double kSmFlopsPerUs = 780e6 / 132;
// Share of an SM's tensor-core peak a tile keeps over its main loop: the wide 128-row tiles keep
// both consumer warpgroups on m64n256 wgmma; 128 x 128 and the 64-row tiles (which split the
// columns between the consumers) measured 1.25-1.45x slower per flop on the large shapes.
double efficiency(int64_t bm, int64_t bn) {
  if (bm == 128) return bn == 256 ? 0.92 : 0.74;
  return bn == 256 ? 0.60 : bn == 128 ? 0.50 : 0.40;
}
// A CTA's operand loads: bytes no other CTA of the wave reads stream from HBM at about 35 GB/s
// per CTA (a decode GEMM's weight strip), bytes the wave shares come from L2 at about 120 GB/s.
constexpr double kStreamBytesPerUs = 35e3;
constexpr double kL2BytesPerUs = 120e3;
// The whole GPU's HBM, as a kernel's loads see it.
constexpr double kHbmBytesPerUs = 3.0e6;
// The launch (kernel start, tables, tensor maps) and each tile's fixed cost (pipeline fill,
// epilogue, the task's bookkeeping).
constexpr double kLaunchUs = 3.5;
constexpr double kTileFixedUs = 1.0;
// The split's fused reduction (templates/mkc/split_k.cuh), per wave: each part stores its f32
// sums (rows x BN x 4 bytes) and takes a ticket, and the tile's last part reads every part's
// sums back (parts x rows x BN x 4 bytes), both at about one CTA's rate, plus a fixed cost per
// part (the ticket, the sum's setup, the part's own pipeline fill). Fitted on an H100
// (2026-12-06, twenty-seventh session, docs/RESULTS.md) to 46 points of `gemm_bench --picks`
// (128 x 1280 x 8192, 512 x 1280 x 8192, 512 x 8192 x 3584, 128 x 7168 x 2048, 4096 x 3584 x
// 8192; tiles 64/128 x 128/256, splits 1-6): rms log error 0.17 (0.70 with the constants
// before, fitted to the first, slower sum), and the model's pick among the measured points is
// the fastest measured on all five shapes. Checked on 165 points of the sweep's 33 shapes
// measured that day (decode splits of 64 x 64 and 64 x 128 included): its pick among each
// shape's measured points is within 7% of the fastest on every shape (4096 x 1280 x 8192: split
// 2, 192 us against 180 unsplit), and a wider fit of these three constants gained nothing.
constexpr double kSplitWaveUs = 5.0;
constexpr double kPartialBytesPerUs = 70e3;
constexpr double kSumBytesPerUs = 70e3;
// B's rows not a multiple of 128 bytes apart (N 5000 of bf16): each of a CTA's B loads costs
// about 2.6 times its bytes. Fitted on an H100 (2026-12-06, twenty-eighth session,
// docs/RESULTS.md) to 128 x 256 tiles at 3000 x 5000 x 4000, 4096 x 5000 x 4096 and 2048 x 5000
// x 8192 (280, 357, 381 us unpaired; predicted 279, 355, 422), where the same tiles in 2-CTA
// clusters, each CTA loading half of B, ran 202, 251 and 284 us (predicted 206, 260, 306). Rows
// of A that far apart measured no such cost (3000 x 8192 x 4000: 293 us, predicted 299).
constexpr double kUnalignedRowCost = 2.6;
// A pair's fixed cost per tile (the partner's slot releases, the cluster barrier at the end of a
// CTA's pairs): on rows 128-byte aligned, where B's loads are not what binds, pairs measured 2-5%
// slower than the same tiles unpaired.
constexpr double kPairTileUs = 1.0;
// Row blocks the lowering groups for L2 reuse (lower_compute.cc, lower_gemm).
constexpr int64_t kGroupRows = 8;

int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The rows a tile's tensor cores run: a tile has min(M, bm) rows (a GEMM of at most 64 rows runs
// a 64-row or swapped tile whatever BM says).
int64_t mma_rows(int64_t M, int64_t bm) {
  return hopper_tile_rows(std::min(M, bm));
}

}  // namespace

int64_t hopper_tile_rows(int64_t rows) {
  for (const int64_t mp : {8, 16, 32, 64})
    if (rows <= mp) return mp;
  return 128;
}

std::string GemmCandidate::text() const {
  if (split_k > 1) return fmt::format("tile({}, {}, {}) split-K {}", bm, bn, bk, split_k);
  if (cluster > 1) return fmt::format("tile({}, {}, {}) cluster {}", bm, bn, bk, cluster);
  return fmt::format("tile({}, {}, {})", bm, bn, bk);
}

int64_t split_parts(int64_t K, int64_t requested) {
  if (requested <= 1 || K <= 64) return 1;
  const int64_t part_k = cdiv(cdiv(K, requested), 64) * 64;
  return cdiv(K, part_k);
}

double predict_gemm_us(const GemmProblem& p, int64_t bm, int64_t bn, int64_t split_k,
                       int64_t cluster) {
  const int64_t parts = split_parts(p.K, split_k);
  const int64_t part_k = cdiv(cdiv(p.K, parts), 64) * 64;
  const int64_t mb = cdiv(p.M, bm), nb = cdiv(p.N, bn);
  const int64_t ctas = std::max<int64_t>(p.ctas, 1);
  const int64_t tasks = mb * nb * parts;
  const int64_t waves = cdiv(tasks, ctas);
  // One task's operands, and how many tasks of a wave read the same ones: a B strip is read by
  // the row blocks of its group, an A strip by the column blocks running beside it.
  const double a_bytes = 2.0 * static_cast<double>(bm * part_k);
  // A pair's CTAs each load half of the B they share (TMA multicast brings the other half); rows
  // that are not 128-byte multiples apart cost more than their bytes.
  const double b_cost =
      ((p.b_pitch > 0 ? p.b_pitch : p.N) * 2) % 128 == 0 ? 1.0 : kUnalignedRowCost;
  const double b_bytes =
      2.0 * static_cast<double>(bn * part_k) * b_cost / static_cast<double>(cluster);
  const int64_t running = std::min(tasks, ctas);
  const int64_t rows_together = std::min(mb, kGroupRows);
  const double a_readers = static_cast<double>(
      std::min(nb, std::max<int64_t>(1, running / std::max<int64_t>(1, rows_together))));
  // A pair reads its B strip from L2 once for its two CTAs: one reader of the group's.
  const double b_readers = std::max(
      1.0, static_cast<double>(std::min(rows_together, running)) / static_cast<double>(cluster));
  const double own = a_bytes / a_readers + b_bytes / b_readers;
  const double load_us = own / kStreamBytesPerUs + (a_bytes + b_bytes - own) / kL2BytesPerUs;
  // Ragged tiles cost a whole tile: the tensor cores run on the zero fill.
  const double mma_us = 2.0 * static_cast<double>(mma_rows(p.M, bm) * bn) *
                        static_cast<double>(part_k) /
                        (kSmFlopsPerUs * efficiency(mma_rows(p.M, bm) > 64 ? 128 : 64, bn));
  const double compute_us = static_cast<double>(waves) * (std::max(mma_us, load_us) + kTileFixedUs +
                                                          (cluster > 1 ? kPairTileUs : 0.0));
  // Every operand once from HBM; when split, the parts' f32 sums written and all but one read.
  const double out_bytes =
      static_cast<double>(p.M * p.N) * (parts > 1 ? 8.0 * static_cast<double>(parts) - 2.0 : 2.0);
  const double memory_us =
      (2.0 * static_cast<double>(p.M * p.K + p.K * p.N) + out_bytes) / kHbmBytesPerUs;
  // Staging copies run before the tiles that read their rows, at about HBM speed.
  double us = kLaunchUs + std::max(compute_us, memory_us) +
              static_cast<double>(p.staged_bytes) / kHbmBytesPerUs;
  if (parts > 1) {
    const double tile_bytes = static_cast<double>(std::min(p.M, bm) * bn) * 4.0;
    us += static_cast<double>(waves) * (kSplitWaveUs + tile_bytes / kPartialBytesPerUs +
                                        static_cast<double>(parts) * tile_bytes / kSumBytesPerUs);
  }
  return us;
}

std::vector<GemmCandidate> gemm_candidates(const GemmProblem& p) {
  std::vector<GemmCandidate> out;
  for (const int64_t bm : {128, 64}) {
    for (const int64_t bn : {256, 128, 64}) {
      // 64 columns: the swapped tile's alone (at most 32 rows).
      if (bn == 64 && mma_rows(p.M, bm) > 32) continue;
      // At most 64 rows, BM 128 runs BM 64's tile: one candidate.
      if (bm == 128 && p.M <= 64) continue;
      for (const int64_t s : {1, 2, 3, 4, 6, 8}) {
        if (s > 1 && (!p.splittable || p.K / s < 1024)) continue;
        const int64_t parts = split_parts(p.K, s);
        if (s > 1 && parts == 1) continue;
        GemmCandidate c;
        c.bm = bm;
        c.bn = bn;
        c.split_k = parts;
        c.predicted_us = predict_gemm_us(p, bm, bn, parts);
        // Two requests that give the same parts are one candidate.
        const bool seen = std::any_of(out.begin(), out.end(), [&](const GemmCandidate& o) {
          return o.bm == bm && o.bn == bn && o.split_k == parts && o.cluster == 1;
        });
        if (seen) continue;
        out.push_back(c);
        // In 2-CTA clusters: 128 x 256 only (128 x 128 pairs measured 1.5-2.5x slower than
        // unpaired on an H100, 2026-12-06), unsplit, the row blocks in pairs.
        if (p.pairs && bm == 128 && bn == 256 && parts == 1 && p.M > 64 &&
            cdiv(p.M, 128) % 2 == 0 && p.ctas % 2 == 0) {
          GemmCandidate q = c;
          q.cluster = 2;
          q.predicted_us = predict_gemm_us(p, bm, bn, 1, 2);
          out.push_back(q);
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const GemmCandidate& a, const GemmCandidate& b) {
    return a.predicted_us < b.predicted_us;
  });
  return out;
}

}  // namespace mkc::tune
