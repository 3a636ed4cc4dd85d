// Tuning applied to compiles (tune/db.h, tune/gemm_model.h): the database key of a compile, the
// hook that applies an entry (the CLI's `compile` and `run`, the C++ API), and the search behind
// `mkc tune` and Kernel::tune(), which measures candidates through a callback (the GPU's launches;
// a stand-in in the tests).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "compiler/passes/lower.h"
#include "compiler/pipeline.h"
#include "compiler/sema/check.h"
#include "dsl/source.h"
#include "tune/db.h"
#include "tune/gemm_model.h"

namespace mkc::tune {

using Knobs = std::map<std::string, plan::LowerOptions::Tuned>;

// The key of checked schedule `s` of `file`, compiled with `options` for `arch`.
Key tune_key(const dsl::SourceFile& file, const compiler::CheckedSchedule& s,
             const compiler::CheckOptions& options, const std::string& arch);

// The database's path: `flag` when set, else $MKC_TUNE_DB, else tune.json in the JIT cache's
// directory; "" when that directory cannot be used (no tuning then).
std::string default_db_path(const std::string& flag);

// compile_file's hook: each schedule's entry in the database at `path`, if any, as knobs, with a
// note on `err` naming what it applied; MKC_TUNE=off gives none. A corrupt or foreign database is
// a warning on `err`, once.
compiler::TunedFor tuned_from_db(const std::string& path,
                                 std::shared_ptr<const dsl::SourceFile> file,
                                 const compiler::CheckOptions& options, const std::string& arch,
                                 std::ostream& err);

// An operation of `s` whose tile the compiler chooses (no tile(...), or tile(auto)), once per
// operation name: a GEMM, whose problem ranks the cost model's candidates (tune/gemm_model.h), or
// an attention whose tensor-core tile has choices besides the compiler's own: at head dim 64
// (where the compiler takes 192 queries by key blocks of 128, or 128 by 128 beside a GEMM or
// another attention), 128 queries by key blocks of 128 and of 192.
struct TunableOp {
  std::string op;
  compiler::OpKind kind = compiler::OpKind::kGemm;
  GemmProblem problem;                      // a GEMM's
  std::vector<int64_t> own;                 // an attention's: the compiler's tile(queries, keys)
  std::vector<std::vector<int64_t>> tiles;  // an attention's candidates, tile(queries, keys) each
};
// `compute_ctas` of the kernel's `sms` CTAs run them.
std::vector<TunableOp> tunable_ops(const compiler::CheckedSchedule& s, int64_t compute_ctas,
                                   int64_t sms);

// Microseconds per launch of the schedule compiled with `knobs` (ops not named: the model's pick).
using Measure = std::function<double(const Knobs& knobs)>;

struct SearchOptions {
  int candidates = 6;     // per operation, the model's best this many (at least 1)
  double budget_s = 600;  // stop measuring new candidates after this long (the best so far wins)
};

// One operation at a time, the others at their best so far: the compiler's own pick first (the
// baseline), then the model's best candidates (a GEMM) or the other tiles (an attention); the
// fastest measured wins. A progress line per measurement on `progress`. The entry's `us` is the
// best kernel time measured.
Entry search(const std::vector<TunableOp>& ops, const Measure& measure,
             const SearchOptions& options, std::ostream& progress);

}  // namespace mkc::tune
