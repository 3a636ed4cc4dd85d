// Dependencies, races and cycles. resolve_deps() turns each instance's `after` clauses into edges
// to the instances they name (the same iteration, an indexed one, or every one), checking that a
// per-tile or per-chunk wait is on something that produces data the waiter reads. Then two rules
// make a schedule safe: no read of data an earlier operation writes without a path of waits to it
// (check_races), and no cycle of waits (check_cycles) — every rank runs the same schedule, so a
// cycle through a comm operation is a deadlock across ranks.
#include <fmt/format.h>

#include <algorithm>

#include "compiler/checker.h"

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
  // Attention that accumulates over a loop reads the running output it merges into.
  if (op.kind == OpKind::kAttention && op.ints.count("accumulate") && op.ints.at("accumulate")) {
    t.push_back(op.outputs[0].tensor);
  }
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

// A slice of a tensor an instance reads or writes: the tensor and the leading-dimension index.
struct Slice {
  int tensor;
  const std::vector<int64_t>* index;  // null: the whole tensor
  Span span;
};

bool overlaps(const Slice& a, const Slice& b) {
  if (a.tensor != b.tensor) return false;
  if (a.index == nullptr || b.index == nullptr) return true;
  const size_t n = std::min(a.index->size(), b.index->size());
  for (size_t i = 0; i < n; ++i) {
    if ((*a.index)[i] != (*b.index)[i]) return false;
  }
  return true;
}

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

}  // namespace

void Checker::resolve_deps() {
  // Instances by operation name, in program order.
  std::map<std::string, std::vector<int>> by_name;
  for (size_t i = 0; i < out_.ops.size(); ++i)
    by_name[out_.ops[i].name].push_back(static_cast<int>(i));
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
  for (const PendingDeps& p : pending_) {
    OpInstance& inst = out_.ops[p.instance];
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
        // Which instances of the target this names.
        std::vector<int> targets;
        const auto matches_outer = [&](const OpInstance& t, const LoopEnv& t_env, size_t n_outer) {
          (void)t;
          for (size_t i = 0; i < n_outer; ++i) {
            const std::string& v = target.loop_vars[i];
            auto a = p.env.find(v);
            if (a != p.env.end() && t_env.at(v) != a->second) return false;
          }
          return true;
        };
        if (d.iteration) {
          if (target.loop_vars.empty()) {
            if (reported.insert({d.span.begin, "iter"}).second) {
              error(
                  DiagKind::kBadArgument, d.span,
                  fmt::format("`{}` is not in a loop, so it has no iterations to index", d.target));
            }
            continue;
          }
          auto it = eval(*d.iteration, EvalCtx{&p.env, false, 0, false, "iteration"});
          if (!it) continue;
          for (int t : by_name[d.target]) {
            const LoopEnv& t_env = env_of(t);
            if (t_env.at(target.loop_vars.back()) == *it &&
                matches_outer(out_.ops[t], t_env, target.loop_vars.size() - 1))
              targets.push_back(t);
          }
          // An iteration outside the loop's range (kv[step - 1] at the first step) names nothing.
        } else {
          for (int t : by_name[d.target]) {
            if (matches_outer(out_.ops[t], env_of(t), target.loop_vars.size()))
              targets.push_back(t);
          }
        }
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
          inst.deps.push_back(Dependency{t, g, d.span});
        }
      }
    }
  }
}

// Every read of data that an earlier operation (in program order) wrote must wait for it.
void Checker::check_races() {
  const size_t n = out_.ops.size();
  // Writers of each tensor, in program order.
  std::map<int, std::vector<std::pair<int, Slice>>> writers;
  for (size_t w = 0; w < n; ++w) {
    const OpInstance& op = out_.ops[w];
    for (const Slice& sl : slices(op.outputs, written_tensors(op), op.decl->span)) {
      writers[sl.tensor].push_back({static_cast<int>(w), sl});
    }
  }
  std::set<std::pair<const dsl::OpDecl*, const dsl::OpDecl*>> reported;
  for (size_t c = 0; c < n; ++c) {
    const OpInstance& reader = out_.ops[c];
    std::vector<char> reach;  // computed on first need
    for (const Slice& use : slices(reader.inputs, read_tensors(reader), reader.decl->span)) {
      // The last earlier writer of an overlapping slice.
      int last = -1;
      for (const auto& [w, sl] : writers[use.tensor]) {
        if (w >= static_cast<int>(c)) break;
        if (overlaps(sl, use)) last = w;
      }
      if (last < 0) continue;
      if (reach.empty()) reach = reachable(static_cast<int>(c));
      if (reach[last]) continue;
      const OpInstance& writer = out_.ops[last];
      if (!reported.insert({reader.decl, writer.decl}).second) continue;
      const std::string& tname = out_.tensors[use.tensor].name;
      error(DiagKind::kMissingDependency, use.span,
            fmt::format("`{}` reads `{}`, which `{}` writes, but does not wait for `{}`",
                        reader.name, tname, writer.name, writer.name))
          .note(writer.decl->span, fmt::format("`{}` writes `{}` here", writer.name, tname))
          .set_hint(fmt::format("add `after {}.{}` to `{}` (or `after {}` to wait for all of it)",
                                writer.name, op_is_comm(writer.kind) ? "chunk" : "tile",
                                reader.name, writer.name));
    }
  }
}

std::vector<char> Checker::reachable(int from) const {
  std::vector<char> seen(out_.ops.size(), 0);
  std::vector<int> stack = {from};
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    for (const Dependency& d : out_.ops[v].deps) {
      if (!seen[d.op]) {
        seen[d.op] = 1;
        stack.push_back(d.op);
      }
    }
  }
  return seen;
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
