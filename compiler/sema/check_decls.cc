// Declarations: parameters (their defaults or -D overrides, each at least 1, evaluated in order so
// a parameter may use only earlier ones), tensors (element type, shape, size in bytes), device
// functions (the signature mkc can call, a name the generated C++ can take, a body without
// preprocessor directives) and CTA roles (known names, counts that fit the GPU).
// A tensor that fails here is remembered as broken, so its uses later stay quiet.
#include <fmt/format.h>

#include <algorithm>

#include "compiler/sema/checker.h"
#include "compiler/sema/clang_check.h"
#include "compiler/sema/device_code.h"
#include "dsl/cpp_body.h"
#include "dsl/suggest.h"

namespace mkc::compiler {

using dsl::DiagKind;
using dsl::Expr;
using dsl::Span;

namespace {

const std::vector<std::string> kRoles = {"compute", "comm", "proxy", "reduce"};

}  // namespace

void Checker::check_defines() {
  for (const auto& [name, value] : opts_.defines) {
    auto it = symbols_.find(name);
    if (it == symbols_.end() || it->second.kind != Symbol::kParam) {
      auto& d = error(DiagKind::kUnknownParam, sched_.name_span,
                      fmt::format("-D {}={}: schedule `{}` has no parameter `{}`", name, value,
                                  sched_.name, name));
      std::vector<std::string> params;
      for (const auto* p : param_decls_) params.push_back(p->name);
      const std::string s = dsl::did_you_mean(name, params);
      d.set_hint(!s.empty()       ? s.substr(1)
                 : params.empty() ? std::string("this schedule declares no parameters")
                                  : fmt::format("its parameters are: {}", fmt::join(params, ", ")));
    }
  }
}

void Checker::evaluate_params() {
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

void Checker::check_decl_item(const dsl::Item& it) {
  if (auto* t = std::get_if<dsl::TensorDecl>(&it.node)) {
    check_tensor(*t);
  } else if (auto* f = std::get_if<dsl::DeviceFn>(&it.node)) {
    check_device_fn(*f);
  } else if (auto* roles = std::get_if<std::vector<dsl::RoleDecl>>(&it.node)) {
    check_roles(*roles);
  }
}

void Checker::check_tensor(const dsl::TensorDecl& t) {
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

void Checker::check_device_fn(const dsl::DeviceFn& f) {
  const size_t errors_before = diags_.error_count();
  DeviceFunction out;
  out.name = f.name;
  out.body = f.body;
  out.body_span = f.body_span;
  if (const char* why = reserved_device_name(f.name)) {
    error(DiagKind::kDeviceFunction, f.name_span,
          fmt::format("`{}` cannot name a device function: it is {}", f.name, why))
        .set_hint(
            "device functions become C++ functions of the generated kernel; pick another name");
  }
  // The body as C++ reads it (dsl/cpp_body.h); the lexer reported a body it could not end.
  const dsl::CppBodyScan scan = dsl::scan_cpp_body(f.body + "}");
  if (scan.problem_at != dsl::CppBodyScan::kNone && !scan.fatal) {
    const uint32_t begin = f.body_span.begin + static_cast<uint32_t>(scan.problem_at);
    const bool directive = scan.problem.rfind("a preprocessor directive", 0) == 0;
    // The directive's line, or the digraph.
    const std::string_view rest = std::string_view(f.body).substr(scan.problem_at);
    const size_t length = directive ? std::min(rest.find('\n'), rest.size()) : scan.problem_length;
    error(DiagKind::kDeviceFunction, Span{begin, begin + static_cast<uint32_t>(length)},
          fmt::format("the body of device function `{}` holds {}", f.name, scan.problem))
        .set_hint(directive
                      ? "the body is compiled as written, on the machine that compiles the kernel: "
                        "`#include`, `#define`, `#pragma`, `_Pragma` and `#` itself are not "
                        "allowed in it"
                      : "write the braces `{` and `}`: the body's end is found by its braces");
  }
  std::set<std::string> seen;
  for (const dsl::DeviceParam& p : f.params) {
    if (const char* why = reserved_device_name(p.name)) {
      error(DiagKind::kDeviceFunction, p.span,
            fmt::format("`{}` cannot name a parameter of `{}`: it is {}", p.name, f.name, why))
          .set_hint("pick another name");
    }
    DType t{};
    if (!parse_dtype(p.type, &t) || dtype_is_fp8(t)) {
      error(DiagKind::kDeviceFunction, p.span,
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
    error(
        DiagKind::kDeviceFunction, f.ret_span,
        fmt::format("`{}` returns `{}`, which device functions cannot return", f.name, f.ret_type))
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
  // Clang reads only a function the checks above found nothing wrong with: a body with a
  // directive never reaches it.
  device_fn_ok_.push_back(diags_.error_count() == errors_before);
  if (opts_.clang_device_fns && device_fn_ok_.back()) check_device_fn_with_clang(f);
}

void Checker::check_device_fn_with_clang(const dsl::DeviceFn& f) {
  std::string why;
  const ClangPlugin* clang = ClangPlugin::get(&why);
  if (clang == nullptr) {
    warning(DiagKind::kDeviceFunction, f.name_span,
            fmt::format("device function `{}` was not parsed: mkc's Clang plugin is not available "
                        "({})",
                        f.name, why))
        .set_hint(
            "its body is compiled when the kernel is, by NVRTC: a wrong type or an unknown call "
            "shows then; build //compiler/clang:libmkc_clang.so (needs LLVM 14) and set "
            "MKC_CLANG_PLUGIN to check it here");
    return;
  }
  // The functions before it that passed the checks (a refused one, `float` say, would only
  // confuse Clang), then it.
  std::vector<DeviceFunction> fns;
  for (size_t i = 0; i + 1 < out_.device_fns.size(); ++i)
    if (device_fn_ok_[i]) fns.push_back(out_.device_fns[i]);
  fns.push_back(out_.device_fns.back());
  size_t body_at = 0, definition_at = 0;
  const std::string text = clang_check_text(fns, fns.size() - 1, &body_at, &definition_at);
  const size_t body_end = body_at + f.body.size();
  for (const ClangFinding& c : clang->check(text, f.name)) {
    if (c.severity == 0) continue;  // notes belong to the finding before them
    // In mkc's prelude: not this function's doing (and not expected).
    if (c.offset != ClangFinding::kNowhere && c.offset < definition_at) continue;
    // In the body: its own place in the .mks file; anywhere else (the signature Clang read, or
    // Clang itself): the function's name.
    dsl::Span at = f.name_span;
    // (body_end is the closing brace, where Clang puts "does not return in all paths".)
    if (c.offset != ClangFinding::kNowhere && c.offset >= body_at && c.offset <= body_end) {
      const uint32_t begin = f.body_span.begin + static_cast<uint32_t>(c.offset - body_at);
      const size_t room = body_end - c.offset + 1;
      at = dsl::Span{begin, begin + static_cast<uint32_t>(std::max<size_t>(
                                        1, std::min(c.length == 0 ? 1 : c.length, room)))};
    }
    const std::string message = fmt::format("in device function `{}`: {}", f.name, c.message);
    if (c.severity == 1) {
      warning(DiagKind::kDeviceFunction, at, message);
    } else {
      error(DiagKind::kDeviceFunction, at, message)
          .set_hint(
              "a device function is a pure function of its scalar arguments: arithmetic, local "
              "variables, control flow and CUDA's math functions (dsl/SPEC.md, device functions)");
    }
  }
}

void Checker::check_roles(const std::vector<dsl::RoleDecl>& roles) {
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

}  // namespace mkc::compiler
