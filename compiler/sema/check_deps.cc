// Dependencies, races and cycles. resolve_deps() turns each instance's `after` clauses into edges
// to the instances they name (the same iteration, an indexed one, or every one), checking that a
// per-tile or per-chunk wait is on something that produces data the waiter reads. Then two rules
// make a schedule safe: no read of data an earlier operation writes without a path of waits to it
// (check_races), and no cycle of waits (check_cycles) — every rank runs the same schedule, so a
// cycle through a comm operation is a deadlock across ranks. A third keeps the kernel's order the
// schedule's: no wait on a later operation that touches the same data (check_forward_waits).
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>
#include <tuple>

#include "compiler/sema/checker.h"

namespace mkc::compiler {

using dsl::DiagKind;
using dsl::Span;

namespace {

std::vector<int> read_tensors(const OpInstance& op) {
  std::vector<int> t;
  for (const TensorUse& u : op.inputs) t.push_back(u.tensor);
  for (const auto& [key, idx] : op.tensor_args) {
    if (key != "counts" || op.kind == OpKind::kGroupedGemm) t.push_back(idx);
  }
  // An accumulating attention reads the running output it merges into.
  if (accumulates(op)) t.push_back(op.outputs[0].tensor);
  return t;
}

std::vector<int> written_tensors(const OpInstance& op) {
  std::vector<int> t;
  for (const TensorUse& u : op.outputs) t.push_back(u.tensor);
  if (op.kind == OpKind::kAllReduce && op.outputs.empty()) t.push_back(op.inputs[0].tensor);
  if (op.kind == OpKind::kAllToAll) t.push_back(op.tensor_args.at("counts"));
  return t;
}

bool reads_what_writes(const OpInstance& reader, const OpInstance& writer) {
  const std::vector<int> r = read_tensors(reader);
  for (int w : written_tensors(writer)) {
    if (std::find(r.begin(), r.end(), w) != r.end()) return true;
  }
  return false;
}

// A slice of a tensor an instance reads or writes: the tensor and the leading-dimension index. Two
// slices of a tensor overlap when one's index is a prefix of the other's.
struct Slice {
  int tensor;
  const std::vector<int64_t>* index;  // null: the whole tensor
  Span span;
};

// Tensor uses with their slices, plus whole tensors named otherwise (named arguments).
std::vector<Slice> slices(const std::vector<TensorUse>& uses, const std::vector<int>& whole,
                          Span at) {
  std::vector<Slice> out;
  for (const TensorUse& u : uses) out.push_back(Slice{u.tensor, &u.index, u.span});
  for (int t : whole) {
    bool present = false;
    for (const TensorUse& u : uses) present |= u.tensor == t;
    if (!present) out.push_back(Slice{t, nullptr, at});
  }
  return out;
}

// The last writer of what a slice reads, over a sweep in program order: per tensor, a trie of the
// leading indices written. Two slices overlap when one's index is a prefix of the other's, so the
// writers a read overlaps are those on its path from the root (a prefix of it) and those under its
// node (it is a prefix of theirs). A node keeps the last writer of exactly its slice and the last
// writer of anything under it; writers are recorded in program order, so the last is the latest.
// A read or a write costs its index's length, not the tensor's writers.
class LastWriters {
 public:
  explicit LastWriters(size_t tensors) : roots_(tensors, -1) {}

  // The last recorded writer of a slice overlapping `s`, or -1.
  int last(const Slice& s, uint64_t* steps) const {
    int node = roots_.at(static_cast<size_t>(s.tensor));
    int best = -1;
    const size_t depth = s.index == nullptr ? 0 : s.index->size();
    for (size_t i = 0; node >= 0 && i < depth; ++i) {
      ++*steps;
      best = std::max(best, nodes_[node].here);
      auto it = children_.find({node, (*s.index)[i]});
      node = it == children_.end() ? -1 : it->second;
    }
    return node >= 0 ? std::max(best, nodes_[node].below) : best;
  }

