#include "compiler/passes.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "compiler/dependencies.h"
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

  template <typename F>
  void pass(const char* name, Plan& plan, F fn) {
    const auto start = std::chrono::steady_clock::now();
    const std::string before = dump_ ? summary(plan) : "";
    fn(plan);
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
  d.pass("lower", plan, [&](Plan& p) { p = lower(schedule, lo); });
  d.pass("dependencies", plan, [&](Plan& p) { derive_dependencies(p, schedule.ranks_per_node); });
  d.pass("schedule", plan, [&](Plan& p) {
    ScheduleOptions so;
    so.sms = options.sms;
    so.roles = schedule.roles;
    plan::schedule(p, so);
  });
  return plan;
}

std::string summary(const Plan& plan) {
  size_t waits = 0;
  for (const Task& t : plan.tasks) waits += t.waits.size();
  std::string roles;
  for (const Role& r : plan.roles) roles += fmt::format(" {}={}", r.name, r.count);
  return fmt::format("{} tasks, {} events, {} waits, {} buffers;{}", plan.tasks.size(),
                     plan.events.size(), waits, plan.buffers.size(),
                     roles.empty() ? " roles unassigned" : " roles" + roles);
}

nlohmann::json to_json(const Plan& plan) {
  using nlohmann::json;
  json j = {{"schedule", plan.schedule}, {"ranks", plan.ranks}, {"summary", summary(plan)}};
  j["buffers"] = json::array();
  for (const Buffer& b : plan.buffers) {
    j["buffers"].push_back({{"name", b.name},
                            {"dtype", compiler::dtype_name(b.dtype)},
                            {"shape", b.shape},
                            {"symmetric", b.symmetric},
                            {"origin", b.origin}});
  }
  j["roles"] = json::array();
  for (const Role& r : plan.roles)
    j["roles"].push_back({{"role", r.name}, {"first_cta", r.first_cta}, {"count", r.count}});
  j["decisions"] = json::array();
  for (const Decision& d : plan.decisions)
    j["decisions"].push_back({{"op", d.op}, {"algorithm", d.choice}, {"reason", d.reason}});
  j["tasks"] = json::array();
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const Task& t = plan.tasks[i];
    json jt = {
        {"id", i},      {"label", t.label}, {"rank", t.rank},   {"kind", task_kind_name(t.kind)},
        {"cta", t.cta}, {"order", t.order}, {"group", t.group}, {"args", t.args}};
    jt["waits"] = json::array();
    for (const Wait& w : t.waits)
      jt["waits"].push_back(
          {{"event", plan.events[w.event].name}, {"count", w.count}, {"lag", w.lag}});
    jt["signals"] = json::array();
    for (const Signal& s : t.signals) {
      jt["signals"].push_back({{"event", plan.events[s.event].name},
                               {"rank", plan.events[s.event].rank},
                               {"handoff", handoff_name(s.handoff)}});
    }
    j["tasks"].push_back(jt);
  }
  return j;
}

}  // namespace mkc::plan
