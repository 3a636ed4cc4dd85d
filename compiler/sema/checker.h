// The checker's one class, shared by the files that implement it (private to //compiler/sema).
//
// A Checker checks one schedule for one world size. Its work is split by concern, one file each:
//   check.cc          the driver: the order of the phases, and check() over schedules and sizes
//   check_names.cc    the namespace of a schedule and the evaluation of expressions in it
//   check_decls.cc    parameters (with -D), tensors, device functions and roles
//   check_loops.cc    the budget of loop iterations and instances, and unrolling loops
//   check_ops.cc      each operation kind's signature and operand rules, one function per kind
//   check_operands.cc resolving operands (tensors, words, integers, device functions) and the
//                     dtype, shape and symmetry predicates the operation rules share
//   check_clauses.cc  tile, chunk, when, rows_from and algo
//   check_deps.cc     `after` dependencies, races (reads without a wait) and cycles (deadlocks)
// Everything here is the checker's internal vocabulary; compiler/sema/check.h is the interface.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/sema/check.h"
#include "compiler/sema/expr_eval.h"
#include "compiler/sema/program.h"
#include "dsl/ast.h"
#include "dsl/diagnostics.h"

namespace mkc::compiler {

// A name declared in a schedule and what it is.
struct Symbol {
  enum Kind { kParam, kTensor, kDevice, kOp, kLoopVar, kRanks, kBuiltin };
  Kind kind;
  dsl::Span span;
  int index = -1;
};

// "a parameter", "a tensor", ... for messages.
const char* symbol_kind_name(Symbol::Kind k);

// Values of the loop variables in scope.
using LoopEnv = std::map<std::string, int64_t>;

// How an expression is evaluated where it appears.
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

// Iterations of the loops around a loop body that the loop budget counts alike: the loop
// variables its inner bounds need (others unbound) and how many iterations share them.
struct LoopRuns {
  LoopEnv env;
  int64_t times = 1;
};

// A kept instance whose `after` clauses are resolved once every instance exists.
struct PendingDeps {
  int instance;
  LoopEnv env;
};

// Replaces the loop variables of `env` in `e` by their values. An expression the checked schedule
// keeps (a peer index, rows_from) is evaluated after checking, where the loops are unrolled.
void bind_loop_vars(dsl::Expr* e, const LoopEnv& env);

// What one operation kind's rule works on: the declaration, the loop variables' values and the
// instance being built.
struct OpCheck {
  const dsl::OpDecl& op;
  OpKind kind;
  const LoopEnv& env;
  OpInstance* inst;
  const char* usage;  // for hints: "gemm(A, B -> C[, epilogue = fn][, bias = b])"
};

class Checker {
 public:
  Checker(const dsl::Module& m, const dsl::Schedule& s, const CheckOptions& o, int64_t ranks,
          int64_t per_node, dsl::Diagnostics& d);

  // Checks the schedule; on success moves the result into `result`.
  bool run(CheckedSchedule* result);

  // The check functions of the operation kinds (check_ops.cc), public so that the table of kinds
  // can name them.
  bool check_gemm(OpCheck& c);
  bool check_grouped_gemm(OpCheck& c);
  bool check_map(OpCheck& c);
  bool check_reduce(OpCheck& c);
  bool check_attention(OpCheck& c);
  bool check_seqlens(OpCheck& c);
  bool check_copy(OpCheck& c);
  bool check_allreduce(OpCheck& c);
  bool check_allgather(OpCheck& c);
  bool check_reducescatter(OpCheck& c);
  bool check_alltoall(OpCheck& c);
  bool check_combine(OpCheck& c);
  bool check_shift(OpCheck& c);
  bool check_put(OpCheck& c);
  bool check_signal(OpCheck& c);

