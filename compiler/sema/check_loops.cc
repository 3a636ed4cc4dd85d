// Loops: the budget that bounds them, and unrolling a schedule's items into operation instances,
// one per iteration of the loops around an operation, with the loop variables bound.
//
// The budget comes first (check_budget) and expands nothing. It counts how many iterations each
// loop runs in all (a nested loop once per iteration of the loops around it) and how many
// operation instances the schedule unrolls to (those `when` switches off included, since each is
// checked), and rejects a loop past kMaxLoopIterations, or one that takes the schedule past
// kMaxOpInstances, before unroll() would spend time on it. A loop whose bounds do not use the
// variables of the loops around it is counted once and multiplied; only one whose bounds do is
// counted per enclosing iteration, and there are at most kMaxLoopIterations of those, so the
// budget costs at most kMaxLoopIterations evaluations per loop whatever the bounds are, and the
// bound it proves is exact.
//
// unroll() then walks every iteration. An empty loop still has its body checked once, for names
// and kinds, and so has every loop inside such a body (once each, with its variable at its first
// value), so checking dead code costs its size. Items other than operations and loops inside a
// loop body are reported once. Each instance opens or closes its declaration's sequence
// (mark_first_and_last).
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "compiler/sema/checker.h"

namespace mkc::compiler {

using dsl::DiagKind;
using dsl::Expr;
using dsl::Span;

namespace {

// Iterations of the half-open range [b, e), which may not fit int64_t (e - b overflows for
// -9223372036854775807 .. 1).
uint64_t trip_count(int64_t b, int64_t e) {
  return e > b ? static_cast<uint64_t>(e) - static_cast<uint64_t>(b) : 0;
}

// The `loop v in a .. b` line of a loop, for messages.
Span loop_header(const dsl::Loop& l) {
  return Span{l.span.begin, std::max(l.end.span.end, l.var_span.end)};
}

bool mentions(const Expr& e, const std::string& name) {
  if (e.kind == Expr::Kind::kName && e.name == name) return true;
  for (const Expr& a : e.args) {
    if (mentions(a, name)) return true;
  }
  return false;
}

// Whether the bounds of a loop among `items`, at any depth, use `var`.
bool bounds_use(const std::vector<dsl::Item>& items, const std::string& var) {
  for (const dsl::Item& it : items) {
    const auto* l = std::get_if<dsl::Loop>(&it.node);
    if (l == nullptr) continue;
    if (mentions(l->begin, var) || mentions(l->end, var) || bounds_use(l->body, var)) return true;
  }
  return false;
}

}  // namespace

void Checker::check_budget() {
  const std::vector<LoopRuns> once = {LoopRuns{LoopEnv{}, 1}};
  uint64_t total = 0;
  bool reported_op = false;
  for (const dsl::Item& it : sched_.items) {
    const uint64_t n = budget_item(it, once, nullptr, 1);
    if (total + n <= static_cast<uint64_t>(kMaxOpInstances)) {
      total += n;
      continue;
    }
    if (const auto* l = std::get_if<dsl::Loop>(&it.node)) {
      over_budget_.insert(l);
      error(DiagKind::kParamRange, loop_header(*l),
            fmt::format("loop `{}` unrolls to {} operation instances{}; a schedule unrolls to at "
                        "most {}",
                        l->var, n,
                        total == 0 ? std::string()
                                   : fmt::format(", {} with the {} before it", total + n, total),
                        kMaxOpInstances))
          .set_hint(
              "each iteration instantiates every operation of the body, those `when` switches "
              "off included; use fewer iterations or fewer operations");
    } else if (const auto* op = std::get_if<dsl::OpDecl>(&it.node); op && !reported_op) {
      reported_op = true;
      error(DiagKind::kParamRange, op->span,
            fmt::format("more than {} operation instances after unrolling loops", kMaxOpInstances));
    }
  }
  instance_bound_ = total;
}

uint64_t Checker::budget(const std::vector<dsl::Item>& items, const std::vector<LoopRuns>& runs,
                         const dsl::Loop* parent, uint64_t parent_total) {
  uint64_t instances = 0;
  for (const dsl::Item& it : items) instances += budget_item(it, runs, parent, parent_total);
  return instances;
}

std::optional<std::pair<int64_t, int64_t>> Checker::quiet_bounds(const dsl::Loop& l,
                                                                 const LoopEnv& env) {
  // Bounds evaluated without diagnostics: where they have no value, unroll() evaluates them
  // again and says why.
  class Quiet final : public ExprScope {
   public:
    Quiet(Checker& c, const LoopEnv& env) : c_(c), env_(env) {}
    std::optional<int64_t> value_of(const Expr& e) override {
      auto it = env_.find(e.name);
      if (it != env_.end()) return it->second;
      auto p = c_.out_.params.find(e.name);
      if (p != c_.out_.params.end()) return p->second;
      auto s = c_.symbols_.find(e.name);
      if (s != c_.symbols_.end() && s->second.kind == Symbol::kRanks)
        return s->second.index == 0 ? c_.out_.ranks : c_.out_.ranks_per_node;
      return std::nullopt;
    }
    void failed(const Expr&, EvalFailure, int64_t, int64_t) override {}

   private:
    Checker& c_;
    const LoopEnv& env_;
  };
  Quiet q(*this, env);
  const auto b = evaluate(l.begin, q);
  const auto e = evaluate(l.end, q);
  if (!b || !e) return std::nullopt;
  return std::make_pair(*b, *e);
}

uint64_t Checker::budget_item(const dsl::Item& it, const std::vector<LoopRuns>& runs,
                              const dsl::Loop* parent, uint64_t parent_total) {
  // An operation is instantiated once per run of the loops around it.
  if (std::holds_alternative<dsl::OpDecl>(it.node)) {
    uint64_t n = 0;
    for (const LoopRuns& r : runs) n += static_cast<uint64_t>(r.times);
    return n;
  }
  const auto* l = std::get_if<dsl::Loop>(&it.node);
  if (l == nullptr) return 0;
  // Each enclosing iteration's bounds; the trip counts are below 2^64 and the weights at most
  // kMaxLoopIterations, so the total fits 128 bits.
  std::vector<std::pair<int64_t, int64_t>> bounds(runs.size(), {0, 0});
  unsigned __int128 total = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    if (auto b = quiet_bounds(*l, runs[k].env)) bounds[k] = *b;
    total += static_cast<unsigned __int128>(trip_count(bounds[k].first, bounds[k].second)) *
             runs[k].times;
  }
  if (total > static_cast<uint64_t>(kMaxLoopIterations)) {
    over_budget_.insert(l);
    const std::string runs_text = total > UINT64_MAX ? std::string("more than 18446744073709551615")
                                                     : std::to_string(static_cast<uint64_t>(total));
    if (parent == nullptr) {
      error(DiagKind::kParamRange, loop_header(*l),
            fmt::format("loop `{}` runs {} iterations; at most {} are allowed", l->var, runs_text,
                        kMaxLoopIterations))
          .set_hint("loops are unrolled at compile time; use fewer iterations");
    } else {
      error(DiagKind::kParamRange, loop_header(*l),
            fmt::format("loop `{}` runs {} iterations in all inside loop `{}` ({} iterations); "
                        "at most {} loop iterations are allowed",
                        l->var, runs_text, parent->var, parent_total, kMaxLoopIterations))
          .note(loop_header(*parent), fmt::format("loop `{}` is here", parent->var))
          .set_hint(
              "a nested loop runs once per iteration of the loops around it, and loops are "
              "unrolled at compile time; use fewer or shorter loops");
    }
    return 0;
  }
  // The runs of the body: per iteration where an inner loop's bounds use this loop's variable,
  // else one run per enclosing run, weighted by the trip count.
  std::vector<LoopRuns> inner;
  const bool per_iteration = bounds_use(l->body, l->var);
  for (size_t k = 0; k < runs.size(); ++k) {
    const auto [b, e] = bounds[k];
    const uint64_t trips = trip_count(b, e);
    if (trips == 0) continue;
    if (!per_iteration) {
      inner.push_back(LoopRuns{runs[k].env, runs[k].times * static_cast<int64_t>(trips)});
      continue;
    }
    for (int64_t i = b; i < e; ++i) {
      LoopEnv env = runs[k].env;
      env[l->var] = i;
      inner.push_back(LoopRuns{std::move(env), runs[k].times});
    }
  }
  return inner.empty() ? 0 : budget(l->body, inner, l, static_cast<uint64_t>(total));
}

