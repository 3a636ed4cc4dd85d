// The plan: what a checked schedule becomes before code generation. Plain values, dumpable as JSON
// (`mkc compile --emit=plan`), executed on the CPU by compiler/oracle/interpret.h and turned into
// one persistent kernel by code generation.
//
// The plan is rank-specific: every task belongs to one rank and names concrete regions of concrete
// buffers, so a task's pointers and its wait targets are constants. Dependencies are events:
// counters that live in the memory of the rank that waits on them (producers push; consumers spin
// on local memory). Counters only grow. A wait names a per-launch count and a lag: in launch e (e =
// 1, 2, ...) it waits until the counter reaches (e - lag) * count, so nothing is reset between
// launches and a late write from launch e - 1 cannot be mistaken for launch e.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "compiler/sema/program.h"
#include "templates/mkc/abi.h"

namespace mkc::plan {

// How a signal reaches the waiting task (DESIGN.md "hand-off kinds").
enum class HandOff {
  kLocal,     // same GPU: release/acquire counter in global memory
  kPeerFlag,  // another GPU of the node: release atomic into the peer's memory over NVLink
  kProxy,     // another node: the host proxy's RDMA write + remote counter update
};
const char* handoff_name(HandOff h);

// A buffer: one per tensor, plus the compiler's scratch (receive slots, attention state).
struct Buffer {
  std::string name;
  compiler::DType dtype = compiler::DType::kF32;
  std::vector<int64_t> shape;
  bool symmetric = false;
  std::string origin;  // "input", "output", "scratch" or "compiler"
  int tensor = -1;     // index into CheckedSchedule::tensors, -1 for compiler scratch
  // Zero when the job is loaded and never poisoned: counters that only grow (split-K's tickets,
  // templates/mkc/split_k.cuh), like the events'.
  bool zeroed = false;
  int64_t elements() const;
};

// A box [lo, hi) over every dimension of a buffer on one rank. `scatter` marks a write whose
// elements are data-dependent (MoE dispatch rows placed by the routing table): the box bounds
// where it may write, and the tasks of one operation scatter into disjoint elements by
// construction, so the verifier orders them against other operations only.
struct Box {
  int rank = 0;
  int buffer = -1;
  std::vector<int64_t> lo, hi;
  bool scatter = false;
  bool overlaps(const Box& o) const;
  int64_t elements() const;
};

// A counter on one rank. `slot` is its place in its rank's counter array, the number the kernel's
// waits and signals carry: a rank's counters are numbered in the order that rank's consumers create
// them, those a peer signals first, then those only the rank's own tasks signal
// (plan::derive_dependencies), so a rank's numbering follows from its own consumers and their
// producers, not from the world, and the slots its peers signal not from its private compute
// (docs/COMPILER.md, "Per-rank planning"); each rank's array holds its own counters only.
struct Event {
  int rank = 0;
  std::string name;
  int slot = 0;
};

struct Wait {
  int event = -1;
  int64_t count = 0;  // signals per launch
  int lag = 0;        // 0: this launch's signals; 1: the previous launch's (credits, fences)
};

struct Signal {
  int event = -1;  // the event (its rank is where the counter lives)
  HandOff handoff = HandOff::kLocal;
};

// X(Enumerator, "name", is_comm): what a task does. Each kind's `args` are the struct of the same
// name in templates/mkc/abi.h (the one definition the lowering, the interpreter, the code
// generator and the device code share). Everything else the compiler knows of a kind is in its
// file under compiler/kinds/ (kind.h; docs/ADDING_A_KIND.md).
#define MKC_TASK_KINDS(X)                         \
  X(kLaunchFence, "launch_fence", true)           \
  X(kLaunchEnd, "launch_end", true)               \
  X(kGemmTile, "gemm_tile", false)                \
  X(kGroupedGemmTile, "grouped_gemm_tile", false) \
  X(kMapTile, "map_tile", false)                  \
  X(kReduceTile, "reduce_tile", false)            \
  X(kAttentionTile, "attention_tile", false)      \
  X(kCopy, "copy", false)                         \
  X(kSend, "send", true)                          \
  X(kReduceSlots, "reduce_slots", true)           \
  X(kSignalOnly, "signal", true)                  \
  X(kA2aCounts, "a2a_counts", true)               \
  X(kA2aSend, "a2a_send", true)                   \
  X(kA2aFinish, "a2a_finish", true)               \
  X(kCombineSend, "combine_send", true)           \
  X(kCombineReduce, "combine_reduce", true)

enum class TaskKind {
#define MKC_TASK_ENUM(e, name, is_comm) e,
  MKC_TASK_KINDS(MKC_TASK_ENUM)
#undef MKC_TASK_ENUM
};
const char* task_kind_name(TaskKind k);
bool task_kind_is_comm(TaskKind k);

// A region of a buffer that a task addresses: a contiguous sub-tensor (the buffer at a flat element
// offset, viewed with `shape`) on `rank`.
struct View {
  int rank = 0;
  int buffer = -1;
  int64_t offset = 0;
  std::vector<int64_t> shape;
};

struct Task {
  int op = -1;  // the operation instance (CheckedSchedule::ops) it comes from; -1 for fences
  int rank = 0;
  TaskKind kind = TaskKind::kCopy;
  std::string label;          // "mm.tile(3, 5)"
  std::vector<View> views;    // operands, in the kind's order
  std::vector<int64_t> args;  // kind-specific integers
  std::vector<Box> reads;     // for dependencies and the interpreter's checks
  std::vector<Box> writes;
  std::vector<Wait> waits;
  std::vector<Signal> signals;
  int cta = -1;    // scheduling: the CTA that runs it
  int order = -1;  // position in a global topological order
  // Scheduling hint: the tasks of one operation with one group (a collective's chunk) run on the
  // same CTA index on every rank, so the ranks' CTAs move through their chunks in step. -1: none.
  int64_t group = -1;
};

// A task's arguments as its kind's struct (templates/mkc/abi.h), and back.
template <typename A>
std::vector<int64_t> args_words(const A& a) {
  static_assert(std::is_trivially_copyable_v<A> && sizeof(A) % 8 == 0, "64-bit fields only");
  std::vector<int64_t> w(sizeof(A) / 8);
  std::memcpy(w.data(), &a, sizeof(A));
  return w;
}
template <typename A>
void set_args(Task& t, const A& a) {
  t.args = args_words(a);
}
// The range at t.args[*pos] (abi.h "ranges"); advances *pos. int64_t and abi::i64 are both 64-bit
// integers, of different C++ types.
inline abi::Range read_range(const Task& t, int* pos) {
  static_assert(sizeof(int64_t) == sizeof(abi::i64), "64-bit arguments");
  return abi::read_range(reinterpret_cast<const abi::i64*>(t.args.data()), pos);
}
template <typename A>
A args_as(const Task& t) {
  static_assert(std::is_trivially_copyable_v<A> && sizeof(A) % 8 == 0, "64-bit fields only");
  A a{};
  std::memcpy(&a, t.args.data(), std::min(sizeof(A), t.args.size() * 8));
  return a;
}

struct Role {
  std::string name;
  int first_cta = 0;
  int count = 0;
};

// Where a collective's algorithm came from and why: visible in the plan.
struct Decision {
  std::string op;
  std::string choice;
  std::string reason;
};

struct Plan {
  std::string schedule;
  int64_t ranks = 1;
  // Every L consecutive ranks are one node. The lowering sets it from the checked schedule (the
  // check settles it, in [1, ranks]); 0 only in a plan built by hand: one node.
  int64_t ranks_per_node = 0;
  std::vector<Buffer> buffers;
  std::vector<Event> events;
  std::vector<Task> tasks;
  std::vector<Role> roles;                               // the same on every rank
  std::vector<std::vector<std::vector<int>>> cta_tasks;  // [rank][cta] -> task ids in order
  std::vector<Decision> decisions;
  const compiler::CheckedSchedule* source = nullptr;
  // Ranks whose tasks were lowered (LowerOptions::ranks), by rank; empty: every rank's. A plan of
  // some ranks is exact for the ranks whose neighbours' neighbours are all in it
  // (tests/compiler/rank_plan_test.cc); checks about the others' memory are left to theirs.
  std::vector<char> lowered;
  bool has_tasks_of(int64_t rank) const { return lowered.empty() || lowered[rank]; }

