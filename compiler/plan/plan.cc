// The plan's own functions: its values' helpers, names of its enums, its one-line summary and its
// JSON form.
#include "compiler/plan/plan.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string_view>

namespace mkc::plan {

int64_t Buffer::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool Box::overlaps(const Box& o) const {
  if (rank != o.rank || buffer != o.buffer) return false;
  for (size_t d = 0; d < lo.size() && d < o.lo.size(); ++d) {
    if (hi[d] <= o.lo[d] || o.hi[d] <= lo[d]) return false;
  }
  return true;
}

int64_t Box::elements() const {
  int64_t n = 1;
  for (size_t d = 0; d < lo.size(); ++d) n *= std::max<int64_t>(0, hi[d] - lo[d]);
  return n;
}

const char* handoff_name(HandOff h) {
  switch (h) {
    case HandOff::kLocal:
      return "local_counter";
    case HandOff::kPeerFlag:
      return "nvlink_flag";
    case HandOff::kProxy:
      return "proxy_rdma";
  }
  return "?";
}

const char* task_kind_name(TaskKind k) {
  switch (k) {
#define MKC_TK_NAME(e, name, is_comm) \
  case TaskKind::e:                   \
    return name;
    MKC_TASK_KINDS(MKC_TK_NAME)
#undef MKC_TK_NAME
  }
  return "?";
}

bool task_kind_is_comm(TaskKind k) {
  switch (k) {
#define MKC_TK_COMM(e, name, is_comm) \
  case TaskKind::e:                   \
    return is_comm;
    MKC_TASK_KINDS(MKC_TK_COMM)
#undef MKC_TK_COMM
  }
  return false;
}

std::string summary(const Plan& plan) {
  size_t waits = 0, proxied = 0;
  for (const Task& t : plan.tasks) {
    waits += t.waits.size();
    for (const Signal& s : t.signals) proxied += s.handoff == HandOff::kProxy;
  }
  std::string roles;
  for (const Role& r : plan.roles) roles += fmt::format(" {}={}", r.name, r.count);
  // Across nodes: how many signals (and the writes before them) the host proxies carry.
  const std::string nodes = proxied == 0 ? ""
                                         : fmt::format(", {} signals through the proxy ({} nodes)",
                                                       proxied, plan.node_of(plan.ranks - 1) + 1);
  return fmt::format("{} tasks, {} events, {} waits{}, {} buffers;{}", plan.tasks.size(),
                     plan.events.size(), waits, nodes, plan.buffers.size(),
                     roles.empty() ? " roles unassigned" : " roles" + roles);
}

namespace {

using nlohmann::json;

// Everything of the plan's JSON but its tasks.
json head_json(const Plan& plan) {
  json j = {{"schedule", plan.schedule},
            {"ranks", plan.ranks},
            {"ranks_per_node", plan.ranks_per_node},
            {"summary", summary(plan)}};
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
  return j;
}

json task_json(const Plan& plan, size_t i) {
  const Task& t = plan.tasks[i];
  json jt = {
      {"id", i},      {"label", t.label}, {"rank", t.rank},   {"kind", task_kind_name(t.kind)},
      {"cta", t.cta}, {"order", t.order}, {"group", t.group}, {"args", t.args}};
  jt["waits"] = json::array();
  for (const Wait& w : t.waits)
    jt["waits"].push_back(
        {{"event", plan.events[w.event].name}, {"count", w.count}, {"lag", w.lag}});
  for (const auto& [key, boxes] : {std::pair{"reads", &t.reads}, std::pair{"writes", &t.writes}}) {
    jt[key] = json::array();
    for (const Box& b : *boxes) {
      json jb = {
          {"rank", b.rank}, {"buffer", plan.buffers[b.buffer].name}, {"lo", b.lo}, {"hi", b.hi}};
      if (b.scatter) jb["scatter"] = true;
      jt[key].push_back(jb);
    }
  }
  jt["signals"] = json::array();
  for (const Signal& s : t.signals) {
    jt["signals"].push_back({{"event", plan.events[s.event].name},
                             {"rank", plan.events[s.event].rank},
                             {"handoff", handoff_name(s.handoff)}});
  }
  return jt;
}

std::string dump(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace);
}

}  // namespace

nlohmann::json to_json(const Plan& plan) {
  json j = head_json(plan);
  j["tasks"] = json::array();
  for (size_t i = 0; i < plan.tasks.size(); ++i) j["tasks"].push_back(task_json(plan, i));
  return j;
}

// The tree of a plan of 100,000 tasks takes gigabytes and seconds to build; one task's at a time
// takes neither. The text is the tree's: "tasks" is the last of the keys (they are sorted), so the
// head's text ends where the tasks begin, and a task's own text, indented two levels deeper, is
// what the whole tree's dump holds (string values carry no raw newlines).
void write_json(const Plan& plan, const std::function<void(std::string_view)>& sink) {
  std::string text = dump(head_json(plan));
  text.resize(text.size() - 2);  // "\n}"
  if (plan.tasks.empty()) {
    sink(text + ",\n  \"tasks\": []\n}\n");
    return;
  }
  text += ",\n  \"tasks\": [\n";
  constexpr size_t kChunk = 1 << 20;
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const std::string task = dump(task_json(plan, i));
    text += "    ";
    for (char c : task) {
      text += c;
      if (c == '\n') text += "    ";
    }
    text += i + 1 < plan.tasks.size() ? ",\n" : "\n  ]\n}\n";
    if (text.size() >= kChunk) {
      sink(text);
      text.clear();
    }
  }
  sink(text);
}

}  // namespace mkc::plan
