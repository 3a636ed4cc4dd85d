// The .mks abstract syntax tree: plain values, every node with the Span of its source text. The
// parser builds it; compiler/check resolves names and evaluates it. dsl/SPEC.md defines what each
// node means; ast_json.cc prints it (`mkc check --emit=ast`).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "dsl/source.h"

namespace mkc::dsl {

// An integer (or, as a named argument's value, decimal) expression over params, the world size,
// loop variables and `rank`.
struct Expr {
  enum class Kind {
    kInt,     // 4096
    kFloat,   // 0.125
    kName,    // M, R, rank, step
    kUnary,   // -x, !x          (op in `op`)
    kBinary,  // a + b, a < b    (op in `op`, operands in args[0], args[1])
    kCall,    // min(a, b), max(a, b), cdiv(a, b)   (function in `name`)
  };
  Kind kind = Kind::kInt;
  Span span;
  // Nodes on the longest path from here to a leaf (1 for a leaf). The parser keeps it at most
  // kMaxExprHeight (dsl/parser.h), which bounds every recursive walk over an expression.
  int height = 1;
  int64_t int_value = 0;
  double float_value = 0;
  std::string name;
  std::string op;
  std::vector<Expr> args;
};

// An argument of an operation: a name (tensor, device function, reduction op ...), optionally
// indexed on its leading dimensions (`KV[step % 2, 0]`), a peer's tensor (`peer(rank + 1).Y`), a
// bare peer (`peer(0)`), or an expression.
struct Operand {
  enum class Kind { kName, kPeerTensor, kPeer, kExpr };
  Kind kind = Kind::kName;
  Span span;
  std::string name;
  Span name_span;
  std::vector<Expr> index;
  Expr peer;  // kPeerTensor, kPeer
  Expr expr;  // kExpr
};

struct NamedArg {
  std::string key;
  Span key_span;
  Operand value;
};

// `after x`, `after x.tile`, `after kv[step - 1].chunk`.
struct DepRef {
  std::string target;
  Span target_span;
  std::optional<Expr> iteration;  // kv[step - 1]: an instance of a loop-body operation
  std::string granule;            // "", "tile" or "chunk"
  Span span;
};

// tile(128, 256, 64), chunk(128, K), after a.tile, when(step < R - 1), rows_from(rank), algo(ring)
struct Clause {
  std::string name;
  Span span;
  std::vector<Expr> args;    // tile, chunk, when, rows_from
  std::vector<DepRef> deps;  // after
  std::string word;          // algo(ring)
  Span word_span;
};

struct RanksDecl {
  std::string name;  // the world-size symbol, e.g. R
  Span name_span;
  std::string per_node;  // ranks per node symbol, e.g. L (empty: one node)
  Span per_node_span;
  Span span;
};

struct ParamDecl {
  std::string name;
  Span name_span;
  Expr value;
};

enum class TensorKind { kInput, kOutput, kScratch };
enum class Placement { kLocal, kSymmetric };

struct TensorDecl {
  TensorKind kind = TensorKind::kInput;
  std::string name;
  Span name_span;
  std::string dtype;
  Span dtype_span;
  std::vector<Expr> shape;
  Span shape_span;
  Placement placement = Placement::kLocal;
  Span span;
};

struct DeviceParam {
  std::string name;
  std::string type;
  Span span;
};

// device gelu(x: f32) -> f32 { C++ body }
struct DeviceFn {
  std::string name;
  Span name_span;
  std::vector<DeviceParam> params;
  std::string ret_type;
  Span ret_span;
  std::string body;
  Span body_span;
  Span span;
};

// compute mm = gemm(A, B -> C, epilogue = gelu) tile(128, 256, 64) after ag.chunk
struct OpDecl {
  bool comm = false;
  std::string name;
  Span name_span;
  std::string op;
  Span op_span;
  std::vector<Operand> inputs;
  std::vector<Operand> outputs;
  bool has_arrow = false;
  std::vector<NamedArg> named;
  std::vector<Clause> clauses;
  Span span;
};

// roles compute = 116, comm = 16
struct RoleDecl {
  std::string role;
  Span role_span;
  Expr count;
};

struct Item;

// loop step in 0 .. R { items }   (half-open range)
struct Loop {
  std::string var;
  Span var_span;
  Expr begin;
  Expr end;
  std::vector<Item> body;
  Span span;
};

struct Item {
  std::variant<ParamDecl, TensorDecl, DeviceFn, OpDecl, std::vector<RoleDecl>, Loop> node;
};

struct Schedule {
  std::string name;
  Span name_span;
  std::optional<RanksDecl> ranks;
  std::vector<Item> items;
  Span span;
};

struct Module {
  std::shared_ptr<const SourceFile> file;
  std::vector<Schedule> schedules;
};

}  // namespace mkc::dsl
