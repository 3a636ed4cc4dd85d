// Operands: resolving what an operation names — a tensor, possibly indexed on its leading
// dimensions or on a peer (`KV[step % 2, 0]`, `peer(rank + 1).Y`), a word from a fixed list
// (`sum`), an integer, a device function — and the predicates the operation rules share: element
// types, shapes and ranks, `symmetric` placement, a device function's arity. Each reports its own
// diagnostic and returns false, so a rule reads as a chain of requirements.
#include <fmt/format.h>

#include <algorithm>

#include "compiler/sema/checker.h"
#include "dsl/suggest.h"

namespace mkc::compiler {

using dsl::DiagKind;
using dsl::Expr;
using dsl::Operand;

std::string Checker::shape_str(const std::vector<int64_t>& s) const {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// Resolves a tensor operand (`A`, `KV[step % 2, 0]`, or with allow_peer `peer(e).Y`).
bool Checker::tensor_operand(const Operand& o, const LoopEnv& env, TensorUse* use, bool allow_peer,
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
    bind_loop_vars(&use->peer, env);
    if (!eval_for_all_ranks(o.peer, env, "peer index")) return false;
  }
  return true;
}

bool Checker::want_symmetric(const TensorUse& u, const std::string& op, const char* why) {
  const Tensor& t = out_.tensors[u.tensor];
  if (t.placement == dsl::Placement::kSymmetric) return true;
  error(DiagKind::kNotSymmetric, u.span,
        fmt::format("`{}` {} `{}`, so it must be `symmetric`", op, why, t.name))
      .note(t.span, "declared here without `symmetric`")
      .set_hint(fmt::format("declare it `{} : {}{} symmetric`", t.name, dtype_name(t.dtype),
                            shape_str(t.shape)));
  return false;
}

bool Checker::want_not_in_place(const TensorUse& in, const TensorUse& out, const std::string& op) {
  if (in.tensor != out.tensor) return true;
  // Two slices of one tensor are apart when their indices differ somewhere both have one.
  for (size_t d = 0; d < std::min(in.index.size(), out.index.size()); ++d) {
    if (in.index[d] != out.index[d]) return true;
  }
  const Tensor& t = out_.tensors[out.tensor];
  error(DiagKind::kBadArgument, out.span,
        fmt::format("`{}` sends `{}` into the same elements of its peer's `{}`: every rank sends "
                    "at once, so a peer's write would land on elements this rank has yet to send",
                    op, t.name, t.name))
      .note(in.span, "the elements sent")
      .set_hint(
          "send into another tensor or another slot of it (`buf[(step + 1) % 2]`, as "
          "samples/ring_attention.mks does), then copy back if it must end where it started");
  return false;
}

bool Checker::want_dtype(const TensorUse& u, bool (*ok)(DType), const std::string& what) {
  const Tensor& t = out_.tensors[u.tensor];
  if (ok(t.dtype)) return true;
  error(DiagKind::kDtypeMismatch, u.span,
        fmt::format("`{}` is {}, but {}", t.name, dtype_name(t.dtype), what));
  return false;
}

bool Checker::same_dtype(const TensorUse& a, const TensorUse& b, const std::string& op) {
  const Tensor& ta = out_.tensors[a.tensor];
  const Tensor& tb = out_.tensors[b.tensor];
  if (ta.dtype == tb.dtype) return true;
  error(DiagKind::kDtypeMismatch, b.span,
        fmt::format("`{}` needs `{}` and `{}` of one element type, but they are {} and {}", op,
                    ta.name, tb.name, dtype_name(ta.dtype), dtype_name(tb.dtype)))
      .note(ta.span, fmt::format("`{}` is {}", ta.name, dtype_name(ta.dtype)));
  return false;
}

bool Checker::want_shape(const TensorUse& u, const std::vector<int64_t>& want,
                         const std::string& why) {
  if (u.shape == want) return true;
  error(DiagKind::kShapeMismatch, u.span,
        fmt::format("`{}` has shape {}, but {} needs {}{}", dsl::source_text(*file_, u.span),
                    shape_str(u.shape), why, shape_str(want), rn({u.tensor})));
  return false;
}

bool Checker::want_rank(const TensorUse& u, size_t dims, const std::string& what) {
  if (u.shape.size() == dims) return true;
  error(DiagKind::kShapeMismatch, u.span,
        fmt::format("`{}` has {} dimensions {}, but {} takes {} dimensions",
                    dsl::source_text(*file_, u.span), u.shape.size(), shape_str(u.shape), what,
                    dims));
  return false;
}

const dsl::NamedArg* Checker::named(const dsl::OpDecl& op, const std::string& key) const {
  for (const dsl::NamedArg& n : op.named) {
    if (n.key == key) return &n;
  }
  return nullptr;
}

std::optional<std::string> Checker::word_arg(const Operand& o,
                                             const std::vector<std::string>& allowed,
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

std::optional<Expr> Checker::int_expr(const Operand& o) {
  if (o.kind == Operand::Kind::kExpr) return o.expr;
  if (o.kind != Operand::Kind::kName || !o.index.empty()) return std::nullopt;
  Expr e;
  e.kind = Expr::Kind::kName;
  e.name = o.name;
  e.span = o.span;
  return e;
}

std::optional<int64_t> Checker::int_arg(const Operand& o, const LoopEnv& env, const char* what) {
  const std::optional<Expr> e = int_expr(o);
  if (!e) {
    error(DiagKind::kBadArgument, o.span, fmt::format("expected an integer for {}", what));
    return std::nullopt;
  }
  return eval(*e, EvalCtx{&env, false, 0, false, what});
}

int Checker::device_fn_arg(const Operand& o, const char* what) {
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

bool Checker::check_fn_arity(const Operand& at, int fn, size_t n) {
  const DeviceFunction& f = out_.device_fns[fn];
  if (f.params.size() == n) return true;
  error(DiagKind::kBadArgument, at.span,
        fmt::format("device function `{}` takes {} parameter{}, but is applied to {}", f.name,
                    f.params.size(), f.params.size() == 1 ? "" : "s", n));
  return false;
}

void Checker::warn_lossy_use(const TensorUse& at, DType from, DType to, const std::string& what) {
  std::string loses;
  if (dtype_is_float(from) && !dtype_is_float(to)) {
    loses = "fractions are dropped and values outside its range are undefined";
  } else if (from == DType::kI64 && to == DType::kI32) {
    loses = "values outside 32 bits do not survive";
  }
  if (loses.empty()) return;
  warning(DiagKind::kDeviceFunction, at.span,
          fmt::format("{} converts {} to {}: {}", what, dtype_name(from), dtype_name(to), loses))
      .set_hint(
          "declare the parameter or the tensor with the type the values have, or convert "
          "explicitly in the device function");
}

}  // namespace mkc::compiler
