// The language's integer arithmetic and the one evaluator of its expressions (dsl/SPEC.md §3).
// The checker evaluates through it, reporting each failure as a diagnostic, and so does the
// compiler after checking (compiler::evaluate in program.h), where a failure is a bug: both see
// the same values, the same overflow and the same division rules.
//
// Every operator is defined on every pair of 64-bit values: a result that does not fit 64 bits is
// an overflow, never undefined behaviour; `%` is never negative; cdiv rounds up.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "dsl/ast.h"

namespace mkc::compiler {

// Why an expression has no value.
enum class EvalFailure {
  kDecimal,          // a decimal number where an integer is needed
  kUnknownFunction,  // a call of something other than min, max and cdiv
  kArity,            // min, max or cdiv without exactly two arguments
  kOverflow,         // the result does not fit in 64 bits
  kDivisionByZero,   // `/`, `%` or cdiv by zero
  kInexactDivision,  // `/` with a remainder where division must be exact (shapes)
};

// One operator applied to values: the value, or why there is none.
struct Arith {
  int64_t value = 0;
  std::optional<EvalFailure> failure;
};

// `-v` and `!v`.
Arith apply_unary(std::string_view op, int64_t v);
// `a op b` for + - * / % < <= > >= == != && ||. With `exact_division`, `/` must leave no remainder.
Arith apply_binary(std::string_view op, int64_t a, int64_t b, bool exact_division = false);
// min(a, b), max(a, b), cdiv(a, b).
Arith apply_call(std::string_view fn, int64_t a, int64_t b);
// Whether `fn` is one of the functions expressions may call.
bool is_expr_function(std::string_view fn);

// What the evaluator needs from where an expression appears: the values of names, and what to do
// when a part of the expression has no value.
class ExprScope {
 public:
  virtual ~ExprScope() = default;
  // The value of the name `e` (a kName node), or nullopt once the scope has said why not.
  virtual std::optional<int64_t> value_of(const dsl::Expr& e) = 0;
  // `e` has no value because of `f`. For arithmetic, `a` and `b` are its operands' values (`b` is
  // unused for a unary operator).
  virtual void failed(const dsl::Expr& e, EvalFailure f, int64_t a, int64_t b) = 0;
};

// Evaluates `e` in `scope`. Both operands of an operator are evaluated even when one has no
// value, so every mistake in an expression is reported.
std::optional<int64_t> evaluate(const dsl::Expr& e, ExprScope& scope, bool exact_division = false);

}  // namespace mkc::compiler
