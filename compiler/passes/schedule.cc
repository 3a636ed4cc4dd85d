#include "compiler/passes/schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <queue>

#include "compiler/kinds/kind.h"
#include "support/error.h"

namespace mkc::plan {
namespace {

// Lists of tasks per event, flat: event e's are items[at[e] .. at[e + 1]). A vector per event
// was two allocations per event (signallers and waiters) and as many frees: 263,040 events for
// gemm_allreduce's rank 0 of 64, where freeing them was a tenth of the pass.
struct ByEvent {
  std::vector<size_t> at;
  std::vector<int> items;
  const int* begin(size_t e) const { return items.data() + at[e]; }
  const int* end(size_t e) const { return items.data() + at[e + 1]; }
  size_t size(size_t e) const { return at[e + 1] - at[e]; }
};

// The tasks that signal each event (several for a whole-operation counter), in task order.
ByEvent producers(const Plan& p) {
  ByEvent by_event;
  by_event.at.assign(p.events.size() + 1, 0);
  for (const Task& t : p.tasks) {
    for (const Signal& s : t.signals) ++by_event.at[s.event + 1];
  }
  for (size_t e = 0; e < p.events.size(); ++e) by_event.at[e + 1] += by_event.at[e];
  by_event.items.resize(by_event.at.back());
  std::vector<size_t> next(by_event.at.begin(), by_event.at.end() - 1);
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    for (const Signal& s : p.tasks[t].signals)
      by_event.items[next[s.event]++] = static_cast<int>(t);
  }
  return by_event;
}

[[noreturn]] void report_cycle(const Plan& p, const ByEvent& by_event,
                               const std::vector<int>& indeg) {
  // Walk back along waits among the tasks left over until a task repeats: that is a cycle.
  int start = -1;
  for (size_t t = 0; t < indeg.size(); ++t) {
    if (indeg[t] > 0) start = static_cast<int>(t);
  }
  std::vector<int> path;
  std::vector<int> pos(p.tasks.size(), -1);
  int v = start;
  while (pos[v] < 0) {
    pos[v] = static_cast<int>(path.size());
    path.push_back(v);
    int next = -1;
    for (const Wait& w : p.tasks[v].waits) {
      for (const int* pr = by_event.begin(w.event); pr != by_event.end(w.event); ++pr) {
        if (indeg[*pr] > 0 && w.lag == 0) next = *pr;
      }
    }
    if (next < 0) break;
    v = next;
  }
  std::string chain;
  for (size_t i = pos[v]; i < path.size(); ++i) {
    chain += fmt::format("{}{} (rank {})", i == static_cast<size_t>(pos[v]) ? "" : " waits for ",
                         p.tasks[path[i]].label, p.tasks[path[i]].rank);
  }
  chain += fmt::format(" waits for {} (rank {})", p.tasks[v].label, p.tasks[v].rank);
  throw UserError(fmt::format("plan `{}` has a wait cycle, a deadlock: {}", p.schedule, chain));
}

// What a task costs a CTA, for balancing the comm CTAs: the bytes of the boxes it reads and
// writes, plus a fixed 4 KiB for the wait and signal around it (so tasks that move nothing
// spread too).
int64_t task_cost(const Plan& p, const Task& t) {
  int64_t bytes = 4096;
  for (const std::vector<Box>* boxes : {&t.reads, &t.writes}) {
    for (const Box& b : *boxes) {
      int64_t v = 1;
      for (size_t d = 0; d < b.lo.size(); ++d) v *= b.hi[d] - b.lo[d];
      bytes += v * compiler::dtype_bytes(p.buffers[b.buffer].dtype);
    }
  }
  return bytes;
}

// The pair rule of 2-CTA clusters (kinds::Kind::pair_half; templates/mkc/gemm_sm90.cuh,
// load_stage_pair): the two halves of a pair run in step, each multicasting into the other's
// shared memory and releasing its ring's slots. So on CTAs 2c and 2c + 1 the pairs' halves come
// first (after bookkeeping that waits for nothing of its launch: a launch fence), in the same
// order: the i-th half on CTA 2c is half 0 of a pair whose half 1 is the i-th on CTA 2c + 1 (the
// rings of the two go through the same tiles, each pair's last tile is the last on both, and
// neither CTA waits for work the other has not reached); and no half waits for anything of its
// launch (no wait can hold one half back while the other waits for it). Why rank r's lists break
// the rule, or "": a pair's two CTAs are on one GPU, so the rule is a rank's own.
std::string pair_rule_broken(const Plan& p, size_t r) {
  const std::vector<std::vector<int>>& lists = p.cta_tasks[r];
  // Each CTA's pair halves, in its order.
  std::vector<std::vector<int>> halves(lists.size());
  for (size_t c = 0; c < lists.size(); ++c) {
    bool lead = true;    // only bookkeeping so far
    bool after = false;  // other work seen since
    for (const int ti : lists[c]) {
      const Task& t = p.tasks[ti];
      const kinds::Kind& kind = kinds::kind_of(t);
      const int half = kind.pair_half(t);
      if (half < 0) {
        const bool free =
            kind.bookkeeping() &&
            std::none_of(t.waits.begin(), t.waits.end(), [](const Wait& w) { return w.lag == 0; });
        if (!(lead && free)) after = true;
        continue;
      }
      lead = false;
      if (after) return fmt::format("{} (rank {}) comes after other work on CTA {}", t.label, r, c);
      if (static_cast<size_t>(half) != c % 2)
        return fmt::format("{} (rank {}), half {} of its pair, is on CTA {}", t.label, r, half, c);
      for (const Wait& w : t.waits) {
        if (w.lag == 0)
          return fmt::format("{} (rank {}) waits for `{}`", t.label, r, p.events[w.event].name);
      }
      halves[c].push_back(ti);
    }
  }
  for (size_t c = 0; c < lists.size(); c += 2) {
    const size_t n0 = halves[c].size(), n1 = c + 1 < lists.size() ? halves[c + 1].size() : 0;
    for (size_t i = 0; i < std::max(n0, n1); ++i) {
      if (i < n0 && i < n1 && halves[c + 1][i] == halves[c][i] + 1) continue;
      const int ti = i < n0 ? halves[c][i] : halves[c + 1][i];
      return fmt::format(
          "{} (rank {}) and the other half of its pair are not the {}th pair "
          "half of CTAs {} and {}",
          p.tasks[ti].label, r, i + 1, c, c + 1);
    }
  }
  return "";
}

// Whether every wait of this launch goes from a lower task id to a higher one: then the
// topological order below, which takes the lowest ready id first, is the id order itself (each
// task's producers all come before it), and a rank can know its tasks' order from their ids
// alone. Every sample's plan is such (tests/compiler/schedule_test.cc: R 1, 2, 4 and 2 x 4); a plan
// with a wait on a later task (one made by hand, or a cycle) is sorted instead, which keeps the
// order the sort always gave. Checks on the way that each wait counts its event's producers.
bool waits_go_forward(const Plan& p, const ByEvent& by_event) {
  bool forward = true;
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    for (const Wait& w : p.tasks[t].waits) {
      const size_t prs = by_event.size(w.event);
      // A plan of some ranks (LowerOptions::ranks) lacks the producers on the others: a wait on
      // them is left out of the order (the ranks the plan is exact for have none such).
      if (!p.lowered.empty() && static_cast<int64_t>(prs) < w.count) continue;
      if (static_cast<int64_t>(prs) != w.count)
        throw InternalError(
            fmt::format("event {} of task {} has {} producer(s), the wait counts {}",
                        p.events[w.event].name, p.tasks[t].label, prs, w.count));
      if (w.lag != 0 || prs == 0) continue;
      // Producers are listed in task order: the last is the highest.
      if (by_event.end(w.event)[-1] >= static_cast<int>(t)) forward = false;
    }
  }
  return forward;
}

