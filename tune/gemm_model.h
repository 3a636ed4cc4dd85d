// A cost model for one GEMM on the Hopper tile (templates/mkc/gemm_sm90.cuh): the time of each
// (tile, split-K) the template can run, from tiles per wave and the last wave's fill, a tile's
// arithmetic at its shape's tensor-core efficiency or its operand loads (the bytes no other CTA
// of the wave reads stream from HBM at a CTA's rate, shared ones come from L2), the whole GPU's
// HBM, the launch, the split's fused reduction and a fixed cost per tile. Deterministic and
// machine-free: it is the compiler's own pick for a GEMM without tile(...) (or with tile(auto)),
// it ranks the candidates `mkc tune` measures, and the compile's decision record says what it
// predicts for the pick and the runner-up. Its constants were fitted to issue 36's sweep on an
// H100 (gemm_model.cc, docs/RESULTS.md): a prediction, never a measurement.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mkc::tune {

struct GemmProblem {
  int64_t M = 0, N = 0, K = 0;
  int64_t ctas = 132;       // compute CTAs of the kernel
  bool splittable = false;  // split-K allowed (K >= 2048, plain row order)
  bool pairs = false;       // 2-CTA clusters allowed (plain row order, an even CTA count)
  // Elements between the rows of the B the tiles read (0: N; a staged B's padded rows, GemmStaging
  // in compiler/passes/lower.h), and the bytes staging copies before the tiles start.
  int64_t b_pitch = 0;
  int64_t staged_bytes = 0;
};

struct GemmCandidate {
  int64_t bm = 128, bn = 128, bk = 64;
  int64_t split_k = 1;
  int64_t cluster = 1;  // 2: in 2-CTA clusters sharing B (templates/mkc/gemm_sm90.cuh)
  double predicted_us = 0;
  // "tile(128, 256, 64)", "tile(128, 256, 64) split-K 4" or "tile(128, 256, 64) cluster 2"
  std::string text() const;
};

// Whether a GEMM may be split over K (the lowering and `mkc tune` ask the same): each part keeps
// a pipeline's worth of 64-wide steps, and a rows_from GEMM's tiles keep their arrival order.
// Bias and epilogue functions split too (the last part applies them to the sum).
inline bool split_allowed(int64_t K, bool rows_from) {
  return K >= 2048 && !rows_from;
}

// The rows the Hopper tile runs for a tile of `rows` rows (at most its BM): 8, 16 or 32 up to
// 32 (the swapped tile, templates/mkc/gemm_sm90.cuh SwapShape: the columns fill wgmma's M of 64
// and the rows are its N, so few rows pad to 8 instead of 64), 64 up to 64 (the consumers then
// split the columns), else 128. The lowering's tile class (compiler/kinds/gemm_tile.cc) and the
// model's arithmetic both ask this.
int64_t hopper_tile_rows(int64_t rows);

// The split-K parts a requested split gives: K in whole 64-wide steps per part (as the lowering
// cuts it), so 3 parts of K 4096 are 3 and 7 parts of K 256 are 4.
int64_t split_parts(int64_t K, int64_t requested);

// The model's time for one candidate, in µs (cluster 2: B's loads shared by a pair of CTAs).
double predict_gemm_us(const GemmProblem& p, int64_t bm, int64_t bn, int64_t split_k,
                       int64_t cluster = 1);

// Every candidate the template can run (BM 64 / 128 x BN 128 / 256, and 64 x 64 swapped at most
// 32 rows; k-step 64; with split-K 2, 3, 4, 6 and 8 where splittable and each part keeps K >=
// 1024; 128 x 256 in 2-CTA clusters where pairs are allowed and the row blocks pair up), fastest
// first by the model; ties keep the listing order (wider tiles first, then fewer parts, then
// unpaired).
std::vector<GemmCandidate> gemm_candidates(const GemmProblem& p);

}  // namespace mkc::tune
