// The checked schedule: what compiler/check produces from the AST once every name is resolved,
// every parameter evaluated for a world size, and every loop unrolled. All sizes are concrete
// integers; an operation inside a loop appears once per iteration. Lowering (the plan) starts here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dsl/ast.h"

namespace mkc::compiler {

// X(Enumerator, "name", bytes, is_float)
#define MKC_DTYPES(X)              \
  X(kBf16, "bf16", 2, true)        \
  X(kF16, "f16", 2, true)          \
  X(kF32, "f32", 4, true)          \
  X(kF64, "f64", 8, true)          \
  X(kFp8E4m3, "fp8_e4m3", 1, true) \
  X(kFp8E5m2, "fp8_e5m2", 1, true) \
  X(kI32, "i32", 4, false)         \
  X(kI64, "i64", 8, false)

enum class DType {
#define MKC_DTYPE_ENUM(e, name, bytes, is_float) e,
  MKC_DTYPES(MKC_DTYPE_ENUM)
#undef MKC_DTYPE_ENUM
};

const char* dtype_name(DType t);
int dtype_bytes(DType t);
bool dtype_is_float(DType t);
bool dtype_is_fp8(DType t);
// Parses "bf16", ...; false when unknown.
bool parse_dtype(const std::string& s, DType* out);
std::vector<std::string> dtype_names();

// X(Enumerator, "name", is_comm)
#define MKC_OPS(X)                         \
  X(kGemm, "gemm", false)                  \
  X(kGroupedGemm, "grouped_gemm", false)   \
  X(kMap, "map", false)                    \
  X(kReduce, "reduce", false)              \
  X(kAttention, "attention", false)        \
  X(kCopy, "copy", false)                  \
  X(kAllReduce, "allreduce", true)         \
  X(kAllGather, "allgather", true)         \
  X(kReduceScatter, "reducescatter", true) \
  X(kAllToAll, "alltoall", true)           \
  X(kCombine, "combine", true)             \
  X(kShift, "shift", true)                 \
  X(kPut, "put", true)                     \
  X(kSignal, "signal", true)

enum class OpKind {
#define MKC_OP_ENUM(e, name, is_comm) e,
  MKC_OPS(MKC_OP_ENUM)
#undef MKC_OP_ENUM
};

const char* op_name(OpKind k);
bool op_is_comm(OpKind k);
bool parse_op(const std::string& s, OpKind* out);
std::vector<std::string> op_names(bool comm);

struct Tensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  dsl::TensorKind kind = dsl::TensorKind::kInput;
  dsl::Placement placement = dsl::Placement::kLocal;
  dsl::Span span;
  int64_t elements() const;
};

// A tensor as an operation uses it: possibly a slice of its leading dimensions (`KV[1, 0]`), and
// possibly a peer's copy (`peer(rank + 1).Y`, the peer index an expression of `rank`, taken modulo
// the world size).
struct TensorUse {
  int tensor = -1;
  std::vector<int64_t> index;
  std::vector<int64_t> shape;  // the shape after indexing
  bool on_peer = false;
  dsl::Expr peer;
  dsl::Span span;
};

enum class Granule { kAll, kTile, kChunk };

struct Dependency {
  int op = -1;  // index into CheckedSchedule::ops
  Granule granule = Granule::kAll;
  dsl::Span span;
};

// One operation instance (a loop body's operation appears once per iteration).
// The most tasks a rank's part of a plan may have (the lowering's default budget, LowerOptions):
// the kernel's task tables, the source NVRTC compiles and its compile time grow with them. The
// checker refuses the chunk grids past it that the lowering would refuse.
constexpr int64_t kMaxTasksPerRank = int64_t{1} << 17;

struct OpInstance {
  OpKind kind = OpKind::kGemm;
  std::string name;
  int iteration = -1;  // the loop variable's value, -1 outside loops
  // No earlier (later) instance of its merge group: the attentions with accumulate = 1 that write
  // the same slice of the same output, whatever their declarations, in program order; for any
  // other operation its declaration (loop unrolling).
  bool first_of_group = true;
  bool last_of_group = true;
  std::vector<TensorUse> inputs;
  std::vector<TensorUse> outputs;
  std::string reduce_op;                   // sum / max / min for reductions and collectives
  int device_fn = -1;                      // map's function or gemm's epilogue
  std::map<std::string, int64_t> ints;     // named integer arguments (by, causal, axis, ...)
  std::map<std::string, double> floats;    // named decimal arguments (scale)
  std::map<std::string, int> tensor_args;  // named tensor arguments (route, counts, weights, bias)
  int dispatch_op = -1;                    // combine: the alltoall instance it reverses
  std::vector<int64_t> tile;               // compute: tile sizes
  std::vector<int64_t> chunk;              // comm: chunk sizes
  std::string algo;                        // collectives: "auto", "one_shot", "two_shot", "ring"
  bool has_rows_from = false;
  dsl::Expr rows_from;  // gemm: the row block to start with (may use `rank`)
  // Named integer arguments that may differ between ranks (attention's q_start and k_start), loop
  // variables bound: compiler::evaluate(e, rank, schedule) gives a rank's value.
  std::map<std::string, dsl::Expr> per_rank;
  std::vector<Dependency> deps;
  const dsl::OpDecl* decl = nullptr;
};

struct DeviceFunction {
  std::string name;
  std::vector<std::pair<std::string, DType>> params;
  DType ret = DType::kF32;
  std::string body;
  dsl::Span body_span;
};

// Work the checker's dependency rules did, in steps (compiler/sema/check_deps.cc): tests hold them
// to near-linear in the instances, their accesses and their waits.
struct CheckWork {
  uint64_t named = 0;  // instances looked at to resolve `after` references
  uint64_t races = 0;  // trie nodes, waits and closure words visited by the race check
};

struct CheckedSchedule {
  std::string name;
  int64_t ranks = 1;           // world size R it was checked for
  int64_t ranks_per_node = 1;  // L, in [1, ranks]: the check settles it (one node: ranks)
  std::map<std::string, int64_t> params;
  std::vector<Tensor> tensors;
  std::vector<DeviceFunction> device_fns;
  std::vector<OpInstance> ops;
  std::map<std::string, int64_t> roles;
  const dsl::Schedule* ast = nullptr;
  CheckWork work;
};

// Evaluates an expression that survived checking for one rank (`rank` = that rank): params, the
// world-size names and integer arithmetic, by the checker's own evaluator
// (compiler/sema/expr_eval.h), so the values are the ones the checker saw. Peer indices are taken
// modulo the world size by the caller.
int64_t evaluate(const dsl::Expr& e, int64_t rank, const CheckedSchedule& s);

// An attention with accumulate = 1: it merges into its slice of O with the others of its group.
bool accumulates(const OpInstance& op);

// A causal attention's offset on one rank: key j of its K is visible to query i of its Q when
// j <= i + offset, offset = q_start - k_start (each 0 unless given). Clamped to [-Sq, Sk], which
// keeps the mask (past Sk - 1 every key is visible, below -Sq none) and fits a device int.
int64_t causal_offset(const OpInstance& op, int64_t rank, const CheckedSchedule& s, int64_t Sq,
                      int64_t Sk);

}  // namespace mkc::compiler