// Sets each task's `order` by a topological sort over this launch's waits (lagged waits point at
// the previous launch), through the events: a task is ready when every event it waits for has all
// its signals, the lowest-numbered ready task first. An edge per (producer, consumer) pair was
// 10^7 edges and 3.5 GB for attention tiles of 7 rows, each waiting for its K,V block's 128
// chunks; per wait and per signal, the graph is as large as the plan. Throws on a cycle.
void sort_topologically(Plan& plan, const ByEvent& by_event) {
  const size_t n = plan.tasks.size();
  std::vector<int> indeg(n, 0);  // waits not yet satisfied
  std::vector<int64_t> remaining(plan.events.size());
  for (size_t e = 0; e < plan.events.size(); ++e)
    remaining[e] = static_cast<int64_t>(by_event.size(e));
  // The tasks that wait for each event within this launch, in task order (counted, then placed).
  // waits_go_forward has checked the counts.
  const auto counted = [&](const Wait& w) {
    const size_t prs = by_event.size(w.event);
    return static_cast<int64_t>(prs) == w.count && w.lag == 0 && prs != 0;
  };
  ByEvent waiters;
  waiters.at.assign(plan.events.size() + 1, 0);
  for (size_t t = 0; t < n; ++t) {
    for (const Wait& w : plan.tasks[t].waits) {
      if (!counted(w)) continue;
      ++indeg[t];
      ++waiters.at[w.event + 1];
    }
  }
  for (size_t e = 0; e < plan.events.size(); ++e) waiters.at[e + 1] += waiters.at[e];
  waiters.items.resize(waiters.at.back());
  {
    std::vector<size_t> next(waiters.at.begin(), waiters.at.end() - 1);
    for (size_t t = 0; t < n; ++t) {
      for (const Wait& w : plan.tasks[t].waits) {
        if (counted(w)) waiters.items[next[w.event]++] = static_cast<int>(t);
      }
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t t = 0; t < n; ++t) {
    if (indeg[t] == 0) ready.push(static_cast<int>(t));
  }
  int order = 0;
  while (!ready.empty()) {
    const int t = ready.top();
    ready.pop();
    plan.tasks[t].order = order++;
    for (const Signal& sig : plan.tasks[t].signals) {
      if (--remaining[sig.event] != 0) continue;
      for (const int* c = waiters.begin(sig.event); c != waiters.end(sig.event); ++c) {
        if (--indeg[*c] == 0) ready.push(*c);
      }
    }
  }
  if (order != static_cast<int>(n)) report_cycle(plan, by_event, indeg);
}

}  // namespace

