#include "compiler/check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <set>

#include "dsl/ast_json.h"
#include "dsl/suggest.h"
#include "support/error.h"

namespace mkc::compiler {
namespace {

using dsl::DiagKind;
using dsl::Diagnostic;
using dsl::Expr;
using dsl::Operand;
using dsl::Span;

// Bounds that keep checking fast on any input (the race and cycle checks are quadratic at worst).
constexpr int64_t kMaxInstances = 4096;
constexpr int64_t kMaxRanks = 4096;
const std::vector<std::string> kRoles = {"compute", "comm", "proxy", "reduce"};
const std::vector<std::string> kReduceOps = {"sum", "max", "min"};
const std::vector<std::string> kAlgos = {"auto", "one_shot", "two_shot", "ring"};

struct Symbol {
  enum Kind { kParam, kTensor, kDevice, kOp, kLoopVar, kRanks, kBuiltin };
  Kind kind;
  Span span;
  int index = -1;
};

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

// Values of the loop variables in scope.
using LoopEnv = std::map<std::string, int64_t>;

struct EvalCtx {
  const LoopEnv* loops = nullptr;
  bool allow_rank = false;  // `rank` allowed (peer indices, rows_from)
  int64_t rank = 0;
  bool exact_division = false;  // `/` must leave no remainder (shapes)
  const char* what = "value";   // for messages: "shape", "tile size", ...
};

// An op declaration with its place among loops.
struct DeclInfo {
  const dsl::OpDecl* decl;
  std::vector<std::string> loop_vars;  // enclosing loop variables, outermost first
};

struct PendingDeps {
  int instance;
  LoopEnv env;
};

class Checker {
 public:
  Checker(const dsl::Module& m, const dsl::Schedule& s, const CheckOptions& o, int64_t ranks,
          int64_t per_node, dsl::Diagnostics& d)
      : file_(m.file), sched_(s), opts_(o), diags_(d) {
    out_.name = s.name;
    out_.ranks = ranks;
    out_.ranks_per_node = per_node;
    out_.ast = &s;
    r_note_ = fmt::format(" (with {} = {})", s.ranks ? s.ranks->name : std::string("R"), ranks);
    if (s.ranks) ranks_names_ = {s.ranks->name, s.ranks->per_node};
  }

  bool run(CheckedSchedule* result) {
    const size_t errors_before = diags_.error_count();
    declare_names();
    check_defines();
    evaluate_params();
    // Declarations and operations are checked even after errors, so one run reports all of a
    // file's mistakes; a tensor that failed its own check is skipped silently where it is used.
    for (const dsl::Item& it : sched_.items) check_decl_item(it);
    {
      LoopEnv env;
      unroll(sched_.items, env, {});
      mark_first_and_last();
      resolve_deps();
    }
    if (diags_.error_count() == errors_before) check_races();
    if (diags_.error_count() == errors_before) check_cycles();
    if (diags_.error_count() != errors_before) return false;
    *result = std::move(out_);
    return true;
  }

 private:
  Diagnostic& error(DiagKind k, Span s, std::string msg) {
    return diags_.error(k, file_, s, std::move(msg));
  }

