// fn_eval: a schedule's device functions evaluated on fixed pseudo-random arguments, on the GPU
// (runtime/device_fn_eval.h: the kernel's own arithmetic) or on the CPU (compiler/oracle/
// clang_eval.h: Clang and LLVM's JIT), one line per function with every result, so that the two
// evaluators can be compared on the same inputs when they run on different machines (the GPU
// machine has no LLVM): run `fn_eval --gpu` there, `fn_eval --cpu` here, then `fn_eval --compare
// GPU_FILE CPU_FILE`. The arguments are the same on every machine (a fixed generator, seeded).
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/oracle/clang_eval.h"
#include "compiler/sema/check.h"
#include "dsl/diagnostics.h"
#include "dsl/parser.h"
#include "runtime/cuda_driver.h"
#include "runtime/device_fn_eval.h"
#include "support/error.h"
#include "tests/support/device_fns.h"

namespace {

constexpr const char* kUsage =
    R"(usage: fn_eval --gpu|--cpu [--tuples N] [--seed S] FILE.mks|--cases
       fn_eval --compare GPU_OUT CPU_OUT

Evaluates every device function of FILE's schedule on N argument tuples (default 100000), the same
on every machine for a seed (default 1): floats uniform in [-6, 6), integers in [-1000, 1000].
--gpu: on GPU 0, as `mkc run --check` does; --cpu: compiled for this CPU by mkc's Clang plugin, as
`mkc verify` does. --cases: the functions both evaluators' tests hold (tests/support/device_fns.h,
every scalar parameter type). Prints `NAME RESULT_TYPE r0 r1 ...` per function.
--compare: for each function, the largest difference between the two outputs relative to 1 + |GPU
value|, against the result type's tolerance (f64 1e-12, f32 2e-6, f16 2e-3, bf16 1.6e-2, integers
exact); exit 1 when one is over.
)";

// xorshift64*: the same numbers on every machine and standard library.
struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

std::vector<double> arguments(const mkc::compiler::DeviceFunction& f, size_t n, uint64_t seed) {
  Rng rng{seed * 0x9e3779b97f4a7c15ull + 1};
  std::vector<double> args(n * f.params.size());
  for (size_t e = 0; e < n; ++e) {
    for (size_t k = 0; k < f.params.size(); ++k) {
      const bool is_float = mkc::compiler::dtype_is_float(f.params[k].second);
      args[e * f.params.size() + k] =
          is_float ? -6.0 + 12.0 * rng.unit()
                   : static_cast<double>(static_cast<int64_t>(rng.next() % 2001) - 1000);
    }
  }
  return args;
}

double tolerance(const std::string& type) {
  if (type == "f64") return 1e-12;
  if (type == "f32") return 2e-6;
  if (type == "f16") return 2e-3;
  if (type == "bf16") return 1.6e-2;
  return 0;
}

std::map<std::string, std::pair<std::string, std::vector<double>>> read_output(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) throw mkc::UserError(fmt::format("fn_eval: cannot read `{}`", path));
  std::map<std::string, std::pair<std::string, std::vector<double>>> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string name, type;
    if (!(ls >> name >> type)) continue;
    std::vector<double>& v = out[name].second;
    out[name].first = type;
    for (std::string x; ls >> x;) v.push_back(std::strtod(x.c_str(), nullptr));
  }
  return out;
}

int compare(const std::string& gpu_path, const std::string& cpu_path) {
  const auto gpu = read_output(gpu_path), cpu = read_output(cpu_path);
  int bad = 0;
  for (const auto& [name, g] : gpu) {
    auto c = cpu.find(name);
    if (c == cpu.end() || c->second.second.size() != g.second.size()) {
      fmt::print("{}: missing or of another length in {}\n", name, cpu_path);
      ++bad;
      continue;
    }
    double worst = 0;
    size_t at = 0, nans = 0;
    for (size_t e = 0; e < g.second.size(); ++e) {
      const double a = g.second[e], b = c->second.second[e];
      if (std::isnan(a) || std::isnan(b)) {
        nans += std::isnan(a) != std::isnan(b);
        continue;
      }
      const double d = a == b ? 0.0 : std::abs(a - b) / (1 + std::abs(a));
      if (d > worst) worst = d, at = e;
    }
    const double tol = tolerance(g.first);
    const bool ok = worst <= tol && nans == 0;
    fmt::print(
        "{} ({}, {} values): largest difference {:.3g} at {} (tolerance {:.3g}), {} NaN "
        "on one side only: {}\n",
        name, g.first, g.second.size(), worst, at, tol, nans, ok ? "ok" : "OVER");
    bad += !ok;
  }
  return bad == 0 ? 0 : 1;
}