 private:
  dsl::Diagnostic& error(dsl::DiagKind k, dsl::Span s, std::string msg) {
    return diags_.error(k, file_, s, std::move(msg));
  }
  dsl::Diagnostic& warning(dsl::DiagKind k, dsl::Span s, std::string msg) {
    return diags_.warning(k, file_, s, std::move(msg));
  }
  // check_decls.cc: Clang's findings on the last device function checked (clang_check.h).
  void check_device_fn_with_clang(const dsl::DeviceFn& f);

  // ---- names (check_names.cc) ---------------------------------------------------------------
  void declare(const std::string& name, Symbol sym);
  void declare_names();
  void declare_items(const std::vector<dsl::Item>& items, std::vector<std::string> loop_vars);
  std::vector<std::string> names_of(std::initializer_list<Symbol::Kind> kinds) const;
  dsl::Diagnostic& undefined(const std::string& name, dsl::Span span, const char* what,
                             std::initializer_list<Symbol::Kind> kinds);
  // " (with R = 4)" when `e` depends on the world size, else "".
  std::string rn(const dsl::Expr& e) const { return depends_on_ranks(e) ? r_note_ : std::string(); }
  std::string rn(std::initializer_list<int> tensors) const;
  bool depends_on_ranks(const dsl::Expr& e) const;

  // ---- expressions (check_names.cc) ---------------------------------------------------------
  // Evaluates `e` (compiler/sema/expr_eval.h), reporting why it has no value where it has none.
  std::optional<int64_t> eval(const dsl::Expr& e, const EvalCtx& ctx);
  std::optional<int64_t> name_value(const dsl::Expr& e, const EvalCtx& ctx);
  void eval_failed(const dsl::Expr& e, EvalFailure f, int64_t a, int64_t b, const EvalCtx& ctx);
  // A positive size (shape dimension, tile, chunk, role count, parameter).
  std::optional<int64_t> eval_positive(const dsl::Expr& e, EvalCtx ctx, const char* what,
                                       const std::string& name = "");
  // Evaluates a rank-dependent expression for every rank.
  bool eval_for_all_ranks(const dsl::Expr& e, const LoopEnv& env, const char* what);

  // ---- parameters and declarations (check_decls.cc) -----------------------------------------
  void check_defines();
  void evaluate_params();
  void check_decl_item(const dsl::Item& it);
  void check_tensor(const dsl::TensorDecl& t);
  void check_device_fn(const dsl::DeviceFn& f);
  void check_roles(const std::vector<dsl::RoleDecl>& roles);

  // ---- loops (check_loops.cc) ---------------------------------------------------------------
  // Before unroll(): rejects every loop that would run more than kMaxLoopIterations iterations
  // in all, or take the schedule past kMaxOpInstances operation instances.
  void check_budget();
  // The operation instances of `items` or `it` when the loops around run as `runs` say; rejects
  // loops past the iteration budget on the way.
  uint64_t budget(const std::vector<dsl::Item>& items, const std::vector<LoopRuns>& runs,
                  const dsl::Loop* parent, uint64_t parent_total);
  uint64_t budget_item(const dsl::Item& it, const std::vector<LoopRuns>& runs,
                       const dsl::Loop* parent, uint64_t parent_total);
  std::optional<std::pair<int64_t, int64_t>> quiet_bounds(const dsl::Loop& l, const LoopEnv& env);
  // `probe`: inside an empty loop, where every loop's body is checked once and then dropped.
  void unroll(const std::vector<dsl::Item>& items, LoopEnv& env, std::vector<std::string> loop_vars,
              bool probe);
  void mark_first_and_last();

  // ---- operations (check_ops.cc) ------------------------------------------------------------
  void instantiate(const dsl::OpDecl& op, const LoopEnv& env);
  bool check_operands(OpCheck& c);
  // The inputs from `from` on, and the outputs, resolved as tensors into the instance.
  bool tensors_in(OpCheck& c, size_t from, bool peer_ok);
  bool tensors_out(OpCheck& c, bool peer_ok);
  // A named tensor argument: its tensor index, -1 when absent and optional, -2 after an error.
  int named_tensor(OpCheck& c, const char* key, bool required);
  bool check_reduction_input(OpCheck& c, TensorUse* x);