void Checker::unroll(const std::vector<dsl::Item>& items, LoopEnv& env,
                     std::vector<std::string> loop_vars, bool probe) {
  for (const dsl::Item& it : items) {
    if (diags_.full()) return;
    if (auto* op = std::get_if<dsl::OpDecl>(&it.node)) {
      instantiate(*op, env);
    } else if (auto* l = std::get_if<dsl::Loop>(&it.node)) {
      EvalCtx ctx{&env, false, 0, false, "loop bound"};
      auto b = eval(l->begin, ctx);
      auto e = eval(l->end, ctx);
      if (!b || !e) continue;
      // Reported by check_budget().
      if (over_budget_.count(l)) continue;
      auto inner = loop_vars;
      inner.push_back(l->var);
      if (probe || *b >= *e) {
        // An empty loop still has its body checked once, for names and kinds; so has a loop
        // inside one, once. What the check makes is dropped.
        LoopEnv probe_env = env;
        probe_env[l->var] = *b;
        const size_t before = out_.ops.size();
        unroll(l->body, probe_env, inner, true);
        out_.ops.resize(before);
        pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                      [&](const PendingDeps& p) {
                                        return p.instance >= static_cast<int>(before);
                                      }),
                       pending_.end());
        continue;
      }
      // check_budget() counted these bounds for this iteration of the loops around, so this
      // holds unless loop variables share a name (reported already); never run away.
      if (trip_count(*b, *e) > static_cast<uint64_t>(kMaxLoopIterations)) {
        error(DiagKind::kParamRange, loop_header(*l),
              fmt::format("loop `{}` runs {} iterations; at most {} are allowed", l->var,
                          trip_count(*b, *e), kMaxLoopIterations));
        continue;
      }
      for (int64_t i = *b; i < *e && !diags_.full(); ++i) {
        env[l->var] = i;
        unroll(l->body, env, inner, false);
      }
      env.erase(l->var);
    } else if (!std::holds_alternative<dsl::OpDecl>(it.node) && !loop_vars.empty()) {
      Span s{};
      if (auto* p = std::get_if<dsl::ParamDecl>(&it.node)) s = p->name_span;
      if (auto* t = std::get_if<dsl::TensorDecl>(&it.node)) s = t->span;
      if (auto* f = std::get_if<dsl::DeviceFn>(&it.node)) s = f->name_span;
      if (auto* r = std::get_if<std::vector<dsl::RoleDecl>>(&it.node)) s = r->front().role_span;
      if (reported_loop_items_.insert(s.begin).second) {
        error(DiagKind::kWrongKind, s,
              "only compute, comm and loop items may appear in a loop body")
            .set_hint(
                "declare parameters, tensors, device functions and roles at the schedule's top "
                "level");
      }
    }
  }
}

