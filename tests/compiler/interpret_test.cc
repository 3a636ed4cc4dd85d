// Every sample, lowered to a plan and executed by the CPU interpreter at world sizes 1, 2, 4 and 8,
// matches the direct reference on random data, over two launches (ranks skewed freely, so epochs,
// credits and launch fences are exercised) and several interleavings. Also: a wait cycle is
// rejected before code generation, and a plan that cannot finish is reported as a deadlock.
#include "compiler/oracle/interpret.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "compiler/oracle/reference.h"
#include "compiler/passes/passes.h"
#include "compiler/sema/check.h"
#include "dsl/parser.h"
#include "support/error.h"
#include "support/parallel.h"
#include "tests/compiler/plan_testing.h"

namespace mkc::plan {
namespace {

// Small sizes for each sample (defaults are production shapes).
const std::map<std::string, std::map<std::string, int64_t>> kSmall = {
    {"allreduce", {{"N", 2 * 65536}}},
    {"allgather", {{"M", 1024}, {"K", 6}}},
    {"reducescatter", {{"M", 1024}, {"N", 6}}},
    {"alltoall", {{"T", 12}, {"H", 8}, {"K", 2}}},
    {"gemm", {{"M", 96}, {"N", 80}, {"K", 24}}},
    {"gemm_allreduce", {{"M", 256}, {"N", 256}, {"K", 8}}},
    {"allgather_gemm", {{"M", 1024}, {"N", 48}, {"K", 8}}},
    {"gemm_reducescatter", {{"M", 1024}, {"N", 40}, {"K", 8}}},
    {"moe_dispatch_gemm", {{"T", 6}, {"H", 16}, {"F", 16}, {"E", 8}, {"TOPK", 2}}},
    {"moe_ffn_combine", {{"T", 6}, {"H", 16}, {"F", 16}, {"E", 8}, {"TOPK", 2}}},
    {"ring_attention", {{"B", 1}, {"H", 1}, {"S", 1024}, {"D", 4}}},
    {"ring_attention_causal", {{"B", 2}, {"H", 1}, {"S", 1024}, {"D", 4}}},
};

using testing::compare;
using testing::host_fns;
using testing::interpret_seeds;

struct Compiled {
  dsl::Module module;
  std::vector<compiler::CheckedSchedule> checked;
};

Compiled compile(const std::string& path, int64_t ranks) {
  Compiled c;
  dsl::Diagnostics diags;
  c.module = dsl::parse(dsl::SourceFile::read(path), diags);
  compiler::CheckOptions opts;
  opts.ranks = {ranks};
  const std::string name = path.substr(path.rfind('/') + 1, path.size() - path.rfind('/') - 5);
  opts.defines = kSmall.at(name);
  if (!diags.has_errors()) c.checked = compiler::check(c.module, opts, diags);
  REQUIRE_MESSAGE(!diags.has_errors(), dsl::render_text(diags.all(), false));
  return c;
}

void run_sample(const std::string& name) {
  for (int64_t R : {1, 2, 4, 8}) {
    Compiled c = compile("samples/" + name + ".mks", R);
    const compiler::CheckedSchedule& s = c.checked[0];
    PassOptions po;
    po.sms = 6;  // few CTAs: long per-CTA lists, so a bad order would deadlock
    const Plan plan = build_plan(s, po);
    interpret_seeds(s, plan, {1u, 2u, 3u}, 2, host_fns(), fmt::format("{} R={}", name, R));
    MESSAGE(fmt::format("{} R={}: {}", name, R, summary(plan)));
  }
}

#define SAMPLE_CASE(name)                                 \
  TEST_CASE("interpreter matches the reference: " name) { \
    run_sample(name);                                     \
  }
SAMPLE_CASE("allreduce")
SAMPLE_CASE("allgather")
SAMPLE_CASE("reducescatter")
SAMPLE_CASE("alltoall")
SAMPLE_CASE("gemm")
SAMPLE_CASE("gemm_allreduce")
SAMPLE_CASE("allgather_gemm")
SAMPLE_CASE("gemm_reducescatter")
SAMPLE_CASE("moe_dispatch_gemm")
SAMPLE_CASE("moe_ffn_combine")
SAMPLE_CASE("ring_attention")
SAMPLE_CASE("ring_attention_causal")

// A GEMM sample at M x N x K on R ranks, checked and planned for 12 SMs.
struct GemmSample {
  std::vector<compiler::CheckedSchedule> checked;
  Plan plan;
};
std::unique_ptr<GemmSample> gemm_sample(const std::string& sample, int64_t M, int64_t N, int64_t K,
                                        int64_t R) {
  auto out = std::make_unique<GemmSample>();
  dsl::Diagnostics diags;
  const dsl::Module module = dsl::parse(dsl::SourceFile::read("samples/" + sample + ".mks"), diags);
  compiler::CheckOptions opts;
  opts.ranks = {R};
  opts.defines = {{"M", M}, {"N", N}, {"K", K}};
  if (!diags.has_errors()) out->checked = compiler::check(module, opts, diags);
  REQUIRE_MESSAGE(!diags.has_errors(), dsl::render_text(diags.all(), false));
  PassOptions po;
  po.sms = 12;
  out->plan = build_plan(out->checked[0], po);
  return out;
}

// Split-K (compiler/passes/lower_compute.cc): a skinny GEMM whose tiles leave most compute CTAs
// idle is cut into K parts, each a task that stores its sums and takes a ticket; the tile's last
// part writes C (templates/mkc/split_k.cuh). No reduce tasks, no part waits for another; the sum
// matches the reference over launches (the tickets only grow), alone and fused with an all-reduce
// whose chunks wait for every part, at odd world sizes and a K no part size divides.
TEST_CASE("split-K: skinny GEMMs sum their K parts, alone and under an all-reduce") {
  struct Case {
    std::string sample;
    int64_t M, N, K, R, parts;
  };
  for (const Case& k :
       {Case{"gemm", 48, 384, 2112, 1, 2}, Case{"gemm", 130, 200, 4160, 1, 2},
        Case{"gemm_allreduce", 40, 512, 3136, 3, 2}, Case{"gemm_allreduce", 1, 256, 2048, 2, 2}}) {
    const auto g = gemm_sample(k.sample, k.M, k.N, k.K, k.R);
    const std::vector<compiler::CheckedSchedule>& checked = g->checked;
    const Plan& plan = g->plan;
    const std::string what = fmt::format("{} M={} N={} K={} R={}", k.sample, k.M, k.N, k.K, k.R);
    // The plan says so, and holds the partial sums and the tickets (zero at load).
    bool said = false;
    for (const Decision& d : plan.decisions)
      said = said || d.reason.find(fmt::format("split-K: {} parts", k.parts)) != std::string::npos;
    CHECK_MESSAGE(said, what);
    int partials = -1;
    for (size_t b = 0; b < plan.buffers.size(); ++b)
      if (plan.buffers[b].name == "mm.partials") partials = static_cast<int>(b);
    REQUIRE_MESSAGE(partials >= 0, what);
    CHECK(plan.buffers[partials].shape == std::vector<int64_t>{k.parts, k.M, k.N});
    int tickets = -1;
    for (size_t b = 0; b < plan.buffers.size(); ++b)
      if (plan.buffers[b].name == "mm.tickets") tickets = static_cast<int>(b);
    REQUIRE_MESSAGE(tickets >= 0, what);
    CHECK(plan.buffers[tickets].zeroed);
    CHECK(!plan.buffers[partials].zeroed);
    int64_t covered = 0, tiles = 0;
    std::map<int64_t, int64_t> parts_of;  // tile -> parts seen
    for (const Task& t : plan.tasks) {
      if (t.rank != 0 || t.op < 0) continue;
      CHECK(t.kind != TaskKind::kReduceTile);
      if (t.kind != TaskKind::kGemmTile) continue;
      const abi::GemmTileArgs g = args_as<abi::GemmTileArgs>(t);
      CHECK(g.k0 % 64 == 0);
      CHECK(g.k0 < g.k1);
      CHECK(g.parts == k.parts);
      covered += (g.m1 - g.m0) * (g.n1 - g.n0) * (g.k1 - g.k0);
      tiles = std::max<int64_t>(tiles, g.tile + 1);
      ++parts_of[g.tile];
      // No part waits for another part of the GEMM: they share no events.
      for (const Wait& w : t.waits)
        CHECK(plan.events[w.event].name.find("mm.tile") == std::string::npos);
      // C's tile as a scatter write, and its own slice of the partials.
      REQUIRE(t.writes.size() == 2u);
      CHECK(t.writes[0].scatter);
      CHECK(t.writes[1].buffer == partials);
      CHECK(t.writes[1].lo.at(0) == g.part);
    }
    CHECK(plan.buffers[tickets].shape == std::vector<int64_t>{2 * tiles});
    for (const auto& [tile, n] : parts_of) CHECK(n == k.parts);
    CHECK_MESSAGE(covered == k.M * k.N * k.K, what);  // every (m, n, k) once
    interpret_seeds(checked[0], plan, {1u, 2u}, 2, host_fns(), what);
  }
}

// Staging (compiler/passes/lower.h, GemmStaging): a 16-bit operand whose rows TMA cannot load
// (not a multiple of 16 bytes) is copied first into a zeroed buffer of padded rows, and the tiles
// read that: A in the tiles' row blocks, in the order the tiles take them (rows_from's arriving
// chunks too), B in blocks of rows. The sums match the reference over launches, alone, split over
// K, after an all-gather and under an all-reduce, at odd world sizes; no pairs where tiles wait.
TEST_CASE("staging: GEMM operands with rows TMA cannot load are copied to padded rows first") {
  struct Case {
    std::string sample;
    int64_t M, N, K, R;
    bool a, b;  // staged
  };
  for (const Case& k :
       {Case{"gemm", 96, 70, 24, 1, false, true}, Case{"gemm", 300, 80, 25, 1, true, false},
        Case{"gemm", 130, 70, 2100, 1, true, true},
        Case{"allgather_gemm", 768, 48, 10, 3, true, false},
        Case{"gemm_allreduce", 256, 36, 9, 3, true, true}}) {
    const auto g = gemm_sample(k.sample, k.M, k.N, k.K, k.R);
    const std::vector<compiler::CheckedSchedule>& checked = g->checked;
    const Plan& plan = g->plan;
    const std::string what = fmt::format("{} M={} N={} K={} R={}", k.sample, k.M, k.N, k.K, k.R);
    INFO(what);
    const Decision& d = plan.decisions.at(k.sample == "allgather_gemm" ? 1 : 0);
    CHECK((d.reason.find("A staged") != std::string::npos) == k.a);
    CHECK((d.reason.find("B staged") != std::string::npos) == k.b);
    const auto buffer = [&](const std::string& name) {
      for (size_t b = 0; b < plan.buffers.size(); ++b)
        if (plan.buffers[b].name == name) return static_cast<int>(b);
      return -1;
    };
    const int a_staged = buffer("mm.a_staged"), b_staged = buffer("mm.b_staged");
    REQUIRE((a_staged >= 0) == k.a);
    REQUIRE((b_staged >= 0) == k.b);
    const auto padded = [](int64_t n) { return (n + 63) / 64 * 64; };
    if (k.a) {
      CHECK(plan.buffers[a_staged].shape == std::vector<int64_t>{k.M, padded(k.K)});
      CHECK(plan.buffers[a_staged].zeroed);
    }
    if (k.b) {
      CHECK(plan.buffers[b_staged].shape == std::vector<int64_t>{k.K, padded(k.N)});
      CHECK(plan.buffers[b_staged].zeroed);
    }
    // Rank 0's copies cover each staged operand's rows once; every tile reads the staged ones.
    std::map<int, int64_t> copied;  // staged buffer -> rows
    for (const Task& t : plan.tasks) {
      if (t.rank != 0 || t.op < 0) continue;
      if (t.label.rfind("mm.stage_", 0) == 0) {
        CHECK(t.kind == TaskKind::kCopy);
        REQUIRE(t.writes.size() == 1u);
        copied[t.writes[0].buffer] += t.writes[0].hi[0] - t.writes[0].lo[0];
      } else if (t.kind == TaskKind::kGemmTile) {
        CHECK((t.reads.at(0).buffer == a_staged) == k.a);
        CHECK((t.reads.at(1).buffer == b_staged) == k.b);
        CHECK(args_as<abi::GemmTileArgs>(t).cluster == 0);
      }
    }
    if (k.a) CHECK(copied[a_staged] == k.M);
    if (k.b) CHECK(copied[b_staged] == k.K);
    CHECK(copied.size() == static_cast<size_t>(k.a + k.b));
    interpret_seeds(checked[0], plan, {1u, 2u, 3u}, 2, host_fns(), what);
  }
}

// A split GEMM with a bias and an epilogue function: the tile's last part applies them to the
// whole sum (before the fused split, a GEMM with either was never split). Three launches with
// fresh inputs: the tickets keep counting and each launch's last part is the one that writes.
TEST_CASE("split-K: the last part applies the bias and the epilogue function to the sum") {
  dsl::Diagnostics diags;
  const dsl::Module m = dsl::parse(std::make_shared<dsl::SourceFile>("split_fn.mks", R"(
schedule split_fn {
  param M = 20, N = 300, K = 4200
  input  A : bf16[M, K]
  input  B : bf16[K, N]
  input  bias : f32[N]
  output C : f32[M, N]
  device soft(x: f32) -> f32 { return log1pf(expf(x)); }
  compute mm = gemm(A, B -> C, epilogue = soft, bias = bias) tile(64, 128, 64)
}
)"),
                                   diags);
  compiler::CheckOptions opts;
  opts.ranks = {1};
  const auto checked = compiler::check(m, opts, diags);
  REQUIRE_MESSAGE(!diags.has_errors(), dsl::render_text(diags.all(), false));
  PassOptions po;
  po.sms = 16;
  const Plan plan = build_plan(checked[0], po);
  int64_t parts = 0;
  for (const Task& t : plan.tasks)
    if (t.kind == TaskKind::kGemmTile) parts = args_as<abi::GemmTileArgs>(t).parts;
  CHECK(parts == 4);  // 3 tiles on 16 CTAs, K 4200: min(16 / 3, 4200 / 1024) parts
  const HostFns soft = {
      {"soft", [](const std::vector<double>& a) { return std::log1p(std::exp(a[0])); }}};
  interpret_seeds(checked[0], plan, {1u, 2u}, 3, soft, "split_fn");
}

// `after op` on an operation of many tasks: one counter per (operation, rank) that all its tasks
// signal, one wait per consumer (not one per producer), and the chain still matches the reference
// at every world size, over skewed launches.
TEST_CASE("a whole-operation dependency is one counting wait, and a chain of them is right") {
  for (int64_t R : {1, 2, 4, 8}) {
    dsl::Diagnostics diags;
    const dsl::Module m = dsl::parse(std::make_shared<dsl::SourceFile>("chain.mks", R"(
schedule chain {
  ranks R
  param N = 4096
  input X : f32[N] symmetric
  loop i in 0 .. 4 {
    comm ar = allreduce(X, sum) chunk(256) after ar[i - 1]
  }
}
)"),
                                     diags);
    compiler::CheckOptions opts;
    opts.ranks = {R};
    const auto checked = compiler::check(m, opts, diags);
    REQUIRE_MESSAGE(!diags.has_errors(), dsl::render_text(diags.all(), false));
    PassOptions po;
    po.sms = 6;
    const Plan plan = build_plan(checked[0], po);
    size_t waits = 0;
    int64_t widest = 0;
    for (const Task& t : plan.tasks) {
      waits += t.waits.size();
      for (const Wait& w : t.waits) widest = std::max(widest, w.count);
    }
    MESSAGE(fmt::format("R={}: {} tasks, {} waits, widest count {}", R, plan.tasks.size(), waits,
                        widest));
    CHECK(waits <= static_cast<size_t>(R + 2) * plan.tasks.size());
    if (R > 1) CHECK(widest > 1);
    interpret_seeds(checked[0], plan, {1u, 2u}, 2, {}, fmt::format("chain R={}", R));
  }
}

// The scheduler places a collective's chunk on one comm CTA index on every rank (so the ranks'
// CTAs meet on the same chunks), and spreads the work: with round robin, 66 CTAs and a two-shot
// all-reduce's period of 3 tasks per chunk gave every CTA one phase only.
TEST_CASE("schedule: a chunk's tasks share a CTA index across ranks; comm CTAs share the work") {
  for (int64_t R : {2, 4}) {
    dsl::Diagnostics diags;
    const dsl::Module m = dsl::parse(
        std::make_shared<dsl::SourceFile>("ar.mks",
                                          "schedule ar { ranks R\n input X : bf16[16777216] "
                                          "symmetric\n comm ar = allreduce(X, sum) }"),
        diags);
    compiler::CheckOptions opts;
    opts.ranks = {R};
    const auto checked = compiler::check(m, opts, diags);
    REQUIRE(checked.size() == 1);
    PassOptions po;
    po.sms = 66;
    const Plan p = build_plan(checked[0], po);
    REQUIRE(p.decisions.at(0).choice == "two_shot");
    std::map<int64_t, int> cta_of_group;
    int grouped = 0;
    for (const Task& t : p.tasks) {
      if (t.group < 0) continue;
      ++grouped;
      const auto [it, fresh] = cta_of_group.try_emplace(t.group, t.cta);
      CHECK_MESSAGE(it->second == t.cta, t.label << " on CTA " << t.cta << ", its chunk's other "
                                                 << "tasks on CTA " << it->second);
    }
    CHECK(grouped > 0);
    // Every rank's comm CTAs: bytes read and written per CTA, the busiest within 25% of the mean.
    for (int64_t r = 0; r < R; ++r) {
      std::vector<double> load;
      for (const std::vector<int>& list : p.cta_tasks[r]) {
        double bytes = 0;
        for (int t : list) {
          for (const std::vector<Box>* boxes : {&p.tasks[t].reads, &p.tasks[t].writes}) {
            for (const Box& x : *boxes) {
              double v = 2;  // bf16
              for (size_t d = 0; d < x.lo.size(); ++d) v *= static_cast<double>(x.hi[d] - x.lo[d]);
              bytes += v;
            }
          }
        }
        load.push_back(bytes);
      }
      double mean = 0, most = 0;
      for (double l : load) {
        mean += l / static_cast<double>(load.size());
        most = std::max(most, l);
      }
      CHECK_MESSAGE(most <= 1.25 * mean, "R=" << R << " rank " << r << ": the busiest CTA moves "
                                              << most / mean << "x the mean");
    }
  }
}

TEST_CASE("the selector: one-shot for small all-reduces, two-shot for large, and algo() wins") {
  for (const auto& [n, want] :
       std::vector<std::pair<int64_t, std::string>>{{1024, "one_shot"}, {1 << 20, "two_shot"}}) {
    dsl::Diagnostics diags;
    const dsl::Module m =
        dsl::parse(std::make_shared<dsl::SourceFile>(
                       "t.mks", fmt::format("schedule s {{ ranks R\n input X : bf16[{}] "
                                            "symmetric\n comm ar = allreduce(X, sum) }}",
                                            n)),
                   diags);
    compiler::CheckOptions opts;
    opts.ranks = {4};
    const auto checked = compiler::check(m, opts, diags);
    REQUIRE(checked.size() == 1);
    const Plan p = build_plan(checked[0], {});
    REQUIRE(p.decisions.size() == 1);
    CHECK(p.decisions[0].choice == want);
  }
}

// A plan whose tasks wait on each other across ranks is rejected, naming the cycle.
TEST_CASE("a hand-made plan with a cross-rank cycle is rejected before code generation") {
  Compiled c = compile("samples/allreduce.mks", 2);
  Plan p = build_plan(c.checked[0], {});
  // Make rank 0's first send wait for rank 1's reduction of the same chunk, which already waits
  // (through rank 0's reduction) for ... : find two tasks and wire them both ways.
  int a = -1, b = -1;
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    if (p.tasks[t].kind == TaskKind::kSend && p.tasks[t].rank == 0 && a < 0)
      a = static_cast<int>(t);
    if (p.tasks[t].kind == TaskKind::kReduceSlots && p.tasks[t].rank == 1 && b < 0)
      b = static_cast<int>(t);
  }
  REQUIRE(a >= 0);
  REQUIRE(b >= 0);
  const int ev_ab = p.add_event(0, "handmade.b_to_a");
  p.tasks[b].signals.push_back(Signal{ev_ab, HandOff::kPeerFlag});
  p.tasks[a].waits.push_back(Wait{ev_ab, 1, 0});
  const int ev_ba = p.add_event(1, "handmade.a_to_b");
  p.tasks[a].signals.push_back(Signal{ev_ba, HandOff::kPeerFlag});
  p.tasks[b].waits.push_back(Wait{ev_ba, 1, 0});
  try {
    schedule(p, {});
    FAIL("a cyclic plan was scheduled");
  } catch (const UserError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("wait cycle, a deadlock") != std::string::npos);
    CHECK(msg.find("(rank 0)") != std::string::npos);
    CHECK(msg.find("(rank 1)") != std::string::npos);
  }
}

