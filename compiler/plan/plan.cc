// The plan's own functions: its values' helpers, names of its enums, its one-line summary and its
// JSON form.
#include "compiler/plan/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
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
    json jb = {{"name", b.name},
               {"dtype", compiler::dtype_name(b.dtype)},
               {"shape", b.shape},
               {"symmetric", b.symmetric},
               {"origin", b.origin}};
    if (b.zeroed) jb["zeroed"] = true;
    j["buffers"].push_back(std::move(jb));
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

// Text collected into a megabyte and handed to a sink a megabyte at a time. Not a std::string:
// its append is compiled out of line (libstdc++ instantiates it once), a call and a capacity check
// for each of a large plan's tens of millions of pieces of a few bytes.
class Pieces {
 public:
  using Sink = std::function<void(std::string_view)>;
  explicit Pieces(const Sink& sink) : sink_(sink), buf_(new char[kSize]) {}
  // By string_view, whose length the call's literal gives (const char* would cost a strlen).
  void put(std::string_view s) {
    if (s.size() > kSize - used_) {
      flush();
      if (s.size() > kSize) {
        sink_(s);
        return;
      }
    }
    std::memcpy(buf_.get() + used_, s.data(), s.size());
    used_ += s.size();
  }
  void put(char c) {
    if (used_ == kSize) flush();
    buf_[used_++] = c;
  }
  void spaces(size_t n) {  // an indent: far under kSize
    if (n > kSize - used_) flush();
    std::memset(buf_.get() + used_, ' ', n);
    used_ += n;
  }
  void flush() {
    if (used_ > 0) sink_(std::string_view(buf_.get(), used_));
    used_ = 0;
  }

 private:
  static constexpr size_t kSize = 1 << 20;
  const Sink& sink_;
  std::unique_ptr<char[]> buf_;
  size_t used_ = 0;
};

// The text of one task as dump(task_json(plan, i)) writes it, each line after the first indented
// by `indent` more, written straight into `out`: the tree of a task took most of a large plan's
// writing time (ring attention at 16 ranks: 5.9 s of 9). Keys in the tree's (sorted) order;
// strings that need escaping (or may not be UTF-8) go through the tree's own serializer.
class TaskText {
 public:
  TaskText(Pieces* out, int indent) : out_(*out), base_(indent) {}

  void task(const Plan& plan, size_t i) {
    const Task& t = plan.tasks[i];
    put("{\n");
    key(1, "args");
    numbers(1, t.args);
    put(",\n");
    member(1, "cta", t.cta);
    member(1, "group", t.group);
    member(1, "id", static_cast<int64_t>(i));
    key(1, "kind");
    string(task_kind_name(t.kind));
    put(",\n");
    key(1, "label");
    string(t.label);
    put(",\n");
    member(1, "order", t.order);
    member(1, "rank", t.rank);
    key(1, "reads");
    boxes(plan, t.reads);
    put(",\n");
    key(1, "signals");
    objects(1, t.signals.size(), [&](size_t k) {
      const Signal& sg = t.signals[k];
      key(3, "event");
      string(plan.events[sg.event].name);
      put(",\n");
      key(3, "handoff");
      string(handoff_name(sg.handoff));
      put(",\n");
      key(3, "rank");
      integer(plan.events[sg.event].rank);
      out_.put('\n');
    });
    put(",\n");
    key(1, "waits");
    objects(1, t.waits.size(), [&](size_t k) {
      const Wait& w = t.waits[k];
      member(3, "count", w.count);
      key(3, "event");
      string(plan.events[w.event].name);
      put(",\n");
      key(3, "lag");
      integer(w.lag);
      out_.put('\n');
    });
    put(",\n");
    key(1, "writes");
    boxes(plan, t.writes);
    put("\n");
    pad(0);
    put("}");
  }