int64_t compute_ctas(const std::map<std::string, int64_t>& roles, bool any_comm, bool any_compute,
                     int64_t sms) {
  if (!roles.empty()) return roles.count("compute") ? roles.at("compute") : 0;
  if (any_comm && any_compute) return sms - std::clamp<int64_t>(sms / 8, 1, 16);
  return any_comm ? 0 : sms;
}

void schedule(Plan& plan, const ScheduleOptions& options) {
  const size_t n = plan.tasks.size();
  {
    const ByEvent by_event = producers(plan);
    if (waits_go_forward(plan, by_event)) {
      for (size_t t = 0; t < n; ++t) plan.tasks[t].order = static_cast<int>(t);
    } else {
      sort_topologically(plan, by_event);
    }
  }

  // Roles.
  // Fences and launch ends are bookkeeping: they do not ask for comm CTAs by themselves.
  bool any_compute = false, any_comm = false;
  for (const Task& t : plan.tasks) {
    const kinds::Kind& kind = kinds::kind_of(t);
    if (!kind.bookkeeping()) (kind.is_comm() ? any_comm : any_compute) = true;
  }
  int64_t compute = 0, comm = 0;
  if (!options.roles.empty()) {
    compute = options.roles.count("compute") ? options.roles.at("compute") : 0;
    comm = options.roles.count("comm") ? options.roles.at("comm") : 0;
    if (any_compute && compute == 0)
      throw UserError(fmt::format(
          "schedule `{}` has compute work but `roles` gives it no compute CTAs", plan.schedule));
    if (any_comm && comm == 0)
      throw UserError(fmt::format(
          "schedule `{}` has communication but `roles` gives it no comm CTAs", plan.schedule));
    if (compute + comm > options.sms) {
      throw UserError(fmt::format("schedule `{}`: roles ask for {} CTAs, the target has {} SMs",
                                  plan.schedule, compute + comm, options.sms));
    }
  } else {
    compute = compute_ctas(options.roles, any_comm, any_compute, options.sms);
    comm = options.sms - compute;
  }
  plan.roles = {Role{"compute", 0, static_cast<int>(compute)},
                Role{"comm", static_cast<int>(compute), static_cast<int>(comm)}};
  const int64_t ctas = compute + comm;

  // Per-rank CTA lists in the global order. Compute tiles go round robin (they cost alike), but
  // attention tiles go by their work (below); a comm task goes to the comm CTA with the least
  // work so far (bytes moved), the next one in turn among equals: a collective's phases (sends,
  // reductions, broadcasts) cost differently, and round robin could give each CTA one phase
  // only, leaving the slow phase on a third of them.
  std::vector<int> by_order(n);
  for (size_t t = 0; t < n; ++t) by_order[plan.tasks[t].order] = static_cast<int>(t);
  plan.cta_tasks.assign(plan.ranks, std::vector<std::vector<int>>(ctas));
  std::vector<int64_t> next_compute(plan.ranks, 0), next_comm(plan.ranks, 0),
      next_any(plan.ranks, 0);
  std::vector<std::vector<int64_t>> comm_load(plan.ranks, std::vector<int64_t>(comm, 0));
  std::vector<std::vector<int64_t>> costed_load(plan.ranks, std::vector<int64_t>(compute, 0));
  const auto on_comm_cta = [&](const kinds::Kind& kind) {
    return comm > 0 && (kind.is_comm() || compute == 0);
  };
  // A group's CTA, the same on every rank: groups take the comm CTAs in turn, shifted by one CTA
  // each round, so that a CTA's chunks do not all have the same owner (a two-shot all-reduce's
  // owner of chunk c is rank c mod R: with an even CTA count and R = 2, plain turns gave half the
  // CTAs every reduction and the other half only sends). Group g of operation o is turn
  // base(o) + g, the operations' groups one after the other in program order: a closed form
  // that a rank computes from its own tasks (every rank has tasks in every group of a collective,
  // its last included), where numbering the groups as the world's tasks first meet them needed
  // every rank's. The lowering numbers each operation's groups from 0 in the order its tasks meet
  // them, so the two numberings agree.
  // first_turn[o + 1]: operation o's (-1: no operation's, in a plan made by hand).
  std::vector<int64_t> first_turn(1, 0);
  for (const Task& task : plan.tasks) {
    const kinds::Kind& kind = kinds::kind_of(task);
    if (task.group < 0 || kind.runs_anywhere() || !on_comm_cta(kind)) continue;
    const size_t o = static_cast<size_t>(task.op + 1);
    if (first_turn.size() < o + 2) first_turn.resize(o + 2, 0);
    first_turn[o + 1] = std::max(first_turn[o + 1], task.group + 1);
  }
  for (size_t o = 1; o < first_turn.size(); ++o) first_turn[o] += first_turn[o - 1];
  for (int t : by_order) {
    Task& task = plan.tasks[t];
    const kinds::Kind& kind = kinds::kind_of(task);
    int cta;
    const bool on_comm = on_comm_cta(kind);
    std::optional<int64_t> compute_load;
    if (kind.runs_anywhere()) {
      // Row moves: every CTA in turn, comm CTAs first (they have no persistent worker after).
      cta = static_cast<int>((compute + next_any[task.rank]++) % ctas);
    } else if (on_comm) {
      std::vector<int64_t>& load = comm_load[task.rank];
      int64_t best = next_comm[task.rank] % comm;
      if (task.group >= 0) {
        const int64_t turn = first_turn[task.op + 1] + task.group;
        best = (turn + turn / comm) % comm;
      } else {
        for (int64_t i = 1; i < comm; ++i) {
          const int64_t c = (next_comm[task.rank] + i) % comm;
          if (load[c] < load[best]) best = c;
        }
        next_comm[task.rank] = best + 1;
      }
      load[best] += task_cost(plan, task);
      cta = static_cast<int>(compute + best);
    } else if ((compute_load = kind.compute_load(task))) {
      // Tiles of a kind whose tiles differ in cost (attention: causal ones by up to the number of
      // key blocks): each goes to the compute CTA with the least such work so far, the next one
      // in turn among equals (equal tiles: round robin).
      std::vector<int64_t>& load = costed_load[task.rank];
      int64_t best = next_compute[task.rank] % compute;
      for (int64_t i = 1; i < compute; ++i) {
        const int64_t c = (next_compute[task.rank] + i) % compute;
        if (load[c] < load[best]) best = c;
      }
      next_compute[task.rank] = best + 1;
      load[best] += *compute_load;
      cta = static_cast<int>(best);
    } else if (kind.bookkeeping()) {
      // A fence or launch end does no work: it goes with the next compute tile and does not take
      // its turn (which would shift every tile after it by one CTA, and the halves of 2-CTA
      // pairs off CTAs 2c and 2c + 1).
      cta = static_cast<int>(next_compute[task.rank] % compute);
    } else {
      cta = static_cast<int>(next_compute[task.rank]++ % compute);
    }
    task.cta = cta;
    plan.cta_tasks[task.rank][cta].push_back(t);
  }

  // Pairs the lowering made for 2-CTA clusters run as such only where their rank's lists keep
  // the pair rule; else each tile of that rank runs on its own (the same work, B loaded by each).
  // Decided rank by rank, from the rank's own lists, so that a rank planned alone decides as the
  // world does.
  std::vector<char> broken_on(plan.cta_tasks.size(), 0);
  std::string broken;  // the first broken rank's reason
  for (size_t r = 0; r < plan.cta_tasks.size(); ++r) {
    const std::string why = pair_rule_broken(plan, r);
    if (why.empty()) continue;
    broken_on[r] = 1;
    if (broken.empty()) broken = why;
  }
  if (!broken.empty()) {
    std::vector<int> unpaired;  // the ranks whose pairs are undone
    bool others_paired = false;
    for (Task& t : plan.tasks) {
      const kinds::Kind& kind = kinds::kind_of(t);
      if (kind.pair_half(t) < 0) continue;
      if (!broken_on[t.rank]) {
        others_paired = true;
        continue;
      }
      kind.unpair(t);
      if (unpaired.empty() || unpaired.back() != t.rank) unpaired.push_back(t.rank);
    }
    std::sort(unpaired.begin(), unpaired.end());
    unpaired.erase(std::unique(unpaired.begin(), unpaired.end()), unpaired.end());
    if (!unpaired.empty() && !others_paired) {
      plan.decisions.push_back(Decision{
          "(schedule)", "no 2-CTA clusters",
          fmt::format("the lists break the pair rule: {}; the tiles run unpaired", broken)});
    } else if (!unpaired.empty()) {
      plan.decisions.push_back(Decision{
          "(schedule)", "no 2-CTA clusters on some ranks",
          fmt::format("the lists of rank(s) {} break the pair rule: {}; their tiles run unpaired, "
                      "the other ranks' in pairs",
                      fmt::join(unpaired, ", "), broken)});
    }
  }
}

}  // namespace mkc::plan
