// Operations: each kind's signature (how many inputs and outputs, which named arguments) and its
// rules over the operands, one check function per kind, found through one table indexed by the
// kind. instantiate() builds one instance of a declaration for the loop variables' values:
// it finds the kind, reads `when`, checks the signature, the operands and the clauses, and keeps
// the instance (unless `when` switches it off) for resolve_deps().
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "compiler/sema/checker.h"
#include "dsl/suggest.h"

namespace mkc::compiler {

using dsl::DiagKind;
using dsl::Expr;
using dsl::Operand;

namespace {

const std::vector<std::string> kReduceOps = {"sum", "max", "min"};

bool is_gemm_in(DType t) {
  return t == DType::kBf16 || t == DType::kF16 || dtype_is_fp8(t);
}
bool is_gemm_out(DType t) {
  return t == DType::kBf16 || t == DType::kF16 || t == DType::kF32;
}
bool is_reducible(DType t) {
  return !dtype_is_fp8(t);
}

// One operation kind: argument counts, the named arguments it takes, its usage line for hints,
// and the function that checks its operands.
struct OpRule {
  OpKind kind;
  size_t min_in, max_in, min_out, max_out;
  bool (Checker::*check)(OpCheck&);
  std::array<const char*, 6> keys;  // unused slots are null
  const char* usage;
};

// In the order of MKC_OPS, so that a kind indexes its rule (checked below). The numbers are the
// least and most inputs, then outputs.
// clang-format off
constexpr OpRule kOpRules[] = {
  {OpKind::kGemm, 2, 2, 1, 1, &Checker::check_gemm, {"epilogue", "bias"},
   "gemm(A, B -> C[, epilogue = fn][, bias = b])"},
  {OpKind::kGroupedGemm, 2, 2, 1, 1, &Checker::check_grouped_gemm, {"counts", "epilogue"},
   "grouped_gemm(X, W -> Y, counts = C[, epilogue = fn])"},
  {OpKind::kMap, 2, 8, 1, 1, &Checker::check_map, {},
   "map(fn, X1[, X2 ...] -> Y)"},
  {OpKind::kReduce, 1, 1, 1, 1, &Checker::check_reduce, {"op", "axis"},
   "reduce(X -> Y, op = sum, axis = k)"},
  {OpKind::kAttention, 3, 3, 1, 1, &Checker::check_attention,
   {"causal", "accumulate", "scale", "q_start", "k_start", "seqlens"},
   "attention(Q, K, V -> O[, causal = 0|1][, accumulate = 0|1][, scale = s][, q_start = e, "
   "k_start = e][, seqlens = L])"},
  {OpKind::kCopy, 1, 1, 1, 1, &Checker::check_copy, {},
   "copy(X -> Y)"},
  {OpKind::kAllReduce, 2, 2, 0, 1, &Checker::check_allreduce, {},
   "allreduce(X, sum[ -> Y])"},
  {OpKind::kAllGather, 1, 1, 1, 1, &Checker::check_allgather, {},
   "allgather(X -> Y)"},
  {OpKind::kReduceScatter, 2, 2, 1, 1, &Checker::check_reducescatter, {},
   "reducescatter(X, sum -> Y)"},
  {OpKind::kAllToAll, 1, 1, 1, 1, &Checker::check_alltoall, {"route", "counts", "experts"},
   "alltoall(X -> Y, route = T, counts = C, experts = E)"},
  {OpKind::kCombine, 1, 1, 1, 1, &Checker::check_combine, {"dispatch", "weights"},
   "combine(Y -> Out, dispatch = d, weights = W)"},
  {OpKind::kShift, 1, 1, 1, 1, &Checker::check_shift, {"by"},
   "shift(X -> Y[, by = k])"},
  {OpKind::kPut, 1, 1, 1, 1, &Checker::check_put, {},
   "put(X -> peer(e).Y)"},
  {OpKind::kSignal, 1, 1, 0, 0, &Checker::check_signal, {},
   "signal(peer(e))"},
};
// clang-format on

#define MKC_OP_COUNT(e, name, is_comm) +1
constexpr size_t kOpKinds = 0 MKC_OPS(MKC_OP_COUNT);
#undef MKC_OP_COUNT

constexpr bool rules_in_kind_order() {
  for (size_t i = 0; i < std::size(kOpRules); ++i) {
    if (kOpRules[i].kind != static_cast<OpKind>(i)) return false;
  }
  return true;
}
static_assert(std::size(kOpRules) == kOpKinds && rules_in_kind_order(),
              "kOpRules must have one rule per operation kind, in the order of MKC_OPS");

const OpRule& rule_of(OpKind k) {
  return kOpRules[static_cast<size_t>(k)];
}

std::vector<std::string> keys_of(const OpRule& r) {
  std::vector<std::string> out;
  for (const char* k : r.keys) {
    if (k != nullptr) out.push_back(k);
  }
  return out;
}

}  // namespace

void Checker::instantiate(const dsl::OpDecl& op, const LoopEnv& env) {
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
          .set_hint(
              fmt::format("write `{} {} = {}(...)`", op.comm ? "compute" : "comm", op.name, op.op));
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

  const OpRule& sig = rule_of(kind);
  const std::vector<std::string> keys = keys_of(sig);
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
    if (std::find(keys.begin(), keys.end(), n.key) == keys.end()) {
      if (report) {
        auto& d = error(DiagKind::kBadArgument, n.key_span,
                        fmt::format("`{}` takes no argument `{}`", op.op, n.key));
        const std::string s = dsl::did_you_mean(n.key, keys);
        d.set_hint(!s.empty() ? s.substr(1) : fmt::format("usage: {}", sig.usage));
      }
      return;
    }
    if (!seen_keys.insert(n.key).second) {
      if (report)
        error(DiagKind::kBadArgument, n.key_span, fmt::format("argument `{}` given twice", n.key));
      return;
    }
  }

