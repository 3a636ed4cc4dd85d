#include "tune/gemm_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace mkc::tune {
namespace {

// An H200: 132 SMs at about 780 TFLOP/s dense bf16 together (cuBLAS 8192^3 reaches 778), 4.8 TB/s
// of HBM of which a kernel's loads see about 4.0 TB/s.
constexpr double kSmFlops = 780e12 / 132;
constexpr double kHbmBytesPerUs = 4.0e6;
// Share of an SM's tensor-core peak a tile keeps over its main loop: the wide 128-row tiles keep
// both consumer warpgroups on m64n256 / m64n128 wgmma; 64-row tiles split the columns, so each
// instruction is half as wide per byte of A it reads.
double efficiency(int64_t bm, int64_t bn) {
  if (bm == 128) return bn == 256 ? 0.92 : 0.82;
  return bn == 256 ? 0.75 : 0.65;
}
// A tile's fixed cost: the pipeline's fill, the epilogue's stores, the task's bookkeeping.
constexpr double kTileFixedUs = 1.0;
// The split's reduction: a kernel phase of its own plus its bytes at about 3 TB/s.
constexpr double kReduceFixedUs = 2.0;
constexpr double kReduceBytesPerUs = 3.0e6;

int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

std::string GemmCandidate::text() const {
  return split_k > 1 ? fmt::format("tile({}, {}, {}) split-K {}", bm, bn, bk, split_k)
                     : fmt::format("tile({}, {}, {})", bm, bn, bk);
}

int64_t split_parts(int64_t K, int64_t requested) {
  if (requested <= 1 || K <= 64) return 1;
  const int64_t part_k = cdiv(cdiv(K, requested), 64) * 64;
  return cdiv(K, part_k);
}

double predict_gemm_us(const GemmProblem& p, int64_t bm, int64_t bn, int64_t split_k) {
  const int64_t parts = split_parts(p.K, split_k);
  const int64_t part_k = cdiv(cdiv(p.K, parts), 64) * 64;
  const int64_t tiles = cdiv(p.M, bm) * cdiv(p.N, bn) * parts;
  const int64_t waves = cdiv(tiles, std::max<int64_t>(p.ctas, 1));
  // Ragged tiles cost a whole tile: the tensor cores run on the zero fill.
  const double tile_us = 2.0 * static_cast<double>(bm * bn) * static_cast<double>(part_k) /
                             (kSmFlops * efficiency(bm, bn)) * 1e6 +
                         kTileFixedUs;
  const double compute_us = static_cast<double>(waves) * tile_us;
  // Every operand once from HBM (L2 holds the reuse the tile order is made for), partial sums
  // written in f32 when split.
  const double out_bytes = static_cast<double>(p.M * p.N) * (parts > 1 ? 4.0 * parts : 2.0);
  const double memory_us =
      (2.0 * static_cast<double>(p.M * p.K + p.K * p.N) + out_bytes) / kHbmBytesPerUs;
  double us = std::max(compute_us, memory_us);
  if (parts > 1)
    us += kReduceFixedUs + static_cast<double>(p.M * p.N) * (4.0 * parts + 2.0) / kReduceBytesPerUs;
  return us;
}

std::vector<GemmCandidate> gemm_candidates(const GemmProblem& p) {
  std::vector<GemmCandidate> out;
  for (const int64_t bm : {128, 64}) {
    for (const int64_t bn : {256, 128}) {
      for (const int64_t s : {1, 2, 4, 8}) {
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
          return o.bm == bm && o.bn == bn && o.split_k == parts;
        });
        if (!seen) out.push_back(c);
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const GemmCandidate& a, const GemmCandidate& b) {
    return a.predicted_us < b.predicted_us;
  });
  return out;
}

}  // namespace mkc::tune