int run(int argc, char** argv) {
  std::string mode, file, a, b;
  size_t tuples = 100000;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw mkc::UserError(fmt::format("fn_eval: {} needs a value", arg));
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--gpu" || arg == "--cpu") {
      mode = arg;
    } else if (arg == "--compare") {
      mode = arg;
      a = value();
      b = value();
    } else if (arg == "--cases") {
      file = "--cases";
    } else if (arg == "--tuples") {
      tuples = std::stoull(value());
    } else if (arg == "--seed") {
      seed = std::stoull(value());
    } else if (!arg.empty() && arg[0] != '-' && file.empty()) {
      file = arg;
    } else {
      throw mkc::UserError(fmt::format("fn_eval: unknown argument `{}`\n{}", arg, kUsage));
    }
  }
  if (mode == "--compare") return compare(a, b);
  if (mode.empty() || file.empty()) throw mkc::UserError(kUsage);
  std::ostringstream text;
  if (file == "--cases") {
    text << mkc::testing::kDeviceFns;
  } else {
    std::ifstream in(file);
    if (!in) throw mkc::UserError(fmt::format("fn_eval: cannot read `{}`", file));
    text << in.rdbuf();
  }
  mkc::dsl::Diagnostics diags;
  auto source = std::make_shared<mkc::dsl::SourceFile>(file, text.str());
  const mkc::dsl::Module m = mkc::dsl::parse(source, diags);
  mkc::compiler::CheckOptions opts;
  opts.ranks = {1};
  opts.clang_device_fns = mode == "--cpu";
  std::vector<mkc::compiler::CheckedSchedule> checked;
  if (!diags.has_errors()) checked = mkc::compiler::check(m, opts, diags);
  if (diags.has_errors() || checked.empty()) {
    std::cerr << mkc::dsl::render_text(diags.all(), false);
    return 1;
  }
  const mkc::compiler::CheckedSchedule& s = checked[0];
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  mkc::plan::BatchFns batch;
  mkc::plan::HostFns host;
  if (mode == "--gpu") {
    const mkc::rt::Driver& d = mkc::rt::Driver::get();
    MKC_CU(d, cuInit, 0);
    MKC_CU(d, cuDeviceGet, &dev, 0);
    MKC_CU(d, cuDevicePrimaryCtxRetain, &ctx, dev);
    batch = mkc::rt::gpu_device_functions(s, ctx);
  } else {
    mkc::plan::ClangFunctions c = mkc::plan::clang_device_functions(s);
    if (c.fns.empty()) throw mkc::UserError("fn_eval: " + c.why);
    host = std::move(c.fns);
  }
  for (const mkc::compiler::DeviceFunction& f : s.device_fns) {
    const std::vector<double> args = arguments(f, tuples, seed);
    std::vector<double> results;
    if (mode == "--gpu") {
      results = batch.at(f.name)(args, tuples);
    } else {
      const size_t arity = f.params.size();
      std::vector<double> one(arity);
      for (size_t e = 0; e < tuples; ++e) {
        for (size_t k = 0; k < arity; ++k) one[k] = args[e * arity + k];
        results.push_back(host.at(f.name)(one));
      }
    }
    std::string line = fmt::format("{} {}", f.name, mkc::compiler::dtype_name(f.ret));
    for (double r : results) line += fmt::format(" {:.17g}", r);
    std::cout << line << "\n";
  }
  batch.clear();
  if (ctx != nullptr) mkc::rt::Driver::get().cuDevicePrimaryCtxRelease(dev);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
