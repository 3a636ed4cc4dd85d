// rt::LocalJob's errors: after a launch, each local rank's error record (host memory the device
// writes) is read; a set flag becomes a LaunchError naming where the launch stopped.
#include "runtime/local_job_errors.h"

#include <fmt/format.h>

#include <cstring>

#include "runtime/local_job.h"
#include "runtime/local_job_internal.h"

namespace mkc::rt {

std::string launch_error_message(const abi::ErrorRecord& e, const plan::Plan& plan,
                                 const dsl::SourceFile* file, uint64_t epoch, uint64_t timeout_ns) {
  std::string where;  // the .mks line, where known
  std::string task = fmt::format("task {}", e.task), event = fmt::format("event {}", e.event);
  // A wait names its counter by slot on its own rank (plan::Event).
  const int ev = e.flag == abi::kWaitTimeout ? plan.event_at(e.rank, e.event) : -1;
  auto op_line = [&](int op) -> std::string {
    if (op < 0 || file == nullptr || plan.source == nullptr ||
        op >= static_cast<int>(plan.source->ops.size()) || !plan.source->ops[op].decl)
      return "";
    const dsl::LineCol lc = file->line_col(plan.source->ops[op].decl->span.begin);
    return fmt::format("{}:{}:{}", file->path(), lc.line, lc.col);
  };
  if (e.task >= 0 && e.task < static_cast<int>(plan.tasks.size())) {
    const plan::Task& t = plan.tasks[e.task];
    task = t.label;
    where = op_line(t.op);
    // A task of no operation (the launch's end) is named by the edge it waited for: the
    // operation of the event's producer.
    for (size_t p = 0; where.empty() && p < plan.tasks.size(); ++p) {
      for (const plan::Signal& s : plan.tasks[p].signals) {
        if (s.event != ev) continue;
        const std::string at = op_line(plan.tasks[p].op);
        if (!at.empty()) where = fmt::format("the edge of {} at {}", plan.tasks[p].label, at);
        break;
      }
    }
  }
  if (ev >= 0) event = plan.events[ev].name;
  if (e.flag == abi::kPipelineTimeout) {
    return fmt::format(
        "launch {} failed on rank {}: task {} (from {}) waited {:.1f} s inside the task for its "
        "shared-memory pipeline (mbarrier of stage {}, phase {}): a TMA copy or a warpgroup of "
        "the tile never arrived; this is a bug in mkc's device code or a fault of the GPU, "
        "please report it with the schedule",
        epoch, e.rank, task, where.empty() ? std::string("?") : where, timeout_ns / 1e9, e.event,
        e.expected);
  }
  if (e.flag == abi::kProxyTimeout) {
    return fmt::format(
        "launch {} timed out on rank {}: task {} (from {}) waited {:.1f} s for its proxy to take "
        "request {} of its ring (the proxy has taken {}): the ring stayed full, or the proxy "
        "stopped (its error, if any, follows)",
        epoch, e.rank, task, where.empty() ? std::string("?") : where, timeout_ns / 1e9, e.expected,
        e.seen);
  }
  return fmt::format(
      "launch {} timed out on rank {}: task {} (from {}) waited {:.1f} s for event {} to reach "
      "{}, seen {}; "
      "a peer did not launch, or failed",
      epoch, e.rank, task, where.empty() ? std::string("?") : where, timeout_ns / 1e9, event,
      e.expected, e.seen);
}

void LocalJob::raise_errors(const std::vector<int>& which) {
  for (int r : which) {
    abi::ErrorRecord e = *ranks_[r]->error;
    if (e.flag == 0) continue;
    std::memset(ranks_[r]->error, 0, sizeof(abi::ErrorRecord));
    // A kernel of one rank numbers its tasks from 0 (Generated::task_ids): the plan's numbering.
    if (!task_ids_.empty() && e.task >= 0)
      e.task = e.task < static_cast<int>(task_ids_.size()) ? task_ids_[e.task] : -1;
    // A proxy that failed (a peer gone, a bad request) is usually why: say so.
    throw LaunchError(launch_error_message(e, plan_, opts_.file.get(), epoch_, opts_.timeout_ns) +
                      proxy_errors());
  }
}

}  // namespace mkc::rt
