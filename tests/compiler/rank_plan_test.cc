// Per-rank planning's first stage (issue 35): the lowering of one rank alone (LowerOptions::ranks)
// makes exactly that rank's tasks of the whole world's lowering, field by field and in the same
// order, with the same buffers and decisions, for every sample at its small shape at R 1, 2, 4
// and 8 on one node and R 4 and 8 across nodes; and a rank's lowering costs what one rank does
// (its tasks at R 16 and 64 are those of R 16's rank, not the world's).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>

#include "compiler/passes/dependencies.h"
#include "compiler/passes/lower.h"
#include "compiler/passes/neighbours.h"
#include "compiler/passes/schedule.h"
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
    std::vector<const Task*> expected, got;
    for (const Task& t : whole.tasks) {
      if (t.rank == r) expected.push_back(&t);
    }
    for (const Task& t : mine.tasks) {
      if (t.rank == r) got.push_back(&t);
    }
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      const std::string d = difference(*got[i], *expected[i]);
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

// Calls fn(name, defines, ranks, per_node) for every sample at its small shape in every world of
// R 1, 2, 4 and 8 on one node and R 4 and 8 across two nodes.
template <typename F>
void for_every_sample_and_world(F&& fn) {
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
      fn(name, defines, w.ranks, w.per_node);
    }
  }
}

TEST_CASE("a rank lowered alone is its part of the world's lowering, every sample") {
  for_every_sample_and_world(check_ranks_alone);
}

