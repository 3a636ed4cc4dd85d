// The plan verifier: independent checks of what each pass must guarantee, run after every pass
// (compiler/passes/passes.cc) and by `mkc verify`. It recomputes its facts from the plan itself
// (boxes, views, waits, signals, CTA lists), never from the passes' own bookkeeping, so a pass that
// forgets an edge or puts a box in the wrong place is caught rather than trusted.
//
// After `lower` (Stage::kLowered):
//   - every view inside its buffer on a rank of the job; every box inside its buffer, with the
//     buffer's rank (number of dimensions), inside one of its task's views, and not empty;
//   - every task's arguments of its kind's length (templates/mkc/abi.h).
// After `dependencies` (kDependencies), also:
//   - every wait on an event of the waiting rank, with a count equal to the number of tasks that
//     signal that event (signal and wait counts match), lag 0 or 1;
//   - no cycle of lag-0 waits (a deadlock inside one launch).
// After `schedule` (kScheduled), also:
//   - every task in exactly one CTA list, of its rank, on a CTA of a role that runs its kind;
//   - no deadlock once the CTAs' program order joins the waits;
//   - ordering: for every pair of tasks whose boxes on one rank's buffer overlap and one of which
//     writes, the later in program order happens after the earlier (through CTA order and events):
//     read-after-write, write-after-read (slot reuse, in-place collectives) and write-after-write;
//     `scatter` writes of one operation are disjoint by construction and exempt among themselves;
//   - launches: a task touching another rank's memory happens after that rank's launch fence and
//     before that rank.s launch is over (a task of it waits for it), and an event signalled from
//     several ranks is signalled from other
//     ranks only after the fence (so a fast rank's next launch cannot be mistaken for this one).
// The ordering checks keep one vector clock per task over the job's CTAs; a plan too large for
// `max_clock_entries` skips them and says so in Report::skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/plan/plan.h"
#include "dsl/source.h"
#include "support/error.h"

namespace mkc::plan {

enum class Stage { kLowered, kDependencies, kScheduled };

struct VerifyOptions {
  // The .mks file, for `file:line:col` in findings (optional).
  const dsl::SourceFile* file = nullptr;
  // Vector-clock entries (tasks x CTAs of the job) the ordering checks may use.
  int64_t max_clock_entries = int64_t{1} << 26;
  // Findings reported before the verifier stops looking.
  int max_findings = 10;
};

struct Finding {
  // "box", "view", "args", "wait", "signal", "cta", "deadlock", "race", "launch".
  std::string kind;
  std::string message;
  int task = -1;   // the task it is about
  int other = -1;  // the other task of a race, or -1
};

struct Report {
  std::vector<Finding> findings;
  std::string skipped;  // non-empty: checks that were not run, and why
  bool ok() const { return findings.empty(); }
  // Every finding on its own line.
  std::string text() const;
};

Report verify(const Plan& plan, Stage stage, const VerifyOptions& options = {});

// The plan verifier failed: names the pass after which it ran, the stage's findings and the first
// one's kind (race, deadlock, ...). A bug of mkc's passes when it comes out of the compiler.
class VerifyError : public InternalError {
 public:
  VerifyError(std::string pass, Report report);
  const std::string& pass() const { return pass_; }
  const Report& report() const { return report_; }

 private:
  std::string pass_;
  Report report_;
};

// Runs verify() and throws VerifyError when it finds anything.
void verify_or_throw(const Plan& plan, Stage stage, const std::string& pass,
                     const VerifyOptions& options = {});

// Whether the compiler verifies after every pass: MKC_VERIFY=1 turns it on, MKC_VERIFY=0 off; by
// default it is on in builds without NDEBUG (tests) and off in optimised builds.
bool verify_by_default();

}  // namespace mkc::plan
