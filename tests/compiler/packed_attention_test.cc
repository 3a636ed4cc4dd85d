// Attention over packed sequences (`attention(..., seqlens = L)`): the CPU interpreter's tiles
// (the kind's own step) and the whole-op reference agree with attention computed here per
// sequence, alone, on fresh packings (one-row and empty sequences, sequences across tiles and
// tiles across sequences, padding rows before L[0] and from L[n] on); and the plan (every tile
// reads L, its args name L's view). The checker's errors: tests/compiler/check_test.cc.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compiler/oracle/interpret.h"
#include "compiler/passes/passes.h"
#include "compiler/sema/check.h"
#include "dsl/parser.h"
#include "tests/compiler/plan_testing.h"

namespace mkc::plan {
namespace {

using testing::interpret_and_compare;
using testing::tensor_index;

const char* kPacked = R"(
schedule packed {
  param H = 2, T = 300, D = 8, N = 5, MASK = 2
  input  Q : bf16[H, T, D]
  input  K : bf16[H, T, D]
  input  V : bf16[H, T, D]
  input  L : i32[N + 1]
  output O : bf16[H, T, D]
  compute att = attention(Q, K, V -> O, causal = MASK - 1, seqlens = L) tile(64)
}
)";

// Row i of head h, attending to keys [lo, hi) (causal: up to i), directly; zeros for none.
std::vector<double> row(const RankData& data, int tq, int tk, int tv, int64_t T, int64_t D,
                        int64_t h, int64_t i, int64_t lo, int64_t hi) {
  std::vector<double> out(D, 0);
  if (lo >= hi) return out;
  std::vector<double> sc;
  double mx = -std::numeric_limits<double>::infinity(), sum = 0;
  for (int64_t j = lo; j < hi; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d)
      dot += data[tq][(h * T + i) * D + d] * data[tk][(h * T + j) * D + d];
    sc.push_back(dot / std::sqrt(static_cast<double>(D)));
    mx = std::max(mx, sc.back());
  }
  for (int64_t j = lo; j < hi; ++j) {
    const double p = std::exp(sc[j - lo] - mx);
    sum += p;
    for (int64_t d = 0; d < D; ++d) out[d] += p * data[tv][(h * T + j) * D + d];
  }
  for (double& x : out) x /= sum;
  return out;
}

TEST_CASE("packed sequences: each sequence attended to alone, fresh packings every launch") {
  const auto file = std::make_shared<dsl::SourceFile>("packed.mks", kPacked);
  struct Case {
    int64_t n, causal;
  };
  int total_padded = 0;  // launches whose packing left padding rows
  for (const Case& k : {Case{1, 1}, Case{5, 0}, Case{5, 1}, Case{40, 1}, Case{299, 1}}) {
    const std::string label = fmt::format("N={} causal={}", k.n, k.causal);
    auto c = testing::compile(file, 1, {{"N", k.n}, {"MASK", k.causal + 1}});
    const compiler::CheckedSchedule& s = c->checked[0];
    PassOptions po;
    po.sms = 6;
    const Plan plan = build_plan(s, po);
    InterpretOptions io;
    io.launches = 3;
    io.inputs = random_inputs(plan, 11);
    // The interpreter's tiles against the whole-op reference, every launch.
    const InterpretResult res = interpret_and_compare(s, plan, io, label);
    const int tq = tensor_index(s, "Q"), tk = tensor_index(s, "K"), tv = tensor_index(s, "V"),
              to = tensor_index(s, "O"), tl = tensor_index(s, "L");
    const int64_t H = 2, T = 300, D = 8;
    std::vector<double> first_packing;
    int padded = 0;
    for (size_t launch = 0; launch < res.snapshots.size(); ++launch) {
      const RankData& data = res.snapshots[launch][0];
      const std::vector<double>& cu = data[tl];
      REQUIRE(static_cast<int64_t>(cu.size()) == k.n + 1);
      CHECK(cu.front() >= 0);
      CHECK(cu.back() <= T);
      CHECK(std::is_sorted(cu.begin(), cu.end()));
      padded += cu.front() > 0 || cu.back() < T;
      if (launch == 0) first_packing = cu;
      if (launch > 0 && k.n > 1) CHECK_MESSAGE(cu != first_packing, label << ": a new packing");
      double num = 0, den = 0;
      for (int64_t h = 0; h < H; ++h) {
        // Padding rows (before L[0], from L[n] on) see no key: zeros.
        for (int64_t i = 0; i < T; ++i) {
          if (i >= cu.front() && i < cu.back()) continue;
          for (int64_t e = 0; e < D; ++e)
            CHECK_MESSAGE(data[to][(h * T + i) * D + e] == 0.0, label << " padding row " << i);
        }
        for (int64_t d = 0; d < k.n; ++d) {
          const auto lo = static_cast<int64_t>(cu[d]), hi = static_cast<int64_t>(cu[d + 1]);
          for (int64_t i = lo; i < hi; ++i) {
            const std::vector<double> want =
                row(data, tq, tk, tv, T, D, h, i, lo, k.causal ? i + 1 : hi);
            for (int64_t e = 0; e < D; ++e) {
              const double got = data[to][(h * T + i) * D + e];
              num += (got - want[e]) * (got - want[e]);
              den += want[e] * want[e];
            }
          }
        }
      }
      const double err = std::sqrt(num / den);
      CHECK_MESSAGE(err <= 1e-9, label << " launch " << launch << ": rel. L2 " << err);
    }
    total_padded += padded;
    // Every tile reads all of L, named by its args.
    int tiles = 0;
    for (const Task& t : plan.tasks) {
      if (t.kind != TaskKind::kAttentionTile) continue;
      ++tiles;
      const abi::AttentionTileArgs a = args_as<abi::AttentionTileArgs>(t);
      REQUIRE(a.seqlens == 4);
      REQUIRE(t.views.size() == 5);
      CHECK(t.views[4].shape == std::vector<int64_t>{k.n + 1});
      bool reads_l = false;
      for (const Box& b : t.reads) reads_l = reads_l || (b.hi == std::vector<int64_t>{k.n + 1});
      CHECK(reads_l);
    }
    CHECK(tiles == H * 5);  // 300 rows in tiles of 64
  }
  // The random packings pad one launch in three: some of these 15 did.
  CHECK(total_padded > 0);
}

}  // namespace
}  // namespace mkc::plan
