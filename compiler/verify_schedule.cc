#include "compiler/verify_schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "compiler/kinds/kind.h"
#include "compiler/oracle/clang_eval.h"
#include "compiler/oracle/reference.h"
#include "compiler/oracle/verifier.h"
#include "compiler/passes/passes.h"
#include "dsl/diagnostics.h"
#include "dsl/parser.h"
#include "support/error.h"

namespace mkc::compiler {
namespace {

std::vector<std::string> device_fn_names(const CheckedSchedule& s) {
  std::vector<std::string> out;
  for (const DeviceFunction& f : s.device_fns) out.push_back("`" + f.name + "`");
  return out;
}

using plan::Plan;
using plan::Task;

std::string op_place(const dsl::SourceFile& file, const Plan& p, int op) {
  if (op < 0 || !p.source || !p.source->ops[op].decl) return "";
  const dsl::LineCol lc = file.line_col(p.source->ops[op].decl->span.begin);
  return fmt::format(" ({}:{}:{})", file.path(), lc.line, lc.col);
}

// A rough count of the element operations one launch costs the interpreter.
double interpreter_work(const Plan& p) {
  double work = 0;
  for (const Task& t : p.tasks) {
    double touched = 0;
    for (const std::vector<plan::Box>* boxes : {&t.reads, &t.writes}) {
      for (const plan::Box& b : *boxes) touched += static_cast<double>(b.elements());
    }
    work += kinds::kind_of(t).interpreter_work(t, touched);
  }
  return work;
}

// The bytes the interpreter and the reference hold for a plan: every buffer of every rank as
// doubles, in the interpreter and again in the reference, and each launch's snapshot of the user
// tensors. `largest` is the buffer of the most elements.
double interpreter_bytes(const Plan& p, int launches, int* largest) {
  double all = 0, user = 0;
  *largest = -1;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    double n = 1;  // in double: a shape the check allowed may still overflow 64 bits here
    for (int64_t d : p.buffers[b].shape) n *= static_cast<double>(d);
    all += n;
    if (p.buffers[b].tensor >= 0) user += n;
    if (*largest < 0 || n > static_cast<double>(p.buffers[*largest].elements())) {
      *largest = static_cast<int>(b);
    }
  }
  return 8.0 * static_cast<double>(p.ranks) * (2 * all + launches * user);
}

// The tasks whose write boxes hold element `flat` of buffer b on rank r, for a wrong output.
std::string writers_of(const dsl::SourceFile& file, const Plan& p, int r, int b, int64_t flat) {
  const std::vector<int64_t>& shape = p.buffers[b].shape;
  std::vector<int64_t> at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    at[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::string out;
  int shown = 0;
  for (const Task& t : p.tasks) {
    for (const plan::Box& box : t.writes) {
      if (box.rank != r || box.buffer != b) continue;
      bool inside = true;
      for (size_t d = 0; d < at.size(); ++d)
        inside = inside && box.lo[d] <= at[d] && at[d] < box.hi[d];
      if (!inside) continue;
      if (shown++ < 4)
        out += fmt::format("{}`{}` on rank {}{}{}", out.empty() ? "" : ", ", t.label, t.rank,
                           op_place(file, p, t.op), box.scatter ? " (data-dependent rows)" : "");
      break;
    }
  }
  if (shown > 4) out += fmt::format(" and {} more", shown - 4);
  return out.empty() ? "no task writes it" : "written by " + out;
}

std::string coords(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    at[d] = flat % shape[d];
    flat /= shape[d];
  }
  return fmt::format("[{}]", fmt::join(at, ", "));
}

class Run {
 public:
  Run(std::shared_ptr<const dsl::SourceFile> file, const VerifyScheduleOptions& o)
      : file_(std::move(file)), o_(o) {}

  VerifyScheduleResult result;

