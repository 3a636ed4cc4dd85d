// Clauses: what follows an operation's arguments. `tile` (compute) and `chunk` (comm) cut it into
// tasks and must fit the operation: GEMM tiles on the tensor cores' grid, chunks over the
// trailing dimensions of the tensor that travels (the last chunk along a dimension may be
// partial). `rows_from` orders a GEMM's row blocks and may differ between ranks; `algo` picks a
// collective's algorithm. `when` is read by instantiate() and `after` by resolve_deps()
// (check_deps.cc); here they are only accepted. A clause may be given once, except `after`.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compiler/sema/checker.h"
#include "dsl/suggest.h"

namespace mkc::compiler {

using dsl::DiagKind;
using dsl::Expr;

namespace {

const std::vector<std::string> kAlgos = {"auto", "one_shot", "two_shot", "ring"};

// The tensor a comm op's chunks cut: the one whose per-rank part travels.
const TensorUse* chunked_tensor(OpKind kind, const OpInstance& inst) {
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

}  // namespace

bool Checker::check_clauses(const dsl::OpDecl& op, OpKind kind, const LoopEnv& env,
                            OpInstance* inst) {
  std::set<std::string> seen;
  static const std::vector<std::string> kClauses = {"tile", "chunk",     "after",
                                                    "when", "rows_from", "algo"};
  for (const dsl::Clause& c : op.clauses) {
    if (std::find(kClauses.begin(), kClauses.end(), c.name) == kClauses.end()) {
      auto& d = error(DiagKind::kUnknownClause, c.span, fmt::format("unknown clause `{}`", c.name));
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
              fmt::format("`{}` operations are cut into {}s, not {}s", op.comm ? "comm" : "compute",
                          tile ? "chunk" : "tile", c.name))
            .set_hint(fmt::format("write `{}(...)`", tile ? "chunk" : "tile"));
        return false;
      }
      // `tile(auto)`, `chunk(auto)`: the compiler chooses, as without the clause (the rule, or
      // what `mkc tune` measured: docs/TUNING.md). `auto` is a word here, never a parameter.
      const auto is_auto = [](const Expr& e) {
        return e.kind == Expr::Kind::kName && e.name == "auto";
      };
      if (std::any_of(c.args.begin(), c.args.end(), is_auto)) {
        if (c.args.size() != 1) {
          error(DiagKind::kBadArgument, c.span,
                fmt::format("`auto` stands alone in `{}(...)`: the compiler chooses every size or "
                            "none",
                            c.name))
              .set_hint(fmt::format("write `{}(auto)`, or give every size", c.name));
          return false;
        }
        continue;
      }
      std::vector<int64_t> sizes;
      for (const Expr& e : c.args) {
        auto v = eval_positive(e, EvalCtx{&env, false, 0, false, tile ? "tile size" : "chunk size"},
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
      bind_loop_vars(&inst->rows_from, env);
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
  // Without chunk(...), the lowering takes chunks of whole trailing rows, about 64 KB each
  // (compiler/passes/lower_views.cc, chunk_sizes): the same budget applies to that grid.
  if (op_is_comm(kind) && inst->chunk.empty()) {
    const TensorUse* u = chunked_tensor(kind, *inst);
    const bool grid = kind == OpKind::kAllReduce || kind == OpKind::kReduceScatter ||
                      kind == OpKind::kAllGather || kind == OpKind::kPut || kind == OpKind::kShift;
    if (grid && u != nullptr && !u->shape.empty() && u->tensor >= 0 &&
        u->tensor < static_cast<int>(out_.tensors.size())) {
      double row = dtype_bytes(out_.tensors[u->tensor].dtype);
      for (size_t d = 1; d < u->shape.size(); ++d) row *= static_cast<double>(u->shape[d]);
      const double rows =
          std::max(1.0, std::min(static_cast<double>(u->shape[0]), std::floor(65536.0 / row)));
      const double chunks = std::ceil(static_cast<double>(u->shape[0]) / rows);
      if (chunks > static_cast<double>(kMaxTasksPerRank)) {
        error(
            DiagKind::kParamRange, op.span,
            fmt::format("`{}` of `{}` makes {:.4g} chunks of about 64 KB, over mkc's limit of {} "
                        "tasks per rank (the kernel's task tables and its compile time grow "
                        "with them)",
                        op_name(kind), dsl::source_text(*file_, u->span), chunks, kMaxTasksPerRank))
            .set_hint(
                "a tensor this large does not fit one kernel's plan; split it over "
                "several operations or schedules");
        return false;
      }
    }
  }
  return true;
}

bool Checker::check_tile(const dsl::Clause& c, OpKind kind, const OpInstance& inst,
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
    if (sizes.size() != 1 && sizes.size() != 2) {
      error(DiagKind::kBadArgument, c.span, "an attention tile is tile(query_rows[, key_rows])");
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

bool Checker::check_chunk(const dsl::Clause& c, OpKind kind, const OpInstance& inst,
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
  // Sizes align with the trailing dimensions. They need not divide them: the last chunk along a
  // dimension is partial, like the last GEMM tile, and a size past the dimension is one chunk.
  //
  // The collectives and sends lower to at least one task per chunk per rank
  // (compiler/passes/lower.cc, chunk_grid): a grid past the lowering's budget is refused here,
  // where the clause is.
  const bool grid = kind == OpKind::kAllReduce || kind == OpKind::kReduceScatter ||
                    kind == OpKind::kAllGather || kind == OpKind::kPut || kind == OpKind::kShift;
  if (!grid) return true;
  double chunks = 1;
  const size_t lead = u->shape.size() - sizes.size();
  for (size_t d = 0; d < u->shape.size(); ++d) {
    const int64_t size = d < lead ? 1 : sizes[d - lead];
    chunks *= std::ceil(static_cast<double>(u->shape[d]) / static_cast<double>(size));
  }
  if (chunks > static_cast<double>(kMaxTasksPerRank)) {
    error(DiagKind::kParamRange, c.span,
          fmt::format("chunk({}) cuts `{}` into {:.4g} chunks, over mkc's limit of {} tasks per "
                      "rank (the kernel's task tables and its compile time grow with them)",
                      fmt::join(sizes, ", "), dsl::source_text(*file_, u->span), chunks,
                      kMaxTasksPerRank))
        .set_hint("use larger chunk sizes: a chunk of 64 KB or more moves at full speed");
    return false;
  }
  return true;
}

}  // namespace mkc::compiler