  void record(const Slice& s, int writer, uint64_t* steps) {
    int node = roots_.at(static_cast<size_t>(s.tensor));
    if (node < 0) node = roots_[s.tensor] = new_node();
    const size_t depth = s.index == nullptr ? 0 : s.index->size();
    for (size_t i = 0; i < depth; ++i) {
      ++*steps;
      nodes_[node].below = writer;
      auto [it, fresh] = children_.try_emplace({node, (*s.index)[i]}, -1);
      if (fresh) it->second = new_node();
      node = it->second;
    }
    nodes_[node].below = writer;
    nodes_[node].here = writer;
  }

 private:
  struct Node {
    int here = -1;   // the last writer of exactly this slice
    int below = -1;  // the last writer of this slice or of one inside it
  };
  int new_node() {
    nodes_.emplace_back();
    return static_cast<int>(nodes_.size()) - 1;
  }
  std::vector<int> roots_;
  std::vector<Node> nodes_;
  std::map<std::pair<int, int64_t>, int> children_;
};

// Which of `targets` each of `from` waits for, directly or through others, as bits: one pass over
// the waits the instances of `from` reach, not one walk per reader (a walk per reader cost readers
// x waits: a minute for a schedule whose loops each wait on a whole loop before). Waits may form
// cycles (reported after the races), so the closure is taken over strongly connected components,
// found in the order Tarjan's algorithm completes them: a component comes after every component
// it waits for. The bits are only the targets' (the writers that reads without a direct wait
// name), so the closure costs the waits reached times the targets / 64 at most.
class WaitClosure {
 public:
  // The loops run over raw arrays: this is the checker's hottest code when it runs, and mkc's
  // default build (Bazel's fastbuild) does not inline the containers' accessors. `targets` is
  // sorted, so nearby instances have nearby bits.
  WaitClosure(const std::vector<OpInstance>& ops, const std::vector<int>& from,
              const std::vector<int>& targets, uint64_t* steps)
      : words_((targets.size() + 63) / 64), bit_(ops.size(), -1), comp_(ops.size(), -1) {
    for (size_t b = 0; b < targets.size(); ++b) bit_[targets[b]] = static_cast<int>(b);
    const int n = static_cast<int>(ops.size());
    std::vector<int> index_v(n, -1), low_v(n, 0), stack_v;
    std::vector<char> on_stack_v(n, 0);
    int* index = index_v.data();
    int* low = low_v.data();
    char* on_stack = on_stack_v.data();
    int* comp = comp_.data();
    // The DFS's path: an instance and the next of its waits to visit.
    std::vector<std::pair<int, size_t>> walk;
    std::vector<std::vector<int>> members;
    int counter = 0;
    for (int root : from) {
      if (index[root] >= 0) continue;
      walk.push_back({root, 0});
      while (!walk.empty()) {
        const int v = walk.back().first;
        size_t& next = walk.back().second;
        if (next == 0) {
          index[v] = low[v] = counter++;
          stack_v.push_back(v);
          on_stack[v] = 1;
        }
        const Dependency* deps = ops[v].deps.data();
        const size_t count = ops[v].deps.size();
        while (next < count && index[deps[next].op] >= 0) {
          const int w = deps[next++].op;
          ++*steps;
          if (on_stack[w] && index[w] < low[v]) low[v] = index[w];
        }
        if (next < count) {
          ++*steps;
          walk.push_back({deps[next++].op, 0});
          continue;
        }
        walk.pop_back();
        if (!walk.empty() && low[v] < low[walk.back().first]) low[walk.back().first] = low[v];
        if (low[v] != index[v]) continue;
        members.emplace_back();
        for (int w = -1; w != v;) {
          w = stack_v.back();
          stack_v.pop_back();
          on_stack[w] = 0;
          comp[w] = static_cast<int>(members.size()) - 1;
          members.back().push_back(w);
        }
      }
    }
    // Each component's set, and the words [lo, hi) outside which it is empty: sets are mostly
    // runs of nearby instances, so merging one costs its run, not the whole width.
    bits_.assign(members.size() * words_, 0);
    std::vector<size_t> lo_v(members.size(), words_), hi_v(members.size(), 0);
    std::vector<int> merged_v(members.size(), -1);
    size_t* lo = lo_v.data();
    size_t* hi = hi_v.data();
    int* merged = merged_v.data();
    uint64_t* bits = bits_.data();
    const int* bit = bit_.data();
    for (int c = 0; c < static_cast<int>(members.size()); ++c) {
      uint64_t* mine = bits + c * words_;
      const auto add = [&](int w) {
        if (bit[w] < 0) return;
        const size_t word = static_cast<size_t>(bit[w]) / 64;
        mine[word] |= uint64_t{1} << (bit[w] % 64);
        if (word < lo[c]) lo[c] = word;
        if (word + 1 > hi[c]) hi[c] = word + 1;
      };
      // In a cycle every member reaches every member, itself included.
      if (members[c].size() > 1) {
        for (int v : members[c]) add(v);
      }
      for (int v : members[c]) {
        const Dependency* deps = ops[v].deps.data();
        const size_t count = ops[v].deps.size();
        *steps += count;
        for (size_t k = 0; k < count; ++k) {
          const int w = deps[k].op;
          add(w);
          const int dc = comp[w];
          if (dc == c || merged[dc] == c || lo[dc] >= hi[dc]) continue;
          merged[dc] = c;
          const uint64_t* theirs = bits + dc * words_;
          *steps += hi[dc] - lo[dc];
          for (size_t b = lo[dc]; b < hi[dc]; ++b) mine[b] |= theirs[b];
          if (lo[dc] < lo[c]) lo[c] = lo[dc];
          if (hi[dc] > hi[c]) hi[c] = hi[dc];
        }
      }
    }
  }

