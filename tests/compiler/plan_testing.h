// Helpers of the compiler's plan tests: compile a schedule for one world size, and run a plan on
// the CPU interpreter against the direct reference (every rank, every launch, every tensor).
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/oracle/interpret.h"
#include "compiler/oracle/reference.h"
#include "compiler/passes/passes.h"
#include "compiler/sema/check.h"
#include "dsl/parser.h"

namespace mkc::plan::testing {

// The index of the schedule's tensor `name` (fails the test when there is none).
inline int tensor_index(const compiler::CheckedSchedule& s, const std::string& name) {
  for (size_t t = 0; t < s.tensors.size(); ++t)
    if (s.tensors[t].name == name) return static_cast<int>(t);
  FAIL("no tensor " << name);
  return -1;
}

struct Compiled {
  std::shared_ptr<const dsl::SourceFile> file;
  dsl::Module module;
  std::vector<compiler::CheckedSchedule> checked;
};

// Parses and checks `file` for world size `ranks` (`per_node` ranks per node, 0: one node); a
// diagnostic fails the test (printed).
inline std::unique_ptr<Compiled> compile(std::shared_ptr<const dsl::SourceFile> file, int64_t ranks,
                                         std::map<std::string, int64_t> defines,
                                         int64_t per_node = 0) {
  auto c = std::make_unique<Compiled>();
  c->file = std::move(file);
  dsl::Diagnostics diags;
  c->module = dsl::parse(c->file, diags);
  compiler::CheckOptions opts;
  opts.ranks = {ranks};
  opts.ranks_per_node = per_node;
  opts.defines = std::move(defines);
  if (!diags.has_errors()) c->checked = compiler::check(c->module, opts, diags);
  REQUIRE_MESSAGE(!diags.has_errors(), dsl::render_text(diags.all(), false));
  return c;
}

inline std::unique_ptr<Compiled> sample(const std::string& name, int64_t ranks,
                                        std::map<std::string, int64_t> defines,
                                        int64_t per_node = 0) {
  return compile(dsl::SourceFile::read("samples/" + name + ".mks"), ranks, std::move(defines),
                 per_node);
}

// The samples' device functions on the host.
inline HostFns host_fns() {
  return {{"swiglu",
           [](const std::vector<double>& a) { return a[0] / (1.0 + std::exp(-a[0])) * a[1]; }}};
}

// Relative L2 error between the interpreter's and the reference's user tensors; a NaN where the
// reference has a value (an element the plan never wrote) fails outright.
inline void compare(const compiler::CheckedSchedule& s, const RankData& got,
                    const std::vector<std::vector<double>>& want, const std::string& where) {
  for (size_t t = 0; t < s.tensors.size(); ++t) {
    double num = 0, den = 0;
    int64_t unwritten = 0;
    for (size_t e = 0; e < want[t].size(); ++e) {
      const double a = got[t][e], b = want[t][e];
      if (std::isnan(b)) continue;
      if (std::isnan(a)) {
        ++unwritten;
        continue;
      }
      num += (a - b) * (a - b);
      den += b * b;
    }
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    CHECK_MESSAGE(unwritten == 0, where << " tensor " << s.tensors[t].name << ": " << unwritten
                                        << " elements never written");
    CHECK_MESSAGE(rel <= 1e-9,
                  where << " tensor " << s.tensors[t].name << ": relative error " << rel);
  }
}

// Interprets `plan` over io.launches launches and compares every rank's user tensors, after each
// launch, with the reference evaluated on the same inputs. Returns the interpreter's result.
inline InterpretResult interpret_and_compare(const compiler::CheckedSchedule& s, const Plan& plan,
                                             const InterpretOptions& io, const std::string& label) {
  const int64_t R = plan.ranks;
  const InterpretResult res = interpret(plan, io);
  for (int launch = 1; launch <= io.launches; ++launch) {
    std::vector<std::vector<std::vector<double>>> ref(R);
    for (int64_t r = 0; r < R; ++r) {
      RankData inputs(plan.buffers.size());
      for (size_t b = 0; b < plan.buffers.size(); ++b)
        inputs[b].assign(plan.buffers[b].elements(), std::nan(""));
      io.inputs(static_cast<int>(r), launch, inputs);
      inputs.resize(s.tensors.size());
      ref[r] = inputs;
    }
    reference(s, io.fns, ref);
    for (int64_t r = 0; r < R; ++r) {
      compare(s, res.snapshots[launch - 1][r], ref[r],
              fmt::format("{} launch={} rank={}", label, launch, r));
    }
  }
  return res;
}

// interpret_and_compare once per seed: `launches` launches of fresh random inputs (seeded by
// the seed) and the interpreter's interleaving seeded by it too, each labelled "`label`
// seed=N". The loop every sample and split test repeats.
inline void interpret_seeds(const compiler::CheckedSchedule& s, const Plan& plan,
                            std::initializer_list<uint64_t> seeds, int launches, const HostFns& fns,
                            const std::string& label) {
  for (const uint64_t seed : seeds) {
    InterpretOptions io;
    io.launches = launches;
    io.seed = seed;
    io.fns = fns;
    io.inputs = random_inputs(plan, seed);
    interpret_and_compare(s, plan, io, fmt::format("{} seed={}", label, seed));
  }
}

}  // namespace mkc::plan::testing