TEST_CASE("a plan that cannot finish is reported as a deadlock with the waiting event") {
  Compiled c = compile("samples/allgather.mks", 2);
  Plan p = build_plan(c.checked[0], {});
  // Ask one task for two signals of an event that gets one per launch.
  for (Task& t : p.tasks) {
    if (!t.waits.empty()) {
      t.waits[0].count = 2;
      break;
    }
  }
  InterpretOptions io;
  io.inputs = random_inputs(p, 1);
  try {
    interpret(p, io);
    FAIL("the interpreter finished a plan that cannot finish");
  } catch (const UserError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("deadlocks") != std::string::npos);
    CHECK(msg.find("to reach 2, seen 1") != std::string::npos);
  }
}

TEST_CASE("random inputs: deterministic, in range, the whole range, new per rank and launch") {
  Compiled c;
  dsl::Diagnostics diags;
  c.module = dsl::parse(dsl::SourceFile::read("samples/alltoall.mks"), diags);
  compiler::CheckOptions opts;
  opts.ranks = {2};
  opts.defines = {{"T", 1024}, {"H", 64}, {"K", 2}};
  c.checked = compiler::check(c.module, opts, diags);
  REQUIRE_MESSAGE(!diags.has_errors(), dsl::render_text(diags.all(), false));
  const Plan p = build_plan(c.checked[0], {});
  const InputFn fill = random_inputs(p, 7);
  auto draw = [&](int rank, int launch) {
    RankData d(p.buffers.size());
    for (size_t b = 0; b < p.buffers.size(); ++b) d[b].assign(p.buffers[b].elements(), 0.0);
    fill(rank, launch, d);
    return d;
  };
  const RankData a = draw(0, 1), again = draw(0, 1), other_rank = draw(1, 1), next = draw(0, 2);
  CHECK(a == again);
  int floats = 0, routes = 0;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (p.buffers[b].origin != "input") continue;
    const std::vector<double>& v = a[b];
    REQUIRE(v.size() >= 2048);
    CHECK(v != other_rank[b]);
    CHECK(v != next[b]);
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    double mean = 0;
    for (double x : v) mean += x / static_cast<double>(v.size());
    if (compiler::dtype_is_float(p.buffers[b].dtype)) {
      ++floats;
      CHECK(*lo >= -1.0);
      CHECK(*hi < 1.0);
      CHECK(*lo < -0.99);  // the whole range is drawn
      CHECK(*hi > 0.99);
      CHECK(std::fabs(mean) < 0.05);
    } else {
      ++routes;  // alltoall's route: expert ids (one expert per rank in the sample)
      CHECK(*lo == 0);
      CHECK(*hi == 1);
      for (double x : v) REQUIRE(x == std::floor(x));
    }
  }
  CHECK(floats >= 1);
  CHECK(routes >= 1);
}

TEST_CASE("parallel_for covers every index once, whatever the size") {
  for (int64_t n :
       {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{3} << 20, (int64_t{5} << 20) + 3}) {
    std::vector<int> hits(static_cast<size_t>(n), 0);
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[i];
    });
    CHECK(std::count(hits.begin(), hits.end(), 1) == n);
    std::vector<int64_t> per(parallel_parts(n), 0);
    parallel_parts_for(n, [&](int64_t part, int64_t b, int64_t e) { per[part] += e - b; });
    int64_t total = 0;
    for (int64_t x : per) total += x;
    CHECK(total == n);
  }
}

}  // namespace
}  // namespace mkc::plan