  // One checked schedule (one world size); false after a finding.
  bool schedule(const CheckedSchedule& s) {
    const auto start = std::chrono::steady_clock::now();
    const bool nodes = s.ranks_per_node > 0 && s.ranks_per_node < s.ranks;
    const std::string what = fmt::format(
        "{}: schedule `{}` at {} rank{}{}", file_->path(), s.name, s.ranks, s.ranks == 1 ? "" : "s",
        nodes ? fmt::format(" ({} nodes of {}, edges between them through the proxy)",
                            s.ranks / s.ranks_per_node, s.ranks_per_node)
              : "");
    plan::PassOptions po;
    po.sms = sms_;
    po.verify = true;
    po.file = file_.get();
    Plan p;
    try {
      p = plan::build_plan(s, po);
    } catch (const plan::VerifyError& e) {
      const plan::Finding& f = e.report().findings.front();
      fail(fmt::format("{}: the plan has a {} ({}, after pass `{}`):\n{}", what,
                       f.kind == "race"       ? "race"
                       : f.kind == "deadlock" ? "deadlock"
                                              : "defect",
                       f.kind, e.pass(), e.report().text()));
      return false;
    } catch (const UserError& e) {
      fail(fmt::format("{}: {}\n", what, e.what()));
      return false;
    }
    if (o_.emit_plan) plans_.push_back(plan::to_json(p));
    const plan::Report checks = plan::verify(p, plan::Stage::kScheduled, {file_.get()});
    std::string note = checks.skipped.empty() ? "" : "; " + checks.skipped;
    size_t waits = 0;
    for (const Task& t : p.tasks) waits += t.waits.size();
    const double work = interpreter_work(p);
    if (work > o_.max_work) {
      fail(fmt::format(
          "{}: the plan verified ({} tasks, {} events, {} waits{}), but the CPU interpreter was "
          "not run: one launch is about {:.2g} element operations, over its limit of {:.2g}; "
          "verify at smaller shapes (-D), where the same plan structure is cheap to execute\n",
          what, p.tasks.size(), p.events.size(), waits, note, work, o_.max_work));
      return false;
    }
    int largest = -1;
    const double bytes = interpreter_bytes(p, o_.launches, &largest);
    if (bytes > o_.max_bytes) {
      const plan::Buffer& big = p.buffers[largest];
      std::string where;
      if (big.tensor >= 0) {
        const dsl::LineCol lc = file_->line_col(s.tensors[big.tensor].span.begin);
        where = fmt::format(", declared at {}:{}:{}", file_->path(), lc.line, lc.col);
      }
      fail(fmt::format(
          "{}: the plan verified ({} tasks, {} events, {} waits{}), but the CPU interpreter was "
          "not run: it would hold about {:.3g} GB of buffers, over its limit of {:.3g} GB (the "
          "largest, `{}`, has {} elements on each of the {} ranks{}); verify at smaller shapes "
          "(-D), or give unused tensors fewer elements\n",
          what, p.tasks.size(), p.events.size(), waits, note, bytes / 1e9, o_.max_bytes / 1e9,
          big.name, static_cast<double>(big.elements()), p.ranks, where));
      return false;
    }
    // The functions as written, compiled for the CPU, where the checker held them to the contract
    // with Clang; else the stand-in.
    plan::HostFns fns;
    std::string stand_in_why = "the check did not parse them with Clang";
    if (clang_device_fns_ && !s.device_fns.empty()) {
      plan::ClangFunctions compiled = plan::clang_device_functions(s);
      fns = std::move(compiled.fns);
      stand_in_why = std::move(compiled.why);
    }
    const bool as_written = !fns.empty();
    if (!as_written) {
      for (const DeviceFunction& f : s.device_fns) fns[f.name] = stand_in_function(f.params.size());
    }

    for (int k = 0; k < o_.interleavings; ++k) {
      plan::InterpretOptions io;
      io.launches = o_.launches;
      io.seed = o_.seed + static_cast<uint64_t>(k);
      io.fns = fns;
      io.inputs = plan::random_inputs(p, o_.seed + 1000003u * static_cast<uint64_t>(k));
      plan::InterpretResult res;
      try {
        res = plan::interpret(p, io);
      } catch (const UserError& e) {
        fail(fmt::format("{}: interleaving {} (seed {}): {}\n", what, k + 1, io.seed, e.what()));
        return false;
      }
      if (!compare(s, p, io, res, what, k)) return false;
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    result.output += fmt::format(
        "{}: verified: plan of {} tasks, {} events, {} waits checked after every pass{}; {} "
        "interleaving{} x {} launches match the reference ({:.0f} ms)\n",
        what, p.tasks.size(), p.events.size(), waits, note, o_.interleavings,
        o_.interleavings == 1 ? "" : "s", o_.launches, ms);
    if (!s.device_fns.empty() && as_written) {
      result.output +=
          fmt::format("  (device functions run on the CPU as written, compiled by Clang: {})\n",
                      fmt::join(device_fn_names(s), ", "));
    } else if (!s.device_fns.empty()) {
      result.output += fmt::format(
          "  (device functions run as a stand-in on the CPU: the data flow is checked, not their "
          "bodies; {})\n",
          stand_in_why);
    }
    return true;
  }

  void fail(std::string msg) {
    result.errors += msg;
    result.exit_code = kExitUserError;
  }

  int64_t sms_ = 132;
  bool clang_device_fns_ = false;  // the checker held device functions to the contract with Clang
  nlohmann::json plans_ = nlohmann::json::array();

 private:
  // Every launch's every user tensor on every rank against the reference on the same inputs.
  bool compare(const CheckedSchedule& s, const Plan& p, const plan::InterpretOptions& io,
               const plan::InterpretResult& res, const std::string& what, int k) {
    for (int launch = 1; launch <= io.launches; ++launch) {
      std::vector<std::vector<std::vector<double>>> ref(p.ranks);
      for (int64_t r = 0; r < p.ranks; ++r) {
        plan::RankData in(p.buffers.size());
        for (size_t b = 0; b < p.buffers.size(); ++b)
          in[b].assign(p.buffers[b].elements(), std::numeric_limits<double>::quiet_NaN());
        io.inputs(static_cast<int>(r), launch, in);
        in.resize(s.tensors.size());
        ref[r] = std::move(in);
      }
      plan::reference(s, io.fns, ref);
      for (int64_t r = 0; r < p.ranks; ++r) {
        for (size_t t = 0; t < s.tensors.size(); ++t) {
          const std::vector<double>& got = res.snapshots[launch - 1][r][t];
          const std::vector<double>& want = ref[r][t];
          double num = 0, den = 0, worst = -1;
          int64_t at = -1, unwritten = 0, first_unwritten = -1;
          for (size_t e = 0; e < want.size(); ++e) {
            if (std::isnan(want[e])) continue;
            if (std::isnan(got[e])) {
              if (unwritten++ == 0) first_unwritten = static_cast<int64_t>(e);
              continue;
            }
            const double d = std::abs(got[e] - want[e]);
            num += d * d;
            den += want[e] * want[e];
            if (d > worst) {
              worst = d;
              at = static_cast<int64_t>(e);
            }
          }
          const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
          if (unwritten == 0 && rel <= 1e-9) continue;
          const int64_t e = unwritten ? first_unwritten : at;
          fail(fmt::format(
              "{}: wrong output in interleaving {} (seed {}), launch {}: tensor `{}` on rank {}: "
              "{}; element {}: expected {:.6g}, got {:.6g}; {}\n",
              what, k + 1, io.seed, launch, s.tensors[t].name, r,
              unwritten ? fmt::format("{} element(s) never written", unwritten)
                        : fmt::format("relative error {:.3g}", rel),
              coords(s.tensors[t].shape, e), want[e], got[e],
              writers_of(*file_, p, static_cast<int>(r), static_cast<int>(t), e)));
          return false;
        }
      }
    }
    return true;
  }

  std::shared_ptr<const dsl::SourceFile> file_;
  const VerifyScheduleOptions& o_;
};

}  // namespace

plan::HostFn stand_in_function(size_t arity) {
  return [arity](const std::vector<double>& a) {
    double sum = 0, mix = 0;
    for (size_t i = 0; i < arity && i < a.size(); ++i) {
      sum += a[i] * static_cast<double>(i + 1);
      mix += std::sin(a[i] + 0.5 * static_cast<double>(i));
    }
    return 0.75 * sum + 0.25 * mix;
  };
}

VerifyScheduleResult verify_schedule(std::shared_ptr<const dsl::SourceFile> file,
                                     const CheckOptions& check,
                                     const VerifyScheduleOptions& options) {
  Run run(file, options);
  run.sms_ = check.sms;
  run.clang_device_fns_ = check.clang_device_fns;
  dsl::Diagnostics diags;
  const dsl::Module module = dsl::parse(file, diags);
  std::vector<CheckedSchedule> checked;
  if (!diags.has_errors()) checked = compiler::check(module, check, diags);
  run.result.errors += dsl::render_text(diags.all(), options.color);
  if (diags.has_errors()) {
    run.result.exit_code = kExitUserError;
    return std::move(run.result);
  }
  for (const CheckedSchedule& s : checked) run.schedule(s);
  if (options.emit_plan) run.result.plans = run.plans_.dump(1) + "\n";
  return std::move(run.result);
}

}  // namespace mkc::compiler
