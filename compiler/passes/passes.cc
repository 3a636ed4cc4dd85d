#include "compiler/passes/passes.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "compiler/passes/dependencies.h"
#include "dsl/ast_json.h"
#include "support/phases.h"

namespace mkc::plan {
namespace {

class Driver {
 public:
  Driver() {
    const char* env = std::getenv("MKC_DUMP_PASSES");
    dump_ = env != nullptr && *env != '\0' && std::strcmp(env, "0") != 0;
    json_ = dump_ && std::strcmp(env, "json") == 0;
  }

  // Runs pass `fn`, then (when on) the verifier for the stage the plan has reached; records both
  // times in `o.phases` when given.
  template <typename F>
  void pass(const char* name, Plan& plan, const PassOptions& o, Stage stage, F fn) {
    const std::string before = dump_ ? summary(plan) : "";
    Stopwatch clock;
    fn(plan);
    const double seconds = clock.lap();
    if (o.phases != nullptr) o.phases->add(name, seconds);
    if (o.verify) {
      VerifyOptions vo;
      vo.file = o.file;
      verify_or_throw(plan, stage, name, vo);
      if (o.phases != nullptr) o.phases->add(fmt::format("verify after {}", name), clock.lap());
    }
    if (!dump_) return;
    const std::string after = summary(plan);
    std::cerr << fmt::format("mkc: pass {:<14} {:8.2f} ms  {}\n", name, seconds * 1e3,
                             after == before ? "unchanged" : after);
    if (json_) std::cerr << dsl::dump_json(to_json(plan)) << "\n";
  }

 private:
  bool dump_ = false;
  bool json_ = false;
};

}  // namespace

Plan build_plan(const compiler::CheckedSchedule& schedule, const PassOptions& options) {
  Driver d;
  Plan plan;
  LowerOptions lo = options.lower;
  lo.sms = options.sms;
  if (lo.file == nullptr) lo.file = options.file;
  d.pass("lower", plan, options, Stage::kLowered, [&](Plan& p) { p = lower(schedule, lo); });
  d.pass("dependencies", plan, options, Stage::kDependencies,
         [&](Plan& p) { derive_dependencies(p, options.file); });
  d.pass("schedule", plan, options, Stage::kScheduled, [&](Plan& p) {
    ScheduleOptions so;
    so.sms = options.sms;
    so.roles = schedule.roles;
    plan::schedule(p, so);
  });
  return plan;
}

}  // namespace mkc::plan
