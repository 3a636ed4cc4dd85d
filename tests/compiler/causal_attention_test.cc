// Causal attention placed in the whole sequence (attention's q_start and k_start): the zigzag
// ring of samples/ring_attention_causal.mks, run by the CPU interpreter, equals causal attention
// over the whole sequence computed directly here from the ranks' chunks, at every world size,
// ragged chunk lengths and batch 2; ring attention in the plain layout with the global mask
// (blocks of later ranks fully masked, the last instance empty) does too; and offsets that cut a
// tile anywhere mask the right keys, a query that sees none getting zeros.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/oracle/interpret.h"
#include "compiler/oracle/reference.h"
#include "compiler/passes/passes.h"
#include "compiler/sema/check.h"
#include "dsl/parser.h"
#include "tests/compiler/plan_testing.h"

namespace mkc::plan {
namespace {

using testing::interpret_and_compare;
using testing::tensor_index;

// Causal softmax(Q Kᵀ / sqrt(D)) V over one whole sequence, [BH][S][D] each.
std::vector<double> causal_attention(const std::vector<double>& q, const std::vector<double>& k,
                                     const std::vector<double>& v, int64_t BH, int64_t S,
                                     int64_t D) {
  std::vector<double> o(q.size(), 0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t l = 0; l < BH; ++l) {
    for (int64_t i = 0; i < S; ++i) {
      std::vector<double> s(i + 1);
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += q[(l * S + i) * D + d] * k[(l * S + j) * D + d];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        const double p = std::exp(s[j] - mx);
        sum += p;
        for (int64_t d = 0; d < D; ++d) o[(l * S + i) * D + d] += p * v[(l * S + j) * D + d];
      }
      for (int64_t d = 0; d < D; ++d) o[(l * S + i) * D + d] /= sum;
    }
  }
  return o;
}

double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t e = 0; e < want.size(); ++e) {
    num += (got[e] - want[e]) * (got[e] - want[e]);
    den += want[e] * want[e];
  }
  return std::sqrt(num / den);
}

// A ring schedule whose ranks hold chunks of one sequence: `chunk_of(r, a)` is the position (in
// chunks of C tokens) of rank r's chunk a. Its O, assembled, must be causal attention over the
// whole sequence of the assembled Q, K, V. Q and O are [A, B, H, C, D], KV [2, A, B, H, C, D].
template <typename ChunkOf>
void check_whole_sequence(const std::string& label, const compiler::CheckedSchedule& s, int64_t R,
                          int64_t A, int64_t B, int64_t H, int64_t C, int64_t D, ChunkOf chunk_of) {
  PassOptions po;
  po.sms = 6;
  const Plan plan = build_plan(s, po);
  InterpretOptions io;
  io.launches = 2;
  io.fns = testing::host_fns();
  io.inputs = random_inputs(plan, 7);
  const InterpretResult res = interpret_and_compare(s, plan, io, label);
  // Per query tile (rank, slice of O, l, q0): one instance opens the merge and one closes it,
  // the first and last that see a key of the tile; every other one that sees none returns at
  // once. Each query sees at least its own key, so every tile has one that does.
  std::map<std::tuple<int64_t, std::vector<int64_t>, int64_t, int64_t>, std::pair<int, int>> ends;
  for (const Task& t : plan.tasks) {
    if (t.kind != TaskKind::kAttentionTile) continue;
    const abi::AttentionTileArgs a = args_as<abi::AttentionTileArgs>(t);
    auto& [opens, closes] = ends[{t.rank, s.ops[t.op].outputs[0].index, a.l, a.q0}];
    opens += a.first ? 1 : 0;
    closes += a.last ? 1 : 0;
    if ((a.first || a.last) && a.causal) CHECK_MESSAGE(a.q1 + a.causal_offset > 0, label);
  }
  for (const auto& [tile, n] : ends) {
    CHECK_MESSAGE(n.first == 1, label);
    CHECK_MESSAGE(n.second == 1, label);
  }
  const int tq = tensor_index(s, "Q"), tkv = tensor_index(s, "KV"), to = tensor_index(s, "O");
  const int64_t BH = B * H, S = R * A * C;
  for (int launch = 0; launch < io.launches; ++launch) {
    std::vector<double> q(BH * S * D), k(q.size()), v(q.size()), o(q.size());
    for (int64_t r = 0; r < R; ++r) {
      const RankData& data = res.snapshots[launch][r];
      for (int64_t a = 0; a < A; ++a) {
        const int64_t at = chunk_of(r, a) * C;
        for (int64_t l = 0; l < BH; ++l) {
          for (int64_t t = 0; t < C; ++t) {
            for (int64_t d = 0; d < D; ++d) {
              const int64_t g = (l * S + at + t) * D + d;
              const int64_t local = ((a * BH + l) * C + t) * D + d;
              q[g] = data[tq][local];
              k[g] = data[tkv][local];
              v[g] = data[tkv][A * BH * C * D + local];
              o[g] = data[to][local];
            }
          }
        }
      }
    }
    const double err = rel_l2(o, causal_attention(q, k, v, BH, S, D));
    CHECK_MESSAGE(err <= 1e-9, label << " launch " << launch + 1 << ": rel. L2 " << err);
  }
}

