#include "runtime/tune_run.h"

#include <fmt/format.h>

#include <vector>

#include "dsl/diagnostics.h"
#include "jit/jit.h"
#include "runtime/local_job.h"
#include "runtime/verify.h"
#include "support/error.h"

namespace mkc::rt {

std::optional<Tuned> tune_schedule(std::shared_ptr<const dsl::SourceFile> file, size_t index,
                                   const TuneRunOptions& options, std::ostream& progress) {
  const auto base = compiler::compile_file(file, options.check, options.defines_text, false);
  if (!base->ok()) throw UserError(dsl::render_text(base->diagnostics.all(), false));
  if (index >= base->checked.size()) {
    throw InternalError(
        fmt::format("tune_schedule: schedule {} of {}", index, base->checked.size()));
  }
  const compiler::CheckedSchedule& s = base->checked[index];
  int64_t ctas = options.check.sms;
  for (const plan::Role& r : base->plans[index].roles)
    if (r.name == "compute") ctas = r.count;
  const std::vector<tune::TunableOp> ops = tune::tunable_ops(s, ctas, options.check.sms);
  if (ops.empty()) return std::nullopt;
  const std::string name = s.name;
  // Each measurement compiles the whole file with the trial's knobs for this schedule only.
  const tune::Measure measure = [&](const tune::Knobs& knobs) {
    const auto trial = compiler::compile_file(file, options.check, options.defines_text, true,
                                              [&](const compiler::CheckedSchedule& cs) {
                                                return cs.name == name ? knobs : tune::Knobs{};
                                              });
    if (!trial->ok()) throw InternalError("a schedule that compiled stopped compiling");
    const plan::Plan& p = trial->plans[index];
    const codegen::Generated& g = trial->kernels[index];
    jit::JitOptions jo;
    jo.arch = options.arch;
    const jit::JitOutput j = jit::jit_compile(g.source, p.schedule + ".cu", g.kernel_name, jo);
    LocalJobOptions lo;
    lo.file = trial->file;
    lo.share_gpus = options.share_gpus;
    LocalJob job(p, j.cubin, g, lo);
    upload_inputs(job, p, plan::random_inputs(p, 1, plan::Routing::kUniform));
    job.launch();  // warm-up
    return job.time_launches(options.iters);
  };
  return Tuned{tune::tune_key(*file, s, options.check, options.arch),
               tune::search(ops, measure, options.search, progress)};
}

}  // namespace mkc::rt