  OpCheck check{op, kind, env, &inst, sig.usage};
  if (!check_operands(check)) return;
  if (!check_clauses(op, kind, env, &inst)) return;
  if (diags_.error_count() != errors_before) return;
  if (!enabled) return;
  pending_.push_back(PendingDeps{static_cast<int>(out_.ops.size()), env});
  out_.ops.push_back(std::move(inst));
}

bool Checker::check_operands(OpCheck& check) {
  return (this->*rule_of(check.kind).check)(check);
}

bool Checker::tensors_in(OpCheck& check, size_t from, bool peer_ok) {
  for (size_t i = from; i < check.op.inputs.size(); ++i) {
    TensorUse u;
    if (!tensor_operand(check.op.inputs[i], check.env, &u, peer_ok, "an input")) return false;
    check.inst->inputs.push_back(std::move(u));
  }
  return true;
}

bool Checker::tensors_out(OpCheck& check, bool peer_ok) {
  for (const Operand& o : check.op.outputs) {
    TensorUse u;
    if (!tensor_operand(o, check.env, &u, peer_ok, "an output")) return false;
    check.inst->outputs.push_back(std::move(u));
  }
  return true;
}

int Checker::named_tensor(OpCheck& check, const char* key, bool required) {
  const dsl::NamedArg* n = named(check.op, key);
  if (n == nullptr) {
    if (required) {
      error(DiagKind::kBadArgument, check.op.op_span,
            fmt::format("`{}` needs `{} = ...`", check.op.op, key))
          .set_hint(fmt::format("usage: {}", check.usage));
    }
    return required ? -2 : -1;
  }
  TensorUse u;
  if (!tensor_operand(n->value, check.env, &u, false, key)) return -2;
  check.inst->tensor_args[key] = u.tensor;
  return u.tensor;
}

