#include "compiler/passes/passes.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "compiler/passes/dependencies.h"
#include "dsl/ast_json.h"

namespace mkc::plan {
namespace {

class Driver {
 public:
  Driver() {
    const char* env = std::getenv("MKC_DUMP_PASSES");
    dump_ = env != nullptr && *env != '\0' && std::strcmp(env, "0") != 0;
    json_ = dump_ && std::strcmp(env, "json") == 0;
  }

  // Runs pass `fn`, then (when on) the verifier for the stage the plan has reached.
  template <typename F>
  void pass(const char* name, Plan& plan, const PassOptions& o, Stage stage, F fn) {
    const auto start = std::chrono::steady_clock::now();
    const std::string before = dump_ ? summary(plan) : "";
    fn(plan);
    if (o.verify) {
      VerifyOptions vo;
      vo.file = o.file;
      verify_or_throw(plan, stage, name, vo);
    }
    if (!dump_) return;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const std::string after = summary(plan);
    std::cerr << fmt::format("mkc: pass {:<14} {:8.2f} ms  {}\n", name, ms,
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
         [&](Plan& p) { derive_dependencies(p); });
  d.pass("schedule", plan, options, Stage::kScheduled, [&](Plan& p) {
    ScheduleOptions so;
    so.sms = options.sms;
    so.roles = schedule.roles;
    plan::schedule(p, so);
  });
  return plan;
}

}  // namespace mkc::plan
