// The GEMM cost model (tune/gemm_model.h): the candidates the template can run, ordered by the
// model, split-K only where allowed, and predictions that keep the H200's known figures.
#include "tune/gemm_model.h"

#include <doctest/doctest.h>

#include <algorithm>

namespace {

using mkc::tune::GemmProblem;

TEST_CASE("gemm model: candidates are the template's tiles, fastest first") {
  const GemmProblem big{8192, 8192, 8192, 132, true};
  const auto c = mkc::tune::gemm_candidates(big);
  REQUIRE(c.size() == 16);  // 4 tiles x {1, 2, 4, 8} parts
  CHECK(std::is_sorted(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.predicted_us < b.predicted_us;
  }));
  for (const auto& x : c) {
    CHECK((x.bm == 64 || x.bm == 128));
    CHECK((x.bn == 128 || x.bn == 256));
    CHECK(x.bk == 64);
  }
  // The big square GEMM: the wide tile without a split, within 25% of cuBLAS's 1414 us.
  CHECK(c[0].text() == "tile(128, 256, 64)");
  CHECK(c[0].predicted_us > 1414.0);
  CHECK(c[0].predicted_us < 1.25 * 1414.0);
  // Not splittable (an epilogue, a bias): no split-K candidate.
  const auto plain = mkc::tune::gemm_candidates(GemmProblem{16, 8192, 7168, 132, false});
  CHECK(plain.size() == 4);
  CHECK(std::none_of(plain.begin(), plain.end(), [](const auto& x) { return x.split_k > 1; }));
  // Each part keeps K >= 1024: K 2048 allows 2 parts only.
  const auto shallow = mkc::tune::gemm_candidates(GemmProblem{16, 8192, 2048, 132, true});
  CHECK(std::all_of(shallow.begin(), shallow.end(), [](const auto& x) { return x.split_k <= 2; }));
}

TEST_CASE("gemm model: memory bounds a decode GEMM; a split fills the idle CTAs") {
  // 16 x 8192 x 7168: the weights (117 MB) take about 29 us from HBM whatever the tile, and the
  // best candidates reach that floor; 32 tiles of 64 x 256 leave 100 CTAs idle without a split.
  const GemmProblem decode{16, 8192, 7168, 132, true};
  const auto c = mkc::tune::gemm_candidates(decode);
  const double floor_us = 2.0 * 8192 * 7168 / 4.0e6;
  for (const auto& x : c) CHECK(x.predicted_us >= floor_us);
  CHECK(c[0].predicted_us < 1.1 * floor_us);
  CHECK(mkc::tune::predict_gemm_us(decode, 64, 256, 4) <
        mkc::tune::predict_gemm_us(decode, 64, 256, 1));
}

TEST_CASE("gemm model: split parts are whole 64-wide steps, as the lowering cuts K") {
  CHECK(mkc::tune::split_parts(4096, 1) == 1);
  CHECK(mkc::tune::split_parts(4096, 3) == 3);
  CHECK(mkc::tune::split_parts(256, 7) == 4);
  CHECK(mkc::tune::split_parts(64, 4) == 1);
  CHECK(mkc::tune::split_parts(7168, 4) == 4);
}

TEST_CASE("gemm model: deterministic, and a ragged last wave costs a whole wave") {
  const GemmProblem a{3000, 5000, 4000, 132, true};
  CHECK(mkc::tune::predict_gemm_us(a, 128, 256, 1) == mkc::tune::predict_gemm_us(a, 128, 256, 1));
  // 480 tiles of 128 x 256 are 4 waves on 132 CTAs; 528 would be 4 too, 529 five.
  const GemmProblem full{128 * 22, 256 * 24, 4000, 132, true};  // 528 tiles
  const GemmProblem over{128 * 23, 256 * 23, 4000, 132, true};  // 529 tiles
  CHECK(mkc::tune::predict_gemm_us(over, 128, 256, 1) >
        1.2 * mkc::tune::predict_gemm_us(full, 128, 256, 1));
}

}  // namespace
