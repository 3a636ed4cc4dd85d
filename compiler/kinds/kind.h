// The task-kind registry: everything the compiler knows of one kind of task, in one place.
//
// A plan task (compiler/plan/plan.h) has a kind; the kind's `args` are the struct of the same name
// in templates/mkc/abi.h. Each kind is a `Kind` in its own file of this folder, which says:
//   - what the device code touches (boxes of its views), for the verifier's race check;
//   - how the CPU interpreter runs it;
//   - what it costs: a compute CTA's load for the scheduler, and the interpreter's work;
//   - its code generation: the class key (kind, element types, variant), the device code path
//     it takes, its launch needs (threads, shared memory), the call it emits, and the arguments
//     the device reads (with tensor maps filled in);
//   - whether it may write into another node's memory.
// The verifier, interpreter, scheduler and code generator look a kind up with `kind_of` instead of
// switching over kinds. docs/ADDING_A_KIND.md lists what a new kind adds.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/plan/plan.h"
#include "support/arch.h"

namespace mkc::kinds {

using plan::Box;
using plan::Plan;
using plan::Task;
using plan::TaskKind;
using plan::View;

// A region the device code of a task reads or writes, in its view's own coordinates; trailing
// dimensions left out are whole.
struct Touch {
  int view;
  std::vector<int64_t> lo, hi;
  bool write;
};

// Every rank's buffers as the CPU interpreter holds them (compiler/oracle/interpret.h): doubles,
// row-major.
struct Memory {
  const Plan& plan;
  std::vector<std::vector<std::vector<double>>>& data;  // [rank][buffer][element]
  // The schedule's device functions, by index (compiler::CheckedSchedule::device_fns).
  const std::vector<std::function<double(const std::vector<double>&)>>& fns;

  std::vector<double>& of(const View& v) const { return data[v.rank][v.buffer]; }
  double call(int64_t fn, const std::vector<double>& args) const { return fns[fn](args); }
};

// What code generation (compiler/codegen/codegen.cc) offers a kind while it writes the kernel's
// source.
class Source {
 public:
  virtual ~Source() = default;
  // Whether tiles whose operands allow it use the sm_90a TMA + wgmma templates.
  virtual bool tensor_cores() const = 0;
  // The NVRTC target (support/arch.h): which of a template's tiles runs, for path(); the source
  // a kind emits must not depend on it.
  virtual const std::string& arch() const = 0;
  virtual compiler::DType dtype(const Task& t, size_t view) const = 0;
  std::string type_of(const Task& t, size_t view) const;  // its CUDA element type
  // A device function as an epilogue functor type (`mkc::NoFn` for -1).
  virtual std::string fn_type(int64_t fn) const = 0;
  virtual const compiler::DeviceFunction& device_fn(int64_t fn) const = 0;
  // Whether t writes into another node's memory (its data then goes through the proxy).
  virtual bool writes_other_node(const Task& t) const = 0;
  // The index of the tensor map of view v in boxes of box_rows x box_cols (added once).
  virtual int tensor_map(const View& v, int box_rows, int box_cols) = 0;
  // An upper bound of the kernel's static shared memory: sync.cuh's own and, per kind in the
  // kernel, the most any of its tasks' device code declares (Kind::static_smem). Dynamic shared
  // memory a class adds must fit beside it (kHopperSmemPerCta).
  virtual int static_smem_bound() const = 0;
  virtual void line(const std::string& s) = 0;
};

// What a task class asks of the kernel's launch (0: nothing). The kernel takes the most of each.
struct Launch {
  int threads = 0;
  int dynamic_smem = 0;
  int portable_smem = 0;
  int cluster = 1;  // CTAs per cluster the kernel needs on Hopper (2: paired GEMM tiles)
  // The class leaves bulk (TMA) stores under way after its tasks: the kernel must complete them
  // before signals and at its end (MKC_BULK_STORES, templates/mkc/sync.cuh).
  bool bulk_stores = false;
};

// Shared memory one CTA may have on Hopper (227 KB), static and dynamic together.
constexpr int kHopperSmemPerCta = 232448;
// The static shared memory templates/mkc/sync.cuh declares in every kernel (TaskState, the
// proxy's claim), rounded up.
constexpr int kSyncStaticSmem = 256;

class Kind {
 public:
  explicit Kind(TaskKind id) : id_(id) {}
  virtual ~Kind() = default;
  TaskKind id() const { return id_; }
  const char* name() const { return plan::task_kind_name(id_); }
  bool is_comm() const { return plan::task_kind_is_comm(id_); }

