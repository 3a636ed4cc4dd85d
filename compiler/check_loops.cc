// Loops: unrolling a schedule's items into operation instances, one per iteration of the loops
// around an operation, with the loop variables bound. An empty loop still has its body checked
// once, for names and kinds; items other than operations and loops inside a loop body are
// reported once. Each instance opens or closes its declaration's sequence (mark_first_and_last).
#include <fmt/format.h>

#include <algorithm>

#include "compiler/checker.h"

namespace mkc::compiler {

using dsl::DiagKind;
using dsl::Span;

void Checker::unroll(const std::vector<dsl::Item>& items, LoopEnv& env,
                     std::vector<std::string> loop_vars) {
  for (const dsl::Item& it : items) {
    if (diags_.full()) return;
    if (auto* op = std::get_if<dsl::OpDecl>(&it.node)) {
      instantiate(*op, env);
    } else if (auto* l = std::get_if<dsl::Loop>(&it.node)) {
      EvalCtx ctx{&env, false, 0, false, "loop bound"};
      auto b = eval(l->begin, ctx);
      auto e = eval(l->end, ctx);
      if (!b || !e) continue;
      if (*e - *b > kMaxInstances) {
        error(DiagKind::kParamRange, l->span,
              fmt::format("loop `{}` runs {} iterations; at most {} are allowed", l->var, *e - *b,
                          kMaxInstances));
        continue;
      }
      auto inner = loop_vars;
      inner.push_back(l->var);
      if (*b >= *e) {
        // An empty loop still has its body checked once, for names and kinds.
        LoopEnv probe = env;
        probe[l->var] = *b;
        const size_t before = out_.ops.size();
        unroll(l->body, probe, inner);
        out_.ops.resize(before);
        pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                      [&](const PendingDeps& p) {
                                        return p.instance >= static_cast<int>(before);
                                      }),
                       pending_.end());
        continue;
      }
      for (int64_t i = *b; i < *e && !diags_.full(); ++i) {
        env[l->var] = i;
        unroll(l->body, env, inner);
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

// Which instances open and close their declaration's sequence (an attention that accumulates
// over a loop initialises its state in the first and writes its output in the last).
void Checker::mark_first_and_last() {
  std::set<const dsl::OpDecl*> seen;
  for (OpInstance& op : out_.ops) op.first_of_decl = seen.insert(op.decl).second;
  seen.clear();
  for (auto it = out_.ops.rbegin(); it != out_.ops.rend(); ++it)
    it->last_of_decl = seen.insert(it->decl).second;
}

}  // namespace mkc::compiler