  // ---- operands (check_operands.cc) ---------------------------------------------------------
  std::string shape_str(const std::vector<int64_t>& s) const;
  // Resolves a tensor operand (`A`, `KV[step % 2, 0]`, or with allow_peer `peer(e).Y`).
  bool tensor_operand(const dsl::Operand& o, const LoopEnv& env, TensorUse* use, bool allow_peer,
                      const char* role);
  bool want_symmetric(const TensorUse& u, const std::string& op, const char* why);
  // A send's source and destination are not the same elements: ranks send to each other at once,
  // so one rank's write would land on what another rank has yet to send.
  bool want_not_in_place(const TensorUse& in, const TensorUse& out, const std::string& op);
  bool want_dtype(const TensorUse& u, bool (*ok)(DType), const std::string& what);
  bool same_dtype(const TensorUse& a, const TensorUse& b, const std::string& op);
  bool want_shape(const TensorUse& u, const std::vector<int64_t>& want, const std::string& why);
  bool want_rank(const TensorUse& u, size_t dims, const std::string& what);
  const dsl::NamedArg* named(const dsl::OpDecl& op, const std::string& key) const;
  std::optional<std::string> word_arg(const dsl::Operand& o,
                                      const std::vector<std::string>& allowed, const char* what);
  std::optional<int64_t> int_arg(const dsl::Operand& o, const LoopEnv& env, const char* what);
  // The operand as an integer expression (a lone name is one); nullopt for a tensor slice or a
  // peer (the caller reports it).
  static std::optional<dsl::Expr> int_expr(const dsl::Operand& o);
  int device_fn_arg(const dsl::Operand& o, const char* what);
  bool check_fn_arity(const dsl::Operand& at, int fn, size_t n);
  // A warning at `at` when passing a `from` value where a `to` is wanted loses it (a float into an
  // integer, i64 into i32); `what` names the passing ("`X` into `f`'s parameter `x`").
  void warn_lossy_use(const TensorUse& at, DType from, DType to, const std::string& what);

  // ---- clauses (check_clauses.cc) -----------------------------------------------------------
  bool check_clauses(const dsl::OpDecl& op, OpKind kind, const LoopEnv& env, OpInstance* inst);
  bool check_tile(const dsl::Clause& c, OpKind kind, const OpInstance& inst,
                  const std::vector<int64_t>& sizes);
  bool check_chunk(const dsl::Clause& c, OpKind kind, const OpInstance& inst,
                   const std::vector<int64_t>& sizes);

  // ---- dependencies, races and cycles (check_deps.cc) ---------------------------------------
  void resolve_deps();
  // pending_ holds one entry per kept instance, in instance order.
  const LoopEnv& env_of(int instance) const { return pending_[instance].env; }
  void check_races();
  void check_cycles();
  void check_forward_waits();
  std::string instance_name(const OpInstance& op) const;
  void report_cycle(const std::vector<int>& cycle);

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
  // Per device function: whether the checks found nothing wrong (Clang reads those before it).
  std::vector<char> device_fn_ok_;
  std::vector<PendingDeps> pending_;
  std::set<uint32_t> reported_ops_;
  std::set<uint32_t> reported_loop_items_;
  std::set<std::string> broken_tensors_;
  // Loops check_budget() rejected: unroll() skips them.
  std::set<const dsl::Loop*> over_budget_;
  // The operation instances check_budget() proved the schedule unrolls to, at most.
  uint64_t instance_bound_ = 0;
  // Names whose value depends on the world size: the ranks symbols and the parameters and tensors
  // defined from them. Messages about them say which world size was checked.
  std::set<std::string> ranks_names_;
  bool evaluating_params_ = false;
};

}  // namespace mkc::compiler
