// Per-rank planning's first stage (issue 35): the lowering of one rank alone (LowerOptions::ranks)
// makes exactly that rank's tasks of the whole world's lowering, field by field and in the same
// order, with the same buffers and decisions, for every sample at its small shape at R 1, 2, 4
// and 8 on one node and R 4 and 8 across nodes; and a rank's lowering costs what one rank does
// (its tasks at R 16 and 64 are those of R 16's rank, not the world's).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>
#include <string>

#include "compiler/passes/lower.h"
#include "tests/compiler/plan_testing.h"
#include "tests/compiler/small_shapes.h"

namespace mkc::plan {
namespace {

using testing::sample;

bool same_view(const View& a, const View& b) {
  return a.rank == b.rank && a.buffer == b.buffer && a.offset == b.offset && a.shape == b.shape;
}

bool same_box(const Box& a, const Box& b) {
  return a.rank == b.rank && a.buffer == b.buffer && a.lo == b.lo && a.hi == b.hi &&
         a.scatter == b.scatter;
}

template <typename T, typename Eq>
bool same_list(const std::vector<T>& a, const std::vector<T>& b, Eq eq) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!eq(a[i], b[i])) return false;
  }
  return true;
}

// What differs between two tasks, or "".
std::string difference(const Task& a, const Task& b) {
  if (a.op != b.op || a.rank != b.rank || a.kind != b.kind || a.label != b.label)
    return fmt::format("`{}` on rank {} against `{}` on rank {}", a.label, a.rank, b.label, b.rank);
  if (!same_list(a.views, b.views, same_view)) return a.label + ": views";
  if (a.args != b.args) return a.label + ": arguments";
  if (!same_list(a.reads, b.reads, same_box)) return a.label + ": reads";
  if (!same_list(a.writes, b.writes, same_box)) return a.label + ": writes";
  if (a.group != b.group) return a.label + ": group";
  return "";
}

void check_ranks_alone(const std::string& name, const std::map<std::string, int64_t>& defines,
                       int64_t ranks, int64_t per_node) {
  const auto c = sample(name, ranks, defines, per_node);
  const compiler::CheckedSchedule& s = c->checked.at(0);
  const Plan whole = lower(s);
  for (int64_t r = 0; r < ranks; ++r) {
    CAPTURE(r);
    LowerOptions o;
    o.ranks = {r};
    const Plan mine = lower(s, o);
    std::vector<const Task*> expected;
    for (const Task& t : whole.tasks) {
      if (t.rank == r) expected.push_back(&t);
    }
    REQUIRE(mine.tasks.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      const std::string d = difference(mine.tasks[i], *expected[i]);
      CHECK_MESSAGE(d.empty(), d);
      if (!d.empty()) return;
    }
    REQUIRE(mine.buffers.size() == whole.buffers.size());
    for (size_t b = 0; b < whole.buffers.size(); ++b) {
      CHECK(mine.buffers[b].name == whole.buffers[b].name);
      CHECK(mine.buffers[b].shape == whole.buffers[b].shape);
    }
    REQUIRE(mine.decisions.size() == whole.decisions.size());
    for (size_t k = 0; k < whole.decisions.size(); ++k)
      CHECK(mine.decisions[k].choice == whole.decisions[k].choice);
  }
}

TEST_CASE("a rank lowered alone is its part of the world's lowering, every sample") {
  const auto shapes = mkc::testing::small_shapes();
  REQUIRE(shapes.size() >= 12);
  struct World {
    int64_t ranks, per_node;
  };
  for (const World w :
       {World{1, 0}, World{2, 0}, World{4, 0}, World{8, 0}, World{4, 2}, World{8, 4}}) {
    for (const auto& [name, defines] : shapes) {
      const std::string label = fmt::format("{} at {} ranks, {} per node", name, w.ranks,
                                            w.per_node == 0 ? w.ranks : w.per_node);
      CAPTURE(label);
      check_ranks_alone(name, defines, w.ranks, w.per_node);
    }
  }
}

TEST_CASE("a rank lowered alone: its own tasks only, at any world size; bad ranks refused") {
  const std::map<std::string, int64_t> shape = {{"B", 1}, {"H", 1}, {"S", 8192}, {"D", 16}};
  size_t at16 = 0;
  for (const int64_t ranks : {16, 64}) {
    const auto c = sample("ring_attention", ranks, shape, 8);
    LowerOptions o;
    o.ranks = {ranks - 1};
    const Plan mine = lower(c->checked.at(0), o);
    for (const Task& t : mine.tasks) CHECK(t.rank == ranks - 1);
    // A ring step per rank, the block cut into chunks: a rank's tasks grow with R (one more step
    // each) but not as the world's do (R times that).
    if (ranks == 16) at16 = mine.tasks.size();
    CAPTURE(mine.tasks.size());
    CHECK(mine.tasks.size() > 0);
    if (ranks == 64) CHECK(mine.tasks.size() < 5 * at16);
  }
  const auto c = sample("gemm", 2, {{"M", 256}, {"N", 256}, {"K", 128}});
  LowerOptions o;
  o.ranks = {2};
  CHECK_THROWS_AS(lower(c->checked.at(0), o), InternalError);
}

}  // namespace
}  // namespace mkc::plan
