// The plan's own functions: its streamed JSON (plan::write_json, what `mkc compile --emit plan`
// writes) is the tree's text byte for byte, for every sample (one node and two), and for a plan
// with no tasks; the pieces it hands over are bounded.
#include "compiler/plan/plan.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "compiler/passes/passes.h"
#include "dsl/ast_json.h"
#include "plan_testing.h"

namespace mkc::plan {
namespace {

struct Streamed {
  std::string text;
  size_t pieces = 0;
  size_t largest = 0;
};

Streamed stream(const Plan& p) {
  Streamed s;
  write_json(p, [&](std::string_view piece) {
    s.text += piece;
    s.pieces += 1;
    s.largest = std::max(s.largest, piece.size());
  });
  return s;
}

TEST_CASE("write_json: the tree's text, byte for byte, for every sample on one node and two") {
  const char* samples[] = {"allgather",
                           "allgather_gemm",
                           "allreduce",
                           "alltoall",
                           "gemm",
                           "gemm_allreduce",
                           "gemm_reducescatter",
                           "moe_dispatch_gemm",
                           "moe_ffn_combine",
                           "reducescatter",
                           "ring_attention",
                           "ring_attention_causal"};
  for (const char* name : samples) {
    for (int64_t per_node : {0, 2}) {
      CAPTURE(name);
      CAPTURE(per_node);
      // Small shapes where the sample has them (every sample checks at its defaults too).
      std::map<std::string, int64_t> defines;
      if (std::string(name).rfind("ring_attention", 0) == 0)
        defines = {{"B", 2}, {"H", 2}, {"S", 512}, {"D", 16}};
      auto c = testing::sample(name, 4, defines, per_node);
      PassOptions po;
      po.file = c->file.get();
      for (const compiler::CheckedSchedule& s : c->checked) {
        const Plan p = build_plan(s, po);
        REQUIRE(!p.tasks.empty());
        const Streamed got = stream(p);
        CHECK(got.text == dsl::dump_json(to_json(p)) + "\n");
        // Parsed back, it is the same plan (and valid JSON).
        CHECK(nlohmann::json::parse(got.text) == to_json(p));
      }
    }
  }
}

TEST_CASE("write_json: a plan without tasks, and one of many tasks in bounded pieces") {
  Plan empty;
  empty.schedule = "nothing";
  empty.buffers.push_back(Buffer{"x", compiler::DType::kBf16, {4, 8}, true, "input", 0});
  const Streamed none = stream(empty);
  CHECK(none.text == dsl::dump_json(to_json(empty)) + "\n");
  CHECK(none.text.find("\"tasks\": []") != std::string::npos);

  // A plan of some thousands of tasks: several pieces, none far over the megabyte the writer
  // collects before handing one over.
  auto c = testing::sample("gemm", 1, {});
  PassOptions po;
  po.file = c->file.get();
  const Plan p = build_plan(c->checked.at(0), po);
  const Streamed got = stream(p);
  CHECK(got.text == dsl::dump_json(to_json(p)) + "\n");
  if (got.text.size() > (3u << 20)) {
    CHECK(got.pieces > 1);
  }
  CHECK(got.largest < (1u << 20) + (64u << 10));
}

// A rank's plan (`mkc compile --rank R --emit plan`) writes R's tasks alone: the tree's tasks of
// rank R in their order, its head with "rank": R, on one node and two.
TEST_CASE("write_json: one rank's tasks, in the tree's order, with the rank in the head") {
  for (int64_t per_node : {0, 2}) {
    CAPTURE(per_node);
    auto c = testing::sample("gemm_allreduce", 4, {{"M", 512}, {"N", 1024}, {"K", 256}}, per_node);
    PassOptions po;
    po.file = c->file.get();
    const Plan p = build_plan(c->checked.at(0), po);
    const nlohmann::json whole = to_json(p);
    for (const int64_t rank : {0, 3}) {
      CAPTURE(rank);
      std::string text;
      write_json(
          p, [&](std::string_view piece) { text += piece; }, rank);
      const nlohmann::json got = nlohmann::json::parse(text);
      CHECK(got["rank"] == rank);
      nlohmann::json expected = whole;
      expected["rank"] = rank;
      expected["tasks"] = nlohmann::json::array();
      for (const auto& t : whole["tasks"]) {
        if (t["rank"] == rank) expected["tasks"].push_back(t);
      }
      REQUIRE(!expected["tasks"].empty());
      CHECK(expected["tasks"].size() < whole["tasks"].size());
      CHECK(got == expected);
      CHECK(text == dsl::dump_json(expected) + "\n");
    }
  }
}

}  // namespace
}  // namespace mkc::plan
