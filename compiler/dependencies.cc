#include "compiler/dependencies.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "compiler/box_index.h"
#include "support/error.h"

namespace mkc::plan {
namespace {

// The boxes of one buffer on one rank, by flat span (compiler/box_index.h): a query visits the
// boxes whose spans meet its own, not every box of the buffer (a GEMM's C has thousands of tiles,
// a ring's slot thousands of chunks).
class BoxIndex {
 public:
  void add(const Plan& p, int task, const Box* b) {
    const auto [first, end] = flat_span(p.buffers[b->buffer], *b);
    index_.add(first, end, std::make_pair(task, b));
  }
  void finish() { index_.finish(); }
  // Calls fn(task) for every entry that overlaps q (exactly, not only by span).
  template <typename F>
  void overlapping(const Plan& p, const Box& q, F&& fn) const {
    const auto [first, end] = flat_span(p.buffers[q.buffer], q);
    index_.overlapping(first, end, [&](const auto& e) {
      if (e.value.second->overlaps(q)) fn(e.value.first);
    });
  }

 private:
  SpanIndex<std::pair<int, const Box*>> index_;
};

class Deriver {
 public:
  Deriver(Plan& p, int64_t per_node) : p_(p), per_node_(per_node > 0 ? per_node : p.ranks) {}

  void run() {
    const auto& ops = p_.source->ops;
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      const Task& task = p_.tasks[t];
      if (task.kind == TaskKind::kLaunchFence) fences_[task.rank] = static_cast<int>(t);
      if (task.kind == TaskKind::kLaunchEnd) ends_[task.rank] = static_cast<int>(t);
    }
    op_reach_ = op_reachability();
    // Indexes: tasks of each operation by the ranks they announce to, and every box by
    // (rank, buffer).
    by_op_rank_.assign(ops.size(), std::vector<std::vector<int>>(p_.ranks));
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      const Task& task = p_.tasks[t];
      if (task.op < 0) continue;
      for (int r : notified(task)) by_op_rank_[task.op][r].push_back(static_cast<int>(t));
      for (const Box& b : task.reads) touches_[{b.rank, b.buffer}].add(p_, static_cast<int>(t), &b);
      for (const Box& b : task.writes) {
        touches_[{b.rank, b.buffer}].add(p_, static_cast<int>(t), &b);
        writes_[{b.rank, b.buffer}].add(p_, static_cast<int>(t), &b);
      }
    }
    for (auto& [key, index] : touches_) index.finish();
    for (auto& [key, index] : writes_) index.finish();
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      if (p_.tasks[t].op < 0) continue;
      std::set<int> producers;
      data_edges(static_cast<int>(t), &producers);
      credits(static_cast<int>(t), &producers);
      wait_for(static_cast<int>(t), producers);
      fence(static_cast<int>(t));
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

  // How a signal from task `from` reaches a counter of rank `to`. Another node would need the
  // host proxy's RDMA path, which does not exist yet: a clear error rather than an NVLink store
  // that cannot reach the peer.
  HandOff handoff(int from_task, int to) const {
    const int from = p_.tasks[from_task].rank;
    if (from == to) return HandOff::kLocal;
    if (from / per_node_ == to / per_node_) return HandOff::kPeerFlag;
    throw UserError(fmt::format(
        "schedule `{}` at {} ranks, {} per node: task `{}` on rank {} must signal rank {} on "
        "another node; edges between nodes go through mkc's RDMA proxy, which is not built yet: "
        "compile for one node (--ranks-per-node {}) or fewer ranks",
        p_.schedule, p_.ranks, per_node_, p_.tasks[from_task].label, from, to, p_.ranks));
  }

  // Makes `consumer` wait for `producer` alone (once): the producer's own counter on the
  // consumer's rank.
  void edge(int producer, int consumer) {
    if (producer == consumer || !edges_.insert({producer, consumer}).second) return;
    Task& c = p_.tasks[consumer];
    awaited_on_.insert({producer, c.rank});
    const Task& pr = p_.tasks[producer];
    auto key = std::make_pair(producer, c.rank);
    auto it = done_.find(key);
    if (it == done_.end()) {
      const int ev = p_.add_event(c.rank, fmt::format("{}@r{}.done", pr.label, pr.rank));
      p_.tasks[producer].signals.push_back(Signal{ev, handoff(producer, c.rank)});
      it = done_.emplace(key, ev).first;
    }
    p_.tasks[consumer].waits.push_back(Wait{it->second, 1, 0});
  }