 private:
  void put(std::string_view s) { out_.put(s); }
  void pad(int level) { out_.spaces(static_cast<size_t>(base_ + 2 * level)); }
  void key(int level, std::string_view name) {
    pad(level);
    out_.put('"');
    put(name);
    put("\": ");
  }
  // Integers through fmt::format_int, not fmt::format_to, which parses its format string at each
  // call: a large plan holds tens of millions of numbers.
  void integer(int64_t v) {
    const fmt::format_int text(v);
    out_.put(std::string_view(text.data(), text.size()));
  }
  void member(int level, std::string_view name, int64_t v) {
    key(level, name);
    integer(v);
    put(",\n");
  }
  void string(std::string_view s) {
    const bool plain = std::all_of(
        s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; });
    if (plain) {
      out_.put('"');
      put(s);
      out_.put('"');
    } else {
      out_.put(dump(json(std::string(s))));
    }
  }
  // An array of integers whose key is at `level`.
  void numbers(int level, const std::vector<int64_t>& v) {
    if (v.empty()) {
      put("[]");
      return;
    }
    put("[\n");
    for (size_t k = 0; k < v.size(); ++k) {
      pad(level + 1);
      integer(v[k]);
      put(k + 1 < v.size() ? std::string_view(",\n") : "\n");
    }
    pad(level);
    put("]");
  }
  // An array of n objects whose key is at `level`; body(k) writes object k's members (at level +
  // 2), the last one ending in a newline.
  template <typename F>
  void objects(int level, size_t n, F&& body) {
    if (n == 0) {
      put("[]");
      return;
    }
    put("[\n");
    for (size_t k = 0; k < n; ++k) {
      pad(level + 1);
      put("{\n");
      body(k);
      pad(level + 1);
      put(k + 1 < n ? std::string_view("},\n") : "}\n");
    }
    pad(level);
    put("]");
  }
  void boxes(const Plan& plan, const std::vector<Box>& bs) {
    objects(1, bs.size(), [&](size_t k) {
      const Box& b = bs[k];
      key(3, "buffer");
      string(plan.buffers[b.buffer].name);
      put(",\n");
      key(3, "hi");
      numbers(3, b.hi);
      put(",\n");
      key(3, "lo");
      numbers(3, b.lo);
      put(",\n");
      key(3, "rank");
      integer(b.rank);
      put(b.scatter ? std::string_view(",\n") : "\n");
      if (b.scatter) {
        key(3, "scatter");
        put("true\n");
      }
    });
  }

  Pieces& out_;
  int base_;
};

}  // namespace

nlohmann::json to_json(const Plan& plan) {
  json j = head_json(plan);
  j["tasks"] = json::array();
  for (size_t i = 0; i < plan.tasks.size(); ++i) j["tasks"].push_back(task_json(plan, i));
  return j;
}

// The tree of a plan of 100,000 tasks takes gigabytes and seconds to build; the text is written a
// task at a time instead (TaskText), and is the tree's: "tasks" is the last of the keys (they are
// sorted), so the head's text ends where the tasks begin, and a task's own text, indented two
// levels deeper, is what the whole tree's dump holds (tests/compiler/plan_test.cc).
void write_json(const Plan& plan, const std::function<void(std::string_view)>& sink,
                int64_t only_rank) {
  json h = head_json(plan);
  if (only_rank >= 0) h["rank"] = only_rank;
  std::string head = dump(h);
  head.resize(head.size() - 2);  // "\n}"
  Pieces text(sink);
  text.put(head);
  bool any = false;
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    if (only_rank >= 0 && plan.tasks[i].rank != only_rank) continue;
    text.put(any ? std::string_view(",\n") : ",\n  \"tasks\": [\n");
    any = true;
    text.spaces(4);
    TaskText(&text, 4).task(plan, i);
  }
  text.put(any ? std::string_view("\n  ]\n}\n") : ",\n  \"tasks\": []\n}\n");
  text.flush();
}

}  // namespace mkc::plan
