#include "compiler/pipeline.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "compiler/passes/neighbours.h"
#include "compiler/passes/passes.h"
#include "dsl/parser.h"
#include "support/error.h"
#include "support/phases.h"

namespace mkc::compiler {
namespace {

// MKC_TABLES: where the plan's tables go (codegen::CodegenOptions::tables). Unset: `fallback`.
codegen::CodegenOptions::Tables tables_from_env(codegen::CodegenOptions::Tables fallback) {
  const char* v = std::getenv("MKC_TABLES");
  const std::string s = v == nullptr ? "" : v;
  if (s.empty()) return fallback;
  if (s == "source") return codegen::CodegenOptions::Tables::kSource;
  if (s == "data") return codegen::CodegenOptions::Tables::kData;
  throw UserError("MKC_TABLES=" + s +
                  ": expected `data` (declared in the kernel, copied in by the runtime: the "
                  "default) or `source` (the plan's tables compiled into the kernel: a "
                  "self-contained cubin, what `mkc compile` writes)");
}

}  // namespace

std::unique_ptr<Compilation> compile_file(std::shared_ptr<const dsl::SourceFile> file,
                                          const CheckOptions& options,
                                          const std::string& defines_text, bool generate,
                                          const TunedFor& tuned,
                                          codegen::CodegenOptions::Tables tables) {
  auto c = std::make_unique<Compilation>();
  c->file = file;
  Stopwatch clock;
  c->module = dsl::parse(file, c->diagnostics);
  c->phases.add("parse", clock.lap());
  if (c->diagnostics.has_errors()) return c;
  c->checked = check(c->module, options, c->diagnostics);
  c->phases.add("check", clock.lap());
  if (c->diagnostics.has_errors()) return c;
  // Plans point at their checked schedule: `checked` is complete and never resized from here on.
  for (const CheckedSchedule& s : c->checked) {
    plan::PassOptions po;
    po.sms = options.sms;
    po.file = file.get();
    po.phases = &c->phases;
    if (options.plan_rank >= 0) {
      if (options.plan_rank >= s.ranks) {
        throw UserError(fmt::format("--rank {}: schedule `{}` has {} ranks (0 to {})",
                                    options.plan_rank, s.name, s.ranks, s.ranks - 1));
      }
      Stopwatch near;
      po.lower.ranks = plan::ranks_within(plan::neighbours(s), options.plan_rank, 2);
      po.lower.private_ops = plan::private_ops(s);
      po.lower.own_rank = options.plan_rank;
      c->phases.add("neighbours", near.lap());
      // The verifier proves cross-rank properties on the whole world's plan (`mkc verify`).
      po.verify = false;
    }
    if (tuned) {
      auto knobs = tuned(s);
      if (!knobs.empty())
        po.lower.tuned = std::make_shared<const std::map<std::string, plan::LowerOptions::Tuned>>(
            std::move(knobs));
    }
    c->plans.push_back(plan::build_plan(s, po));
  }
  clock.lap();
  if (!generate) return c;
  for (const plan::Plan& p : c->plans) {
    codegen::CodegenOptions co;
    co.file = file;
    co.arch = options.arch;
    co.defines = defines_text;
    co.tables = tables_from_env(tables);
    // A plan of one rank's neighbourhood generates that rank's kernel only.
    co.rank = options.plan_rank;
    c->kernels.push_back(codegen::generate(p, co));
  }
  c->phases.add("codegen", clock.lap());
  return c;
}

}  // namespace mkc::compiler