TEST_CASE("a rank lowered alone: its own tasks only, at any world size; bad ranks refused") {
  const std::map<std::string, int64_t> shape = {{"B", 1}, {"H", 1}, {"S", 8192}, {"D", 16}};
  size_t at16 = 0;
  for (const int64_t ranks : {16, 64}) {
    const auto c = sample("ring_attention", ranks, shape, 8);
    LowerOptions o;
    o.ranks = {ranks - 1};
    const Plan mine = lower(c->checked.at(0), o);
    for (const Task& t : mine.tasks) CHECK((t.rank == ranks - 1 || t.op < 0));
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

// Rank x's neighbourhood in a lowered plan: x, the ranks whose tasks read or write x's memory,
// and the ranks x's tasks read or write.
std::set<int64_t> neighbourhood(const Plan& p, int64_t x) {
  std::set<int64_t> out = {x};
  for (const Task& t : p.tasks) {
    if (t.op < 0) continue;
    for (const std::vector<Box>* boxes : {&t.reads, &t.writes}) {
      for (const Box& b : *boxes) {
        if (b.rank == x) out.insert(t.rank);
        if (t.rank == x) out.insert(b.rank);
      }
    }
  }
  return out;
}

// A task's waits and signals by their events' names and slots, what the kernel's tables carry
// (the events' places in the plan's list differ between plans; their slots on their ranks must
// not).
std::string edges_text(const Plan& p, const Task& t) {
  std::vector<std::string> w, s;
  for (const Wait& x : t.waits) {
    const Event& e = p.events[x.event];
    w.push_back(fmt::format("{} slot {} x{} lag {}", e.name, e.slot, x.count, x.lag));
  }
  for (const Signal& x : t.signals) {
    const Event& e = p.events[x.event];
    s.push_back(
        fmt::format("{} slot {} of r{} ({})", e.name, e.slot, e.rank, handoff_name(x.handoff)));
  }
  std::sort(w.begin(), w.end());
  std::sort(s.begin(), s.end());
  return fmt::format("waits [{}] signals [{}]", fmt::join(w, ", "), fmt::join(s, ", "));
}

// The design fact per-rank planning builds on (docs/COMPILER.md, "Per-rank planning"): the
// dependency pass run on the ranks within two steps of a rank (a step: one rank's task reads or
// writes the other's memory), every launch fence and end kept, gives that rank's tasks the waits
// and signals the whole world's pass gives them, event for event (by name: the numbering is the
// plan's). One step is not enough: across nodes a hierarchical all-reduce's rank signals a
// counter whose producers include ranks two steps away. Ring attention's two steps are 5 ranks at
// any R; the collectives' and MoE's are the world (every rank writes every other).
TEST_CASE("a rank's dependencies from the ranks two steps away are the world's, every sample") {
  const auto shapes = mkc::testing::small_shapes();
  struct World {
    int64_t ranks, per_node;
  };
  for (const World w : {World{2, 0}, World{4, 0}, World{8, 0}, World{8, 4}}) {
    for (const auto& [name, defines] : shapes) {
      const auto c = sample(name, w.ranks, defines, w.per_node);
      const compiler::CheckedSchedule& s = c->checked.at(0);
      Plan whole = lower(s);
      derive_dependencies(whole);
      const std::vector<std::vector<int64_t>> near = neighbours(s);
      for (const int64_t r : {int64_t{0}, w.ranks / 2 + 1, w.ranks - 1}) {
        if (r >= w.ranks) continue;
        const std::string label =
            fmt::format("{} at {} ranks ({} per node), rank {}", name, w.ranks, w.per_node, r);
        CAPTURE(label);
        // Its neighbours' neighbours too: r signals counters of its neighbours, and a counter's
        // identity is the set of producers its consumers wait for, which are their neighbours.
        std::set<int64_t> ranks;
        for (const int64_t x : neighbourhood(whole, r)) {
          for (const int64_t y : neighbourhood(whole, x)) ranks.insert(y);
        }
        LowerOptions o;
        o.ranks.assign(ranks.begin(), ranks.end());
        // The same ranks from the schedule alone, what a process planning r would lower.
        CHECK(ranks_within(near, r, 2) == o.ranks);
        if (name.rfind("ring_attention", 0) == 0)
          CHECK(o.ranks.size() == std::min<size_t>(5, w.ranks));
        // Then without the other ranks' private compute (what `mkc compile --rank` lowers): the
        // counters they number for r's signals come first in their arrays (Event::slot).
        for (const bool alone_private : {false, true}) {
          CAPTURE(alone_private);
          if (alone_private) {
            o.private_ops = private_ops(s);
            o.own_rank = r;
          }
          Plan mine = lower(s, o);
          for (const Task& t : mine.tasks) {
            if (alone_private && t.op >= 0 && o.private_ops[t.op]) CHECK(t.rank == r);
          }
          derive_dependencies(mine);
          // Its counter array as the world's: what its heap holds (runtime/local_job_heap.cc).
          CHECK(mine.counters_of(r) == whole.counters_of(r));
          std::vector<const Task*> a, b;
          for (const Task& t : whole.tasks) {
            if (t.rank == r) a.push_back(&t);
          }
          for (const Task& t : mine.tasks) {
            if (t.rank == r) b.push_back(&t);
          }
          REQUIRE(a.size() == b.size());
          for (size_t i = 0; i < a.size(); ++i) {
            const std::string world = edges_text(whole, *a[i]), alone = edges_text(mine, *b[i]);
            CHECK_MESSAGE(world == alone,
                          a[i]->label << "\n  world: " << world << "\n  alone: " << alone);
            if (world != alone) break;
          }
        }
      }
    }
  }
}

// A peer's private compute (compute touching only its rank's memory, in buffers no other rank's
// task touches) is lowered on the planned rank alone: MoE's SwiGLU `act` (2048 tiles a rank at
// the defaults) and `fc2` are not lowered on the 63 peers of rank 0 at R 64, where `act` brought
// the plan past its size limit (issue 35). What crosses ranks (fc1 and fc3, reading the rows the
// all-to-all wrote) stays.
TEST_CASE("a rank's plan leaves out its peers' private compute") {
  const auto small =
      sample("moe_ffn_combine", 8, mkc::testing::small_shapes().at("moe_ffn_combine"));
  const compiler::CheckedSchedule& s8 = small->checked.at(0);
  const std::vector<char> priv = private_ops(s8);
  std::set<std::string> names;
  for (size_t i = 0; i < s8.ops.size(); ++i) {
    if (priv[i]) names.insert(s8.ops[i].name);
  }
  // fc2 reads its rank's counts, which the rank's own dispatch task fills from what its peers
  // sent: its workers wait on their own rank only.
  CHECK_MESSAGE(names == (std::set<std::string>{"act", "fc2"}),
                fmt::format("{}", fmt::join(names, ", ")));
  // Ring attention has none: every attention step reads the K and V blocks a peer sent.
  const auto ring = sample("ring_attention", 4, mkc::testing::small_shapes().at("ring_attention"));
  for (const char p : private_ops(ring->checked.at(0))) CHECK(p == 0);
  const auto c = sample("moe_ffn_combine", 64, {}, 8);
  const compiler::CheckedSchedule& s = c->checked.at(0);
  LowerOptions o;
  o.ranks = ranks_within(neighbours(s), 0, 2);
  CHECK(o.ranks.size() == 64);
  // Every rank's tasks: past the plan's limit of views and boxes.
  CHECK_THROWS_AS(lower(s, o), UserError);
  o.private_ops = private_ops(s);
  o.own_rank = 0;
  const Plan mine = lower(s, o);
  int64_t act_mine = 0, act_peers = 0;
  for (const Task& t : mine.tasks) {
    if (t.op >= 0 && s.ops[t.op].name == "act") ++(t.rank == 0 ? act_mine : act_peers);
  }
  CHECK(act_mine > 0);
  CHECK(act_peers == 0);
  MESSAGE("moe_ffn_combine, rank 0 of 64 without its peers' private compute: " << mine.tasks.size()
                                                                               << " tasks");
}

// The neighbour relation from the schedule (neighbours.h, a footprint lowering: one task per
// compute operation and rank, communication in at most R chunks) is the relation the whole world's
// plan spells: for every sample, world and rank, the same ranks.
TEST_CASE("a schedule's neighbour relation is its whole plan's, every sample") {
  for_every_sample_and_world([](const std::string& name,
                                const std::map<std::string, int64_t>& defines, int64_t ranks,
                                int64_t per_node) {
    const auto c = sample(name, ranks, defines, per_node);
    const compiler::CheckedSchedule& s = c->checked.at(0);
    const Plan whole = lower(s);
    const std::vector<std::vector<int64_t>> n = neighbours(s);
    REQUIRE(n.size() == static_cast<size_t>(ranks));
    for (int64_t x = 0; x < ranks; ++x) {
      std::set<int64_t> expected = neighbourhood(whole, x);
      expected.erase(x);
      const std::set<int64_t> got(n[x].begin(), n[x].end());
      CHECK_MESSAGE(got == expected,
                    "rank " << x << ": footprint {" << fmt::format("{}", fmt::join(got, ", "))
                            << "}, plan {" << fmt::format("{}", fmt::join(expected, ", ")) << "}");
    }
  });
  // Ring attention's relation at R 64 (2 steps: 5 ranks), where the world's plan is past its
  // limit: the footprint costs the operations, not the tasks.
  const auto c = sample("ring_attention", 64, {{"B", 1}, {"H", 1}, {"S", 8192}, {"D", 16}}, 8);
  const auto start = std::chrono::steady_clock::now();
  const auto n = neighbours(c->checked.at(0));
  MESSAGE(
      "ring attention's neighbours at R 64: "
      << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()
      << " ms");
  for (const int64_t r : {int64_t{0}, int64_t{31}, int64_t{63}}) {
    CAPTURE(r);
    CHECK(n[r].size() == 2);
    CHECK(ranks_within(n, r, 2).size() == 5);
  }
  // What a process planning rank 31 would lower and derive, at the small shape and at the
  // sample's defaults (where the world's plan is past its limit): its 5 ranks' tasks.
  const auto defaults = sample("ring_attention", 64, {}, 8);
  for (const auto* s : {&c->checked.at(0), &defaults->checked.at(0)}) {
    const auto planned = std::chrono::steady_clock::now();
    LowerOptions o;
    o.ranks = ranks_within(neighbours(*s), 31, 2);
    CHECK(o.ranks.size() == 5);
    Plan mine = lower(*s, o);
    derive_dependencies(mine);
    MESSAGE("rank 31 of 64: its neighbours, then lowering and dependencies of its 5 ranks, "
            << mine.tasks.size() << " tasks: "
            << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - planned)
                   .count()
            << " ms");
  }
}

// Scheduling a rank's neighbourhood (the ranks within two steps, from the schedule) gives that
// rank the world's CTA lists, task for task by label, and the world's roles.
TEST_CASE("a rank's CTA lists from its neighbourhood are the world's, every sample") {
  for_every_sample_and_world([](const std::string& name,
                                const std::map<std::string, int64_t>& defines, int64_t ranks,
                                int64_t per_node) {
    const auto c = sample(name, ranks, defines, per_node);
    const compiler::CheckedSchedule& s = c->checked.at(0);
    ScheduleOptions so;
    Plan whole = lower(s);
    derive_dependencies(whole);
    schedule(whole, so);
    const std::vector<std::vector<int64_t>> near = neighbours(s);
    for (const int64_t r : {int64_t{0}, ranks / 2 + 1, ranks - 1}) {
      if (r >= ranks) continue;
      CAPTURE(r);
      LowerOptions o;
      o.ranks = ranks_within(near, r, 2);
      Plan mine = lower(s, o);
      derive_dependencies(mine);
      schedule(mine, so);
      REQUIRE(mine.roles.size() == whole.roles.size());
      for (size_t k = 0; k < whole.roles.size(); ++k)
        CHECK(mine.roles[k].count == whole.roles[k].count);
      REQUIRE(mine.cta_tasks[r].size() == whole.cta_tasks[r].size());
      for (size_t cta = 0; cta < whole.cta_tasks[r].size(); ++cta) {
        std::vector<std::string> a, b;
        for (int t : whole.cta_tasks[r][cta]) a.push_back(whole.tasks[t].label);
        for (int t : mine.cta_tasks[r][cta]) b.push_back(mine.tasks[t].label);
        CHECK_MESSAGE(a == b,
                      "CTA " << cta << ": world " << a.size() << " tasks, alone " << b.size());
        if (a != b) return;
      }
    }
  });
}

}  // namespace
}  // namespace mkc::plan
