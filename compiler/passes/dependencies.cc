#include "compiler/passes/dependencies.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "compiler/plan/box_index.h"
#include "support/error.h"

namespace mkc::plan {
namespace {

// A box's extent in its buffer's last dimension, held beside its flat span in the indexes below:
// boxes whose spans meet may lie side by side (gemm_allreduce at 64 ranks: each 128x256 chunk's
// span meets all 32 GEMM tiles of its 128-row band, one of which it overlaps), and comparing
// these, stored in the index's own entries, rejects the others without Box::overlaps loading
// each box's bounds from wherever its task keeps them. Box::overlaps compares this dimension too,
// so a box these reject it rejects.
struct Columns {
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  bool meet(const Columns& o) const { return lo < o.hi && o.lo < hi; }
};
Columns columns(const Buffer& buf, const Box& b) {
  if (buf.shape.empty()) return {};
  const size_t d = buf.shape.size() - 1;
  return {b.lo[d], b.hi[d]};
}

// The boxes of one buffer on one rank, by flat span (compiler/plan/box_index.h): a query visits the
// boxes whose spans meet its own, not every box of the buffer (a GEMM's C has thousands of tiles,
// a ring's slot thousands of chunks). A box added right after an equal one joins its entry, so a
// query checks it once for all its writers: every sender of an all-to-all or a combine writes the
// same whole buffer of each rank (8,192 boxes of one entry at 64 ranks), and each reader of a
// chunk of it checked every one.
class BoxIndex {
 public:
  void add(const Plan& p, int task, const Box* b) {
    if (boxes_.empty() || boxes_.back().first->lo != b->lo || boxes_.back().first->hi != b->hi) {
      const Buffer& buf = p.buffers[b->buffer];
      const auto [first, end] = flat_span(buf, *b);
      index_.add(first, end, {boxes_.size(), columns(buf, *b)});
      boxes_.push_back({b, tasks_.size()});
    }
    tasks_.push_back(task);
  }
  void finish() {
    index_.finish();
    boxes_.push_back({nullptr, tasks_.size()});  // the end of the last box's tasks
  }
  // Calls fn(begin, end) for every box that overlaps q (exactly, not only by span): its writers
  // are task(begin) .. task(end - 1).
  template <typename F>
  void overlapping(const Plan& p, const Box& q, F&& fn) const {
    const Buffer& buf = p.buffers[q.buffer];
    const auto [first, end] = flat_span(buf, q);
    const Columns qc = columns(buf, q);
    index_.overlapping(first, end, [&](const auto& e) {
      const size_t box = e.value.first;
      if (e.value.second.meet(qc) && boxes_[box].first->overlaps(q))
        fn(boxes_[box].second, boxes_[box + 1].second);
    });
  }
  int task(size_t i) const { return tasks_[i]; }

 private:
  // Each distinct box with the place of its first writer in tasks_; its writers run up to the
  // next box's.
  std::vector<std::pair<const Box*, size_t>> boxes_;
  std::vector<int> tasks_;                       // the writers, in the order they were added
  SpanIndex<std::pair<size_t, Columns>> index_;  // span -> its place in boxes_, its columns
};

// A task's access to a box, as the credit frontier holds it.
struct Access {
  int task;
  bool write;  // beside task: in the padding before box
  const Box* box;
  Columns columns;  // the box's
};

class Deriver {
 public:
  Deriver(Plan& p, const dsl::SourceFile* file) : p_(p), file_(file) {}

