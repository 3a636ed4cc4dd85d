// Shape sweeps on the CPU interpreter: every sample at small, odd and non-divisible sizes (the
// last GEMM tile and the last chunk along a dimension partial), batch >= 2 where there is one, at
// R = 1, 2, 3, 4 and 8, planned with the verifier after every pass (on in test builds) and
// executed over two launches and two interleavings against the reference. The ring-attention race
// lived at batch 2 and 3+ ranks, where no test looked; these sweeps look everywhere the samples
// can go.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <functional>

#include "compiler/oracle/verifier.h"
#include "tests/compiler/plan_testing.h"

namespace mkc::plan {
namespace {

using Defines = std::map<std::string, int64_t>;
// The sizes of one case, given the world size (dimensions a shape divides by R scale with it).
using Case = std::function<Defines(int64_t R)>;

// World sizes and ranks per node (0: one node): one node at R = 1, 2, 3, 4 and 8, then several
// nodes, where every edge between them goes through the proxies (the interpreter delivers their
// messages late and out of order between channels).
constexpr std::pair<int64_t, int64_t> kWorlds[] = {{1, 0}, {2, 0}, {3, 0}, {4, 0}, {8, 0},
                                                   {2, 1}, {4, 2}, {8, 2}, {8, 4}};

void sweep(const std::string& name, const std::vector<Case>& cases) {
  for (const auto& [R, per_node] : kWorlds) {
    for (size_t k = 0; k < cases.size(); ++k) {
      const Defines d = cases[k](R);
      std::string label = fmt::format("{} R={}", name, R);
      if (per_node > 0) label += fmt::format(" per_node={}", per_node);
      for (const auto& [n, v] : d) label += fmt::format(" {}={}", n, v);
      INFO(label);
      auto c = testing::sample(name, R, d, per_node);
      const compiler::CheckedSchedule& s = c->checked[0];
      PassOptions po;
      po.verify = true;
      po.file = c->file.get();
      // Few CTAs (long per-CTA lists: a bad order deadlocks) and many, alternately.
      po.sms = k % 2 == 0 ? 6 : 132;
      const Plan plan = build_plan(s, po);
      for (uint64_t seed : {1u, 2u}) {
        InterpretOptions io;
        io.launches = 2;
        io.seed = seed + 10 * k;
        io.fns = testing::host_fns();
        io.inputs = random_inputs(plan, seed + 100 * R);
        const InterpretResult res =
            testing::interpret_and_compare(s, plan, io, fmt::format("{} seed={}", label, seed));
        // Several nodes: edges between them went through the proxies, and some landed late
        // (every sample but the plain GEMM communicates).
        size_t proxied = 0;
        for (const Task& t : plan.tasks) {
          for (const Signal& sg : t.signals) proxied += sg.handoff == HandOff::kProxy;
        }
        CHECK((proxied > 0) == (per_node > 0 && per_node < R && name != "gemm"));
        CHECK((res.proxy_messages > 0) == (proxied > 0));
        if (proxied > 0) CHECK(res.proxy_late > 0);
      }
    }
  }
}

TEST_CASE("sweep: allreduce") {
  sweep("allreduce", {[](int64_t) {
                        return Defines{{"N", 65536}};
                      },
                      [](int64_t) {
                        return Defines{{"N", 3 * 65536}};
                      },
                      // chunk(65536) does not divide N: the last chunk is partial (1,000 elements),
                      // and a chunk larger than the tensor is one chunk.
                      [](int64_t) {
                        return Defines{{"N", 2 * 65536 + 1000}};
                      },
                      [](int64_t) {
                        return Defines{{"N", 1000}};
                      }});
}

TEST_CASE("sweep: allgather") {
  sweep("allgather", {[](int64_t R) {
                        return Defines{{"M", 128 * R}, {"K", 1}};
                      },
                      [](int64_t R) {
                        return Defines{{"M", 256 * R}, {"K", 3}};
                      },
                      // chunk(128, K) over 200 rows a rank: a partial last chunk of 72 rows.
                      [](int64_t R) {
                        return Defines{{"M", 200 * R}, {"K", 3}};
                      }});
}

TEST_CASE("sweep: reducescatter") {
  sweep("reducescatter", {[](int64_t R) {
                            return Defines{{"M", 128 * R}, {"N", 1}};
                          },
                          [](int64_t R) {
                            return Defines{{"M", 256 * R}, {"N", 5}};
                          },
                          // chunk(128, N) over a 200-row shard: the last chunk is partial.
                          [](int64_t R) {
                            return Defines{{"M", 200 * R}, {"N", 5}};
                          }});
}

TEST_CASE("sweep: alltoall") {
  sweep("alltoall", {[](int64_t) {
                       return Defines{{"T", 1}, {"H", 1}, {"K", 1}};
                     },
                     [](int64_t) {
                       return Defines{{"T", 5}, {"H", 8}, {"K", 3}};
                     },
                     [](int64_t) {
                       return Defines{{"T", 12}, {"H", 3}, {"K", 2}};
                     }});
}

TEST_CASE("sweep: gemm") {
  sweep("gemm", {[](int64_t) {
                   return Defines{{"M", 1}, {"N", 1}, {"K", 1}};
                 },
                 [](int64_t) {
                   return Defines{{"M", 5}, {"N", 7}, {"K", 3}};
                 },
                 [](int64_t) {
                   return Defines{{"M", 130}, {"N", 257}, {"K", 9}};
                 }});
}

TEST_CASE("sweep: gemm_allreduce") {
  sweep("gemm_allreduce", {[](int64_t) {
                             return Defines{{"M", 128}, {"N", 256}, {"K", 3}};
                           },
                           [](int64_t) {
                             return Defines{{"M", 256}, {"N", 512}, {"K", 1}};
                           },
                           // chunk(128, 256) divides neither dimension: partial last chunks in
                           // both, under partial GEMM tiles.
                           [](int64_t) {
                             return Defines{{"M", 200}, {"N", 300}, {"K", 3}};
                           }});
}

TEST_CASE("sweep: allgather_gemm") {
  sweep("allgather_gemm", {[](int64_t R) {
                             return Defines{{"M", 128 * R}, {"N", 7}, {"K", 5}};
                           },
                           [](int64_t R) {
                             return Defines{{"M", 256 * R}, {"N", 48}, {"K", 2}};
                           }});
}

TEST_CASE("sweep: gemm_reducescatter") {
  sweep("gemm_reducescatter", {[](int64_t R) {
                                 return Defines{{"M", 128 * R}, {"N", 3}, {"K", 5}};
                               },
                               [](int64_t R) {
                                 return Defines{{"M", 256 * R}, {"N", 40}, {"K", 1}};
                               }});
}

TEST_CASE("sweep: moe_dispatch_gemm") {
  sweep("moe_dispatch_gemm",
        {[](int64_t) {
           return Defines{{"T", 1}, {"H", 3}, {"F", 5}, {"E", 24}, {"TOPK", 1}};
         },
         [](int64_t) {
           return Defines{{"T", 7}, {"H", 16}, {"F", 5}, {"E", 24}, {"TOPK", 3}};
         }});
}

TEST_CASE("sweep: moe_ffn_combine") {
  sweep("moe_ffn_combine", {[](int64_t) {
                              return Defines{{"T", 1}, {"H", 3}, {"F", 5}, {"E", 24}, {"TOPK", 1}};
                            },
                            [](int64_t) {
                              return Defines{{"T", 7}, {"H", 16}, {"F", 5}, {"E", 24}, {"TOPK", 3}};
                            }});
}

TEST_CASE("sweep: ring_attention") {
  sweep("ring_attention", {[](int64_t R) {
                             return Defines{{"B", 2}, {"H", 1}, {"S", 128 * R}, {"D", 3}};
                           },
                           [](int64_t R) {
                             return Defines{{"B", 1}, {"H", 3}, {"S", 128 * R}, {"D", 8}};
                           },
                           [](int64_t R) {
                             return Defines{{"B", 3}, {"H", 2}, {"S", 256 * R}, {"D", 4}};
                           },
                           // chunk(128, D) over 200 keys a rank: the last chunk of each K,V block
                           // is partial, and the attention tiles wait for it.
                           [](int64_t R) {
                             return Defines{{"B", 2}, {"H", 1}, {"S", 200 * R}, {"D", 3}};
                           }});
}

// Partial last chunks on the paths the samples' sizes do not reach: a two-shot all-reduce (the
// chunk's owner is c mod R, so the partial chunk has one owner that reduces and broadcasts it), a
// 2-D chunk cutting both dimensions of an in-place one-shot all-reduce, a shift, and on several
// nodes the hierarchical all-reduce that algo(auto) picks there.
TEST_CASE("sweep: partial last chunks") {
  const auto file = std::make_shared<dsl::SourceFile>("chunks.mks", R"(
schedule chunks {
  ranks R
  param N = 4500, M = 37, W = 11
  input   X : f32[N] symmetric
  output  Y : f32[N] symmetric
  input   Z : f32[M, W] symmetric
  input   S : f32[M, W]
  output  T : f32[M, W] symmetric
  input   H : f32[M, W] symmetric
  comm two  = allreduce(X, sum -> Y) chunk(1000) algo(two_shot)
  comm one  = allreduce(Z, max) chunk(16, 4) algo(one_shot)
  comm sh   = shift(S -> T, by = 1) chunk(10, 7)
  comm hier = allreduce(H, sum) chunk(16, 4)
}
)");
  for (const auto& [R, per_node] : kWorlds) {
    for (const Defines& d :
         {Defines{{"N", 4500}, {"M", 37}, {"W", 11}}, Defines{{"N", 999}, {"M", 1}, {"W", 3}}}) {
      const std::string label = fmt::format("chunks R={} per_node={} N={}", R, per_node, d.at("N"));
      INFO(label);
      auto c = testing::compile(file, R, d, per_node);
      PassOptions po;
      po.verify = true;
      po.sms = 6;
      const Plan plan = build_plan(c->checked[0], po);
      for (uint64_t seed : {1u, 2u}) {
        InterpretOptions io;
        io.launches = 2;
        io.seed = seed;
        io.inputs = random_inputs(plan, seed + 100 * R);
        testing::interpret_and_compare(c->checked[0], plan, io,
                                       fmt::format("{} seed={}", label, seed));
      }
      bool hierarchical = false;
      for (const Decision& dec : plan.decisions) hierarchical |= dec.choice == "hierarchical";
      CHECK(hierarchical == (per_node > 1 && per_node < R));
    }
  }
}

// Reductions over each axis and elementwise maps, which no sample has: odd shapes, tiles that do
// not divide the rows.
TEST_CASE("sweep: reduce and map") {
  const auto file = std::make_shared<dsl::SourceFile>("rows.mks", R"(
schedule rows {
  ranks R
  param A = 5, B = 300, C = 7
  input  X  : f32[A, B, C]
  input  Z  : f32[A, B, C]
  output Y0 : f32[B, C]
  output Y1 : f32[A, C]
  output Y2 : f32[A, B]
  output W  : f32[A, B, C]
  device mix(a: f32, b: f32) -> f32 { return a * 0.5f - b; }
  compute r0 = reduce(X -> Y0, op = sum, axis = 0)
  compute r1 = reduce(X -> Y1, op = max, axis = 1)
  compute r2 = reduce(X -> Y2, op = min, axis = 2) tile(64)
  compute m  = map(mix, X, Z -> W) tile(2)
}
)");
  for (int64_t R : {1, 2, 3}) {
    for (const Defines& d :
         {Defines{{"A", 5}, {"B", 300}, {"C", 7}}, Defines{{"A", 1}, {"B", 1}, {"C", 1}},
          Defines{{"A", 3}, {"B", 4097}, {"C", 2}}}) {
      auto c = testing::compile(file, R, d);
      PassOptions po;
      po.verify = true;
      po.sms = 6;
      const Plan plan = build_plan(c->checked[0], po);
      InterpretOptions io;
      io.launches = 2;
      io.fns = {{"mix", [](const std::vector<double>& a) { return a[0] * 0.5 - a[1]; }}};
      io.inputs = random_inputs(plan, 3);
      testing::interpret_and_compare(c->checked[0], plan, io,
                                     fmt::format("rows R={} B={}", R, d.at("B")));
    }
  }
}

// The zigzag layout: S = 2 R C; chunks shorter than a tile, a partial last tile and a partial
// last K,V chunk, batch 2 and 3.
TEST_CASE("sweep: ring_attention_causal") {
  sweep("ring_attention_causal",
        {[](int64_t R) {
           return Defines{{"B", 2}, {"H", 1}, {"S", 2 * 40 * R}, {"D", 3}};
         },
         [](int64_t R) {
           return Defines{{"B", 3}, {"H", 2}, {"S", 2 * 133 * R}, {"D", 4}};
         }});
}

}  // namespace
}  // namespace mkc::plan