  // ---- names --------------------------------------------------------------------------------
  void declare(const std::string& name, Symbol sym) {
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

  void declare_names() {
    symbols_["rank"] = Symbol{Symbol::kBuiltin, {}, -1};
    if (sched_.ranks) {
      declare(sched_.ranks->name, Symbol{Symbol::kRanks, sched_.ranks->name_span, 0});
      if (!sched_.ranks->per_node.empty()) {
        declare(sched_.ranks->per_node, Symbol{Symbol::kRanks, sched_.ranks->per_node_span, 1});
      }
    }
    declare_items(sched_.items, {});
  }

  void declare_items(const std::vector<dsl::Item>& items, std::vector<std::string> loop_vars) {
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

  std::vector<std::string> names_of(std::initializer_list<Symbol::Kind> kinds) const {
    std::vector<std::string> out;
    for (const auto& [name, sym] : symbols_) {
      if (std::find(kinds.begin(), kinds.end(), sym.kind) != kinds.end()) out.push_back(name);
    }
    return out;
  }

  Diagnostic& undefined(const std::string& name, Span span, const char* what,
                        std::initializer_list<Symbol::Kind> kinds) {
    auto& d = error(DiagKind::kUndefinedName, span, fmt::format("undefined {} `{}`", what, name));
    const std::string s = dsl::did_you_mean(name, names_of(kinds));
    if (!s.empty()) d.set_hint(s.substr(1));
    return d;
  }

  // " (with R = 4)" when `e` depends on the world size, else "".
  std::string rn(const Expr& e) const { return depends_on_ranks(e) ? r_note_ : std::string(); }
  std::string rn(std::initializer_list<int> tensors) const {
    for (int t : tensors) {
      if (t >= 0 && ranks_names_.count(out_.tensors[t].name)) return r_note_;
    }
    return std::string();
  }
  bool depends_on_ranks(const Expr& e) const {
    if (e.kind == Expr::Kind::kName && ranks_names_.count(e.name)) return true;
    for (const Expr& a : e.args) {
      if (depends_on_ranks(a)) return true;
    }
    return false;
  }

  // ---- expressions --------------------------------------------------------------------------
  std::optional<int64_t> eval(const Expr& e, const EvalCtx& ctx) {
    switch (e.kind) {
      case Expr::Kind::kInt:
        return e.int_value;
      case Expr::Kind::kFloat:
        error(DiagKind::kBadArgument, e.span,
              fmt::format("a decimal number where an integer {} is needed", ctx.what));
        return std::nullopt;
      case Expr::Kind::kName: {
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
                      "every rank must agree on it; `rank` may appear in peer(...) and "
                      "rows_from(...)");
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
      case Expr::Kind::kUnary: {
        auto v = eval(e.args[0], ctx);
        if (!v) return std::nullopt;
        if (e.op == "!") return *v == 0 ? 1 : 0;
        if (*v == INT64_MIN) {
          error(DiagKind::kOverflow, e.span, "negation overflows 64 bits");
          return std::nullopt;
        }
        return -*v;
      }
      case Expr::Kind::kCall: {
        static const std::vector<std::string> kFns = {"min", "max", "cdiv"};
        if (std::find(kFns.begin(), kFns.end(), e.name) == kFns.end()) {
          auto& d =
              error(DiagKind::kUndefinedName, e.span, fmt::format("unknown function `{}`", e.name));
          const std::string s = dsl::did_you_mean(e.name, kFns);
          d.set_hint(s.empty() ? "expressions may call min(a, b), max(a, b) and cdiv(a, b)"
                               : s.substr(1));
          return std::nullopt;
        }
        if (e.args.size() != 2) {
          error(DiagKind::kBadArgument, e.span,
                fmt::format("`{}` takes 2 arguments, given {}", e.name, e.args.size()));
          return std::nullopt;
        }
        auto a = eval(e.args[0], ctx);
        auto b = eval(e.args[1], ctx);
        if (!a || !b) return std::nullopt;
        if (e.name == "min") return std::min(*a, *b);
        if (e.name == "max") return std::max(*a, *b);
        if (*b == 0) {
          error(DiagKind::kDivisionByZero, e.span,
                fmt::format("`{}` divides by zero{}", dsl::source_text(*file_, e.span), rn(e)));
          return std::nullopt;
        }
        int64_t q = *a / *b;
        if ((*a % *b != 0) && ((*a > 0) == (*b > 0))) ++q;
        return q;
      }
      case Expr::Kind::kBinary: {
        auto a = eval(e.args[0], ctx);
        auto b = eval(e.args[1], ctx);
        if (!a || !b) return std::nullopt;
        int64_t r = 0;
        const std::string& op = e.op;
        const auto overflow = [&]() -> std::optional<int64_t> {
          const std::string text = dsl::source_text(*file_, e.span);
          const std::string values = fmt::format("{} {} {}", *a, op, *b);
          error(DiagKind::kOverflow, e.span,
                fmt::format("`{}`{} overflows 64 bits{}", text,
                            text == values ? "" : " = " + values, rn(e)));
          return std::nullopt;
        };
        if (op == "+") return __builtin_add_overflow(*a, *b, &r) ? overflow() : std::optional(r);
        if (op == "-") return __builtin_sub_overflow(*a, *b, &r) ? overflow() : std::optional(r);
        if (op == "*") return __builtin_mul_overflow(*a, *b, &r) ? overflow() : std::optional(r);
        if (op == "/" || op == "%") {
          if (*b == 0) {
            error(DiagKind::kDivisionByZero, e.span,
                  fmt::format("`{}` divides by zero{}", dsl::source_text(*file_, e.span), rn(e)));
            return std::nullopt;
          }
          if (*a == INT64_MIN && *b == -1) return overflow();
          if (op == "%") {
            // Modulo is always non-negative, so `(rank - 1) % R` names a rank.
            int64_t m = *a % *b;
            if (m < 0) m += *b < 0 ? -*b : *b;
            return m;
          }
          if (ctx.exact_division && *a % *b != 0) {
            error(DiagKind::kInexactDivision, e.span,
                  fmt::format("{} `{}` = {} / {} leaves a remainder{}", ctx.what,
                              dsl::source_text(*file_, e.span), *a, *b, rn(e)))
                .set_hint("choose sizes that divide evenly, or use cdiv(a, b) to round up");
            return std::nullopt;
          }
          return *a / *b;
        }
        if (op == "<") return *a < *b;
        if (op == "<=") return *a <= *b;
        if (op == ">") return *a > *b;
        if (op == ">=") return *a >= *b;
        if (op == "==") return *a == *b;
        if (op == "!=") return *a != *b;
        if (op == "&&") return (*a != 0 && *b != 0) ? 1 : 0;
        if (op == "||") return (*a != 0 || *b != 0) ? 1 : 0;
        return std::nullopt;
      }
    }
    return std::nullopt;
  }

  // A positive size (shape dimension, tile, chunk, role count, parameter).
  std::optional<int64_t> eval_positive(const Expr& e, EvalCtx ctx, const char* what,
                                       const std::string& name = "") {
    ctx.what = what;
    auto v = eval(e, ctx);
    if (!v) return std::nullopt;
    if (*v <= 0) {
      const std::string text = dsl::source_text(*file_, e.span);
      const std::string shown = name.empty() ? fmt::format("`{}`", text)
                                : text == std::to_string(*v)
                                    ? fmt::format("`{}`", name)
                                    : fmt::format("`{}` = `{}`", name, text);
      error(DiagKind::kParamRange, e.span,
            fmt::format("{} {} is {}; it must be at least 1{}", what, shown, *v, rn(e)));
      return std::nullopt;
    }
    return v;
  }

  // Evaluates a rank-dependent expression for every rank; the value for rank 0 is returned.
  bool eval_for_all_ranks(const Expr& e, const LoopEnv& env, const char* what) {
    for (int64_t r = 0; r < out_.ranks; ++r) {
      EvalCtx ctx{&env, true, r, false, what};
      if (!eval(e, ctx)) return false;
    }
    return true;
  }

  // ---- parameters and declarations ----------------------------------------------------------
  void check_defines() {
    for (const auto& [name, value] : opts_.defines) {
      auto it = symbols_.find(name);
      if (it == symbols_.end() || it->second.kind != Symbol::kParam) {
        auto& d = error(DiagKind::kUnknownParam, sched_.name_span,
                        fmt::format("-D {}={}: schedule `{}` has no parameter `{}`", name, value,
                                    sched_.name, name));
        std::vector<std::string> params;
        for (const auto* p : param_decls_) params.push_back(p->name);
        const std::string s = dsl::did_you_mean(name, params);
        d.set_hint(!s.empty() ? s.substr(1)
                   : params.empty()
                       ? std::string("this schedule declares no parameters")
                       : fmt::format("its parameters are: {}", fmt::join(params, ", ")));
      }
    }
  }

  void evaluate_params() {
    evaluating_params_ = true;
    for (const dsl::ParamDecl* p : param_decls_) {
      auto def = opts_.defines.find(p->name);
      if (def == opts_.defines.end()) {
        if (depends_on_ranks(p->value)) ranks_names_.insert(p->name);
        if (auto v = eval_positive(p->value, EvalCtx{}, "parameter", p->name))
          out_.params[p->name] = *v;
      } else if (def->second <= 0) {
        error(DiagKind::kParamRange, p->name_span,
              fmt::format("-D {}={}: parameters must be at least 1", p->name, def->second));
      } else {
        out_.params[p->name] = def->second;
      }
    }
    evaluating_params_ = false;
  }

  void check_decl_item(const dsl::Item& it) {
    if (auto* t = std::get_if<dsl::TensorDecl>(&it.node)) {
      check_tensor(*t);
    } else if (auto* f = std::get_if<dsl::DeviceFn>(&it.node)) {
      check_device_fn(*f);
    } else if (auto* roles = std::get_if<std::vector<dsl::RoleDecl>>(&it.node)) {
      check_roles(*roles);
    }
  }

  void check_tensor(const dsl::TensorDecl& t) {
    Tensor out;
    out.name = t.name;
    out.kind = t.kind;
    out.placement = t.placement;
    out.span = t.span;
    bool ok = true;
    if (!parse_dtype(t.dtype, &out.dtype)) {
      ok = false;
      auto& d = error(DiagKind::kUnknownDtype, t.dtype_span,
                      fmt::format("unknown element type `{}`", t.dtype));
      const std::string s = dsl::did_you_mean(t.dtype, dtype_names());
      d.set_hint(s.empty() ? fmt::format("element types: {}", fmt::join(dtype_names(), ", "))
                           : s.substr(1));
    }
    EvalCtx ctx;
    ctx.exact_division = true;
    int64_t bytes = dtype_bytes(out.dtype);
    for (const Expr& e : t.shape) {
      if (depends_on_ranks(e)) ranks_names_.insert(t.name);
      auto v = eval_positive(e, ctx, "shape dimension");
      if (!v) {
        ok = false;
        continue;
      }
      out.shape.push_back(*v);
      if (ok && __builtin_mul_overflow(bytes, *v, &bytes)) {
        error(DiagKind::kOverflow, t.shape_span,
              fmt::format("tensor `{}` is too large: its size in bytes overflows 64 bits{}", t.name,
                          ranks_names_.count(t.name) ? r_note_ : ""));
        ok = false;
      }
    }
    if (!ok) broken_tensors_.insert(t.name);
    tensor_index_[t.name] = static_cast<int>(out_.tensors.size());
    out_.tensors.push_back(std::move(out));
  }

  void check_device_fn(const dsl::DeviceFn& f) {
    DeviceFunction out;
    out.name = f.name;
    out.body = f.body;
    out.body_span = f.body_span;
    std::set<std::string> seen;
    for (const dsl::DeviceParam& p : f.params) {
      DType t{};
      if (!parse_dtype(p.type, &t) || dtype_is_fp8(t)) {
        error(
            DiagKind::kDeviceFunction, p.span,
            fmt::format("parameter `{}` of `{}` has type `{}`, which device functions cannot take",
                        p.name, f.name, p.type))
            .set_hint(
                "device function parameters and results are scalars: f32, f16, bf16, f64, i32 or "
                "i64");
      }
      if (!seen.insert(p.name).second) {
        error(DiagKind::kDeviceFunction, p.span,
              fmt::format("parameter `{}` of `{}` is declared twice", p.name, f.name));
      }
      out.params.emplace_back(p.name, t);
    }
    if (!parse_dtype(f.ret_type, &out.ret) || dtype_is_fp8(out.ret)) {
      error(DiagKind::kDeviceFunction, f.ret_span,
            fmt::format("`{}` returns `{}`, which device functions cannot return", f.name,
                        f.ret_type))
          .set_hint(
              "device function parameters and results are scalars: f32, f16, bf16, f64, i32 or "
              "i64");
    }
    if (f.params.empty()) {
      error(DiagKind::kDeviceFunction, f.name_span,
            fmt::format("device function `{}` takes no parameters", f.name))
          .set_hint(
              "a device function maps elements: give it at least one parameter, e.g. `(x: f32)`");
    }
    if (f.body.find("return") == std::string::npos) {
      error(DiagKind::kDeviceFunction,
            f.body_span.end > f.body_span.begin ? f.body_span : f.name_span,
            fmt::format("device function `{}` never returns a value", f.name))
          .set_hint("its C++ body must `return` a value of the declared result type");
    }
    device_index_[f.name] = static_cast<int>(out_.device_fns.size());
    out_.device_fns.push_back(std::move(out));
  }

  void check_roles(const std::vector<dsl::RoleDecl>& roles) {
    int64_t total = 0;
    bool overflow = false;
    Span all = roles.front().role_span;
    for (const dsl::RoleDecl& r : roles) {
      all = Span::merge(all, r.count.span);
      if (std::find(kRoles.begin(), kRoles.end(), r.role) == kRoles.end()) {
        auto& d =
            error(DiagKind::kBadArgument, r.role_span, fmt::format("unknown role `{}`", r.role));
        const std::string s = dsl::did_you_mean(r.role, kRoles);
        d.set_hint(s.empty() ? fmt::format("roles: {}", fmt::join(kRoles, ", ")) : s.substr(1));
        continue;
      }
      if (out_.roles.count(r.role)) {
        error(DiagKind::kDuplicateName, r.role_span, fmt::format("role `{}` given twice", r.role));
        continue;
      }
      auto v = eval_positive(r.count, EvalCtx{}, "role count");
      if (!v) continue;
      out_.roles[r.role] = *v;
      // The exact total, or "more than" the largest count when it does not fit in 64 bits.
      if (__builtin_add_overflow(total, *v, &total)) {
        total = INT64_MAX;
        overflow = true;
      }
    }
    if (total > opts_.sms) {
      error(DiagKind::kRoleLimit, all,
            fmt::format("the roles ask for {}{} CTAs, but a persistent kernel holds one CTA per "
                        "multiprocessor and the target has {}",
                        overflow ? "more than " : "", total, opts_.sms))
          .set_hint(fmt::format(
              "make the counts add up to at most {} (or pass --sms for another GPU)", opts_.sms));
    }
  }

  // ---- operations ---------------------------------------------------------------------------
  void unroll(const std::vector<dsl::Item>& items, LoopEnv& env,
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

  const Tensor* tensor(int i) const { return i >= 0 ? &out_.tensors[i] : nullptr; }

  std::string shape_str(const std::vector<int64_t>& s) const {
    return fmt::format("[{}]", fmt::join(s, ", "));
  }

  // Resolves a tensor operand (`A`, `KV[step % 2, 0]`, or with allow_peer `peer(e).Y`).
  bool tensor_operand(const Operand& o, const LoopEnv& env, TensorUse* use, bool allow_peer,
                      const char* role) {
    if (o.kind == Operand::Kind::kPeerTensor && !allow_peer) {
      error(DiagKind::kBadArgument, o.span, fmt::format("{} cannot be a peer's tensor here", role))
          .set_hint("only `put` names a peer's tensor; collectives address peers themselves");
      return false;
    }
    if (o.kind != Operand::Kind::kName && o.kind != Operand::Kind::kPeerTensor) {
      error(DiagKind::kBadArgument, o.span, fmt::format("expected a tensor as {}", role));
      return false;
    }
    auto sit = symbols_.find(o.name);
    if (sit == symbols_.end()) {
      undefined(o.name, o.name_span, "tensor", {Symbol::kTensor});
      return false;
    }
    if (sit->second.kind != Symbol::kTensor) {
      error(DiagKind::kWrongKind, o.name_span,
            fmt::format("`{}` is {}, but {} must be a tensor", o.name,
                        symbol_kind_name(sit->second.kind), role))
          .note(sit->second.span, "declared here");
      return false;
    }
    if (broken_tensors_.count(o.name) || !tensor_index_.count(o.name))
      return false;  // reported already
    use->tensor = tensor_index_.at(o.name);
    use->span = o.span;
    const Tensor& t = out_.tensors[use->tensor];
    if (o.index.size() >= t.shape.size() && !o.index.empty()) {
      error(DiagKind::kShapeMismatch, o.span,
            fmt::format("`{}` has {} dimensions; {} indices leave nothing to use", o.name,
                        t.shape.size(), o.index.size()));
      return false;
    }
    EvalCtx ctx{&env, false, 0, false, "tensor index"};
    for (size_t i = 0; i < o.index.size(); ++i) {
      auto v = eval(o.index[i], ctx);
      if (!v) return false;
      if (*v < 0 || *v >= t.shape[i]) {
        error(DiagKind::kShapeMismatch, o.index[i].span,
              fmt::format("index {} is out of range for dimension {} of `{}` (size {}){}", *v, i,
                          o.name, t.shape[i], rn({use->tensor})));
        return false;
      }
      use->index.push_back(*v);
    }
    use->shape.assign(t.shape.begin() + static_cast<long>(o.index.size()), t.shape.end());
    if (o.kind == Operand::Kind::kPeerTensor) {
      use->on_peer = true;
      use->peer = o.peer;
      if (!eval_for_all_ranks(o.peer, env, "peer index")) return false;
    }
    return true;
  }

  bool want_symmetric(const TensorUse& u, const std::string& op, const char* why) {
    const Tensor& t = out_.tensors[u.tensor];
    if (t.placement == dsl::Placement::kSymmetric) return true;
    error(DiagKind::kNotSymmetric, u.span,
          fmt::format("`{}` {} `{}`, so it must be `symmetric`", op, why, t.name))
        .note(t.span, "declared here without `symmetric`")
        .set_hint(fmt::format("declare it `{} : {}{} symmetric`", t.name, dtype_name(t.dtype),
                              shape_str(t.shape)));
    return false;
  }

  bool want_dtype(const TensorUse& u, std::function<bool(DType)> ok, const std::string& what) {
    const Tensor& t = out_.tensors[u.tensor];
    if (ok(t.dtype)) return true;
    error(DiagKind::kDtypeMismatch, u.span,
          fmt::format("`{}` is {}, but {}", t.name, dtype_name(t.dtype), what));
    return false;
  }

  bool same_dtype(const TensorUse& a, const TensorUse& b, const std::string& op) {
    const Tensor& ta = out_.tensors[a.tensor];
    const Tensor& tb = out_.tensors[b.tensor];
    if (ta.dtype == tb.dtype) return true;
    error(DiagKind::kDtypeMismatch, b.span,
          fmt::format("`{}` needs `{}` and `{}` of one element type, but they are {} and {}", op,
                      ta.name, tb.name, dtype_name(ta.dtype), dtype_name(tb.dtype)))
        .note(ta.span, fmt::format("`{}` is {}", ta.name, dtype_name(ta.dtype)));
    return false;
  }

  bool want_shape(const TensorUse& u, const std::vector<int64_t>& want, const std::string& why) {
    if (u.shape == want) return true;
    error(DiagKind::kShapeMismatch, u.span,
          fmt::format("`{}` has shape {}, but {} needs {}{}", dsl::source_text(*file_, u.span),
                      shape_str(u.shape), why, shape_str(want), rn({u.tensor})));
    return false;
  }

  bool want_rank(const TensorUse& u, size_t dims, const std::string& what) {
    if (u.shape.size() == dims) return true;
    error(DiagKind::kShapeMismatch, u.span,
          fmt::format("`{}` has {} dimensions {}, but {} takes {} dimensions",
                      dsl::source_text(*file_, u.span), u.shape.size(), shape_str(u.shape), what,
                      dims));
    return false;
  }

  const dsl::NamedArg* named(const dsl::OpDecl& op, const std::string& key) const {
    for (const dsl::NamedArg& n : op.named) {
      if (n.key == key) return &n;
    }
    return nullptr;
  }

  std::optional<std::string> word_arg(const Operand& o, const std::vector<std::string>& allowed,
                                      const char* what) {
    if (o.kind == Operand::Kind::kName && o.index.empty() &&
        std::find(allowed.begin(), allowed.end(), o.name) != allowed.end())
      return o.name;
    auto& d = error(DiagKind::kBadArgument, o.span,
                    fmt::format("expected {} ({}), found `{}`", what, fmt::join(allowed, ", "),
                                dsl::source_text(*file_, o.span)));
    if (o.kind == Operand::Kind::kName) {
      const std::string s = dsl::did_you_mean(o.name, allowed);
      if (!s.empty()) d.set_hint(s.substr(1));
    }
    return std::nullopt;
  }

  std::optional<int64_t> int_arg(const Operand& o, const LoopEnv& env, const char* what) {
    Expr e;
    if (o.kind == Operand::Kind::kExpr) {
      e = o.expr;
    } else if (o.kind == Operand::Kind::kName && o.index.empty()) {
      e.kind = Expr::Kind::kName;
      e.name = o.name;
      e.span = o.span;
    } else {
      error(DiagKind::kBadArgument, o.span, fmt::format("expected an integer for {}", what));
      return std::nullopt;
    }
    return eval(e, EvalCtx{&env, false, 0, false, what});
  }

  int device_fn_arg(const Operand& o, const char* what) {
    if (o.kind != Operand::Kind::kName || !o.index.empty()) {
      error(DiagKind::kBadArgument, o.span, fmt::format("expected a device function as {}", what));
      return -1;
    }
    auto sit = symbols_.find(o.name);
    if (sit == symbols_.end()) {
      undefined(o.name, o.name_span, "device function", {Symbol::kDevice});
      return -1;
    }
    if (sit->second.kind != Symbol::kDevice) {
      error(DiagKind::kWrongKind, o.name_span,
            fmt::format("`{}` is {}, but {} must be a device function", o.name,
                        symbol_kind_name(sit->second.kind), what))
          .note(sit->second.span, "declared here");
      return -1;
    }
    return device_index_.at(o.name);
  }

  // Argument counts and named keys, per operation.
  struct Signature {
    size_t min_in, max_in, min_out, max_out;
    std::vector<std::string> keys;
    const char* usage;
  };

  static Signature signature(OpKind k) {
    switch (k) {
      case OpKind::kGemm:
        return {2, 2, 1, 1, {"epilogue", "bias"}, "gemm(A, B -> C[, epilogue = fn][, bias = b])"};
      case OpKind::kGroupedGemm:
        return {2,
                2,
                1,
                1,
                {"counts", "epilogue"},
                "grouped_gemm(X, W -> Y, counts = C[, epilogue = fn])"};
      case OpKind::kMap:
        return {2, 8, 1, 1, {}, "map(fn, X1[, X2 ...] -> Y)"};
      case OpKind::kReduce:
        return {1, 1, 1, 1, {"op", "axis"}, "reduce(X -> Y, op = sum, axis = k)"};
      case OpKind::kAttention:
        return {3,
                3,
                1,
                1,
                {"causal", "accumulate", "scale"},
                "attention(Q, K, V -> O[, causal = 0|1][, accumulate = 0|1][, scale = s])"};
      case OpKind::kCopy:
        return {1, 1, 1, 1, {}, "copy(X -> Y)"};
      case OpKind::kAllReduce:
        return {2, 2, 0, 1, {}, "allreduce(X, sum[ -> Y])"};
      case OpKind::kAllGather:
        return {1, 1, 1, 1, {}, "allgather(X -> Y)"};
      case OpKind::kReduceScatter:
        return {2, 2, 1, 1, {}, "reducescatter(X, sum -> Y)"};
      case OpKind::kAllToAll:
        return {1,
                1,
                1,
                1,
                {"route", "counts", "experts"},
                "alltoall(X -> Y, route = T, counts = C, experts = E)"};
      case OpKind::kCombine:
        return {
            1, 1, 1, 1, {"dispatch", "weights"}, "combine(Y -> Out, dispatch = d, weights = W)"};
      case OpKind::kShift:
        return {1, 1, 1, 1, {"by"}, "shift(X -> Y[, by = k])"};
      case OpKind::kPut:
        return {1, 1, 1, 1, {}, "put(X -> peer(e).Y)"};
      case OpKind::kSignal:
        return {1, 1, 0, 0, {}, "signal(peer(e))"};
    }
    return {0, 0, 0, 0, {}, ""};
  }

  void instantiate(const dsl::OpDecl& op, const LoopEnv& env) {
    OpKind kind{};
    if (!parse_op(op.op, &kind)) {
      if (reported_ops_.insert(op.op_span.begin).second) {
        auto& d =
            error(DiagKind::kUnknownOp, op.op_span,
                  fmt::format("unknown {} operation `{}`", op.comm ? "comm" : "compute", op.op));
        std::string s = dsl::did_you_mean(op.op, op_names(op.comm));
        if (s.empty()) s = dsl::did_you_mean(op.op, op_names(!op.comm));
        d.set_hint(s.empty() ? fmt::format("{} operations: {}", op.comm ? "comm" : "compute",
                                           fmt::join(op_names(op.comm), ", "))
                             : s.substr(1));
      }
      return;
    }
    if (op_is_comm(kind) != op.comm) {
      if (reported_ops_.insert(op.op_span.begin).second) {
        error(DiagKind::kWrongKind, op.op_span,
              fmt::format("`{}` is a {} operation, declared with `{}`", op.op,
                          op.comm ? "compute" : "comm", op.comm ? "comm" : "compute"))
            .set_hint(fmt::format("write `{} {} = {}(...)`", op.comm ? "compute" : "comm", op.name,
                                  op.op));
      }
      return;
    }
    OpInstance inst;
    inst.kind = kind;
    inst.name = op.name;
    inst.decl = &op;
    if (!env.empty()) {
      // The innermost loop's variable: the last declared among the decl's loop vars.
      const DeclInfo& info = decls_[symbols_.at(op.name).index];
      inst.iteration = env.at(info.loop_vars.back());
    }

    // `when` first: an instance that is switched off is still checked, but not kept.
    bool enabled = true;
    for (const dsl::Clause& c : op.clauses) {
      if (c.name != "when") continue;
      if (c.args.size() != 1) {
        error(DiagKind::kBadArgument, c.span, "`when` takes one condition");
        return;
      }
      auto v = eval(c.args[0], EvalCtx{&env, false, 0, false, "condition"});
      if (!v) return;
      enabled = *v != 0;
    }

    const Signature sig = signature(kind);
    const bool report = reported_ops_.insert(op.span.begin).second;
    const size_t errors_before = diags_.error_count();
    const auto count_error = [&](size_t n, size_t lo, size_t hi, const char* what) {
      if (n >= lo && n <= hi) return false;
      if (report) {
        error(DiagKind::kBadArgument, op.op_span,
              fmt::format("`{}` takes {} {}{}, given {}", op.op,
                          lo == hi ? std::to_string(lo) : fmt::format("{} to {}", lo, hi), what,
                          hi == 1 ? "" : "s", n))
            .set_hint(fmt::format("usage: {}", sig.usage));
      }
      return true;
    };
    if (count_error(op.inputs.size(), sig.min_in, sig.max_in, "input") ||
        count_error(op.outputs.size(), sig.min_out, sig.max_out, "output")) {
      return;
    }
    std::set<std::string> seen_keys;
    for (const dsl::NamedArg& n : op.named) {
      if (std::find(sig.keys.begin(), sig.keys.end(), n.key) == sig.keys.end()) {
        if (report) {
          auto& d = error(DiagKind::kBadArgument, n.key_span,
                          fmt::format("`{}` takes no argument `{}`", op.op, n.key));
          const std::string s = dsl::did_you_mean(n.key, sig.keys);
          d.set_hint(!s.empty() ? s.substr(1) : fmt::format("usage: {}", sig.usage));
        }
        return;
      }
      if (!seen_keys.insert(n.key).second) {
        if (report)
          error(DiagKind::kBadArgument, n.key_span,
                fmt::format("argument `{}` given twice", n.key));
        return;
      }
    }

    if (!check_operands(op, kind, env, &inst)) return;
    if (!check_clauses(op, kind, env, &inst)) return;
    if (diags_.error_count() != errors_before) return;
    if (!enabled) return;
    if (static_cast<int64_t>(out_.ops.size()) >= kMaxInstances) {
      error(DiagKind::kParamRange, op.span,
            fmt::format("more than {} operation instances after unrolling loops", kMaxInstances));
      return;
    }
    pending_.push_back(PendingDeps{static_cast<int>(out_.ops.size()), env});
    out_.ops.push_back(std::move(inst));
  }

  bool check_operands(const dsl::OpDecl& op, OpKind kind, const LoopEnv& env, OpInstance* inst) {
    const std::string& name = op.name;
    const auto tensors_in = [&](size_t from, bool peer_ok) {
      for (size_t i = from; i < op.inputs.size(); ++i) {
        TensorUse u;
        if (!tensor_operand(op.inputs[i], env, &u, peer_ok, "an input")) return false;
        inst->inputs.push_back(std::move(u));
      }
      return true;
    };
    const auto tensors_out = [&](bool peer_ok) {
      for (const Operand& o : op.outputs) {
        TensorUse u;
        if (!tensor_operand(o, env, &u, peer_ok, "an output")) return false;
        inst->outputs.push_back(std::move(u));
      }
      return true;
    };
    const auto named_tensor = [&](const char* key, bool required) -> int {
      const dsl::NamedArg* n = named(op, key);
      if (n == nullptr) {
        if (required) {
          error(DiagKind::kBadArgument, op.op_span,
                fmt::format("`{}` needs `{} = ...`", op.op, key))
              .set_hint(fmt::format("usage: {}", signature(kind).usage));
        }
        return required ? -2 : -1;
      }
      TensorUse u;
      if (!tensor_operand(n->value, env, &u, false, key)) return -2;
      inst->tensor_args[key] = u.tensor;
      return u.tensor;
    };
    const auto is_gemm_in = [](DType t) {
      return t == DType::kBf16 || t == DType::kF16 || dtype_is_fp8(t);
    };
    const auto is_gemm_out = [](DType t) {
      return t == DType::kBf16 || t == DType::kF16 || t == DType::kF32;
    };
    const auto is_reducible = [](DType t) { return !dtype_is_fp8(t); };

    switch (kind) {
      case OpKind::kGemm: {
        if (!tensors_in(0, false) || !tensors_out(false)) return false;
        const TensorUse& a = inst->inputs[0];
        const TensorUse& b = inst->inputs[1];
        const TensorUse& c = inst->outputs[0];
        if (!want_rank(a, 2, "gemm's A") || !want_rank(b, 2, "gemm's B") ||
            !want_rank(c, 2, "gemm's C"))
          return false;
        if (!want_dtype(a, is_gemm_in, "gemm multiplies bf16, f16 or fp8") ||
            !same_dtype(a, b, "gemm") ||
            !want_dtype(c, is_gemm_out, "gemm writes bf16, f16 or f32"))
          return false;
        if (a.shape[1] != b.shape[0]) {
          error(DiagKind::kShapeMismatch, b.span,
                fmt::format("gemm inner dimensions differ: A is {} and B is {} ({} != {}){}",
                            shape_str(a.shape), shape_str(b.shape), a.shape[1], b.shape[0],
                            rn({a.tensor, b.tensor})))
              .note(a.span, "A is here")
              .set_hint("gemm(A, B -> C) computes C[M, N] = A[M, K] x B[K, N]");
          return false;
        }
        if (!want_shape(c, {a.shape[0], b.shape[1]}, "gemm's C = A x B")) return false;
        if (const dsl::NamedArg* n = named(op, "epilogue")) {
          inst->device_fn = device_fn_arg(n->value, "the epilogue");
          if (inst->device_fn < 0) return false;
          if (!check_fn_arity(n->value, inst->device_fn, 1)) return false;
        }
        const int bias = named_tensor("bias", false);
        if (bias == -2) return false;
        if (bias >= 0) {
          TensorUse bu;
          tensor_operand(named(op, "bias")->value, env, &bu, false, "bias");
          if (!want_shape(bu, {b.shape[1]}, "gemm's bias (one value per column of C)"))
            return false;
        }
        return true;
      }
      case OpKind::kGroupedGemm: {
        if (!tensors_in(0, false) || !tensors_out(false)) return false;
        const TensorUse& x = inst->inputs[0];
        const TensorUse& w = inst->inputs[1];
        const TensorUse& y = inst->outputs[0];
        if (!want_rank(x, 2, "grouped_gemm's X") ||
            !want_rank(w, 3, "grouped_gemm's W [groups, K, N]") ||
            !want_rank(y, 2, "grouped_gemm's Y"))
          return false;
        if (!want_dtype(x, is_gemm_in, "grouped_gemm multiplies bf16, f16 or fp8") ||
            !same_dtype(x, w, "grouped_gemm") ||
            !want_dtype(y, is_gemm_out, "grouped_gemm writes bf16, f16 or f32"))
          return false;
        if (x.shape[1] != w.shape[1]) {
          error(
              DiagKind::kShapeMismatch, w.span,
              fmt::format("grouped_gemm inner dimensions differ: X is {} and W is {} ({} != {}){}",
                          shape_str(x.shape), shape_str(w.shape), x.shape[1], w.shape[1],
                          rn({x.tensor, w.tensor})))
              .note(x.span, "X is here");
          return false;
        }
        if (!want_shape(y, {x.shape[0], w.shape[2]}, "grouped_gemm's Y")) return false;
        const int counts = named_tensor("counts", true);
        if (counts < 0) return false;
        const Tensor& ct = out_.tensors[counts];
        TensorUse cu;
        tensor_operand(named(op, "counts")->value, env, &cu, false, "counts");
        if (!want_dtype(
                cu, [](DType t) { return t == DType::kI32; }, "row counts are i32"))
          return false;
        if (ct.shape.back() != w.shape[0]) {
          error(DiagKind::kShapeMismatch, cu.span,
                fmt::format(
                    "`{}` counts rows for {} groups (its last dimension), but W has {} groups{}",
                    ct.name, ct.shape.back(), w.shape[0], rn({counts, w.tensor})));
          return false;
        }
        if (const dsl::NamedArg* n = named(op, "epilogue")) {
          inst->device_fn = device_fn_arg(n->value, "the epilogue");
          if (inst->device_fn < 0 || !check_fn_arity(n->value, inst->device_fn, 1)) return false;
        }
        return true;
      }
      case OpKind::kMap: {
        inst->device_fn = device_fn_arg(op.inputs[0], "map's first argument");
        if (inst->device_fn < 0) return false;
        if (!tensors_in(1, false) || !tensors_out(false)) return false;
        if (!check_fn_arity(op.inputs[0], inst->device_fn, inst->inputs.size())) return false;
        const TensorUse& y = inst->outputs[0];
        for (const TensorUse& x : inst->inputs) {
          if (!want_shape(x, y.shape,
                          fmt::format("map into `{}`", dsl::source_text(*file_, y.span))))
            return false;
        }
        return true;
      }
      case OpKind::kReduce: {
        if (!tensors_in(0, false) || !tensors_out(false)) return false;
        const dsl::NamedArg* opn = named(op, "op");
        inst->reduce_op = "sum";
        if (opn != nullptr) {
          auto w = word_arg(opn->value, kReduceOps, "a reduction");
          if (!w) return false;
          inst->reduce_op = *w;
        }
        const TensorUse& x = inst->inputs[0];
        int64_t axis = static_cast<int64_t>(x.shape.size()) - 1;
        if (const dsl::NamedArg* an = named(op, "axis")) {
          auto v = int_arg(an->value, env, "axis");
          if (!v) return false;
          if (*v < 0 || *v >= static_cast<int64_t>(x.shape.size())) {
            error(DiagKind::kBadArgument, an->value.span,
                  fmt::format("axis {} is out of range: `{}` has {} dimensions", *v,
                              dsl::source_text(*file_, x.span), x.shape.size()));
            return false;
          }
          axis = *v;
        }
        inst->ints["axis"] = axis;
        std::vector<int64_t> want = x.shape;
        want.erase(want.begin() + axis);
        if (want.empty()) want.push_back(1);
        return want_dtype(x, is_reducible, "fp8 cannot be reduced") &&
               want_shape(inst->outputs[0], want, fmt::format("reducing axis {}", axis));
      }
      case OpKind::kAttention: {
        if (!tensors_in(0, false) || !tensors_out(false)) return false;
        const TensorUse& q = inst->inputs[0];
        const TensorUse& k = inst->inputs[1];
        const TensorUse& v = inst->inputs[2];
        const TensorUse& o = inst->outputs[0];
        if (q.shape.size() < 2 || k.shape.size() != q.shape.size() ||
            v.shape.size() != q.shape.size() || o.shape.size() != q.shape.size()) {
          error(DiagKind::kShapeMismatch, op.op_span,
                "attention needs Q, K, V and O of one rank, at least 2: [..., sequence, head_dim]")
              .set_hint("e.g. Q : bf16[B, H, S, D]");
          return false;
        }
        const auto is_attn_in = [](DType t) { return t == DType::kBf16 || t == DType::kF16; };
        if (!want_dtype(q, is_attn_in, "attention takes bf16 or f16") ||
            !same_dtype(q, k, "attention") || !same_dtype(q, v, "attention") ||
            !want_dtype(o, is_gemm_out, "attention writes bf16, f16 or f32"))
          return false;
        const size_t n = q.shape.size();
        std::vector<int64_t> kwant(q.shape.begin(), q.shape.end() - 2);
        kwant.push_back(k.shape[n - 2]);
        kwant.push_back(q.shape[n - 1]);
        if (!want_shape(k, kwant, "attention's K (batch dims and head_dim of Q)")) return false;
        std::vector<int64_t> vwant = kwant;
        vwant[n - 1] = v.shape[n - 1];
        if (!want_shape(v, vwant, "attention's V (K's sequence length)")) return false;
        std::vector<int64_t> owant(q.shape.begin(), q.shape.end() - 1);
        owant.push_back(v.shape[n - 1]);
        if (!want_shape(o, owant, "attention's O")) return false;
        for (const char* key : {"causal", "accumulate"}) {
          if (const dsl::NamedArg* a = named(op, key)) {
            auto val = int_arg(a->value, env, key);
            if (!val) return false;
            if (*val != 0 && *val != 1) {
              error(DiagKind::kBadArgument, a->value.span,
                    fmt::format("`{}` is 0 or 1, not {}", key, *val));
              return false;
            }
            inst->ints[key] = *val;
          }
        }
        if (inst->ints.count("accumulate") && inst->ints["accumulate"] && env.empty()) {
          error(DiagKind::kBadArgument, named(op, "accumulate")->key_span,
                "`accumulate = 1` merges attention over a loop's iterations, but this attention is "
                "not in a loop");
          return false;
        }
        // The softmax scale: given, or 1 / sqrt(head_dim).
        inst->floats["scale"] = 1.0 / std::sqrt(static_cast<double>(q.shape.back()));
        if (const dsl::NamedArg* s = named(op, "scale")) {
          if (s->value.kind == Operand::Kind::kExpr && s->value.expr.kind == Expr::Kind::kFloat) {
            inst->floats["scale"] = s->value.expr.float_value;
          } else {
            auto val = int_arg(s->value, env, "scale");
            if (!val) return false;
            inst->floats["scale"] = static_cast<double>(*val);
          }
        }
        return true;
      }
      case OpKind::kCopy: {
        if (!tensors_in(0, false) || !tensors_out(false)) return false;
        return same_dtype(inst->inputs[0], inst->outputs[0], "copy") &&
               want_shape(inst->outputs[0], inst->inputs[0].shape, "copy");
      }
      case OpKind::kAllReduce:
      case OpKind::kReduceScatter: {
        TensorUse x;
        if (!tensor_operand(op.inputs[0], env, &x, false, "the tensor to reduce")) return false;
        auto w = word_arg(op.inputs[1], kReduceOps, "a reduction");
        if (!w) return false;
        inst->reduce_op = *w;
        inst->inputs.push_back(x);
        if (!tensors_out(false)) return false;
        if (!want_dtype(x, is_reducible, fmt::format("{} cannot reduce fp8", op.op))) return false;
        if (!want_symmetric(x, name, "has peers read")) return false;
        if (kind == OpKind::kAllReduce) {
          if (inst->outputs.empty()) return true;  // in place
          const TensorUse& y = inst->outputs[0];
          return same_dtype(x, y, op.op) && want_shape(y, x.shape, "allreduce's result") &&
                 want_symmetric(y, name, "writes on every rank");
        }
        const TensorUse& y = inst->outputs[0];
        std::vector<int64_t> want = x.shape;
        if (want[0] % out_.ranks != 0) {
          error(DiagKind::kInexactDivision, x.span,
                fmt::format("reducescatter splits the first dimension of `{}` ({}) over the ranks, "
                            "which leaves a remainder{}",
                            dsl::source_text(*file_, x.span), want[0], r_note_));
          return false;
        }
        want[0] /= out_.ranks;
        return same_dtype(x, y, op.op) &&
               want_shape(y, want,
                          "reducescatter's result (the first dimension split over the ranks)");
      }
      case OpKind::kAllGather: {
        if (!tensors_in(0, false) || !tensors_out(false)) return false;
        const TensorUse& x = inst->inputs[0];
        const TensorUse& y = inst->outputs[0];
        std::vector<int64_t> want = x.shape;
        if (__builtin_mul_overflow(want[0], out_.ranks, &want[0])) return false;
        return same_dtype(x, y, op.op) &&
               want_shape(y, want,
                          "allgather's result (the ranks' parts stacked on the first dimension)") &&
               want_symmetric(y, name, "has peers write into");
      }
      case OpKind::kAllToAll: {
        if (!tensors_in(0, false) || !tensors_out(false)) return false;
        const TensorUse& x = inst->inputs[0];
        const TensorUse& y = inst->outputs[0];
        if (!same_dtype(x, y, op.op) || !want_rank(x, 2, "alltoall's X [rows, width]") ||
            !want_rank(y, 2, "alltoall's Y [capacity, width]"))
          return false;
        if (x.shape[1] != y.shape[1]) {
          error(DiagKind::kShapeMismatch, y.span,
                fmt::format("alltoall moves rows of width {}, but `{}` has rows of width {}{}",
                            x.shape[1], dsl::source_text(*file_, y.span), y.shape[1],
                            rn({x.tensor, y.tensor})));
          return false;
        }
        if (!want_symmetric(y, name, "has peers write into")) return false;
        const int route = named_tensor("route", true);
        const int counts = named_tensor("counts", true);
        if (route < 0 || counts < 0) return false;
        const dsl::NamedArg* rn = named(op, "route");
        const dsl::NamedArg* cn = named(op, "counts");
        TensorUse ru, cu;
        tensor_operand(rn->value, env, &ru, false, "route");
        tensor_operand(cn->value, env, &cu, false, "counts");
        const auto is_i32 = [](DType t) { return t == DType::kI32; };
        if (!want_dtype(ru, is_i32, "the routing table is i32") ||
            !want_dtype(cu, is_i32, "row counts are i32"))
          return false;
        if (ru.shape.size() != 2 || ru.shape[0] != x.shape[0]) {
          error(DiagKind::kShapeMismatch, ru.span,
                fmt::format("the routing table `{}` must be [{}, k]: one row of k destinations per "
                            "row of `{}`{}",
                            out_.tensors[route].name, x.shape[0], out_.tensors[x.tensor].name,
                            r_note_));
          return false;
        }
        int64_t experts = out_.ranks;
        if (const dsl::NamedArg* en = named(op, "experts")) {
          auto v = int_arg(en->value, env, "experts");
          if (!v) return false;
          if (*v <= 0 || *v % out_.ranks != 0) {
            error(DiagKind::kInexactDivision, en->value.span,
                  fmt::format("{} experts cannot be split evenly over the ranks{}", *v, r_note_));
            return false;
          }
          experts = *v;
        }
        inst->ints["experts"] = experts;
        if (!want_shape(cu, {out_.ranks, experts / out_.ranks},
                        "alltoall's counts [source rank, local expert]"))
          return false;
        return want_symmetric(cu, name, "has peers write into");
      }
      case OpKind::kCombine: {
        if (!tensors_in(0, false) || !tensors_out(false)) return false;
        const dsl::NamedArg* dn = named(op, "dispatch");
        if (dn == nullptr || dn->value.kind != Operand::Kind::kName) {
          error(DiagKind::kBadArgument, dn ? dn->value.span : op.op_span,
                "`combine` needs `dispatch = d`, the alltoall whose routing it reverses")
              .set_hint(fmt::format("usage: {}", signature(kind).usage));
          return false;
        }
        auto sit = symbols_.find(dn->value.name);
        if (sit == symbols_.end()) {
          undefined(dn->value.name, dn->value.span, "operation", {Symbol::kOp});
          return false;
        }
        const dsl::OpDecl* disp =
            sit->second.kind == Symbol::kOp ? decls_[sit->second.index].decl : nullptr;
        if (disp == nullptr || disp->op != "alltoall") {
          error(DiagKind::kWrongKind, dn->value.span,
                fmt::format("`{}` is not an alltoall; combine reverses a dispatch", dn->value.name))
              .note(sit->second.span, "declared here");
          return false;
        }
        inst->dispatch_op = sit->second.index;  // a declaration index until resolve_deps()
        const TensorUse& y = inst->inputs[0];
        const TensorUse& out = inst->outputs[0];
        if (!want_rank(y, 2, "combine's Y") || !want_rank(out, 2, "combine's Out") ||
            !same_dtype(y, out, op.op))
          return false;
        if (y.shape[1] != out.shape[1]) {
          error(DiagKind::kShapeMismatch, out.span,
                fmt::format("combine moves rows of width {}, but `{}` has rows of width {}{}",
                            y.shape[1], dsl::source_text(*file_, out.span), out.shape[1],
                            rn({y.tensor, out.tensor})));
          return false;
        }
        if (!want_symmetric(out, name, "has peers write into")) return false;
        const int weights = named_tensor("weights", false);
        if (weights == -2) return false;
        if (weights >= 0) {
          TensorUse wu;
          tensor_operand(named(op, "weights")->value, env, &wu, false, "weights");
          if (!want_dtype(
                  wu, [](DType t) { return t == DType::kF32; }, "combine weights are f32") ||
              !want_rank(wu, 2, "combine's weights [tokens, k]"))
            return false;
          if (wu.shape[0] != out.shape[0]) {
            return want_shape(wu, {out.shape[0], wu.shape[1]},
                              "combine's weights (one row per output row)");
          }
        }
        return true;
      }
      case OpKind::kShift: {
        if (!tensors_in(0, false) || !tensors_out(false)) return false;
        int64_t by = 1;
        if (const dsl::NamedArg* bn = named(op, "by")) {
          auto v = int_arg(bn->value, env, "by");
          if (!v) return false;
          by = *v;
        }
        inst->ints["by"] = by;
        return same_dtype(inst->inputs[0], inst->outputs[0], op.op) &&
               want_shape(inst->outputs[0], inst->inputs[0].shape, "shift") &&
               want_symmetric(inst->outputs[0], name, "has a peer write into");
      }
      case OpKind::kPut: {
        if (!tensors_in(0, false)) return false;
        if (op.outputs[0].kind != Operand::Kind::kPeerTensor) {
          error(DiagKind::kBadArgument, op.outputs[0].span,
                "`put` writes into a peer's tensor: `put(X -> peer(e).Y)`")
              .set_hint("to copy within a rank use `compute name = copy(X -> Y)`");
          return false;
        }
        if (!tensors_out(true)) return false;
        return same_dtype(inst->inputs[0], inst->outputs[0], op.op) &&
               want_shape(inst->outputs[0], inst->inputs[0].shape, "put") &&
               want_symmetric(inst->outputs[0], name, "writes into a peer's");
      }
      case OpKind::kSignal: {
        if (op.inputs[0].kind != Operand::Kind::kPeer) {
          error(DiagKind::kBadArgument, op.inputs[0].span,
                "`signal` takes a peer: `signal(peer(e))`");
          return false;
        }
        return eval_for_all_ranks(op.inputs[0].peer, env, "peer index");
      }
    }
    return false;
  }

  bool check_fn_arity(const Operand& at, int fn, size_t n) {
    const DeviceFunction& f = out_.device_fns[fn];
    if (f.params.size() == n) return true;
    error(DiagKind::kBadArgument, at.span,
          fmt::format("device function `{}` takes {} parameter{}, but is applied to {}", f.name,
                      f.params.size(), f.params.size() == 1 ? "" : "s", n));
    return false;
  }

  // The tensor a comm op's chunks cut: the one whose per-rank part travels.
  const TensorUse* chunked_tensor(OpKind kind, const OpInstance& inst) const {
    switch (kind) {
      case OpKind::kReduceScatter:
      case OpKind::kCombine:
        return inst.outputs.empty() ? nullptr : &inst.outputs[0];
      case OpKind::kSignal:
        return nullptr;
      default:
        return inst.inputs.empty() ? nullptr : &inst.inputs[0];
    }
  }

  bool check_clauses(const dsl::OpDecl& op, OpKind kind, const LoopEnv& env, OpInstance* inst) {
    std::set<std::string> seen;
    static const std::vector<std::string> kClauses = {"tile", "chunk",     "after",
                                                      "when", "rows_from", "algo"};
    for (const dsl::Clause& c : op.clauses) {
      if (std::find(kClauses.begin(), kClauses.end(), c.name) == kClauses.end()) {
        auto& d =
            error(DiagKind::kUnknownClause, c.span, fmt::format("unknown clause `{}`", c.name));
        const std::string s = dsl::did_you_mean(c.name, kClauses);
        d.set_hint(s.empty() ? fmt::format("clauses: {}", fmt::join(kClauses, ", ")) : s.substr(1));
        return false;
      }
      if (c.name != "after" && !seen.insert(c.name).second) {
        error(DiagKind::kBadArgument, c.span, fmt::format("clause `{}` given twice", c.name));
        return false;
      }
      if (c.name == "tile" || c.name == "chunk") {
        const bool tile = c.name == "tile";
        if (tile == op_is_comm(kind)) {
          error(DiagKind::kUnknownClause, c.span,
                fmt::format("`{}` operations are cut into {}s, not {}s",
                            op.comm ? "comm" : "compute", tile ? "chunk" : "tile", c.name))
              .set_hint(fmt::format("write `{}(...)`", tile ? "chunk" : "tile"));
          return false;
        }
        std::vector<int64_t> sizes;
        for (const Expr& e : c.args) {
          auto v =
              eval_positive(e, EvalCtx{&env, false, 0, false, tile ? "tile size" : "chunk size"},
                            tile ? "tile size" : "chunk size");
          if (!v) return false;
          sizes.push_back(*v);
        }
        if (tile ? !check_tile(c, kind, *inst, sizes) : !check_chunk(c, kind, *inst, sizes))
          return false;
        (tile ? inst->tile : inst->chunk) = sizes;
      } else if (c.name == "rows_from") {
        if (kind != OpKind::kGemm && kind != OpKind::kGroupedGemm) {
          error(DiagKind::kUnknownClause, c.span,
                "`rows_from` orders a gemm's row blocks; this is not a gemm");
          return false;
        }
        if (c.args.size() != 1) {
          error(DiagKind::kBadArgument, c.span,
                "`rows_from` takes one row-block index (e.g. `rows_from(rank)`)");
          return false;
        }
        if (!eval_for_all_ranks(c.args[0], env, "row block")) return false;
        inst->has_rows_from = true;
        inst->rows_from = c.args[0];
      } else if (c.name == "algo") {
        if (kind != OpKind::kAllReduce && kind != OpKind::kAllGather &&
            kind != OpKind::kReduceScatter && kind != OpKind::kAllToAll) {
          error(DiagKind::kUnknownClause, c.span,
                fmt::format("`algo` chooses a collective's algorithm; `{}` is not a collective",
                            op.op));
          return false;
        }
        if (std::find(kAlgos.begin(), kAlgos.end(), c.word) == kAlgos.end()) {
          auto& d = error(DiagKind::kBadArgument, c.word_span,
                          fmt::format("unknown algorithm `{}`", c.word));
          const std::string s = dsl::did_you_mean(c.word, kAlgos);
          d.set_hint(s.empty() ? fmt::format("algorithms: {}", fmt::join(kAlgos, ", "))
                               : s.substr(1));
          return false;
        }
        inst->algo = c.word;
      }
    }
    if (inst->algo.empty()) inst->algo = "auto";
    return true;
  }

  bool check_tile(const dsl::Clause& c, OpKind kind, const OpInstance& inst,
                  const std::vector<int64_t>& sizes) {
    if (kind == OpKind::kGemm || kind == OpKind::kGroupedGemm) {
      if (sizes.size() != 2 && sizes.size() != 3) {
        error(DiagKind::kBadArgument, c.span,
              "a gemm tile is tile(rows, cols) or tile(rows, cols, k_step)");
        return false;
      }
      // The tensor cores' granularity: wgmma works on 64-row blocks and 16-wide K steps.
      const int64_t need[3] = {64, 16, 16};
      const char* dim[3] = {"rows", "cols", "k_step"};
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (sizes[i] % need[i] != 0) {
          error(DiagKind::kTileDivisibility, c.args[i].span,
                fmt::format("gemm tile {} = {} is not a multiple of {}", dim[i], sizes[i], need[i]))
              .set_hint(
                  "tensor cores work on 64-row blocks and multiples of 16 in N and K; e.g. "
                  "tile(128, 256, 64)");
          return false;
        }
      }
      return true;
    }
    if (kind == OpKind::kAttention) {
      if (sizes.size() != 2) {
        error(DiagKind::kBadArgument, c.span, "an attention tile is tile(query_rows, key_rows)");
        return false;
      }
      return true;
    }
    const size_t dims = inst.outputs.empty() ? 0 : inst.outputs[0].shape.size();
    if (sizes.size() > dims) {
      error(DiagKind::kBadArgument, c.span,
            fmt::format("tile has {} sizes, but the output has {} dimensions", sizes.size(), dims));
      return false;
    }
    return true;
  }

  bool check_chunk(const dsl::Clause& c, OpKind kind, const OpInstance& inst,
                   const std::vector<int64_t>& sizes) {
    const TensorUse* u = chunked_tensor(kind, inst);
    if (u == nullptr) {
      error(DiagKind::kBadArgument, c.span,
            fmt::format("`{}` moves no data to cut into chunks", op_name(kind)));
      return false;
    }
    if (sizes.size() > u->shape.size()) {
      error(DiagKind::kBadArgument, c.span,
            fmt::format("chunk has {} sizes, but `{}` has {} dimensions", sizes.size(),
                        dsl::source_text(*file_, u->span), u->shape.size()));
      return false;
    }
    // Sizes align with the trailing dimensions; chunks must cut them exactly.
    const size_t off = u->shape.size() - sizes.size();
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t dim = u->shape[off + i];
      if (dim % sizes[i] != 0) {
        error(DiagKind::kTileDivisibility, c.args[i].span,
              fmt::format("chunk size {} does not divide dimension {} of `{}` ({}){}", sizes[i],
                          off + i, dsl::source_text(*file_, u->span), dim, rn({u->tensor})))
            .set_hint("chunks cut a tensor exactly; pick a divisor of the dimension");
        return false;
      }
    }
    return true;
  }

  // Which instances open and close their declaration's sequence (an attention that accumulates
  // over a loop initialises its state in the first and writes its output in the last).
  void mark_first_and_last() {
    std::set<const dsl::OpDecl*> seen;
    for (OpInstance& op : out_.ops) op.first_of_decl = seen.insert(op.decl).second;
    seen.clear();
    for (auto it = out_.ops.rbegin(); it != out_.ops.rend(); ++it)
      it->last_of_decl = seen.insert(it->decl).second;
  }

  // ---- dependencies -------------------------------------------------------------------------
  void resolve_deps() {
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
          const auto matches_outer = [&](const OpInstance& t, const LoopEnv& t_env,
                                         size_t n_outer) {
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
                error(DiagKind::kBadArgument, d.span,
                      fmt::format("`{}` is not in a loop, so it has no iterations to index",
                                  d.target));
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
                error(
                    DiagKind::kUnproducedDependency, d.span,
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

  // pending_ holds one entry per kept instance, in instance order.
  const LoopEnv& env_of(int instance) const { return pending_[instance].env; }

  std::vector<int> read_tensors(const OpInstance& op) const {
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

  std::vector<int> written_tensors(const OpInstance& op) const {
    std::vector<int> t;
    for (const TensorUse& u : op.outputs) t.push_back(u.tensor);
    if (op.kind == OpKind::kAllReduce && op.outputs.empty()) t.push_back(op.inputs[0].tensor);
    if (op.kind == OpKind::kAllToAll) t.push_back(op.tensor_args.at("counts"));
    return t;
  }

  bool reads_what_writes(const OpInstance& reader, const OpInstance& writer) const {
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

  static bool overlaps(const Slice& a, const Slice& b) {
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
                            Span at) const {
    std::vector<Slice> out;
    for (const TensorUse& u : uses) out.push_back(Slice{u.tensor, &u.index, u.span});
    for (int t : whole) {
      bool present = false;
      for (const TensorUse& u : uses) present |= u.tensor == t;
      if (!present) out.push_back(Slice{t, nullptr, at});
    }
    return out;
  }

  // Every read of data that an earlier operation (in program order) wrote must wait for it.
  void check_races() {
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

  std::vector<char> reachable(int from) const {
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

  // A cycle of waits is a deadlock. Iterative DFS; the first cycle found is reported.
  void check_cycles() {
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

  std::string instance_name(const OpInstance& op) const {
    return op.iteration >= 0 ? fmt::format("{}[{}]", op.name, op.iteration) : op.name;
  }

  void report_cycle(const std::vector<int>& cycle) {
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

  std::shared_ptr<const dsl::SourceFile> file_;
  const dsl::Schedule& sched_;
  const CheckOptions& opts_;
  dsl::Diagnostics& diags_;
  CheckedSchedule out_;
  std::string r_note_;
  std::map<std::string, Symbol> symbols_;
  std::vector<const dsl::ParamDecl*> param_decls_;
  std::vector<DeclInfo> decls_;
  std::map<std::string, int> tensor_index_;
  std::map<std::string, int> device_index_;
  std::vector<PendingDeps> pending_;
  std::set<uint32_t> reported_ops_;
  std::set<uint32_t> reported_loop_items_;
  std::set<std::string> broken_tensors_;
  // Names whose value depends on the world size: the ranks symbols and the parameters and tensors
  // defined from them. Messages about them say which world size was checked.
  std::set<std::string> ranks_names_;
  bool evaluating_params_ = false;
};

}  // namespace

std::vector<CheckedSchedule> check(const dsl::Module& module, const CheckOptions& options,
                                   dsl::Diagnostics& diags) {
  std::vector<CheckedSchedule> out;
  std::vector<int64_t> sizes = options.ranks;
  if (sizes.empty()) sizes = {1, 2, 4, 8};
  std::set<std::string> names;
  for (const dsl::Schedule& s : module.schedules) {
    if (!names.insert(s.name).second) {
      diags.error(DiagKind::kDuplicateName, module.file, s.name_span,
                  fmt::format("schedule `{}` is declared twice in this file", s.name));
      continue;
    }
    for (int64_t r : sizes) {
      if (r <= 0 || r > kMaxRanks) {
        throw UserError(
            fmt::format("--ranks {}: the world size must be between 1 and {}", r, kMaxRanks));
      }
      int64_t per_node = options.ranks_per_node > 0 ? options.ranks_per_node : r;
      if (r % per_node != 0) {
        throw UserError(
            fmt::format("--ranks {} is not a multiple of --ranks-per-node {}", r, per_node));
      }
      CheckedSchedule cs;
      Checker c(module, s, options, r, per_node, diags);
      if (!c.run(&cs)) break;
      if (r == sizes.back()) out.push_back(std::move(cs));
    }
  }
  if (diags.has_errors()) out.clear();
  return out;
}

}  // namespace mkc::compiler
