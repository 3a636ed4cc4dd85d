// Every kind of diagnostic mkc's front end and checker can report, listed once. The name in
// brackets at the end of a message ("[undefined-name]") is the kind's name here. Each kind has a
// golden test in tests/dsl/golden/<name>.mks; a test fails when one is missing.
#pragma once

// X(Enumerator, "name", "one-line meaning")
#define MKC_DIAGNOSTIC_KINDS(X)                                                                  \
  X(kInvalidCharacter, "invalid-character", "a character that cannot start any token")           \
  X(kInvalidNumber, "invalid-number", "a malformed or out-of-range number literal")              \
  X(kUnterminated, "unterminated", "a comment, string or device body that never ends")           \
  X(kSyntax, "syntax", "the tokens do not fit the grammar")                                      \
  X(kNestingTooDeep, "nesting-too-deep", "expressions or loops nested beyond the limit")         \
  X(kTooManyErrors, "too-many-errors", "reporting stopped after the error limit")                \
  X(kUnknownDtype, "unknown-dtype", "a tensor element type mkc does not know")                   \
  X(kUnknownOp, "unknown-op", "a compute or comm operation mkc does not know")                   \
  X(kUnknownClause, "unknown-clause", "a clause after an operation that mkc does not know")      \
  X(kUndefinedName, "undefined-name", "a name that nothing declares")                            \
  X(kDuplicateName, "duplicate-name", "a name declared twice in one schedule")                   \
  X(kWrongKind, "wrong-kind",                                                                    \
    "a name used as something it is not (a tensor where a function is "                          \
    "needed, ...)")                                                                              \
  X(kBadArgument, "bad-argument", "an operation given the wrong number or kind of arguments")    \
  X(kDtypeMismatch, "dtype-mismatch", "element types that do not fit the operation")             \
  X(kShapeMismatch, "shape-mismatch", "shapes that do not fit the operation")                    \
  X(kTileDivisibility, "tile-divisibility", "a GEMM tile off the tensor cores' grid")            \
  X(kNotSymmetric, "not-symmetric", "a peer writes into a tensor that is not symmetric")         \
  X(kUnproducedDependency, "unproduced-dependency",                                              \
    "`after` names tiles or chunks nothing "                                                     \
    "produces for the operation")                                                                \
  X(kMissingDependency, "missing-dependency",                                                    \
    "an operation reads data another writes, without "                                           \
    "`after`")                                                                                   \
  X(kDependencyCycle, "dependency-cycle", "operations that wait on each other: a deadlock")      \
  X(kDependencyOrder, "dependency-order",                                                        \
    "a wait on a later operation touching the same data: against program order")                 \
  X(kParamRange, "param-range", "a parameter or size that is zero, negative or too large")       \
  X(kOverflow, "overflow", "integer arithmetic that overflows 64 bits")                          \
  X(kInexactDivision, "inexact-division", "a shape or size division with a remainder")           \
  X(kDivisionByZero, "division-by-zero", "division or modulo by zero")                           \
  X(kRankDependent, "rank-dependent", "`rank` used where a value must be the same on all ranks") \
  X(kRoleLimit, "role-limit", "CTA role counts a GPU cannot hold")                               \
  X(kUnknownParam, "unknown-param", "a -D override naming no parameter")                         \
  X(kDeviceFunction, "device-function",                                                          \
    "a device function mkc cannot compile: signature, name or body")

namespace mkc::dsl {

enum class DiagKind {
#define MKC_DIAG_ENUM(e, name, meaning) e,
  MKC_DIAGNOSTIC_KINDS(MKC_DIAG_ENUM)
#undef MKC_DIAG_ENUM
};

const char* diag_kind_name(DiagKind k);
const char* diag_kind_meaning(DiagKind k);

}  // namespace mkc::dsl