  // Fences and launch ends: bookkeeping around a launch, no work and no CTA role of their own.
  virtual bool bookkeeping() const { return false; }
  // Whether the kernel runs device code for it (fences, launch ends and signals only wait and
  // signal).
  virtual bool has_body() const { return true; }
  // Bytes of static (__shared__) memory the task's device code declares, an upper bound: it counts
  // against the dynamic shared memory other classes of the kernel may ask for
  // (Source::static_smem_bound; codegen_test checks the bound against ptxas on every sample).
  virtual int static_smem(const Source&, const Task&) const { return 0; }
  // Moves of routed rows: the scheduler deals them to every CTA, whatever its role (whatever
  // comes after them waits for all of them).
  virtual bool runs_anywhere() const { return false; }
  // The argument words of a fixed-layout kind (its abi.h struct); 0 for kinds with ranges.
  virtual size_t fixed_args() const { return 0; }

  // What the device code touches, from the task's views and arguments alone.
  virtual std::vector<Touch> touches(const Task& t) const = 0;
  // Runs the task on the CPU.
  virtual void execute(const Memory& m, const Task& t) const = 0;

  // The load a compute task puts on its CTA, for kinds whose tasks differ in cost (the scheduler
  // gives each to the least loaded compute CTA); nullopt: tasks cost alike (round robin).
  virtual std::optional<int64_t> compute_load(const Task&) const { return std::nullopt; }
  // A task that runs as one half of a 2-CTA cluster pair: 0 or 1 (half 0's task index + 1 is
  // half 1's), else -1. The scheduler puts the halves at the same place of CTAs 2c and 2c + 1
  // (plan/schedule.cc, the pair rule), or, where it cannot, makes them tiles of their own
  // (unpair).
  virtual int pair_half(const Task&) const { return -1; }
  virtual void unpair(Task&) const {}
  // The interpreter's element operations for one run of t, given the elements its boxes touch.
  virtual double interpreter_work(const Task&, double touched) const { return touched; }

  // Code generation. The class key: kind, key_tag, the views' element types, key_variant.
  virtual std::string key_tag(const Source&, const Task&) const { return ""; }
  virtual std::string key_variant(const Source&, const Task&) const { return ""; }
  // Which device code a class runs, for the compile summary.
  virtual std::string path(const Source&, const Task&) const { return name(); }
  virtual Launch launch(const Source&, const Task&) const { return {}; }
  // The body of the class's device function (`a`, `v`, `args`, `nargs`, `next_args`, `next_v`
  // and `kBuffers`, `kRanks` are in scope).
  virtual void emit(Source& s, const Task& t) const;
  // Whether the class's tasks run as chains: a run of them back to back in a CTA's list (none but
  // the first waiting for anything, none but the last signalling) in one call, without the CTA
  // meeting between them. Its chain function's body is then emit_chain's, and emit's is unused.
  virtual bool chains(const Source&, const Task&) const { return false; }
  // The body of the class's chain function (`a`, `tasks`, `views`, `args`, `list`, `n`,
  // `next_args`, `next_v` and `kBuffers`, `kRanks` in scope: the tasks list[0] .. list[n - 1],
  // their records at tasks[list[i]]).
  virtual void emit_chain(Source& s, const Task& t) const;
  // The argument words the device reads, from t.args (tensor maps filled in).
  virtual std::vector<int64_t> device_args(Source&, const Task& t) const { return t.args; }
  // Whether t may write box b of another node (the proxy carries it); why not, for the error.
  virtual bool may_write_other_node(const Task&, const Box&) const { return false; }
  virtual std::string why_not_other_node() const {
    return "mkc's kernels move data between nodes only by sends and the MoE all-to-all and "
           "combine";
  }

 private:
  TaskKind id_;
};

// The kind of every TaskKind.
const Kind& kind_of(TaskKind k);
inline const Kind& kind_of(const Task& t) {
  return kind_of(t.kind);
}

// The class key of a task (code generation: one device function per key).
std::string class_key(const Source& s, const Task& t);

}  // namespace mkc::kinds