  // Whether `from` (one of the constructor's) waits for `to` (one of its targets), through at
  // least one wait.
  bool waits_for(int from, int to) const {
    const int b = bit_[to];
    return (bits_[comp_[from] * words_ + b / 64] >> (b % 64)) & 1;
  }

 private:
  size_t words_;
  std::vector<int> bit_;   // an instance's bit, -1 for an instance that is no target
  std::vector<int> comp_;  // an instance's component, -1 where no instance of `from` reaches
  std::vector<uint64_t> bits_;
};

}  // namespace

void Checker::resolve_deps() {
  // Instances by operation name, in program order.
  std::map<std::string, std::vector<int>> by_name;
  for (size_t i = 0; i < out_.ops.size(); ++i)
    by_name[out_.ops[i].name].push_back(static_cast<int>(i));
  // Instances of an operation keyed by the values of the loop variables a reference fixes:
  // `after x` from inside loops x shares (by name) names x's instances at this iteration of them,
  // and `after x[e]` fixes x's innermost loop to e as well. One index per operation and set of
  // fixed loops, built on first use: a reference costs the instances it names, not all of x's.
  using Key = std::vector<int64_t>;
  std::map<std::pair<int, std::vector<bool>>, std::map<Key, std::vector<int>>> indexes;
  const auto named = [&](int decl, const std::vector<bool>& fixed,
                         const Key& values) -> const std::vector<int>* {
    auto [index, fresh] = indexes.try_emplace({decl, fixed});
    if (fresh) {
      const DeclInfo& info = decls_[decl];
      const std::vector<int>& all = by_name[info.decl->name];
      out_.work.named += all.size();
      for (int t : all) {
        const LoopEnv& env = env_of(t);
        Key key;
        for (size_t i = 0; i < fixed.size(); ++i) {
          if (fixed[i]) key.push_back(env.at(info.loop_vars[i]));
        }
        index->second[key].push_back(t);
      }
    }
    auto found = index->second.find(values);
    return found == index->second.end() ? nullptr : &found->second;
  };
  std::set<std::pair<uint32_t, std::string>> reported;
  // combine reverses the latest instance of its dispatch that precedes it.
  for (size_t i = 0; i < out_.ops.size(); ++i) {
    OpInstance& op = out_.ops[i];
    if (op.kind != OpKind::kCombine) continue;
    const std::string& disp = decls_[op.dispatch_op].decl->name;
    op.dispatch_op = -1;
    for (int t : by_name[disp]) {
      if (t < static_cast<int>(i)) op.dispatch_op = t;
    }
    if (op.dispatch_op < 0) {
      error(DiagKind::kUnproducedDependency, op.decl->span,
            fmt::format("`{}` combines the rows `{}` dispatched, but no `{}` runs before it",
                        op.name, disp, disp))
          .set_hint(fmt::format("declare `{}` before `{}`", disp, op.name));
    }
  }
  // What an instance waits for already: a reference named again (`after x, x`) adds no work, and
  // an instance named twice no second wait, so an instance has at most three waits per instance
  // of the schedule, whatever the source repeats. waited[3 t + g] is the last instance that waits
  // for t with granule g.
  std::vector<int> waited(3 * out_.ops.size(), -1);
  for (const PendingDeps& p : pending_) {
    OpInstance& inst = out_.ops[p.instance];
    std::set<std::tuple<int, Granule, bool, int64_t>> refs;
    for (const dsl::Clause& c : inst.decl->clauses) {
      for (const dsl::DepRef& d : c.deps) {
        auto sit = symbols_.find(d.target);
        if (sit == symbols_.end()) {
          if (reported.insert({d.span.begin, "undef"}).second)
            undefined(d.target, d.target_span, "operation", {Symbol::kOp});
          continue;
        }
        if (sit->second.kind != Symbol::kOp) {
          if (reported.insert({d.span.begin, "kind"}).second) {
            error(DiagKind::kWrongKind, d.target_span,
                  fmt::format("`after` waits for operations, but `{}` is {}", d.target,
                              symbol_kind_name(sit->second.kind)))
                .note(sit->second.span, "declared here");
          }
          continue;
        }
        const DeclInfo& target = decls_[sit->second.index];
        const bool target_comm = target.decl->comm;
        Granule g = d.granule == "tile"    ? Granule::kTile
                    : d.granule == "chunk" ? Granule::kChunk
                                           : Granule::kAll;
        if ((g == Granule::kTile && target_comm) || (g == Granule::kChunk && !target_comm)) {
          if (reported.insert({d.span.begin, "granule"}).second) {
            error(DiagKind::kUnproducedDependency, d.span,
                  fmt::format("`{}` is a {} operation: it produces {}s, not {}s", d.target,
                              target_comm ? "comm" : "compute", target_comm ? "chunk" : "tile",
                              d.granule))
                .note(target.decl->span, "declared here")
                .set_hint(
                    fmt::format("write `after {}.{}`", d.target, target_comm ? "chunk" : "tile"));
          }
          continue;
        }
        // The iteration `x[e]` names.
        std::optional<int64_t> at;
        if (d.iteration) {
          if (target.loop_vars.empty()) {
            if (reported.insert({d.span.begin, "iter"}).second) {
              error(
                  DiagKind::kBadArgument, d.span,
                  fmt::format("`{}` is not in a loop, so it has no iterations to index", d.target));
            }
            continue;
          }
          at = eval(*d.iteration, EvalCtx{&p.env, false, 0, false, "iteration"});
          if (!at) continue;
        }
        if (!refs.insert({sit->second.index, g, at.has_value(), at.value_or(0)}).second) continue;
        // Which instances of the target this names: those whose enclosing loops shared with this
        // instance are at this instance's iteration, and at the iteration named.
        const size_t depth = target.loop_vars.size();
        std::vector<bool> fixed(depth, false);
        Key values;
        for (size_t i = 0; i < depth; ++i) {
          if (at && i + 1 == depth) {
            fixed[i] = true;
            values.push_back(*at);
            continue;
          }
          auto a = p.env.find(target.loop_vars[i]);
          if (a == p.env.end()) continue;
          fixed[i] = true;
          values.push_back(a->second);
        }
        // An iteration outside the loop's range (kv[step - 1] at the first step) names nothing.
        const std::vector<int>* named_now = named(sit->second.index, fixed, values);
        if (named_now == nullptr) continue;
        const std::vector<int>& targets = *named_now;
        out_.work.named += targets.size();
        for (int t : targets) {
          if (t == p.instance) {
            if (reported.insert({d.span.begin, "self"}).second) {
              error(DiagKind::kDependencyCycle, d.span,
                    fmt::format("`{}` waits for itself", inst.name))
                  .set_hint("an operation cannot depend on its own completion");
            }
            continue;
          }
          if (g != Granule::kAll && !reads_what_writes(inst, out_.ops[t])) {
            if (reported.insert({d.span.begin, "unproduced"}).second) {
              error(DiagKind::kUnproducedDependency, d.span,
                    fmt::format("`{}` reads nothing that `{}` writes, so no {} of it can feed `{}`",
                                inst.name, d.target, d.granule, inst.name))
                  .note(target.decl->span, fmt::format("`{}` is declared here", d.target))
                  .set_hint(
                      fmt::format("to wait for all of `{}` regardless of data, write `after {}`",
                                  d.target, d.target));
            }
            continue;
          }
          int& last = waited[3 * static_cast<size_t>(t) + static_cast<size_t>(g)];
          if (last == p.instance) continue;
          last = p.instance;
          inst.deps.push_back(Dependency{t, g, d.span});
        }
      }
    }
  }
}

// Every read of data that an earlier operation (in program order) wrote must wait for it: for its
// last writer, which comes from a sweep in program order (LastWriters). Most reads wait for that
// writer directly, which marking the reader's waits answers; the rest ask the closure of the
// waits, built once for their readers and writers. So the check costs the accesses, their
// indices and the waits (plus, only for reads that wait through others, the waits those readers
// reach times the writers they name / 64), where it cost every reader times every writer of the
// tensor, and a walk of the waits per reader.
void Checker::check_races() {
  const int n = static_cast<int>(out_.ops.size());
  uint64_t* steps = &out_.work.races;
  struct Read {
    int reader;
    int writer;
    Slice use;
  };
  std::vector<Read> indirect;  // reads whose reader does not wait for the writer directly
  LastWriters writes(out_.tensors.size());
  std::vector<int> waits_of(n, -1);  // waits_of[t] == c: c waits for t directly
  // What each instance reads through its operands: its inputs, and for an attention that
  // accumulates the slice of O it merges into (`O[1]` is not `O[0]`). Kept for the whole check:
  // the reads recorded below point into it.
  std::vector<std::vector<TensorUse>> read_uses(n);
  for (int c = 0; c < n; ++c) {
    const OpInstance& op = out_.ops[c];
    read_uses[c] = op.inputs;
    if (accumulates(op)) read_uses[c].push_back(op.outputs[0]);
  }
  for (int c = 0; c < n; ++c) {
    const OpInstance& op = out_.ops[c];
    bool marked = false;
    for (const Slice& use : slices(read_uses[c], read_tensors(op), op.decl->span)) {
      const int w = writes.last(use, steps);
      if (w < 0) continue;
      if (!marked) {
        for (const Dependency& d : op.deps) waits_of[d.op] = c;
        *steps += op.deps.size();
        marked = true;
      }
      if (waits_of[w] != c) indirect.push_back(Read{c, w, use});
    }
    // Its own writes come after its reads: an in-place operation reads what an earlier one wrote.
    for (const Slice& sl : slices(op.outputs, written_tensors(op), op.decl->span)) {
      writes.record(sl, c, steps);
    }
  }
  if (indirect.empty()) return;
  std::vector<int> readers, writers;
  for (const Read& r : indirect) {
    readers.push_back(r.reader);
    writers.push_back(r.writer);
  }
  std::sort(writers.begin(), writers.end());
  writers.erase(std::unique(writers.begin(), writers.end()), writers.end());
  readers.erase(std::unique(readers.begin(), readers.end()), readers.end());  // in order already
  const WaitClosure waits(out_.ops, readers, writers, steps);
  std::set<std::pair<const dsl::OpDecl*, const dsl::OpDecl*>> reported;
  for (const Read& r : indirect) {
    if (waits.waits_for(r.reader, r.writer)) continue;
    const OpInstance& reader = out_.ops[r.reader];
    const OpInstance& writer = out_.ops[r.writer];
    if (!reported.insert({reader.decl, writer.decl}).second) continue;
    const std::string& tname = out_.tensors[r.use.tensor].name;
    error(DiagKind::kMissingDependency, r.use.span,
          fmt::format("`{}` reads `{}`, which `{}` writes, but does not wait for `{}`", reader.name,
                      tname, writer.name, writer.name))
        .note(writer.decl->span, fmt::format("`{}` writes `{}` here", writer.name, tname))
        .set_hint(fmt::format("add `after {}.{}` to `{}` (or `after {}` to wait for all of it)",
                              writer.name, op_is_comm(writer.kind) ? "chunk" : "tile", reader.name,
                              writer.name));
  }
}

void Checker::check_cycles() {
  const size_t n = out_.ops.size();
  std::vector<int> color(n, 0), parent(n, -1);
  std::vector<size_t> next(n, 0);
  for (size_t s = 0; s < n; ++s) {
    if (color[s] != 0) continue;
    std::vector<int> stack = {static_cast<int>(s)};
    color[s] = 1;
    while (!stack.empty()) {
      const int v = stack.back();
      const auto& deps = out_.ops[v].deps;
      if (next[v] == deps.size()) {
        color[v] = 2;
        stack.pop_back();
        continue;
      }
      const Dependency& d = deps[next[v]++];
      if (color[d.op] == 0) {
        color[d.op] = 1;
        parent[d.op] = v;
        stack.push_back(d.op);
      } else if (color[d.op] == 1) {
        // v waits for d.op, which is on the stack: the stack from d.op to v is the cycle.
        std::vector<int> cycle;
        for (auto it = std::find(stack.begin(), stack.end(), d.op); it != stack.end(); ++it)
          cycle.push_back(*it);
        report_cycle(cycle);
        return;
      }
    }
  }
}

namespace {

bool slices_overlap(const Slice& a, const Slice& b) {
  if (a.tensor != b.tensor) return false;
  if (a.index == nullptr || b.index == nullptr) return true;
  const size_t n = std::min(a.index->size(), b.index->size());
  return std::equal(a.index->begin(), a.index->begin() + static_cast<std::ptrdiff_t>(n),
                    b.index->begin());
}

// The first tensor both touch with one of them writing it (-1: none).
int conflict(const std::vector<Slice>& a_reads, const std::vector<Slice>& a_writes,
             const std::vector<Slice>& b_reads, const std::vector<Slice>& b_writes) {
  for (const Slice& w : a_writes) {
    for (const std::vector<Slice>* other : {&b_reads, &b_writes}) {
      for (const Slice& s : *other)
        if (slices_overlap(w, s)) return w.tensor;
    }
  }
  for (const Slice& r : a_reads) {
    for (const Slice& w : b_writes)
      if (slices_overlap(r, w)) return r.tensor;
  }
  return -1;
}

}  // namespace

// An operation that waits, directly or through others, for one that comes later in program order
// runs after it on the GPU, while the schedule means it to run before: program order is what the
// reference computes and what the compiler's credits follow. Where the two touch the same data and
// one of them writes it, the kernel would compute something other than the schedule, or race
// (`a = copy(X -> Y) after b` with `b = copy(Z -> Y)` declared after it). Refused, naming both.
// Without a wait on a later instance (the common case) no path can lead forward and nothing more
// is done; with one, the waits' transitive closure as bitsets over the instances (at most 4096,
// the unroll bound: 2 MB), in an order where every instance follows what it waits for (the waits
// are acyclic here: check_cycles ran first).
void Checker::check_forward_waits() {
  const int n = static_cast<int>(out_.ops.size());
  bool forward = false;
  for (int v = 0; v < n && !forward; ++v) {
    for (const Dependency& d : out_.ops[v].deps) forward = forward || d.op > v;
  }
  if (!forward) return;
  // Post-order of the waits: every instance after those it waits for.
  std::vector<int> order;
  std::vector<char> state(n, 0);
  for (int s = 0; s < n; ++s) {
    if (state[s]) continue;
    std::vector<std::pair<int, size_t>> stack = {{s, 0}};
    state[s] = 1;
    while (!stack.empty()) {
      auto& [v, next] = stack.back();
      const auto& deps = out_.ops[v].deps;
      if (next == deps.size()) {
        order.push_back(v);
        stack.pop_back();
        continue;
      }
      const int d = deps[next++].op;
      if (!state[d]) {
        state[d] = 1;
        stack.push_back({d, 0});
      }
    }
  }
  const size_t words = (static_cast<size_t>(n) + 63) / 64;
  std::vector<uint64_t> reach(static_cast<size_t>(n) * words, 0);
  const auto row = [&](int v) { return reach.data() + static_cast<size_t>(v) * words; };
  for (int v : order) {
    uint64_t* r = row(v);
    for (const Dependency& d : out_.ops[v].deps) {
      const uint64_t* from = row(d.op);
      for (size_t w = 0; w < words; ++w) r[w] |= from[w];
      r[d.op / 64] |= uint64_t{1} << (d.op % 64);
    }
  }
  // Each instance's accesses, once.
  std::vector<std::vector<TensorUse>> read_uses(n);
  std::vector<std::vector<Slice>> reads(n), writes(n);
  for (int c = 0; c < n; ++c) {
    const OpInstance& op = out_.ops[c];
    read_uses[c] = op.inputs;
    if (accumulates(op)) read_uses[c].push_back(op.outputs[0]);
    reads[c] = slices(read_uses[c], read_tensors(op), op.decl->span);
    writes[c] = slices(op.outputs, written_tensors(op), op.decl->span);
  }
  std::set<std::pair<const dsl::OpDecl*, const dsl::OpDecl*>> reported;
  for (int a = 0; a < n; ++a) {
    const uint64_t* r = row(a);
    const OpInstance& first = out_.ops[a];
    for (size_t w = static_cast<size_t>(a + 1) / 64; w < words; ++w) {
      uint64_t bits = r[w];
      if (w == static_cast<size_t>(a + 1) / 64) bits &= ~uint64_t{0} << ((a + 1) % 64);
      for (; bits != 0; bits &= bits - 1) {
        const int b = static_cast<int>(w * 64) + __builtin_ctzll(bits);
        const int t = conflict(reads[a], writes[a], reads[b], writes[b]);
        if (t < 0) continue;
        const OpInstance& later = out_.ops[b];
        if (!reported.insert({first.decl, later.decl}).second) continue;
        // Point at the `after` that names `later` when it is a direct wait.
        Span at = first.decl->span;
        for (const Dependency& d : first.deps) {
          if (d.op == b) at = d.span;
        }
        error(DiagKind::kDependencyOrder, at,
              fmt::format("`{}` waits for `{}`, which comes after it in program order, and both "
                          "use `{}` (one writes it): the kernel would run `{}` first, against "
                          "the schedule's order",
                          instance_name(first), instance_name(later), out_.tensors[t].name,
                          instance_name(later)))
            .note(later.decl->span, fmt::format("`{}` is declared here", instance_name(later)))
            .set_hint(later.decl == first.decl
                          ? fmt::format("wait for an earlier iteration (`{}[... - 1]`), or drop "
                                        "the wait",
                                        first.name)
                          : fmt::format("declare `{}` before `{}`, or drop the wait", later.name,
                                        first.name));
      }
    }
  }
}

std::string Checker::instance_name(const OpInstance& op) const {
  return op.iteration >= 0 ? fmt::format("{}[{}]", op.name, op.iteration) : op.name;
}

void Checker::report_cycle(const std::vector<int>& cycle) {
  bool across = false;
  std::string chain;
  for (size_t i = 0; i < cycle.size(); ++i) {
    const OpInstance& op = out_.ops[cycle[i]];
    across |= op_is_comm(op.kind);
    chain += fmt::format("`{}` waits for ", instance_name(op));
  }
  chain += fmt::format("`{}`", instance_name(out_.ops[cycle[0]]));
  const OpInstance& first = out_.ops[cycle[0]];
  // The dependency of cycle[0] on cycle[1] is where we point.
  Span at = first.decl->span;
  for (const Dependency& d : first.deps) {
    if (cycle.size() > 1 && d.op == cycle[1]) at = d.span;
  }
  auto& diag = error(DiagKind::kDependencyCycle, at,
                     fmt::format("dependency cycle{}: {}", across ? " across ranks" : "", chain));
  std::set<const dsl::OpDecl*> noted;
  for (size_t i = 1; i < cycle.size(); ++i) {
    const OpInstance& op = out_.ops[cycle[i]];
    const int next = cycle[(i + 1) % cycle.size()];
    for (const Dependency& d : op.deps) {
      if (d.op == next && noted.insert(op.decl).second) {
        diag.note(d.span, fmt::format("`{}` waits for `{}` here", instance_name(op),
                                      instance_name(out_.ops[next])));
      }
    }
  }
  diag.set_hint(
      across ? "every rank runs the same schedule, so rank r would wait on a peer that waits on "
               "rank r: a deadlock; remove one of these waits"
             : "these operations wait on each other: a deadlock; remove one of these waits");
}

}  // namespace mkc::compiler