  // Ranks per node (the world size on one node).
  int64_t per_node() const { return ranks_per_node > 0 ? ranks_per_node : ranks; }
  int node_of(int64_t rank) const { return static_cast<int>(rank / per_node()); }
  // Whether an edge from rank a to rank b crosses nodes (the proxy carries it).
  bool crosses_node(int64_t a, int64_t b) const { return node_of(a) != node_of(b); }
  // Whether task t writes into the memory of a rank on another node.
  bool writes_other_node(const Task& t) const {
    for (const Box& b : t.writes)
      if (crosses_node(t.rank, b.rank)) return true;
    return false;
  }
  // Whether any edge crosses nodes: a write into another node, or a signal through the proxy.
  bool has_edges_between_nodes() const {
    for (const Task& t : tasks) {
      if (writes_other_node(t)) return true;
      for (const Signal& s : t.signals)
        if (s.handoff == HandOff::kProxy) return true;
    }
    return false;
  }
  int add_event(int rank, std::string name) {
    if (static_cast<size_t>(rank) >= counters.size()) counters.resize(rank + 1, 0);
    events.push_back(Event{rank, std::move(name), counters[rank]++});
    return static_cast<int>(events.size()) - 1;
  }
  // Counters on `rank` (its events' slots are 0 .. this - 1).
  int counters_of(int64_t rank) const {
    return static_cast<size_t>(rank) < counters.size() ? counters[rank] : 0;
  }
  // The most counters any rank has: the length of every rank's counter array.
  int max_counters() const {
    int n = 0;
    for (int c : counters) n = std::max(n, c);
    return n;
  }
  // The event of `rank`'s counter `slot`, or -1 (an error record names a slot).
  int event_at(int64_t rank, int slot) const {
    for (size_t e = 0; e < events.size(); ++e)
      if (events[e].rank == rank && events[e].slot == slot) return static_cast<int>(e);
    return -1;
  }
  std::vector<int> counters;  // [rank]: counters created on it (add_event keeps it)
};

// One line: tasks, events, waits, buffers, roles (MKC_DUMP_PASSES, the compile summary).
std::string summary(const Plan& plan);

// The plan as JSON (`mkc compile --emit=plan`): buffers, roles, decisions, tasks with their read
// and write boxes, waits and signals, and the CTA each runs on.
nlohmann::json to_json(const Plan& plan);
// The same text as dsl::dump_json(to_json(plan)) followed by a newline, handed to `sink` in pieces
// of about a megabyte, without building the tree (a plan's JSON runs to hundreds of megabytes).
// With `only_rank` >= 0 (a rank's plan, `mkc compile --rank`): that rank's tasks alone, and
// "rank": only_rank beside the head's keys; the peers' tasks lowered for their edges with it
// (Plan::lowered) are left out (gemm_allreduce at 64 ranks: 98% of the tasks). The head's
// "summary" still counts every task planned, the peers' too.
void write_json(const Plan& plan, const std::function<void(std::string_view)>& sink,
                int64_t only_rank = -1);

}  // namespace mkc::plan