bool Checker::check_gemm(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  const LoopEnv& env = check.env;
  OpInstance* inst = check.inst;
  if (!tensors_in(check, 0, false) || !tensors_out(check, false)) return false;
  const TensorUse& a = inst->inputs[0];
  const TensorUse& b = inst->inputs[1];
  const TensorUse& c = inst->outputs[0];
  if (!want_rank(a, 2, "gemm's A") || !want_rank(b, 2, "gemm's B") || !want_rank(c, 2, "gemm's C"))
    return false;
  if (!want_dtype(a, is_gemm_in, "gemm multiplies bf16, f16 or fp8") || !same_dtype(a, b, "gemm") ||
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
  const int bias = named_tensor(check, "bias", false);
  if (bias == -2) return false;
  if (bias >= 0) {
    TensorUse bu;
    tensor_operand(named(op, "bias")->value, env, &bu, false, "bias");
    if (!want_shape(bu, {b.shape[1]}, "gemm's bias (one value per column of C)")) return false;
  }
  return true;
}

bool Checker::check_grouped_gemm(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  const LoopEnv& env = check.env;
  OpInstance* inst = check.inst;
  if (!tensors_in(check, 0, false) || !tensors_out(check, false)) return false;
  const TensorUse& x = inst->inputs[0];
  const TensorUse& w = inst->inputs[1];
  const TensorUse& y = inst->outputs[0];
  if (!want_rank(x, 2, "grouped_gemm's X") || !want_rank(w, 3, "grouped_gemm's W [groups, K, N]") ||
      !want_rank(y, 2, "grouped_gemm's Y"))
    return false;
  if (!want_dtype(x, is_gemm_in, "grouped_gemm multiplies bf16, f16 or fp8") ||
      !same_dtype(x, w, "grouped_gemm") ||
      !want_dtype(y, is_gemm_out, "grouped_gemm writes bf16, f16 or f32"))
    return false;
  if (x.shape[1] != w.shape[1]) {
    error(DiagKind::kShapeMismatch, w.span,
          fmt::format("grouped_gemm inner dimensions differ: X is {} and W is {} ({} != {}){}",
                      shape_str(x.shape), shape_str(w.shape), x.shape[1], w.shape[1],
                      rn({x.tensor, w.tensor})))
        .note(x.span, "X is here");
    return false;
  }
  if (!want_shape(y, {x.shape[0], w.shape[2]}, "grouped_gemm's Y")) return false;
  const int counts = named_tensor(check, "counts", true);
  if (counts < 0) return false;
  const Tensor& ct = out_.tensors[counts];
  TensorUse cu;
  tensor_operand(named(op, "counts")->value, env, &cu, false, "counts");
  if (!want_dtype(
          cu, [](DType t) { return t == DType::kI32; }, "row counts are i32"))
    return false;
  if (ct.shape.back() != w.shape[0]) {
    error(DiagKind::kShapeMismatch, cu.span,
          fmt::format("`{}` counts rows for {} groups (its last dimension), but W has {} groups{}",
                      ct.name, ct.shape.back(), w.shape[0], rn({counts, w.tensor})));
    return false;
  }
  if (const dsl::NamedArg* n = named(op, "epilogue")) {
    inst->device_fn = device_fn_arg(n->value, "the epilogue");
    if (inst->device_fn < 0 || !check_fn_arity(n->value, inst->device_fn, 1)) return false;
  }
  return true;
}

// `seqlens = L`: Q, K and V hold n packed sequences along their sequence dimension (the same in
// every slice of the leading dims), L their i32 cumulative lengths [n + 1]. Self-attention only
// (Q's and K's sequence dimensions the same), and neither merged over a loop nor placed in a
// longer sequence (the sequences' own starts say where each row is).
bool Checker::check_seqlens(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  OpInstance* inst = check.inst;
  const dsl::NamedArg* a = named(op, "seqlens");
  const int seqlens = named_tensor(check, "seqlens", true);
  if (seqlens < 0) return false;
  TensorUse u;
  tensor_operand(a->value, check.env, &u, false, "seqlens");
  if (!want_dtype(
          u, [](DType t) { return t == DType::kI32; }, "sequence lengths are i32"))
    return false;
  const TensorUse& q = inst->inputs[0];
  const TensorUse& k = inst->inputs[1];
  const size_t n = q.shape.size();
  if (!u.index.empty()) {
    error(DiagKind::kBadArgument, u.span,
          fmt::format("`seqlens` takes a whole tensor, not a slice of `{}`",
                      out_.tensors[seqlens].name))
        .set_hint("declare the lengths as their own i32 [n + 1] tensor");
    return false;
  }
  if (u.shape.size() != 1 || u.shape[0] < 2) {
    error(DiagKind::kShapeMismatch, u.span,
          fmt::format("`seqlens` holds the packed sequences' cumulative lengths, [n + 1] with n >= "
                      "1, not {}",
                      shape_str(u.shape)))
        .set_hint("e.g. `input L : i32[N + 1]`, L[0] = 0, L[N] = S, non-decreasing");
    return false;
  }
  if (k.shape[n - 2] != q.shape[n - 2]) {
    error(DiagKind::kShapeMismatch, a->key_span,
          fmt::format("`seqlens` packs sequences into Q and K alike, but Q has {} rows and K {}",
                      q.shape[n - 2], k.shape[n - 2]))
        .set_hint("packed (varlen) attention is self-attention: one S for Q, K and V");
    return false;
  }
  for (const char* key : {"accumulate", "q_start", "k_start"}) {
    const dsl::NamedArg* other = named(op, key);
    if (other == nullptr || (std::string(key) == "accumulate" && inst->ints[key] == 0)) continue;
    error(DiagKind::kBadArgument, other->key_span,
          fmt::format("`{}` does not go with `seqlens`: each packed sequence is attended to "
                      "whole, from its own first row",
                      key))
        .set_hint("drop one of them");
    return false;
  }
  return true;
}

bool Checker::check_map(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  OpInstance* inst = check.inst;
  inst->device_fn = device_fn_arg(op.inputs[0], "map's first argument");
  if (inst->device_fn < 0) return false;
  if (!tensors_in(check, 1, false) || !tensors_out(check, false)) return false;
  if (!check_fn_arity(op.inputs[0], inst->device_fn, inst->inputs.size())) return false;
  const TensorUse& y = inst->outputs[0];
  for (const TensorUse& x : inst->inputs) {
    if (!want_shape(x, y.shape, fmt::format("map into `{}`", dsl::source_text(*file_, y.span))))
      return false;
  }
  // The kernel converts each element to the parameter's type and the result to the output's:
  // say where that loses the value.
  const DeviceFunction& f = out_.device_fns[inst->device_fn];
  for (size_t k = 0; k < inst->inputs.size(); ++k) {
    const TensorUse& x = inst->inputs[k];
    warn_lossy_use(x, out_.tensors[x.tensor].dtype, f.params[k].second,
                   fmt::format("passing `{}` to `{}`'s parameter `{}`",
                               dsl::source_text(*file_, x.span), f.name, f.params[k].first));
  }
  warn_lossy_use(
      y, f.ret, out_.tensors[y.tensor].dtype,
      fmt::format("storing `{}`'s result in `{}`", f.name, dsl::source_text(*file_, y.span)));
  return true;
}

bool Checker::check_reduce(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  const LoopEnv& env = check.env;
  OpInstance* inst = check.inst;
  if (!tensors_in(check, 0, false) || !tensors_out(check, false)) return false;
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

bool Checker::check_attention(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  const LoopEnv& env = check.env;
  OpInstance* inst = check.inst;
  if (!tensors_in(check, 0, false) || !tensors_out(check, false)) return false;
  const TensorUse& q = inst->inputs[0];
  const TensorUse& k = inst->inputs[1];
  const TensorUse& v = inst->inputs[2];
  const TensorUse& o = inst->outputs[0];
  if (q.shape.size() < 2 || k.shape.size() != q.shape.size() || v.shape.size() != q.shape.size() ||
      o.shape.size() != q.shape.size()) {
    error(DiagKind::kShapeMismatch, op.op_span,
          "attention needs Q, K, V and O of one rank, at least 2: [..., sequence, head_dim]")
        .set_hint("e.g. Q : bf16[B, H, S, D]");
    return false;
  }
  const auto is_attn_in = [](DType t) { return t == DType::kBf16 || t == DType::kF16; };
  if (!want_dtype(q, is_attn_in, "attention takes bf16 or f16") || !same_dtype(q, k, "attention") ||
      !same_dtype(q, v, "attention") ||
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
  // Where Q's and K's first rows sit in the whole sequence, for the causal mask (key j is visible
  // to query i when k_start + j <= q_start + i). They may differ between ranks (ring attention:
  // the block a rank holds at each step), so they are kept as expressions, loop variables bound.
  for (const char* key : {"q_start", "k_start"}) {
    const dsl::NamedArg* a = named(op, key);
    if (a == nullptr) continue;
    std::optional<Expr> parsed = int_expr(a->value);
    if (!parsed) {
      error(DiagKind::kBadArgument, a->value.span,
            fmt::format("`{}` is an integer expression (a position in the sequence)", key))
          .set_hint(fmt::format("e.g. `{} = rank * S`", key));
      return false;
    }
    Expr e = std::move(*parsed);
    if (e.kind == Expr::Kind::kFloat) {
      error(DiagKind::kBadArgument, a->value.span,
            fmt::format("`{}` is an integer (a position in the sequence), not a decimal", key));
      return false;
    }
    if (!eval_for_all_ranks(e, env, "sequence position")) return false;
    bind_loop_vars(&e, env);
    inst->per_rank[key] = e;
  }
  if (named(op, "seqlens") != nullptr && !check_seqlens(check)) return false;
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

bool Checker::check_copy(OpCheck& check) {
  OpInstance* inst = check.inst;
  if (!tensors_in(check, 0, false) || !tensors_out(check, false)) return false;
  return same_dtype(inst->inputs[0], inst->outputs[0], "copy") &&
         want_shape(inst->outputs[0], inst->inputs[0].shape, "copy");
}

bool Checker::check_allgather(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  OpInstance* inst = check.inst;
  const std::string& name = check.op.name;
  if (!tensors_in(check, 0, false) || !tensors_out(check, false)) return false;
  const TensorUse& x = inst->inputs[0];
  const TensorUse& y = inst->outputs[0];
  std::vector<int64_t> want = x.shape;
  if (__builtin_mul_overflow(want[0], out_.ranks, &want[0])) {
    error(DiagKind::kOverflow, x.span,
          fmt::format("allgather stacks the {} rows of `{}` from each of {} ranks, which "
                      "overflows 64 bits",
                      x.shape[0], dsl::source_text(*file_, x.span), out_.ranks));
    return false;
  }
  return same_dtype(x, y, op.op) &&
         want_shape(y, want,
                    "allgather's result (the ranks' parts stacked on the first dimension)") &&
         want_symmetric(y, name, "has peers write into");
}

bool Checker::check_alltoall(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  const LoopEnv& env = check.env;
  OpInstance* inst = check.inst;
  const std::string& name = check.op.name;
  if (!tensors_in(check, 0, false) || !tensors_out(check, false)) return false;
  const TensorUse& x = inst->inputs[0];
  const TensorUse& y = inst->outputs[0];
  if (!same_dtype(x, y, op.op) || !want_rank(x, 2, "alltoall's X [rows, width]") ||
      !want_rank(y, 2, "alltoall's Y [capacity, width]"))
    return false;
  if (x.shape[1] != y.shape[1]) {
    error(
        DiagKind::kShapeMismatch, y.span,
        fmt::format("alltoall moves rows of width {}, but `{}` has rows of width {}{}", x.shape[1],
                    dsl::source_text(*file_, y.span), y.shape[1], rn({x.tensor, y.tensor})));
    return false;
  }
  if (!want_symmetric(y, name, "has peers write into")) return false;
  const int route = named_tensor(check, "route", true);
  const int counts = named_tensor(check, "counts", true);
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
                      out_.tensors[route].name, x.shape[0], out_.tensors[x.tensor].name, r_note_));
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

bool Checker::check_combine(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  const LoopEnv& env = check.env;
  OpInstance* inst = check.inst;
  const std::string& name = check.op.name;
  if (!tensors_in(check, 0, false) || !tensors_out(check, false)) return false;
  const dsl::NamedArg* dn = named(op, "dispatch");
  if (dn == nullptr || dn->value.kind != Operand::Kind::kName) {
    error(DiagKind::kBadArgument, dn ? dn->value.span : op.op_span,
          "`combine` needs `dispatch = d`, the alltoall whose routing it reverses")
        .set_hint(fmt::format("usage: {}", check.usage));
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
    error(
        DiagKind::kShapeMismatch, out.span,
        fmt::format("combine moves rows of width {}, but `{}` has rows of width {}{}", y.shape[1],
                    dsl::source_text(*file_, out.span), out.shape[1], rn({y.tensor, out.tensor})));
    return false;
  }
  if (!want_symmetric(out, name, "has peers write into")) return false;
  const int weights = named_tensor(check, "weights", false);
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

bool Checker::check_shift(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  const LoopEnv& env = check.env;
  OpInstance* inst = check.inst;
  const std::string& name = check.op.name;
  if (!tensors_in(check, 0, false) || !tensors_out(check, false)) return false;
  int64_t by = 1;
  if (const dsl::NamedArg* bn = named(op, "by")) {
    auto v = int_arg(bn->value, env, "by");
    if (!v) return false;
    by = *v;
  }
  inst->ints["by"] = by;
  return same_dtype(inst->inputs[0], inst->outputs[0], op.op) &&
         want_shape(inst->outputs[0], inst->inputs[0].shape, "shift") &&
         want_symmetric(inst->outputs[0], name, "has a peer write into") &&
         want_not_in_place(inst->inputs[0], inst->outputs[0], name);
}

bool Checker::check_put(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  OpInstance* inst = check.inst;
  const std::string& name = check.op.name;
  if (!tensors_in(check, 0, false)) return false;
  if (op.outputs[0].kind != Operand::Kind::kPeerTensor) {
    error(DiagKind::kBadArgument, op.outputs[0].span,
          "`put` writes into a peer's tensor: `put(X -> peer(e).Y)`")
        .set_hint("to copy within a rank use `compute name = copy(X -> Y)`");
    return false;
  }
  if (!tensors_out(check, true)) return false;
  return same_dtype(inst->inputs[0], inst->outputs[0], op.op) &&
         want_shape(inst->outputs[0], inst->inputs[0].shape, "put") &&
         want_symmetric(inst->outputs[0], name, "writes into a peer's") &&
         want_not_in_place(inst->inputs[0], inst->outputs[0], name);
}

bool Checker::check_signal(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  const LoopEnv& env = check.env;
  if (op.inputs[0].kind != Operand::Kind::kPeer) {
    error(DiagKind::kBadArgument, op.inputs[0].span, "`signal` takes a peer: `signal(peer(e))`");
    return false;
  }
  return eval_for_all_ranks(op.inputs[0].peer, env, "peer index");
}

// allreduce and reducescatter: the tensor to reduce (symmetric: peers read it), the reduction,
// and the outputs.
bool Checker::check_reduction_input(OpCheck& check, TensorUse* x) {
  const dsl::OpDecl& op = check.op;
  OpInstance* inst = check.inst;
  if (!tensor_operand(op.inputs[0], check.env, x, false, "the tensor to reduce")) return false;
  auto w = word_arg(op.inputs[1], kReduceOps, "a reduction");
  if (!w) return false;
  inst->reduce_op = *w;
  inst->inputs.push_back(*x);
  if (!tensors_out(check, false)) return false;
  if (!want_dtype(*x, is_reducible, fmt::format("{} cannot reduce fp8", op.op))) return false;
  return want_symmetric(*x, op.name, "has peers read");
}

bool Checker::check_allreduce(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  const std::string& name = op.name;
  TensorUse x;
  if (!check_reduction_input(check, &x)) return false;
  if (check.inst->outputs.empty()) return true;  // in place
  const TensorUse& y = check.inst->outputs[0];
  return same_dtype(x, y, op.op) && want_shape(y, x.shape, "allreduce's result") &&
         want_symmetric(y, name, "writes on every rank");
}

bool Checker::check_reducescatter(OpCheck& check) {
  const dsl::OpDecl& op = check.op;
  TensorUse x;
  if (!check_reduction_input(check, &x)) return false;
  const TensorUse& y = check.inst->outputs[0];
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
         want_shape(y, want, "reducescatter's result (the first dimension split over the ranks)");
}

}  // namespace mkc::compiler
