#include "compiler/dependencies.h"

#include <fmt/format.h>

#include <map>
#include <set>

namespace mkc::plan {
namespace {

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
      for (const Box& b : task.reads) touches_[{b.rank, b.buffer}].push_back({static_cast<int>(t), &b});
      for (const Box& b : task.writes) touches_[{b.rank, b.buffer}].push_back({static_cast<int>(t), &b});
    }
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
        if (r != task.rank && !awaited_on_.count({static_cast<int>(t), r})) edge(static_cast<int>(t), ends_.at(r));
      }
    }
  }

 private:
  // The ranks a task's completion concerns: where it writes (and where a signal task points).
  std::set<int> notified(const Task& t) const {
    std::set<int> out;
    for (const Box& b : t.writes) out.insert(b.rank);
    if (t.kind == TaskKind::kSignalOnly) out.insert(static_cast<int>(t.args[0]));
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

  static bool reads_any(const Task& consumer, const Task& producer) {
    for (const Box& r : consumer.reads) {
      for (const Box& w : producer.writes) {
        if (r.overlaps(w)) return true;
      }
    }
    return false;
  }

  void data_edges(int t) {
    const Task& task = p_.tasks[t];
    const compiler::OpInstance& op = p_.source->ops[task.op];
    for (const compiler::Dependency& d : op.deps) {
      for (int pt : by_op_rank_[d.op][task.rank]) {
        if (d.granule == compiler::Granule::kAll || reads_any(task, p_.tasks[pt])) edge(pt, t);
      }
    }
    // Earlier tasks of the same operation whose results this one reads.
    for (int pt : op_tasks_[task.op]) {
      if (pt >= t) break;
      if (reads_any(task, p_.tasks[pt])) edge(pt, t);
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
      for (const auto& [x, b] : touches_[{wb.rank, wb.buffer}]) {
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
    if (task.kind == TaskKind::kSignalOnly && task.args[0] != task.rank) edge(fences_.at(static_cast<int>(task.args[0])), t);
  }

  Plan& p_;
  int64_t per_node_;
  std::vector<std::vector<int>> op_tasks_;
  std::vector<std::vector<std::vector<int>>> by_op_rank_;
  std::map<std::pair<int, int>, std::vector<std::pair<int, const Box*>>> touches_;
  std::map<int, int> fences_;
  std::map<int, int> ends_;
  std::set<std::pair<int, int>> awaited_on_;  // (producer task, rank of some task waiting for it)
  std::vector<std::vector<char>> op_reach_;
  std::set<std::pair<int, int>> edges_;
  std::map<std::pair<int, int>, int> done_;
};

}  // namespace

void derive_dependencies(Plan& plan, int64_t ranks_per_node) { Deriver(plan, ranks_per_node).run(); }

}  // namespace mkc::plan
