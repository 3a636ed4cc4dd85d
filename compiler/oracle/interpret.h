// The CPU reference interpreter: executes a plan for R simulated ranks, honouring every event.
//
// Each rank runs its CTAs' task lists in order; a task starts only when its waits are met
// (counter >= (launch - lag) * count). Ranks launch independently: rank r starts launch e + 1 as
// soon as all its CTAs finished launch e, whatever its peers are doing, which is how a real GPU
// job skews; the CTA that runs next is drawn at random (seeded), so different seeds explore
// different interleavings. If no CTA of any rank can run while work remains, that is a deadlock,
// reported with every waiting task, its event, the expected and the seen counts.
//
// Data are doubles (inputs drawn at random per launch and rank). Output and scratch buffers are
// poisoned with NaN before each launch, so an element no task writes stays NaN. Device functions
// (GEMM epilogues, map) run through host implementations the caller supplies by name.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compiler/plan/plan.h"

namespace mkc::plan {

using HostFn = std::function<double(const std::vector<double>&)>;
using HostFns = std::map<std::string, HostFn>;

// One rank's buffers: buffer index -> elements (row-major).
using RankData = std::vector<std::vector<double>>;

// Fills the input tensors of one rank for one launch: buffer index -> values. Routing tables get
// valid expert ids.
using InputFn = std::function<void(int rank, int launch, RankData& data)>;

struct InterpretOptions {
  int launches = 2;
  uint64_t seed = 1;
  HostFns fns;
  InputFn inputs;  // required
};

struct InterpretResult {
  // outputs[launch][rank]: every buffer of the rank as it stood when the rank finished the launch.
  std::vector<std::vector<RankData>> snapshots;
  int64_t tasks_run = 0;
  // Messages the proxies carried between nodes, and how many of them landed after a later
  // step of their sender's rank had run (delivered late, not at once).
  int64_t proxy_messages = 0, proxy_late = 0;
};

// Runs the plan; throws UserError on a deadlock (naming the waits) and on a missing host function.
InterpretResult interpret(const Plan& plan, const InterpretOptions& options);

// How random routing tables choose each token's experts (always distinct within a token when
// k <= experts): uniformly; skewed toward two hot experts (most rows go to experts 0 and 1); or
// leaving the upper half of the experts empty.
enum class Routing { kUniform, kSkewed, kEmptyExperts };

// Input generator used by tests, `mkc verify` and `mkc run --check`: uniform [-1, 1) for floats,
// each token's k distinct expert ids for alltoall routing tables (by `routing`), small integers
// otherwise; deterministic in (seed, launch, rank, buffer), whatever the threads.
InputFn random_inputs(const Plan& plan, uint64_t seed, Routing routing = Routing::kUniform);

}  // namespace mkc::plan
