// The whole compiler in one call: a schedule file -> checked schedules -> plans -> generated kernel
// sources. The CLI, the GPU runner's tests and (next) the host JIT API all go through it, so they
// compile a schedule the same way. The result owns everything the plans point into; keep it alive
// (and in place: it is returned behind a unique_ptr) while plans or kernels are in use.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/passes/lower.h"
#include "compiler/plan/plan.h"
#include "compiler/sema/check.h"
#include "dsl/ast.h"
#include "dsl/diagnostics.h"
#include "support/phases.h"

namespace mkc::compiler {

struct Compilation {
  std::shared_ptr<const dsl::SourceFile> file;
  dsl::Module module;
  dsl::Diagnostics diagnostics;
  std::vector<CheckedSchedule> checked;     // one per schedule of the file
  std::vector<plan::Plan> plans;            // plans[i] is checked[i] lowered and scheduled
  std::vector<codegen::Generated> kernels;  // kernels[i] generated from plans[i]
  Phases phases;  // parse, check, each pass (and its verifier), codegen: where the time went
  bool ok() const { return !diagnostics.has_errors(); }
};

// Parses and checks `file` for the options' world size(s); when it is free of errors, plans
// (for options.sms CTAs) and, with `generate`, generates every schedule's kernel (`kernels` stays
// empty without). `defines_text` goes into the generated banner. Errors in the schedule are in
// the result's diagnostics.
// `tuned`, when set, gives each checked schedule the knobs `mkc tune` measured for it (by
// operation name; the CLI looks them up in the tuning database, tune/db.h).
// `tables`: where the plan's tables go unless MKC_TABLES says (docs/COMPILER.md, "The plan's
// tables"): as data by default, copied into the module by whoever loads it (rt::LocalJob does);
// `mkc compile` asks for them in the source, so the cubin it writes stands alone.
using TunedFor =
    std::function<std::map<std::string, plan::LowerOptions::Tuned>(const CheckedSchedule&)>;
std::unique_ptr<Compilation> compile_file(
    std::shared_ptr<const dsl::SourceFile> file, const CheckOptions& options,
    const std::string& defines_text = "", bool generate = true, const TunedFor& tuned = nullptr,
    codegen::CodegenOptions::Tables tables = codegen::CodegenOptions::Tables::kData);

}  // namespace mkc::compiler
