// Names and expressions: the one namespace of a schedule (parameters, tensors, device functions,
// operations, loop variables, the world-size names and the built-in `rank`), the lookups with
// their "did you mean" hints, and the evaluation of expressions for the world size being checked.
// Every failed lookup or evaluation is reported where it happens, so callers only see "no value".
#include <fmt/format.h>

#include <algorithm>

#include "compiler/sema/checker.h"
#include "dsl/suggest.h"

namespace mkc::compiler {

using dsl::DiagKind;
using dsl::Diagnostic;
using dsl::Expr;
using dsl::Span;

const char* symbol_kind_name(Symbol::Kind k) {
  switch (k) {
    case Symbol::kParam:
      return "a parameter";
    case Symbol::kTensor:
      return "a tensor";
    case Symbol::kDevice:
      return "a device function";
    case Symbol::kOp:
      return "an operation";
    case Symbol::kLoopVar:
      return "a loop variable";
    case Symbol::kRanks:
      return "the world size";
    case Symbol::kBuiltin:
      return "a built-in name";
  }
  return "?";
}

void Checker::declare(const std::string& name, Symbol sym) {
  if (name == "rank" || name == "peer") {
    error(DiagKind::kDuplicateName, sym.span, fmt::format("`{}` is a built-in name", name))
        .set_hint("pick another name");
    return;
  }
  auto [it, inserted] = symbols_.emplace(name, sym);
  if (!inserted) {
    error(DiagKind::kDuplicateName, sym.span,
          fmt::format("`{}` is already declared as {}", name, symbol_kind_name(it->second.kind)))
        .note(it->second.span, "first declared here")
        .set_hint(
            "names are shared by parameters, tensors, functions, operations and loop "
            "variables of one schedule; rename one");
  }
}

void Checker::declare_names() {
  symbols_["rank"] = Symbol{Symbol::kBuiltin, {}, -1};
  if (sched_.ranks) {
    declare(sched_.ranks->name, Symbol{Symbol::kRanks, sched_.ranks->name_span, 0});
    if (!sched_.ranks->per_node.empty()) {
      declare(sched_.ranks->per_node, Symbol{Symbol::kRanks, sched_.ranks->per_node_span, 1});
    }
  }
  declare_items(sched_.items, {});
}

void Checker::declare_items(const std::vector<dsl::Item>& items,
                            std::vector<std::string> loop_vars) {
  for (const dsl::Item& it : items) {
    if (auto* p = std::get_if<dsl::ParamDecl>(&it.node)) {
      declare(p->name, Symbol{Symbol::kParam, p->name_span, -1});
      param_decls_.push_back(p);
    } else if (auto* t = std::get_if<dsl::TensorDecl>(&it.node)) {
      declare(t->name, Symbol{Symbol::kTensor, t->name_span, -1});
    } else if (auto* f = std::get_if<dsl::DeviceFn>(&it.node)) {
      declare(f->name, Symbol{Symbol::kDevice, f->name_span, -1});
    } else if (auto* op = std::get_if<dsl::OpDecl>(&it.node)) {
      declare(op->name, Symbol{Symbol::kOp, op->name_span, static_cast<int>(decls_.size())});
      decls_.push_back(DeclInfo{op, loop_vars});
    } else if (auto* l = std::get_if<dsl::Loop>(&it.node)) {
      declare(l->var, Symbol{Symbol::kLoopVar, l->var_span, -1});
      auto inner = loop_vars;
      inner.push_back(l->var);
      declare_items(l->body, inner);
    }
  }
}

std::vector<std::string> Checker::names_of(std::initializer_list<Symbol::Kind> kinds) const {
  std::vector<std::string> out;
  for (const auto& [name, sym] : symbols_) {
    if (std::find(kinds.begin(), kinds.end(), sym.kind) != kinds.end()) out.push_back(name);
  }
  return out;
}

Diagnostic& Checker::undefined(const std::string& name, Span span, const char* what,
                               std::initializer_list<Symbol::Kind> kinds) {
  auto& d = error(DiagKind::kUndefinedName, span, fmt::format("undefined {} `{}`", what, name));
  const std::string s = dsl::did_you_mean(name, names_of(kinds));
  if (!s.empty()) d.set_hint(s.substr(1));
  return d;
}

std::string Checker::rn(std::initializer_list<int> tensors) const {
  for (int t : tensors) {
    if (t >= 0 && ranks_names_.count(out_.tensors[t].name)) return r_note_;
  }
  return std::string();
}

bool Checker::depends_on_ranks(const Expr& e) const {
  if (e.kind == Expr::Kind::kName && ranks_names_.count(e.name)) return true;
  for (const Expr& a : e.args) {
    if (depends_on_ranks(a)) return true;
  }
  return false;
}

std::optional<int64_t> Checker::eval(const Expr& e, const EvalCtx& ctx) {
  // The checker's side of an evaluation: names resolve in the schedule's namespace, and every
  // failure is a diagnostic at the part of the expression that failed.
  class Scope final : public ExprScope {
   public:
    Scope(Checker& c, const EvalCtx& ctx) : c_(c), ctx_(ctx) {}
    std::optional<int64_t> value_of(const Expr& e) override { return c_.name_value(e, ctx_); }
    void failed(const Expr& e, EvalFailure f, int64_t a, int64_t b) override {
      c_.eval_failed(e, f, a, b, ctx_);
    }

   private:
    Checker& c_;
    const EvalCtx& ctx_;
  };
  Scope scope(*this, ctx);
  return evaluate(e, scope, ctx.exact_division);
}

std::optional<int64_t> Checker::name_value(const Expr& e, const EvalCtx& ctx) {
  if (ctx.loops != nullptr) {
    auto it = ctx.loops->find(e.name);
    if (it != ctx.loops->end()) return it->second;
  }
  auto sit = symbols_.find(e.name);
  if (sit == symbols_.end()) {
    undefined(e.name, e.span, "name", {Symbol::kParam, Symbol::kRanks, Symbol::kLoopVar});
    return std::nullopt;
  }
  const Symbol& sym = sit->second;
  switch (sym.kind) {
    case Symbol::kBuiltin:
      if (!ctx.allow_rank) {
        error(DiagKind::kRankDependent, e.span,
              fmt::format("a {} cannot depend on `rank`", ctx.what))
            .set_hint(
                "every rank must agree on it; `rank` may appear in peer(...), "
                "rows_from(...) and attention's q_start and k_start");
        return std::nullopt;
      }
      return ctx.rank;
    case Symbol::kRanks:
      return sym.index == 0 ? out_.ranks : out_.ranks_per_node;
    case Symbol::kParam: {
      auto pit = out_.params.find(e.name);
      if (pit == out_.params.end()) {
        if (evaluating_params_) {
          error(DiagKind::kUndefinedName, e.span,
                fmt::format("parameter `{}` is used before its declaration", e.name))
              .note(sym.span, "declared here");
        }
        return std::nullopt;
      }
      return pit->second;
    }
    case Symbol::kLoopVar:
      error(DiagKind::kUndefinedName, e.span,
            fmt::format("loop variable `{}` is used outside its loop", e.name))
          .note(sym.span, "the loop is here");
      return std::nullopt;
    default:
      error(DiagKind::kWrongKind, e.span,
            fmt::format("`{}` is {}, not a number", e.name, symbol_kind_name(sym.kind)))
          .note(sym.span, "declared here");
      return std::nullopt;
  }
}

void Checker::eval_failed(const Expr& e, EvalFailure f, int64_t a, int64_t b, const EvalCtx& ctx) {
  switch (f) {
    case EvalFailure::kDecimal:
      error(DiagKind::kBadArgument, e.span,
            fmt::format("a decimal number where an integer {} is needed", ctx.what));
      return;
    case EvalFailure::kUnknownFunction: {
      static const std::vector<std::string> kFns = {"min", "max", "cdiv"};
      auto& d =
          error(DiagKind::kUndefinedName, e.span, fmt::format("unknown function `{}`", e.name));
      const std::string s = dsl::did_you_mean(e.name, kFns);
      d.set_hint(s.empty() ? "expressions may call min(a, b), max(a, b) and cdiv(a, b)"
                           : s.substr(1));
      return;
    }
    case EvalFailure::kArity:
      error(DiagKind::kBadArgument, e.span,
            fmt::format("`{}` takes 2 arguments, given {}", e.name, e.args.size()));
      return;
    case EvalFailure::kOverflow: {
      if (e.kind == Expr::Kind::kUnary) {
        error(DiagKind::kOverflow, e.span, "negation overflows 64 bits");
        return;
      }
      const std::string text = dsl::source_text(*file_, e.span);
      const std::string values = e.kind == Expr::Kind::kCall
                                     ? fmt::format("{}({}, {})", e.name, a, b)
                                     : fmt::format("{} {} {}", a, e.op, b);
      error(DiagKind::kOverflow, e.span,
            fmt::format("`{}`{} overflows 64 bits{}", text, text == values ? "" : " = " + values,
                        rn(e)));
      return;
    }
    case EvalFailure::kDivisionByZero:
      error(DiagKind::kDivisionByZero, e.span,
            fmt::format("`{}` divides by zero{}", dsl::source_text(*file_, e.span), rn(e)));
      return;
    case EvalFailure::kInexactDivision:
      error(DiagKind::kInexactDivision, e.span,
            fmt::format("{} `{}` = {} / {} leaves a remainder{}", ctx.what,
                        dsl::source_text(*file_, e.span), a, b, rn(e)))
          .set_hint("choose sizes that divide evenly, or use cdiv(a, b) to round up");
      return;
  }
}

std::optional<int64_t> Checker::eval_positive(const Expr& e, EvalCtx ctx, const char* what,
                                              const std::string& name) {
  ctx.what = what;
  auto v = eval(e, ctx);
  if (!v) return std::nullopt;
  if (*v <= 0) {
    const std::string text = dsl::source_text(*file_, e.span);
    const std::string shown = name.empty()                 ? fmt::format("`{}`", text)
                              : text == std::to_string(*v) ? fmt::format("`{}`", name)
                                                           : fmt::format("`{}` = `{}`", name, text);
    error(DiagKind::kParamRange, e.span,
          fmt::format("{} {} is {}; it must be at least 1{}", what, shown, *v, rn(e)));
    return std::nullopt;
  }
  return v;
}

bool Checker::eval_for_all_ranks(const Expr& e, const LoopEnv& env, const char* what) {
  for (int64_t r = 0; r < out_.ranks; ++r) {
    EvalCtx ctx{&env, true, r, false, what};
    if (!eval(e, ctx)) return false;
  }
  return true;
}

void bind_loop_vars(Expr* e, const LoopEnv& env) {
  if (e->kind == Expr::Kind::kName) {
    auto it = env.find(e->name);
    if (it == env.end()) return;
    e->kind = Expr::Kind::kInt;
    e->int_value = it->second;
    e->name.clear();
    return;
  }
  for (Expr& a : e->args) bind_loop_vars(&a, env);
}

}  // namespace mkc::compiler
