#include "compiler/dependencies.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace mkc::plan {
namespace {

// The boxes of one buffer on one rank, sorted by their start in the first dimension, so the boxes
// that may overlap a query are found without scanning them all (a GEMM's C has thousands of tiles).
class BoxIndex {
 public:
  void add(int task, const Box* b) { entries_.push_back({task, b}); }
  void finish() {
    std::sort(entries_.begin(), entries_.end(), [](const auto& x, const auto& y) {
      return first(x.second).first < first(y.second).first;
    });
    for (const auto& e : entries_) {
      const auto [lo, hi] = first(e.second);
      max_extent_ = std::max(max_extent_, hi - lo);
    }
  }
  // Entries whose first-dimension range may intersect q's; the caller checks the full overlap.
  std::vector<std::pair<int, const Box*>> near(const Box& q) const {
    const auto [qlo, qhi] = first(&q);
    const int64_t from = qlo - max_extent_ + 1;
    auto it = std::lower_bound(entries_.begin(), entries_.end(), from,
                               [](const auto& e, int64_t v) { return first(e.second).first < v; });
    std::vector<std::pair<int, const Box*>> out;
    for (; it != entries_.end() && first(it->second).first < qhi; ++it) {
      if (first(it->second).second > qlo) out.push_back(*it);
    }
    return out;
  }

 private:
  static std::pair<int64_t, int64_t> first(const Box* b) {
    return b->lo.empty() ? std::make_pair<int64_t, int64_t>(0, 1)
                         : std::make_pair(b->lo[0], b->hi[0]);
  }
  std::vector<std::pair<int, const Box*>> entries_;
  int64_t max_extent_ = 1;
};

class Deriver {
 public:
  Deriver(Plan& p, int64_t per_node) : p_(p), per_node_(per_node > 0 ? per_node : p.ranks) {}

