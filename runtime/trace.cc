#include "runtime/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>

#include "dsl/ast_json.h"
#include "support/error.h"

namespace mkc::rt {

int write_chrome_trace(const std::string& path, const plan::Plan& plan,
                       const std::vector<std::vector<uint64_t>>& per_rank) {
  uint64_t t0 = std::numeric_limits<uint64_t>::max();
  for (const auto& tr : per_rank) {
    for (size_t i = 0; i + 1 < tr.size(); i += 2) {
      if (tr[i] != 0) t0 = std::min(t0, tr[i]);
    }
  }
  std::string out = "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n";
  int events = 0;
  const auto role_of = [&](int cta) {
    for (const plan::Role& r : plan.roles) {
      if (cta >= r.first_cta && cta < r.first_cta + r.count) return r.name;
    }
    return std::string("cta");
  };
  for (size_t r = 0; r < per_rank.size(); ++r) {
    out += fmt::format(
        "{{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": {0}, \"args\": {{\"name\": \"rank "
        "{0}\"}}}},\n",
        r);
    const int ctas = plan.cta_tasks.empty() ? 0 : static_cast<int>(plan.cta_tasks[r].size());
    for (int c = 0; c < ctas; ++c) {
      out += fmt::format(
          "{{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": {}, \"tid\": {}, \"args\": "
          "{{\"name\": \"CTA {} ({})\"}}}},\n",
          r, c, c, role_of(c));
    }
    const std::vector<uint64_t>& tr = per_rank[r];
    for (size_t t = 0; t < plan.tasks.size() && 2 * t + 1 < tr.size(); ++t) {
      const plan::Task& task = plan.tasks[t];
      if (task.rank != static_cast<int>(r) || tr[2 * t] == 0) continue;
      const uint64_t end = std::max(tr[2 * t + 1], tr[2 * t]);
      out += fmt::format(
          "{{\"ph\": \"X\", \"name\": {}, \"cat\": \"{}\", \"pid\": {}, \"tid\": {}, \"ts\": "
          "{:.3f}, \"dur\": {:.3f}}},\n",
          dsl::dump_json(nlohmann::json(task.label), -1), plan::task_kind_name(task.kind), r,
          task.cta, (tr[2 * t] - t0) / 1e3, (end - tr[2 * t]) / 1e3);
      ++events;
    }
  }
  if (out.size() >= 2 && out[out.size() - 2] == ',') out.erase(out.size() - 2, 1);
  out += "]}\n";
  std::ofstream f(path, std::ios::binary);
  f << out;
  f.flush();
  if (!f) throw EnvironmentError(fmt::format("cannot write the trace `{}`", path));
  return events;
}

int traced_launch(LocalJob& job, const plan::Plan& plan, const std::string& path) {
  job.set_trace(true);
  job.launch();
  std::vector<std::vector<uint64_t>> per_rank(job.ranks());
  for (int r : job.local_ranks()) per_rank[r] = job.trace(r);
  job.set_trace(false);
  if (Rendezvous* group = job.group()) {
    // One process per rank: rank 0 collects every rank's times (one %globaltimer per node).
    const std::vector<uint64_t>& mine = per_rank[group->world().rank];
    const std::vector<std::string> all = group->all_gather(
        std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(uint64_t)));
    for (size_t r = 0; r < all.size(); ++r) {
      per_rank[r].resize(all[r].size() / sizeof(uint64_t));
      std::memcpy(per_rank[r].data(), all[r].data(), per_rank[r].size() * sizeof(uint64_t));
    }
    if (group->world().rank != 0) {
      int events = 0;
      for (const std::vector<uint64_t>& tr : per_rank) {
        for (size_t t = 0; 2 * t < tr.size(); ++t) events += tr[2 * t] != 0;
      }
      return events;
    }
  }
  return write_chrome_trace(path, plan, per_rank);
}

}  // namespace mkc::rt