// Which instances open and close their merge group (an attention that accumulates initialises
// its state in the first and writes its output in the last): the accumulating attentions into
// one output slice, or else one declaration's instances.
void Checker::mark_first_and_last() {
  using Group = std::tuple<const dsl::OpDecl*, int, std::vector<int64_t>>;
  const auto group = [](const OpInstance& op) -> Group {
    if (accumulates(op)) return {nullptr, op.outputs[0].tensor, op.outputs[0].index};
    return {op.decl, -1, {}};
  };
  std::set<Group> seen;
  for (OpInstance& op : out_.ops) op.first_of_group = seen.insert(group(op)).second;
  seen.clear();
  for (auto it = out_.ops.rbegin(); it != out_.ops.rend(); ++it)
    it->last_of_group = seen.insert(group(*it)).second;
  // A merge group's O is written by its last instance only: another operation that reads or
  // writes that slice between the group's first and last instance would see O unwritten, or
  // have its data merged away. Refused, naming both.
  const auto overlaps = [](const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    const size_t n = std::min(a.size(), b.size());
    return std::equal(a.begin(), a.begin() + n, b.begin());
  };
  const int n = static_cast<int>(out_.ops.size());
  for (int f = 0; f < n; ++f) {
    const OpInstance& first = out_.ops[f];
    const Group g = group(first);
    if (std::get<0>(g) != nullptr || !first.first_of_group || first.last_of_group) continue;
    const TensorUse& slice = first.outputs[0];
    for (int c = f + 1; c < n; ++c) {
      const OpInstance& op = out_.ops[c];
      if (group(op) == g) {
        if (op.last_of_group) break;
        continue;
      }
      bool touches = false;
      for (const auto* uses : {&op.inputs, &op.outputs}) {
        for (const TensorUse& u : *uses)
          touches |= u.tensor == slice.tensor && overlaps(u.index, slice.index);
      }
      for (const auto& [key, t] : op.tensor_args) touches |= t == slice.tensor;
      if (!touches) continue;
      const std::string tensor = out_.tensors[slice.tensor].name;
      error(DiagKind::kBadArgument, op.decl->span,
            fmt::format("`{}` uses `{}` while attentions merge into it (accumulate = 1, from "
                        "`{}` on): the merged result is written only by the last of them",
                        op.name, tensor, first.name))
          .note(first.decl->span, "the merge into it starts here")
          .set_hint(fmt::format("use `{}` after the last attention that merges into it, or give "
                                "each merge its own output",
                                tensor));
      return;
    }
  }
}

}  // namespace mkc::compiler