  void run() {
    const auto& ops = p_.source->ops;
    op_tasks_.resize(ops.size());
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      const Task& task = p_.tasks[t];
      if (task.op >= 0) {
        op_tasks_[task.op].push_back(static_cast<int>(t));
      } else if (task.kind == TaskKind::kLaunchFence) {
        fences_[task.rank] = static_cast<int>(t);
      } else {
        ends_[task.rank] = static_cast<int>(t);
      }
    }
    op_reach_ = op_reachability();
    // Indexes: tasks of each operation by the ranks they announce to, and every box by
    // (rank, buffer).
    by_op_rank_.assign(ops.size(), std::vector<std::vector<int>>(p_.ranks));
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      const Task& task = p_.tasks[t];
      if (task.op < 0) continue;
      for (int r : notified(task)) by_op_rank_[task.op][r].push_back(static_cast<int>(t));
      for (const Box& b : task.reads) touches_[{b.rank, b.buffer}].add(static_cast<int>(t), &b);
      for (const Box& b : task.writes) {
        touches_[{b.rank, b.buffer}].add(static_cast<int>(t), &b);
        writes_[{b.rank, b.buffer}].add(static_cast<int>(t), &b);
      }
    }
    for (auto& [key, index] : touches_) index.finish();
    for (auto& [key, index] : writes_) index.finish();
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      if (p_.tasks[t].op >= 0) data_edges(static_cast<int>(t));
    }
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      if (p_.tasks[t].op >= 0) credits(static_cast<int>(t));
    }
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      if (p_.tasks[t].op >= 0) fence(static_cast<int>(t));
    }
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      const Task& task = p_.tasks[t];
      if (task.op < 0) continue;
      for (int r : notified(task)) {
        if (r != task.rank && !awaited_on_.count({static_cast<int>(t), r}))
          edge(static_cast<int>(t), ends_.at(r));
      }
    }
  }

 private:
  // The ranks a task's completion concerns: where it writes (and where a signal task points).
  std::set<int> notified(const Task& t) const {
    std::set<int> out;
    for (const Box& b : t.writes) out.insert(b.rank);
    if (t.kind == TaskKind::kSignalOnly)
      out.insert(static_cast<int>(args_as<abi::SignalArgs>(t).peer));
    if (out.empty()) out.insert(t.rank);
    return out;
  }

  HandOff handoff(int from, int to) const {
    if (from == to) return HandOff::kLocal;
    return from / per_node_ == to / per_node_ ? HandOff::kPeerFlag : HandOff::kProxy;
  }

  // Makes `consumer` wait for `producer` (once).
  void edge(int producer, int consumer) {
    if (producer == consumer || !edges_.insert({producer, consumer}).second) return;
    Task& c = p_.tasks[consumer];
    awaited_on_.insert({producer, c.rank});
    const Task& pr = p_.tasks[producer];
    auto key = std::make_pair(producer, c.rank);
    auto it = done_.find(key);
    if (it == done_.end()) {
      const int ev = p_.add_event(c.rank, fmt::format("{}@r{}.done", pr.label, pr.rank));
      p_.tasks[producer].signals.push_back(Signal{ev, handoff(pr.rank, c.rank)});
      it = done_.emplace(key, ev).first;
    }
    c.waits.push_back(Wait{it->second, 1, 0});
  }

  // Makes `consumer` wait for every task of operation `op` that concerns its rank, through one
  // counter those tasks all signal (`after op` on a large operation would otherwise be one wait
  // per producer task in every consumer: a 16-step chain of 128-chunk all-reduces had 1.2 million).
  void whole_op_edge(int op, int consumer) {
    Task& c = p_.tasks[consumer];
    const std::vector<int>& producers = by_op_rank_[op][c.rank];
    const auto key = std::make_pair(op, c.rank);
    auto it = all_done_.find(key);
    if (it == all_done_.end()) {
      const compiler::OpInstance& o = p_.source->ops[op];
      const std::string name =
          o.iteration >= 0 ? fmt::format("{}[{}]", o.name, o.iteration) : o.name;
      const int ev = p_.add_event(c.rank, fmt::format("{}.all@r{}.done", name, c.rank));
      for (int pt : producers) {
        p_.tasks[pt].signals.push_back(Signal{ev, handoff(p_.tasks[pt].rank, c.rank)});
        awaited_on_.insert({pt, c.rank});
      }
      it = all_done_.emplace(key, ev).first;
    }
    if (!all_waits_.insert({consumer, it->second}).second) return;
    c.waits.push_back(Wait{it->second, static_cast<int64_t>(producers.size()), 0});
  }

  // Tasks whose writes overlap what task t reads, from the index of write boxes.
  std::set<int> writers_of(int t) const {
    std::set<int> out;
    for (const Box& r : p_.tasks[t].reads) {
      auto it = writes_.find({r.rank, r.buffer});
      if (it == writes_.end()) continue;
      for (const auto& [w, b] : it->second.near(r)) {
        if (b->overlaps(r)) out.insert(w);
      }
    }
    return out;
  }

  void data_edges(int t) {
    const Task& task = p_.tasks[t];
    const compiler::OpInstance& op = p_.source->ops[task.op];
    const std::set<int> writers = writers_of(t);
    for (const compiler::Dependency& d : op.deps) {
      if (d.granule == compiler::Granule::kAll) {
        const std::vector<int>& producers = by_op_rank_[d.op][task.rank];
        if (producers.size() >= 2) {
          whole_op_edge(d.op, t);
        } else {
          for (int pt : producers) edge(pt, t);
        }
      } else {
        for (int pt : writers) {
          if (p_.tasks[pt].op == d.op) edge(pt, t);
        }
      }
    }
    // Earlier tasks of the same operation whose results this one reads.
    for (int pt : writers) {
      if (pt < t && p_.tasks[pt].op == task.op) edge(pt, t);
    }
  }

  // op_reach[a][b]: operation instance a waits (transitively) for b.
  std::vector<std::vector<char>> op_reachability() const {
    const auto& ops = p_.source->ops;
    const size_t n = ops.size();
    std::vector<std::vector<char>> reach(n, std::vector<char>(n, 0));
    for (size_t a = 0; a < n; ++a) {
      std::vector<int> stack = {static_cast<int>(a)};
      while (!stack.empty()) {
        const int v = stack.back();
        stack.pop_back();
        for (const compiler::Dependency& d : ops[v].deps) {
          if (!reach[a][d.op]) {
            reach[a][d.op] = 1;
            stack.push_back(d.op);
          }
        }
      }
    }
    return reach;
  }

  void credits(int w) {
    const Task& writer = p_.tasks[w];
    for (const Box& wb : writer.writes) {
      for (const auto& [x, b] : touches_[{wb.rank, wb.buffer}].near(wb)) {
        const Task& other = p_.tasks[x];
        // Only tasks running on the rank written (a remote writer's own reads are its business).
        if (x == w || other.rank != wb.rank) continue;
        // Earlier in program order: an earlier operation, or an earlier task of the same one.
        const bool earlier = other.op < writer.op || (other.op == writer.op && x < w);
        if (!earlier) continue;
        // If the earlier task waits for the writer's operation, it reads the new data, not the old.
        if (other.op != writer.op && op_reach_[other.op][writer.op]) continue;
        if (b->overlaps(wb)) edge(x, w);
      }
    }
  }

  void fence(int t) {
    const Task& task = p_.tasks[t];
    for (const Box& b : task.writes) {
      if (b.rank != task.rank) edge(fences_.at(b.rank), t);
    }
    if (task.kind == TaskKind::kSignalOnly) {
      const int peer = static_cast<int>(args_as<abi::SignalArgs>(task).peer);
      if (peer != task.rank) edge(fences_.at(peer), t);
    }
  }

  Plan& p_;
  int64_t per_node_;
  std::vector<std::vector<int>> op_tasks_;
  std::vector<std::vector<std::vector<int>>> by_op_rank_;
  std::map<std::pair<int, int>, BoxIndex> touches_;
  std::map<std::pair<int, int>, BoxIndex> writes_;
  std::map<int, int> fences_;
  std::map<int, int> ends_;
  std::set<std::pair<int, int>> awaited_on_;  // (producer task, rank of some task waiting for it)
  std::vector<std::vector<char>> op_reach_;
  std::set<std::pair<int, int>> edges_;
  std::map<std::pair<int, int>, int> done_;
  std::map<std::pair<int, int>, int> all_done_;  // (operation, rank) -> its counter
  std::set<std::pair<int, int>> all_waits_;      // (consumer task, counter)
};

}  // namespace

void derive_dependencies(Plan& plan, int64_t ranks_per_node) {
  Deriver(plan, ranks_per_node).run();
}

}  // namespace mkc::plan