  // Makes `consumer` wait for every task of `producers`: per producing operation, one counting
  // wait on a counter those tasks all signal (shared by every consumer waiting for the same set
  // on that rank), or the producer's own counter when it is alone. An attention tile waits for
  // the 128 chunks of its K,V block with one wait, not 128; the chunks' counter is shared by the
  // tiles of that block.
  //
  // One counter may mix producers of several ranks only where no producer's next launch can
  // count for this one: producers on the consumer's rank (its next launch comes after this one
  // ends) and producers that write into the consumer's rank (they wait for its launch fence).
  // Any other producer shares a counter only with producers of its own rank, whose launches are
  // in order.
  void wait_for(int consumer, const std::set<int>& producers) {
    const int rank = p_.tasks[consumer].rank;
    std::map<std::pair<int, int>, std::vector<int>> groups;  // (op, rank or -1) -> producers
    for (int p : producers) {
      if (p == consumer || edges_.count({p, consumer})) continue;
      const Task& pt = p_.tasks[p];
      bool fenced = pt.rank == rank;
      for (const Box& b : pt.writes) fenced = fenced || b.rank == rank;
      groups[{pt.op, fenced ? -1 : pt.rank}].push_back(p);
    }
    for (auto& [key, set] : groups) {
      const int op = key.first;
      if (set.size() == 1 || op < 0) {
        for (int p : set) edge(p, consumer);
        continue;
      }
      auto it = set_done_.find({rank, set});
      if (it == set_done_.end()) {
        const Task& first = p_.tasks[set.front()];
        const int ev = p_.add_event(
            rank, fmt::format("{}+{}@r{}.done", first.label, set.size() - 1, first.rank));
        for (int p : set) {
          p_.tasks[p].signals.push_back(Signal{ev, handoff(p, rank)});
          awaited_on_.insert({p, rank});
        }
        it = set_done_.emplace(std::make_pair(rank, set), ev).first;
      }
      for (int p : set) edges_.insert({p, consumer});
      p_.tasks[consumer].waits.push_back(Wait{it->second, static_cast<int64_t>(set.size()), 0});
    }
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
        p_.tasks[pt].signals.push_back(Signal{ev, handoff(pt, c.rank)});
        awaited_on_.insert({pt, c.rank});
      }
      it = all_done_.emplace(key, ev).first;
    }
    if (!all_waits_.insert({consumer, it->second}).second) return;
    for (int pt : producers) edges_.insert({pt, consumer});
    c.waits.push_back(Wait{it->second, static_cast<int64_t>(producers.size()), 0});
  }

  // Tasks whose writes overlap what task t reads, from the index of write boxes.
  std::set<int> writers_of(int t) const {
    std::set<int> out;
    for (const Box& r : p_.tasks[t].reads) {
      auto it = writes_.find({r.rank, r.buffer});
      if (it == writes_.end()) continue;
      it->second.overlapping(p_, r, [&](int w) { out.insert(w); });
    }
    return out;
  }

  // 1. Data edges: the tasks of the operations t's operation is `after` (with .tile/.chunk only
  // those whose writes overlap what t reads; without, all of them that announce to t's rank), and
  // earlier tasks of t's own operation whose writes it reads.
  void data_edges(int t, std::set<int>* producers) {
    const Task& task = p_.tasks[t];
    const compiler::OpInstance& op = p_.source->ops[task.op];
    const std::set<int> writers = writers_of(t);
    for (const compiler::Dependency& d : op.deps) {
      if (d.granule == compiler::Granule::kAll) {
        const std::vector<int>& all = by_op_rank_[d.op][task.rank];
        if (all.size() >= 2) {
          whole_op_edge(d.op, t);
        } else {
          producers->insert(all.begin(), all.end());
        }
      } else {
        for (int pt : writers) {
          if (p_.tasks[pt].op == d.op) producers->insert(pt);
        }
      }
    }
    for (int pt : writers) {
      if (pt < t && p_.tasks[pt].op == task.op) producers->insert(pt);
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

  // 2. Credits: a writer waits for the tasks earlier in program order, on the rank written, that
  // read or write what it overwrites, unless those wait for the writer's operation themselves.
  void credits(int w, std::set<int>* producers) {
    const Task& writer = p_.tasks[w];
    for (const Box& wb : writer.writes) {
      touches_[{wb.rank, wb.buffer}].overlapping(p_, wb, [&](int x) {
        const Task& other = p_.tasks[x];
        // Only tasks running on the rank written (a remote writer's own reads are its business).
        if (x == w || other.rank != wb.rank) return;
        // Earlier in program order: an earlier operation, or an earlier task of the same one.
        const bool earlier = other.op < writer.op || (other.op == writer.op && x < w);
        if (!earlier) return;
        // If the earlier task waits for the writer's operation, it reads the new data, not the old.
        if (other.op != writer.op && op_reach_[other.op][writer.op]) return;
        producers->insert(x);
      });
    }
  }

  // 3. Launch fences: a write into (or a signal to) another rank waits for that rank's fence.
  void fence(int t) {
    const Task& task = p_.tasks[t];
    std::set<int> peers;
    for (const Box& b : task.writes) {
      if (b.rank != task.rank) peers.insert(b.rank);
    }
    if (task.kind == TaskKind::kSignalOnly) {
      const int peer = static_cast<int>(args_as<abi::SignalArgs>(task).peer);
      if (peer != task.rank) peers.insert(peer);
    }
    for (int d : peers) edge(fences_.at(d), t);
  }

  Plan& p_;
  int64_t per_node_;
  std::vector<std::vector<std::vector<int>>> by_op_rank_;
  std::map<std::pair<int, int>, BoxIndex> touches_;
  std::map<std::pair<int, int>, BoxIndex> writes_;
  std::map<int, int> fences_;
  std::map<int, int> ends_;
  std::set<std::pair<int, int>> awaited_on_;  // (producer task, rank of some task waiting for it)
  std::vector<std::vector<char>> op_reach_;
  std::set<std::pair<int, int>> edges_;                       // (producer, consumer) ordered so far
  std::map<std::pair<int, int>, int> done_;                   // (producer, rank) -> its counter
  std::map<std::pair<int, std::vector<int>>, int> set_done_;  // (rank, producers) -> counter
  std::map<std::pair<int, int>, int> all_done_;               // (operation, rank) -> its counter
  std::set<std::pair<int, int>> all_waits_;                   // (consumer task, counter)
};

}  // namespace

void derive_dependencies(Plan& plan, int64_t ranks_per_node) {
  Deriver(plan, ranks_per_node).run();
}

}  // namespace mkc::plan