TEST_CASE("causal ring attention, zigzag: the whole sequence's causal attention at every R") {
  const auto file = dsl::SourceFile::read("samples/ring_attention_causal.mks");
  for (int64_t R : {1, 2, 3, 4, 8}) {
    // C = 40: chunks shorter than a tile; 130: a partial second tile; B 2 and H 3.
    for (int64_t C : {40, 130}) {
      if (R == 8 && C == 130) continue;  // the interpreter's fp64 attention: keep the test short
      const int64_t B = 2, H = R == 8 ? 1 : 3, D = 4;
      const std::string label = fmt::format("zigzag R={} B={} H={} C={}", R, B, H, C);
      auto c = testing::compile(file, R, {{"B", B}, {"H", H}, {"S", 2 * R * C}, {"D", D}});
      check_whole_sequence(label, c->checked[0], R, 2, B, H, C, D,
                           [R](int64_t r, int64_t a) { return a == 0 ? r : 2 * R - 1 - r; });
    }
  }
}

// The plain layout (rank r holds chunk r) with the global mask: at step s rank r holds rank
// (r - s) mod R's block, fully visible when that rank is earlier, masked when later; rank r's
// last instances see nothing, so the output is written by an instance with no key.
const char* kRingCausalPlain = R"(
schedule ring_causal {
  ranks R
  param B = 2, H = 2, S = 333, D = 4
  input   Q   : bf16[1, B, H, S / R, D]
  input   KV  : bf16[2, 1, B, H, S / R, D]
  scratch buf : bf16[2, 2, 1, B, H, S / R, D] symmetric
  output  O   : bf16[1, B, H, S / R, D]
  compute init = copy(KV -> buf[0])
  loop step in 0 .. R {
    comm    kv  = shift(buf[step % 2] -> buf[(step + 1) % 2], by = 1) chunk(128, D)
                  when(step < R - 1) after init, kv[step - 1].chunk
    compute att = attention(Q[0], buf[step % 2, 0, 0], buf[step % 2, 1, 0] -> O[0], causal = 1,
                            accumulate = 1, q_start = rank * (S / R),
                            k_start = (rank - step) % R * (S / R))
                  tile(128) after init, kv[step - 1].chunk, att[step - 1].tile
  }
}
)";

TEST_CASE("causal ring attention, plain layout: later ranks' blocks masked, at every R") {
  const auto file = std::make_shared<dsl::SourceFile>("ring_causal.mks", kRingCausalPlain);
  for (int64_t R : {1, 2, 3, 4}) {
    const int64_t C = 111, B = 2, H = 2, D = 4;
    auto c = testing::compile(file, R, {{"S", R * C}});
    check_whole_sequence(fmt::format("plain R={}", R), c->checked[0], R, 1, B, H, C, D,
                         [](int64_t r, int64_t) { return r; });
  }
}

// One attention placed with q_start and k_start anywhere: key j visible to query i when
// KS + j <= QS + i. Offsets that cut the tiles at odd places, and past either end.
const char* kOffset = R"(
schedule offset {
  param SQ = 300, SK = 200, D = 8, QS = 1, KS = 1
  input  Q : bf16[2, SQ, D]
  input  K : bf16[2, SK, D]
  input  V : bf16[2, SK, D]
  output O : bf16[2, SQ, D]
  compute att = attention(Q, K, V -> O, causal = 1, q_start = QS, k_start = KS) tile(64)
}
)";

