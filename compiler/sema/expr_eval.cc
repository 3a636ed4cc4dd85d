// The language's arithmetic, operator by operator, and the walk that applies it to an expression.
// Checked builtins (__builtin_*_overflow) do the arithmetic, so no pair of values is undefined
// behaviour.
#include "compiler/sema/expr_eval.h"

#include <algorithm>

#include "support/check.h"

namespace mkc::compiler {
namespace {

Arith value(int64_t v) {
  return Arith{v, std::nullopt};
}
Arith failure(EvalFailure f) {
  return Arith{0, f};
}

}  // namespace

Arith apply_unary(std::string_view op, int64_t v) {
  if (op == "!") return value(v == 0 ? 1 : 0);
  MKC_CHECK(op == "-", "unknown unary operator `{}`", op);
  if (v == INT64_MIN) return failure(EvalFailure::kOverflow);
  return value(-v);
}

Arith apply_binary(std::string_view op, int64_t a, int64_t b, bool exact_division) {
  int64_t r = 0;
  if (op == "+")
    return __builtin_add_overflow(a, b, &r) ? failure(EvalFailure::kOverflow) : value(r);
  if (op == "-")
    return __builtin_sub_overflow(a, b, &r) ? failure(EvalFailure::kOverflow) : value(r);
  if (op == "*")
    return __builtin_mul_overflow(a, b, &r) ? failure(EvalFailure::kOverflow) : value(r);
  if (op == "/" || op == "%") {
    if (b == 0) return failure(EvalFailure::kDivisionByZero);
    if (a == INT64_MIN && b == -1) return failure(EvalFailure::kOverflow);
    if (op == "%") {
      // Modulo is always non-negative, so `(rank - 1) % R` names a rank.
      // |b| does not fit 64 bits for b = INT64_MIN, so m is moved into [0, |b|) without it.
      int64_t m = a % b;
      if (m < 0) m = b < 0 ? m - b : m + b;
      return value(m);
    }
    if (exact_division && a % b != 0) return failure(EvalFailure::kInexactDivision);
    return value(a / b);
  }
  if (op == "<") return value(a < b);
  if (op == "<=") return value(a <= b);
  if (op == ">") return value(a > b);
  if (op == ">=") return value(a >= b);
  if (op == "==") return value(a == b);
  if (op == "!=") return value(a != b);
  if (op == "&&") return value((a != 0 && b != 0) ? 1 : 0);
  MKC_CHECK(op == "||", "unknown binary operator `{}`", op);
  return value((a != 0 || b != 0) ? 1 : 0);
}

bool is_expr_function(std::string_view fn) {
  return fn == "min" || fn == "max" || fn == "cdiv";
}

Arith apply_call(std::string_view fn, int64_t a, int64_t b) {
  if (fn == "min") return value(std::min(a, b));
  if (fn == "max") return value(std::max(a, b));
  MKC_CHECK(fn == "cdiv", "unknown function `{}`", fn);
  if (b == 0) return failure(EvalFailure::kDivisionByZero);
  if (a == INT64_MIN && b == -1) return failure(EvalFailure::kOverflow);
  int64_t q = a / b;
  if ((a % b != 0) && ((a > 0) == (b > 0))) ++q;
  return value(q);
}

std::optional<int64_t> evaluate(const dsl::Expr& e, ExprScope& scope, bool exact_division) {
  using Kind = dsl::Expr::Kind;
  const auto finish = [&](Arith r, int64_t a, int64_t b) -> std::optional<int64_t> {
    if (!r.failure) return r.value;
    scope.failed(e, *r.failure, a, b);
    return std::nullopt;
  };
  switch (e.kind) {
    case Kind::kInt:
      return e.int_value;
    case Kind::kFloat:
      scope.failed(e, EvalFailure::kDecimal, 0, 0);
      return std::nullopt;
    case Kind::kName:
      return scope.value_of(e);
    case Kind::kUnary: {
      const auto v = evaluate(e.args[0], scope, exact_division);
      if (!v) return std::nullopt;
      return finish(apply_unary(e.op, *v), *v, 0);
    }
    case Kind::kCall: {
      if (!is_expr_function(e.name)) {
        scope.failed(e, EvalFailure::kUnknownFunction, 0, 0);
        return std::nullopt;
      }
      if (e.args.size() != 2) {
        scope.failed(e, EvalFailure::kArity, static_cast<int64_t>(e.args.size()), 0);
        return std::nullopt;
      }
      const auto a = evaluate(e.args[0], scope, exact_division);
      const auto b = evaluate(e.args[1], scope, exact_division);
      if (!a || !b) return std::nullopt;
      return finish(apply_call(e.name, *a, *b), *a, *b);
    }
    case Kind::kBinary: {
      const auto a = evaluate(e.args[0], scope, exact_division);
      const auto b = evaluate(e.args[1], scope, exact_division);
      if (!a || !b) return std::nullopt;
      return finish(apply_binary(e.op, *a, *b, exact_division), *a, *b);
    }
  }
  MKC_CHECK(false, "unhandled expression kind");
  return std::nullopt;
}

}  // namespace mkc::compiler