  void run() {
    const auto& ops = p_.source->ops;
    check_remote_reads();
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      const Task& task = p_.tasks[t];
      if (task.kind == TaskKind::kLaunchFence) fences_[task.rank] = static_cast<int>(t);
      if (task.kind == TaskKind::kLaunchEnd) ends_[task.rank] = static_cast<int>(t);
    }
    op_reach_ = op_reachability();
    // Indexes: tasks of each operation by the ranks they announce to, and every box by
    // (rank, buffer).
    by_op_rank_.assign(ops.size(), std::vector<std::vector<int>>(p_.ranks));
    notified_at_.assign(1, 0);
    awaited_first_.assign(p_.tasks.size(), -1);
    awaited_more_.resize(p_.tasks.size());
    set_done_.resize(static_cast<size_t>(p_.ranks));
    op_of_.resize(p_.tasks.size());
    rank_of_.resize(p_.tasks.size());
    scatters_.assign(p_.tasks.size(), 0);
    fenced_for_.assign(p_.tasks.size(), -1);
    fenced_.assign(p_.tasks.size(), 0);
    written_at_.assign(1, 0);
    std::tuple<int, int, int> last_writes_key;
    BoxIndex* last_writes = nullptr;
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      const Task& task = p_.tasks[t];
      op_of_[t] = task.op;
      rank_of_[t] = task.rank;
      const auto first = written_ranks_.end() - written_ranks_.begin();
      for (const Box& b : task.writes) {
        written_ranks_.push_back(b.rank);
        scatters_[t] = scatters_[t] || b.scatter;
      }
      std::sort(written_ranks_.begin() + first, written_ranks_.end());
      written_ranks_.erase(std::unique(written_ranks_.begin() + first, written_ranks_.end()),
                           written_ranks_.end());
      written_at_.push_back(written_ranks_.size());
      if (task.op >= 0) add_notified(task);
      notified_at_.push_back(notified_ranks_.size());
      if (task.op < 0) continue;
      for (int r : notified(static_cast<int>(t)))
        by_op_rank_[task.op][r].push_back(static_cast<int>(t));
      for (const Box& b : task.writes) {
        // Consecutive boxes mostly share their index: the tree is looked up when the key changes.
        const std::tuple<int, int, int> key = {b.rank, b.buffer, task.op};
        if (last_writes == nullptr || key != last_writes_key) {
          last_writes_key = key;
          last_writes = &writes_[key];
        }
        last_writes->add(p_, static_cast<int>(t), &b);
      }
    }
    for (auto& [key, index] : writes_) index.finish();
    // The accesses of every task to every rank's buffers, switched on as tasks are processed: a
    // peer's write into this rank (a shift, a put) or read of it (a one-shot all-reduce) is an
    // access a later writer of those elements must wait for, like this rank's own. (With only
    // the own rank's, two shifts into one ring slot from the same sender were a write-after-
    // write race that compile accepted: tests/fuzz/mks_gen.h found it.)
    own_at_.assign(1, 0);
    parts_.resize(static_cast<size_t>(p_.ranks) * p_.buffers.size());
    std::tuple<int, int, int> last_frontier_key;
    LiveSpanIndex<Access>* last_frontier = nullptr;
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      const Task& task = p_.tasks[t];
      if (task.op < 0) {
        own_at_.push_back(own_.size());
        continue;
      }
      for (const std::vector<Box>* boxes : {&task.reads, &task.writes}) {
        for (const Box& b : *boxes) {
          const auto [first, end] = flat_span(p_.buffers[b.buffer], b);
          const std::tuple<int, int, int> key = {b.rank, b.buffer, b.scatter ? task.op : -1};
          if (last_frontier == nullptr || key != last_frontier_key) {
            last_frontier_key = key;
            last_frontier = &frontier_[key];
          }
          LiveSpanIndex<Access>& idx = *last_frontier;
          const bool write = boxes == &task.writes;
          // Marked: a peer's write into this rank, what retire_awaited looks for.
          const Access a{static_cast<int>(t), write, &b, columns(p_.buffers[b.buffer], b)};
          own_.push_back({&idx, idx.add(first, end, a, write && b.rank != task.rank)});
        }
      }
      own_at_.push_back(own_.size());
    }
    for (auto& [key, index] : frontier_) {
      index.finish();
      const auto [rank, buffer, scatter_op] = key;
      // Every box of every task has its key here, so this bounds parts_'s lookups too.
      if (rank < 0 || rank >= p_.ranks || buffer < 0 ||
          static_cast<size_t>(buffer) >= p_.buffers.size())
        throw InternalError(
            fmt::format("a box of rank {} of buffer {} in a plan of {} ranks and "
                        "{} buffers",
                        rank, buffer, p_.ranks, p_.buffers.size()));
      parts_[part_of(rank, buffer)].push_back({scatter_op, &index});
    }
    forward_.assign(ops.size(), 0);
    for (size_t a = 0; a < ops.size(); ++a) {
      for (size_t b = a + 1; b < ops.size(); ++b) forward_[a] = forward_[a] || op_reach_[a][b];
    }
    ordered_.assign(p_.tasks.size(), -1);
    // About a counter per task at 64 ranks: grown from empty, the rehashes were 1.9% of
    // gemm_allreduce's rank 0 of 64.
    done_.reserve(p_.tasks.size());
    whole_.assign(ops.size(), -1);
    // Collected with repeats, then sorted and made unique: a consumer of an all-to-all has
    // hundreds of producers, and a tree set per consumer cost more than the pass's own work.
    // Reused from task to task (cleared, not freed): a vector each per task was a malloc and a
    // free each for every one of the 254,080 tasks of gemm_allreduce's rank 0 of 64.
    std::vector<int> producers;
    std::vector<std::pair<LiveSpanIndex<Access>*, size_t>> superseded;
    std::vector<int> awaited_ops;
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      if (p_.tasks[t].op < 0) continue;
      producers.clear();
      superseded.clear();
      data_edges(static_cast<int>(t), &producers);
      credits(static_cast<int>(t), &producers, &superseded);
      // Often in order already: the readers of a whole buffer's writers get them in task order.
      if (!std::is_sorted(producers.begin(), producers.end()))
        std::sort(producers.begin(), producers.end());
      producers.erase(std::unique(producers.begin(), producers.end()), producers.end());
      wait_for(static_cast<int>(t), producers, &awaited_ops);
      retire_awaited(static_cast<int>(t), awaited_ops, &superseded);
      fence(static_cast<int>(t));
      for (size_t i = own_at_[t]; i < own_at_[t + 1]; ++i)
        own_[i].first->set_alive(own_[i].second, true);
      for (const auto& [idx, h] : superseded) idx->set_alive(h, false);
    }
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      const Task& task = p_.tasks[t];
      if (task.op < 0) continue;
      for (int r : notified(static_cast<int>(t))) {
        if (r != task.rank && !is_awaited(static_cast<int>(t), r))
          edge(static_cast<int>(t), ends_.at(r));
      }
    }
  }

 private:
  // The ranks a task's completion concerns, ascending: its own, where it writes, and where a
  // signal task points. Its own rank is one even when it writes only into a peer (a shift), so
  // that `after x` on rank r waits for x's tasks on r as well as x's writes into r: a chain of
  // `after`s (c after b, b after a) then orders c after a on each rank, as the checker's
  // "directly or through others" takes it. (Without it, `c = copy(Y -> ...) after b` with `b =
  // shift(...) after a` and `a` writing Y raced on Y: tests/fuzz/mks_gen.h found it.)
  void add_notified(const Task& t) {
    std::vector<int>& out = notified_ranks_;
    const auto first = static_cast<std::ptrdiff_t>(out.size());
    out.push_back(t.rank);
    for (const Box& b : t.writes) out.push_back(b.rank);
    if (t.kind == TaskKind::kSignalOnly)
      out.push_back(static_cast<int>(args_as<abi::SignalArgs>(t).peer));
    std::sort(out.begin() + first, out.end());
    out.erase(std::unique(out.begin() + first, out.end()), out.end());
  }
  // A task's notified ranks (add_notified), ascending; none for a launch fence or end.
  struct Ranks {
    const int* b;
    const int* e;
    const int* begin() const { return b; }
    const int* end() const { return e; }
  };
  Ranks notified(int t) const {
    return {notified_ranks_.data() + notified_at_[t], notified_ranks_.data() + notified_at_[t + 1]};
  }

  // Whether `consumer` already waits for `producer`: by an edge of its own, or through the counter
  // of the producer's whole operation on its rank (whole_op_edge). Every edge into a consumer is
  // made while it is processed (the launch ends, which are never processed, last), so one stamp per
  // task and per operation says it, in constant time and memory: a set of (producer, consumer)
  // pairs held every task's `after` operations, tasks x producers (3 GB and 19 s for ring
  // attention at 2 ranks).
  bool ordered(int producer, int consumer) const {
    if (ordered_[producer] == consumer) return true;
    const int op = op_of_[producer];
    if (op < 0 || whole_[op] != consumer) return false;
    const Ranks to = notified(producer);
    return std::binary_search(to.begin(), to.end(), rank_of_[consumer]);
  }

  // Whether task t writes into `rank`. An all-to-all's sender has a box per destination: its
  // ranks are looked up, not walked.
  bool writes_into(int t, int rank) const {
    const auto first = written_ranks_.begin() + static_cast<std::ptrdiff_t>(written_at_[t]);
    const auto last = written_ranks_.begin() + static_cast<std::ptrdiff_t>(written_at_[t + 1]);
    return std::binary_search(first, last, rank);
  }

  // How a signal from task `from` reaches a counter of rank `to`: the same GPU, a peer of the node
  // over NVLink, or another node through the host proxies (DESIGN.md "hand-off kinds").
  HandOff handoff(int from_task, int to) const {
    const int from = p_.tasks[from_task].rank;
    if (from == to) return HandOff::kLocal;
    if (!p_.crosses_node(from, to)) return HandOff::kPeerFlag;
    return HandOff::kProxy;
  }

  // The proxy carries writes into another node's memory, never reads of it: a task that would
  // load a rank's data across nodes is an error naming the task (the lowering puts every
  // movement in the sender's hands, so only a hand-written pattern can reach this).
  void check_remote_reads() const {
    for (const Task& t : p_.tasks) {
      for (const Box& b : t.reads) {
        if (!p_.crosses_node(t.rank, b.rank)) continue;
        throw UserError(fmt::format(
            "schedule `{}` at {} ranks, {} per node: task `{}` on rank {} reads `{}` of rank {} "
            "on another node; between nodes data only moves by sends through the proxy (the "
            "sender pushes): restructure the operation as a put, or keep both ranks on one node",
            p_.schedule, p_.ranks, p_.per_node(), t.label, t.rank, p_.buffers[b.buffer].name,
            b.rank));
      }
    }
  }

  // A task of `rank` waits for task `producer`.
  void awaited(int producer, int rank) {
    int& first = awaited_first_[producer];
    if (first == rank) return;
    if (first < 0) {
      first = rank;
      return;
    }
    std::vector<int>& by = awaited_more_[producer];
    if (std::find(by.begin(), by.end(), rank) == by.end()) by.push_back(rank);
  }
  bool is_awaited(int producer, int rank) const {
    if (awaited_first_[producer] == rank) return true;
    const std::vector<int>& by = awaited_more_[producer];
    return std::find(by.begin(), by.end(), rank) != by.end();
  }

  // Makes `consumer` wait for `producer` alone (once): the producer's own counter on the
  // consumer's rank.
  void edge(int producer, int consumer) {
    if (producer == consumer || ordered(producer, consumer)) return;
    ordered_[producer] = consumer;
    Task& c = p_.tasks[consumer];
    awaited(producer, c.rank);
    const Task& pr = p_.tasks[producer];
    const uint64_t key = (static_cast<uint64_t>(producer) << 32) | static_cast<uint32_t>(c.rank);
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
  //
  // Also sets *awaited_ops, sorted: the operations with a scatter-writing task that the consumer
  // now waits for by an edge of its own (retire_awaited).
  void wait_for(int consumer, const std::vector<int>& producers, std::vector<int>* awaited_ops) {
    const int rank = p_.tasks[consumer].rank;
    const bool keep = producers.size() >= kKeptWaits &&
                      !std::binary_search(producers.begin(), producers.end(), consumer);
    if (keep) {
      auto k = kept_waits_.find(rank);
      if (k != kept_waits_.end() && same_waits(k->second, consumer, producers)) {
        for (int p : k->second.stamped) ordered_[p] = consumer;
        std::vector<Wait>& waits = p_.tasks[consumer].waits;
        waits.insert(waits.end(), k->second.waits.begin(), k->second.waits.end());
        *awaited_ops = k->second.awaited_ops;
        return;
      }
    }
    const size_t first_wait = p_.tasks[consumer].waits.size();
    // The producers by group, (op, rank or -1), in runs as they come (producers come in runs of
    // one group); then the groups in key order, each group's producers in the order they came:
    // what a map from key to producers gave, without its nodes and vectors for every consumer.
    size_t nruns = 0;
    std::pair<int, int> last_key;
    std::vector<int>* last = nullptr;  // runs_[nruns - 1].second
    for (int p : producers) {
      if (p == consumer || ordered(p, consumer)) continue;
      if (fenced_for_[p] != rank) {
        fenced_for_[p] = rank;
        fenced_[p] = rank_of_[p] == rank || writes_into(p, rank);
      }
      const bool fenced = fenced_[p];
      const std::pair<int, int> key = {op_of_[p], fenced ? -1 : rank_of_[p]};
      if (last == nullptr || key != last_key) {
        last_key = key;
        if (nruns == runs_.size()) runs_.emplace_back();
        runs_[nruns].first = key;
        runs_[nruns].second.clear();
        last = &runs_[nruns].second;
        ++nruns;
      }
      last->push_back(p);
    }
    run_order_.resize(nruns);
    for (size_t i = 0; i < nruns; ++i) run_order_[i] = i;
    const auto by_key = [&](size_t a, size_t b) { return runs_[a].first < runs_[b].first; };
    if (!std::is_sorted(run_order_.begin(), run_order_.end(), by_key))
      std::stable_sort(run_order_.begin(), run_order_.end(), by_key);
    for (size_t i = 0; i < nruns;) {
      const std::pair<int, int> key = runs_[run_order_[i]].first;
      size_t j = i + 1;
      while (j < nruns && runs_[run_order_[j]].first == key) ++j;
      const std::vector<int>* group = &runs_[run_order_[i]].second;
      if (j - i > 1) {
        merged_.clear();
        for (size_t k = i; k < j; ++k) {
          const std::vector<int>& run = runs_[run_order_[k]].second;
          merged_.insert(merged_.end(), run.begin(), run.end());
        }
        group = &merged_;
      }
      i = j;
      const std::vector<int>& set = *group;
      const int op = key.first;
      if (set.size() == 1 || op < 0) {
        for (int p : set) edge(p, consumer);
        continue;
      }
      std::map<std::vector<int>, int>& done = set_done_[static_cast<size_t>(rank)];
      auto it = done.find(set);
      if (it == done.end()) {
        const Task& first = p_.tasks[set.front()];
        const int ev = p_.add_event(
            rank, fmt::format("{}+{}@r{}.done", first.label, set.size() - 1, first.rank));
        for (int p : set) {
          p_.tasks[p].signals.push_back(Signal{ev, handoff(p, rank)});
          awaited(p, rank);
        }
        it = done.emplace(set, ev).first;
      }
      for (int p : set) ordered_[p] = consumer;
      p_.tasks[consumer].waits.push_back(Wait{it->second, static_cast<int64_t>(set.size()), 0});
    }
    awaited_ops->clear();
    for (int p : producers) {
      if (ordered_[p] != consumer || op_of_[p] < 0 || !scatters_[p]) continue;
      // One entry per run: an all-to-all's readers wait for thousands of its senders.
      if (awaited_ops->empty() || awaited_ops->back() != op_of_[p])
        awaited_ops->push_back(op_of_[p]);
    }
    std::sort(awaited_ops->begin(), awaited_ops->end());
    awaited_ops->erase(std::unique(awaited_ops->begin(), awaited_ops->end()), awaited_ops->end());
    if (!keep) return;
    KeptWaits& k = kept_waits_[rank];
    k.producers = producers;
    k.ops.clear();
    k.stamped.clear();
    for (int p : producers) {
      if (ordered_[p] == consumer) k.stamped.push_back(p);
      const int op = op_of_[p];
      if (op >= 0 && (k.ops.empty() || k.ops.back().first != op))
        k.ops.push_back({op, whole_[op] == consumer});
    }
    std::sort(k.ops.begin(), k.ops.end());
    k.ops.erase(std::unique(k.ops.begin(), k.ops.end()), k.ops.end());
    k.waits.assign(p_.tasks[consumer].waits.begin() + static_cast<std::ptrdiff_t>(first_wait),
                   p_.tasks[consumer].waits.end());
    k.awaited_ops = *awaited_ops;
  }

  // The last wait_for of a rank's consumer with kKeptWaits producers or more, and what it gave:
  // every combine reducer of a rank has all the world's senders as producers (8,192 at 64 ranks),
  // and each grouped them, looked their counter up by the whole set and stamped them alike. What
  // wait_for does depends only on the consumer's rank, its producers, and which of their
  // operations the consumer already waits for as a whole (whole_; no other edge into a consumer
  // is made before its wait_for): where those are the same, the counters exist already (each is
  // found by its rank and producers), and the next consumer gets the same waits.
  struct KeptWaits {
    std::vector<int> producers;
    std::vector<std::pair<int, bool>> ops;  // producers' operations: waited for whole or not
    std::vector<int> stamped;               // the producers given an edge or a counter (ordered_)
    std::vector<Wait> waits;
    std::vector<int> awaited_ops;
  };
  static constexpr size_t kKeptWaits = 64;
  bool same_waits(const KeptWaits& k, int consumer, const std::vector<int>& producers) const {
    if (k.producers != producers) return false;
    for (const auto& [op, whole] : k.ops) {
      if ((whole_[op] == consumer) != whole) return false;
    }
    return true;
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
        awaited(pt, c.rank);
      }
      it = all_done_.emplace(key, ev).first;
    }
    if (!all_waits_.insert({consumer, it->second}).second) return;
    whole_[op] = consumer;
    c.waits.push_back(Wait{it->second, static_cast<int64_t>(producers.size()), 0});
  }

  // Calls fn(w) for the tasks w of operation `op` whose writes overlap what task t reads, from the
  // index of write boxes (a task once per box of t it overlaps). A query that finds many writers
  // is kept: the workers of a grouped GEMM each read all of X, which every sender of an
  // all-to-all scatters into, and asked the index the same question once per worker.
  template <typename F>
  void writers_of(int t, int op, F&& fn) {
    for (const Box& r : p_.tasks[t].reads) {
      auto it = writes_.find({r.rank, r.buffer, op});
      if (it == writes_.end()) continue;
      const uint64_t h = query_hash(op, r);
      const WriterQuery* kept = nullptr;
      if (auto b = writer_queries_.find(h); b != writer_queries_.end()) {
        for (const WriterQuery& q : b->second) {
          if (q.op == op && q.box->rank == r.rank && q.box->buffer == r.buffer &&
              q.box->lo == r.lo && q.box->hi == r.hi) {
            kept = &q;
            break;
          }
        }
      }
      const BoxIndex& index = it->second;
      if (kept != nullptr) {
        for (const auto& [begin, end] : kept->runs) {
          for (size_t i = begin; i < end; ++i) fn(index.task(i));
        }
        continue;
      }
      std::vector<std::pair<size_t, size_t>>& found = found_;  // reused: most find a few boxes
      found.clear();
      size_t writers = 0;
      index.overlapping(p_, r, [&](size_t begin, size_t end) {
        found.emplace_back(begin, end);
        writers += end - begin;
        for (size_t i = begin; i < end; ++i) fn(index.task(i));
      });
      if (writers >= kKeptQuery) writer_queries_[h].push_back(WriterQuery{op, &r, found});
    }
  }

  // A kept writers_of query: the box (a task's read, which lives as long as the plan) and what it
  // found, as runs of the index's writers (BoxIndex::task): a combine's reducer finds every
  // sender of the world, 8,192 at 64 ranks, in one run (held as task numbers, each reducer's
  // query was 32 KB kept).
  struct WriterQuery {
    int op;
    const Box* box;
    std::vector<std::pair<size_t, size_t>> runs;
  };
  static constexpr size_t kKeptQuery = 16;
  static uint64_t query_hash(int op, const Box& b) {
    uint64_t h = 1469598103934665603ull;
    const auto mix = [&](int64_t v) { h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull; };
    mix(op);
    mix(b.rank);
    mix(b.buffer);
    for (int64_t v : b.lo) mix(v);
    for (int64_t v : b.hi) mix(v);
    return h;
  }

  // 1. Data edges: the tasks of the operations t's operation is `after` (with .tile/.chunk only
  // those whose writes overlap what t reads; without, all of them that announce to t's rank), and
  // earlier tasks of t's own operation whose writes it reads.
  //
  // An operation with no task that concerns t's rank (an in-place all-reduce at one rank, a put
  // from another rank only) stands for what it waits for: t waits for those, as a whole, so that
  // `c after b after a` orders c after a on every rank even where b is empty. (Without it, c
  // raced with a at R 1: tests/fuzz/mks_gen.h found it.)
  void data_edges(int t, std::vector<int>* producers) {
    const Task& task = p_.tasks[t];
    const compiler::OpInstance& op = p_.source->ops[task.op];
    auto whole = [&](int o) {
      const std::vector<int>& all = by_op_rank_[o][task.rank];
      if (all.size() >= 2) {
        whole_op_edge(o, t);
      } else {
        producers->insert(producers->end(), all.begin(), all.end());
      }
    };
    std::vector<int> empty_ops;  // dependencies with no task on this rank: their own stand in
    for (const compiler::Dependency& d : op.deps) {
      if (by_op_rank_[d.op][task.rank].empty()) {
        empty_ops.push_back(d.op);
      } else if (d.granule == compiler::Granule::kAll) {
        whole(d.op);
      } else {
        writers_of(t, d.op, [&](int pt) { producers->push_back(pt); });
      }
    }
    std::vector<int> seen;
    while (!empty_ops.empty()) {
      const int o = empty_ops.back();
      empty_ops.pop_back();
      if (std::find(seen.begin(), seen.end(), o) != seen.end()) continue;
      seen.push_back(o);
      for (const compiler::Dependency& d : p_.source->ops[o].deps) {
        if (by_op_rank_[d.op][task.rank].empty()) {
          empty_ops.push_back(d.op);
        } else {
          whole(d.op);
        }
      }
    }
    writers_of(t, task.op, [&](int pt) {
      if (pt < t) producers->push_back(pt);
    });
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

  // 2. Credits: a writer waits for the tasks earlier in program order, of any rank, that read or
  // write what it overwrites on the rank written, unless those wait for the writer's operation
  // themselves.
  //
  // Only the frontier: the accesses to that rank's elements (by its tasks and its peers',
  // processed in program order) that no later write of that rank has covered. An access a write
  // covers and waits for is ordered before every later writer of its elements through that write,
  // so it leaves the frontier (a chain of n all-reduces in place over one tensor costs n, not n^2,
  // credits). A write of an operation with dependencies on later operations supersedes nothing
  // (those could make a later writer skip it).
  void credits(int w, std::vector<int>* producers,
               std::vector<std::pair<LiveSpanIndex<Access>*, size_t>>* superseded) {
    const Task& writer = p_.tasks[w];
    for (const Box& wb : writer.writes) {
      const auto& parts = parts_[part_of(wb.rank, wb.buffer)];
      if (parts.empty()) continue;
      const auto [first, end] = flat_span(p_.buffers[wb.buffer], wb);
      const Columns wc = columns(p_.buffers[wb.buffer], wb);
      for (const auto& [scatter_op, index] : parts) {
        // Scatter writes of one operation fill disjoint elements by construction (plan.h): the
        // writer's own operation's part is skipped whole.
        if (wb.scatter && scatter_op == writer.op) continue;
        LiveSpanIndex<Access>* idx = index;  // not a structured binding: captured below
        idx->overlapping(first, end, [&](size_t h) {
          const Access& a = idx->entry(h).value;
          const int x = a.task;
          const Task& other = p_.tasks[x];
          if (x == w || !a.columns.meet(wc) || !a.box->overlaps(wb)) return;
          // Earlier in program order: an earlier operation, or an earlier task of the same one
          // (every live access is: tasks go live once processed, in task order). If the earlier
          // task waits for the writer's operation, it reads the new data, not the old.
          if (other.op != writer.op && op_reach_[other.op][writer.op]) return;
          // (Where the rank written has no tasks in this plan, the tasks that could order the
          // landings are missing: its own plan checks it.)
          if (a.write && p_.crosses_node(other.rank, wb.rank) &&
              p_.crosses_node(writer.rank, wb.rank) && p_.has_tasks_of(wb.rank))
            unordered_remote_writes(x, w, wb);
          producers->push_back(x);
          if ((writer.rank == wb.rank || !a.write) && !forward_[writer.op] &&
              (contains(wb, *a.box) || covered_by(idx, h, writer, wb, *a.box)))
            superseded->push_back({idx, h});
        });
      }
    }
  }

  // An earlier write by a peer that task t waits for, and whose box one of t's accesses covers,
  // leaves the frontier once t's access is on it: a later writer of those elements waits for t's
  // access (a credit), hence for the write. This keeps a peer's write into a ring slot from
  // adding a credit edge where the slot's reader, which waited for that write, already gives one:
  // every sample's plan is the same as before peers' accesses went on the frontier. (A rank's
  // own writes could retire the same way; that would drop edges from today's kernels, which
  // waits for a GPU run.) As with writes, an operation with dependencies on later operations
  // retires nothing.
  //
  // Only parts that can hold such a write are visited: the unscattered accesses, and the scatter
  // writes of an operation t waits for as a whole or of which it waits for a scatter-writing task
  // (an all-to-all's part holds every sender's write into the rank, and its senders wait for none
  // of each other: visiting it from each of them was quadratic, 9.5 s of the all-to-all's 10 s at
  // 64 ranks).
  //
  // awaited_ops: the operations with a scatter-writing task that t waits for by an edge of its
  // own, sorted (wait_for's).
  void retire_awaited(int t, const std::vector<int>& awaited_ops,
                      std::vector<std::pair<LiveSpanIndex<Access>*, size_t>>* superseded) {
    const Task& task = p_.tasks[t];
    if (forward_[task.op]) return;
    auto may_be_awaited = [&](int op) {
      return op < 0 || whole_[op] == t ||
             std::binary_search(awaited_ops.begin(), awaited_ops.end(), op);
    };
    for (const std::vector<Box>* boxes : {&task.reads, &task.writes}) {
      for (const Box& mine : *boxes) {
        const auto& parts = parts_[part_of(mine.rank, mine.buffer)];
        if (parts.empty()) continue;
        const auto [first, end] = flat_span(p_.buffers[mine.buffer], mine);
        for (const auto& [scatter_op, index] : parts) {
          if (!may_be_awaited(scatter_op)) continue;
          LiveSpanIndex<Access>* idx = index;  // not a structured binding: captured below
          // Only a peer's write inside `mine` can be covered: one over a whole buffer (an
          // all-to-all's) is not even visited from its readers' chunks.
          idx->contained_marked(first, end, [&](size_t other) {
            const Access& a = idx->entry(other).value;
            if (a.task != t && a.write && a.box->rank != p_.tasks[a.task].rank &&
                contains(mine, *a.box) && ordered(a.task, t))
              superseded->push_back({idx, other});
          });
        }
      }
    }
  }

  // `task` named with its operation's place in the schedule.
  std::string placed(int task) const {
    const Task& t = p_.tasks[task];
    const compiler::OpInstance& o = p_.source->ops[t.op];
    if (file_ == nullptr || o.decl == nullptr)
      return fmt::format("`{}` on rank {}", t.label, t.rank);
    const dsl::LineCol lc = file_->line_col(o.decl->span.begin);
    return fmt::format("`{}` on rank {} ({}:{}:{})", t.label, t.rank, file_->path(), lc.line,
                       lc.col);
  }

  // Task w overwrites, on rank wb.rank of another node, what task x wrote there from another node
  // too. The proxies land a write in that node before the signals they send into it, so only a
  // task of that node can wait for the landing; neither can, and no task there that waited for
  // x's write covered it (retire_awaited), so nothing orders the two landings.
  [[noreturn]] void unordered_remote_writes(int x, int w, const Box& wb) const {
    throw UserError(fmt::format(
        "schedule `{}` at {} ranks, {} per node: {} overwrites elements of `{}` on rank {} "
        "(another "
        "node) that {} wrote there first, and nothing orders the two writes' landing: a write "
        "into another node is ordered only before tasks of that node, and no task of rank {} "
        "that waits for the first write reads or writes all of it before the second; have one "
        "(`after {}.chunk` on an operation of that rank that uses the data), write the elements "
        "once, or keep the ranks on one node",
        p_.schedule, p_.ranks, p_.per_node(), placed(w), p_.buffers[wb.buffer].name, wb.rank,
        placed(x), wb.rank, p_.source->ops[p_.tasks[x].op].name));
  }

  // Whether the writes of `writer`'s operation on its rank that waited for frontier access h
  // (of index idx, box `accessed`) now cover all of it, with `wb`, writer's box, counted in: a
  // reader of a whole ring slot is overwritten chunk by chunk, each chunk's writer waiting for it,
  // and no single chunk contains it. Once they do, every later writer of those elements waits for
  // one of these writes (they are on the frontier), which waited for the access, so it leaves the
  // frontier: without that a slot's readers piled up, one more per lap of the ring, and the
  // credits of a ring's R steps grew as R^2. Only the parts disjoint from those already counted
  // count (two writes of one operation to one element are ordered, not both new coverage); a write
  // of another operation or rank starts the count again.
  bool covered_by(LiveSpanIndex<Access>* idx, size_t h, const Task& writer, const Box& wb,
                  const Box& accessed) {
    Coverage& c = coverage_[{idx, h}];
    if (c.op != writer.op || c.rank != writer.rank) c = Coverage{writer.op, writer.rank, 0, {}};
    Box part = wb;
    for (size_t d = 0; d < part.lo.size(); ++d) {
      part.lo[d] = std::max(wb.lo[d], accessed.lo[d]);
      part.hi[d] = std::min(wb.hi[d], accessed.hi[d]);
    }
    for (const Box& q : c.parts) {
      if (q.overlaps(part)) return false;
    }
    c.covered += part.elements();
    c.parts.push_back(std::move(part));
    if (c.covered < accessed.elements()) return false;
    coverage_.erase({idx, h});
    return true;
  }

  static bool contains(const Box& outer, const Box& inner) {
    for (size_t d = 0; d < outer.lo.size(); ++d) {
      if (inner.lo[d] < outer.lo[d] || inner.hi[d] > outer.hi[d]) return false;
    }
    return true;
  }

  // 3. Launch fences: a write into (or a signal to) another rank waits for that rank's fence.
  void fence(int t) {
    const Task& task = p_.tasks[t];
    // Ascending and once each, as a set gave them; most tasks write only their own rank, and a
    // tree set per task was a malloc for each.
    std::vector<int>& peers = fence_peers_;
    peers.clear();
    for (const Box& b : task.writes) {
      if (b.rank != task.rank) peers.push_back(b.rank);
    }
    if (task.kind == TaskKind::kSignalOnly) {
      const int peer = static_cast<int>(args_as<abi::SignalArgs>(task).peer);
      if (peer != task.rank) peers.push_back(peer);
    }
    if (peers.empty()) return;
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    for (int d : peers) edge(fences_.at(d), t);
  }

  Plan& p_;
  const dsl::SourceFile* file_;
  std::vector<std::vector<std::vector<int>>> by_op_rank_;
  std::map<std::tuple<int, int, int>, BoxIndex> writes_;  // (rank, buffer, op) -> its writes
  // (rank, buffer, operation of a scatter write or -1) -> the accesses of every task to that
  // rank's buffer, live while on the credit frontier; one operation's scatter writes are a part
  // of their own, which their operation's other scatter writes never need to visit.
  std::map<std::tuple<int, int, int>, LiveSpanIndex<Access>> frontier_;
  // (rank, buffer) -> its parts of the frontier: (operation of the scatter writes or -1, index).
  // Indexed by part_of(rank, buffer): looked up for every box of every task.
  std::vector<std::vector<std::pair<int, LiveSpanIndex<Access>*>>> parts_;
  size_t part_of(int rank, int buffer) const {
    return static_cast<size_t>(rank) * p_.buffers.size() + static_cast<size_t>(buffer);
  }
  // Task t's entries on the frontier: own_[own_at_[t] .. own_at_[t + 1]) (flat: a vector per
  // task was an allocation and a free for each).
  std::vector<std::pair<LiveSpanIndex<Access>*, size_t>> own_;
  std::vector<size_t> own_at_;
  std::vector<char> forward_;  // operation -> waits (transitively) for a later one
  // Frontier accesses partly overwritten by the writes of one operation on one rank, each of
  // which waited for them (covered_by).
  struct Coverage {
    int op = -1, rank = -1;
    int64_t covered = 0;
    std::vector<Box> parts;
  };
  std::map<std::pair<const void*, size_t>, Coverage> coverage_;
  std::vector<int> fence_peers_;  // fence's scratch
  // wait_for's scratch: runs of producers of one group, their order by group, and a group's
  // producers gathered from several runs.
  std::vector<std::pair<std::pair<int, int>, std::vector<int>>> runs_;
  std::vector<size_t> run_order_;
  std::vector<int> merged_;
  std::map<int, int> fences_;
  std::map<int, int> ends_;
  // Producer task -> the ranks of tasks waiting for it (a few; a set of pairs cost a tree node
  // per signal).
  // The first such rank inline (most producers have one), the others beside it.
  std::vector<int> awaited_first_;
  std::vector<std::vector<int>> awaited_more_;
  std::vector<std::vector<char>> op_reach_;
  // notified(t), flat: notified_ranks_[notified_at_[t] .. notified_at_[t + 1]).
  std::vector<size_t> notified_at_;
  std::vector<int> notified_ranks_;
  // Per task, apart from the tasks themselves: a consumer's producers (8,192 for a combine's
  // reducer at 64 ranks) are each looked at, and a Task's fields lie a cache miss apart.
  std::vector<int> op_of_, rank_of_;
  std::vector<char> scatters_;  // task -> it writes a scatter box
  // The ranks task t writes into, ascending: written_ranks_[written_at_[t] .. written_at_[t + 1]).
  std::vector<size_t> written_at_;
  std::vector<int> written_ranks_;
  // wait_for's answer for producer t, whether it runs on or writes into rank fenced_for_[t]: a
  // rank's reducers of a combine ask it of the same senders one after another, and looking it up
  // in written_ranks_ (2 MB at 64 ranks) missed the cache for each.
  std::vector<int> fenced_for_;
  std::vector<char> fenced_;
  std::unordered_map<uint64_t, std::vector<WriterQuery>> writer_queries_;  // writers_of's kept
  std::vector<std::pair<size_t, size_t>> found_;                           // writers_of's scratch
  std::vector<int> ordered_;  // task -> the last consumer given an edge from it (ordered())
  std::vector<int> whole_;    // operation -> the last consumer waiting for all of it (ordered())
  // (producer << 32 | rank) -> its counter; hashed: every edge looks it up, and as a tree (with
  // all_done_, of the same type then) it was 4.6% of gemm_allreduce's rank 0 of 64.
  std::unordered_map<uint64_t, int> done_;
  // [rank]: producers -> counter (by rank first: a lookup copied the producers into its key).
  std::vector<std::map<std::vector<int>, int>> set_done_;
  std::unordered_map<int, KeptWaits> kept_waits_;  // rank -> its last kept wait_for
  std::map<std::pair<int, int>, int> all_done_;    // (operation, rank) -> its counter
  std::set<std::pair<int, int>> all_waits_;        // (consumer task, counter)
};

}  // namespace

// Renumbers each rank's counters: those signalled by a task of another rank first, then those
// only its own tasks signal, each group in creation order (issue 35). A rank's counters that its
// peers signal are then numbered by the consumers that wait for peers alone, so a plan that leaves
// out a peer's private compute (LowerOptions::private_ops) still gives the peer the world's slots
// for what the planned rank signals.
void number_counters(Plan& plan) {
  std::vector<char> foreign(plan.events.size(), 0);
  for (const Task& t : plan.tasks) {
    for (const Signal& s : t.signals) {
      if (plan.events[s.event].rank != t.rank) foreign[s.event] = 1;
    }
  }
  std::vector<int> next(plan.counters.size(), 0);
  for (const char pass : {1, 0}) {
    for (size_t e = 0; e < plan.events.size(); ++e) {
      if (foreign[e] == pass) plan.events[e].slot = next[plan.events[e].rank]++;
    }
  }
}

void derive_dependencies(Plan& plan, const dsl::SourceFile* file) {
  Deriver(plan, file).run();
  number_counters(plan);
}

}  // namespace mkc::plan