TEST_CASE("causal attention with q_start and k_start: the mask moves, blind queries get zeros") {
  const auto file = std::make_shared<dsl::SourceFile>("offset.mks", kOffset);
  struct Case {
    int64_t qs, ks;
  };
  for (const Case& k : {Case{1, 1}, Case{38, 1}, Case{1, 38}, Case{1, 250}, Case{1, 400},
                        Case{500, 1}, Case{130, 7}}) {
    const std::string label = fmt::format("q_start={} k_start={}", k.qs, k.ks);
    auto c = testing::compile(file, 1, {{"QS", k.qs}, {"KS", k.ks}});
    const compiler::CheckedSchedule& s = c->checked[0];
    PassOptions po;
    po.sms = 6;
    const Plan plan = build_plan(s, po);
    InterpretOptions io;
    io.launches = 1;
    io.inputs = random_inputs(plan, 3);
    const InterpretResult res = interpret_and_compare(s, plan, io, label);
    // Directly: row i of slice l sees keys j <= i + qs - ks; none: zeros.
    const RankData& data = res.snapshots[0][0];
    const int tq = tensor_index(s, "Q"), tk = tensor_index(s, "K"), tv = tensor_index(s, "V"),
              to = tensor_index(s, "O");
    const int64_t SQ = 300, SK = 200, D = 8;
    double num = 0, den = 0;
    int64_t blind = 0;
    for (int64_t l = 0; l < 2; ++l) {
      for (int64_t i = 0; i < SQ; ++i) {
        const int64_t last = std::min<int64_t>(SK - 1, i + k.qs - k.ks);
        std::vector<double> out(D, 0);
        if (last >= 0) {
          std::vector<double> sc(last + 1);
          double mx = -std::numeric_limits<double>::infinity(), sum = 0;
          for (int64_t j = 0; j <= last; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += data[tq][(l * SQ + i) * D + d] * data[tk][(l * SK + j) * D + d];
            sc[j] = dot / std::sqrt(static_cast<double>(D));
            mx = std::max(mx, sc[j]);
          }
          for (int64_t j = 0; j <= last; ++j) {
            const double p = std::exp(sc[j] - mx);
            sum += p;
            for (int64_t d = 0; d < D; ++d) out[d] += p * data[tv][(l * SK + j) * D + d];
          }
          for (double& x : out) x /= sum;
        } else {
          ++blind;
        }
        for (int64_t d = 0; d < D; ++d) {
          const double got = data[to][(l * SQ + i) * D + d];
          num += (got - out[d]) * (got - out[d]);
          den += out[d] * out[d];
          if (last < 0) CHECK_MESSAGE(got == 0.0, label << " row " << i << " sees no key");
        }
      }
    }
    const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    CHECK_MESSAGE(err <= 1e-9, label << ": rel. L2 " << err);
    MESSAGE(label << ": " << blind << " rows of 600 see no key, rel. L2 " << err);
    // The tiles of a slice that sees nothing still exist (they write O), and the plan's offsets
    // are clamped to what changes the mask.
    for (const Task& t : plan.tasks) {
      if (t.kind != TaskKind::kAttentionTile) continue;
      const abi::AttentionTileArgs a = args_as<abi::AttentionTileArgs>(t);
      CHECK(a.causal_offset == std::clamp<int64_t>(k.qs - k.ks, -SQ, SK));
    }
  }
}

// The order the lowering gives attention tiles, which the scheduler's least-loaded placement
// follows (lower_compute.cc, kAttentionL2Bytes): causal tiles dearest first within groups of
// slices whose K and V take at most 16 MB (at head dim 128 and 8,192 keys, 4 MB a slice: groups
// of four), each group's slices interleaved from their last query tile down; without a mask,
// slice after slice, first tile first.
TEST_CASE("attention tiles: causal ones dearest first in groups of slices that fit L2") {
  const char* text = R"(
schedule attn {
  param H = 8, S = 8192, MASK = 2
  input  Q : bf16[1, H, S, 128]
  input  K : bf16[1, H, S, 128]
  input  V : bf16[1, H, S, 128]
  output O : bf16[1, H, S, 128]
  compute att = attention(Q, K, V -> O, causal = MASK - 1) tile(128)
}
)";
  const auto file = std::make_shared<dsl::SourceFile>("attn.mks", text);
  for (const int64_t causal : {1, 0}) {
    CAPTURE(causal);
    auto c = testing::compile(file, 1, {{"MASK", causal + 1}});
    const Plan plan = build_plan(c->checked[0], PassOptions{});
    std::vector<std::pair<int64_t, int64_t>> got;  // (slice, query tile) in the plan's order
    std::vector<const Task*> tiles;
    for (const Task& t : plan.tasks)
      if (t.kind == TaskKind::kAttentionTile) tiles.push_back(&t);
    std::sort(tiles.begin(), tiles.end(),
              [](const Task* a, const Task* b) { return a->order < b->order; });
    for (const Task* t : tiles) {
      const auto a = args_as<abi::AttentionTileArgs>(*t);
      got.emplace_back(a.l, a.q0 / 128);
    }
    std::vector<std::pair<int64_t, int64_t>> want;
    if (causal) {
      for (int64_t g0 = 0; g0 < 8; g0 += 4)
        for (int64_t k = 63; k >= 0; --k)
          for (int64_t l = g0; l < g0 + 4; ++l) want.emplace_back(l, k);
    } else {
      for (int64_t l = 0; l < 8; ++l)
        for (int64_t k = 0; k < 64; ++k) want.emplace_back(l, k);
    }
    CHECK(got == want);
  }
}

}  // namespace
}  // namespace mkc::plan
