// The scheduler's rank-local rules (docs/RANK_PLANS.md, step 1 of issue 35): a task's order is its
// id wherever every wait goes from a lower id to a higher one (every sample), else the topological
// sort's; a comm group's CTA is the closed form of (operation, group) that gives the numbering the
// world's tasks met them in, and a rank's own tasks suffice to compute it; the 2-CTA pair rule is
// decided rank by rank.
#include "compiler/passes/schedule.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/kinds/kind.h"
#include "compiler/passes/passes.h"
#include "tests/compiler/plan_testing.h"
#include "tests/compiler/small_shapes.h"

namespace mkc::plan {
namespace {

using testing::sample;

// The worlds each sample is planned in: R 1, 2 and 4 on one node, 4 on two nodes.
const std::vector<std::pair<int64_t, int64_t>> kWorlds = {{1, 0}, {2, 0}, {4, 0}, {4, 2}};

Plan plan_of(const compiler::CheckedSchedule& s) {
  PassOptions o;
  o.verify = false;
  return build_plan(s, o);
}

// Runs `check` on the plan of every sample at its small shape in every world of kWorlds.
void each_sample_plan(const std::function<void(const Plan&, int64_t ranks)>& check) {
  for (const auto& [name, defines] : mkc::testing::samples_at_small_shapes()) {
    for (const auto& [ranks, per_node] : kWorlds) {
      CAPTURE(name);
      CAPTURE(ranks);
      CAPTURE(per_node);
      const auto c = sample(name, ranks, defines, per_node);
      check(plan_of(c->checked.at(0)), ranks);
    }
  }
}

// Every lag-0 wait's producers come before its consumer in `order`.
void check_topological(const Plan& p) {
  std::vector<std::vector<int>> producers(p.events.size());
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    for (const Signal& s : p.tasks[t].signals) producers[s.event].push_back(static_cast<int>(t));
  }
  for (const Task& t : p.tasks) {
    for (const Wait& w : t.waits) {
      if (w.lag != 0) continue;
      for (const int pr : producers[w.event])
        CHECK_MESSAGE(p.tasks[pr].order < t.order, p.tasks[pr].label << " -> " << t.label);
    }
  }
}

TEST_CASE("a task's order is its id in every sample, and the sort's after a wait on a later task") {
  each_sample_plan([](const Plan& p, int64_t) {
    for (size_t t = 0; t < p.tasks.size(); ++t) REQUIRE(p.tasks[t].order == static_cast<int>(t));
  });
  // A hand-made wait on a later task that waits for nothing (no cycle): the order is no longer
  // the ids', the sort puts the later task first, and every CTA list follows the order.
  const auto c = sample("allgather", 2, mkc::testing::small_shapes().at("allgather"));
  Plan p = plan_of(c->checked.at(0));
  int late = -1;
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    const bool free = std::none_of(p.tasks[t].waits.begin(), p.tasks[t].waits.end(),
                                   [](const Wait& w) { return w.lag == 0; });
    if (free && p.tasks[t].op >= 0) late = static_cast<int>(t);
  }
  REQUIRE(late > 1);
  int early = -1;
  for (int t = 0; t < late && early < 0; ++t) {
    if (p.tasks[t].op >= 0 && p.tasks[t].rank == p.tasks[late].rank) early = t;
  }
  REQUIRE(early >= 0);
  const int ev = p.add_event(p.tasks[early].rank, "handmade.late_to_early");
  p.tasks[late].signals.push_back(Signal{ev, HandOff::kLocal});
  p.tasks[early].waits.push_back(Wait{ev, 1, 0});
  schedule(p, {});
  CHECK(p.tasks[late].order < p.tasks[early].order);
  check_topological(p);
  for (const auto& lists : p.cta_tasks) {
    for (const auto& list : lists) {
      for (size_t i = 1; i < list.size(); ++i)
        CHECK(p.tasks[list[i - 1]].order < p.tasks[list[i]].order);
    }
  }
}

TEST_CASE("a comm group's CTA: the world's first-meeting numbering, from a rank's own tasks") {
  each_sample_plan([](const Plan& p, int64_t ranks) {
    const int64_t compute = p.roles.at(0).count, comm = p.roles.at(1).count;
    if (comm == 0) return;
    // The numbering the scheduler had: groups in the order the world's tasks (in `order`, here
    // the ids) first meet them.
    std::map<std::pair<int, int64_t>, int64_t> turn;
    // Per grouped operation, the groups the world has and those each rank's own tasks have.
    std::map<int, int64_t> world_groups;
    std::map<std::pair<int, int>, int64_t> rank_groups;
    for (const Task& t : p.tasks) {
      const kinds::Kind& kind = kinds::kind_of(t);
      if (t.group < 0 || kind.runs_anywhere() || !(kind.is_comm() || compute == 0)) continue;
      const int64_t k = turn.try_emplace({t.op, t.group}, turn.size()).first->second;
      CHECK_MESSAGE(t.cta == compute + (k + k / comm) % comm, t.label);
      world_groups[t.op] = std::max(world_groups[t.op], t.group + 1);
      auto& mine = rank_groups[{t.op, t.rank}];
      mine = std::max(mine, t.group + 1);
    }
    for (const auto& [op, groups] : world_groups) {
      for (int r = 0; r < ranks; ++r) CHECK(rank_groups[{op, r}] == groups);
    }
  });
}

// A rank's lists that break the pair rule unpair that rank's tiles only: the pairs of a 2-CTA
// cluster are on one GPU.
TEST_CASE("the 2-CTA pair rule is decided rank by rank") {
  const auto c = sample("gemm", 2, {{"M", 1024}, {"N", 1024}, {"K", 256}});
  PassOptions o;
  o.verify = false;
  auto tuned = std::make_shared<std::map<std::string, LowerOptions::Tuned>>();
  for (const compiler::OpInstance& op : c->checked.at(0).ops) {
    if (op.kind == compiler::OpKind::kGemm)
      (*tuned)[op.name] = LowerOptions::Tuned{{128, 128, 64}, 1, 2};
  }
  o.lower.tuned = tuned;
  Plan p = build_plan(c->checked.at(0), o);
  const auto halves = [&](int rank) {
    int n = 0;
    for (const Task& t : p.tasks) {
      if (t.rank == rank && kinds::kind_of(t).pair_half(t) >= 0) ++n;
    }
    return n;
  };
  REQUIRE(halves(0) > 0);
  REQUIRE(halves(1) == halves(0));
  // Rank 1's first pair half waits for its launch fence: against the rule.
  int fence = -1, half = -1;
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    if (p.tasks[t].rank != 1) continue;
    if (p.tasks[t].kind == TaskKind::kLaunchFence && fence < 0) fence = static_cast<int>(t);
    if (kinds::kind_of(p.tasks[t]).pair_half(p.tasks[t]) >= 0 && half < 0)
      half = static_cast<int>(t);
  }
  REQUIRE(fence >= 0);
  REQUIRE(half > fence);
  const int ev = p.add_event(1, "handmade.fence_to_half");
  p.tasks[fence].signals.push_back(Signal{ev, HandOff::kLocal});
  p.tasks[half].waits.push_back(Wait{ev, 1, 0});
  const size_t decisions = p.decisions.size();
  schedule(p, {});
  CHECK(halves(1) == 0);
  CHECK(halves(0) > 0);
  REQUIRE(p.decisions.size() == decisions + 1);
  CHECK(p.decisions.back().choice == "no 2-CTA clusters on some ranks");
  CHECK(p.decisions.back().reason.find("rank(s) 1 break the pair rule") != std::string::npos);
}

}  // namespace
}  // namespace mkc::plan
