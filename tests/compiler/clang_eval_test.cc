// Device functions run on the CPU as written (compiler/oracle/clang_eval.h, the plugin's
// compiler/clang/device_fn_jit.cc). The functions and expected values of the GPU evaluator's test
// (tests/support/device_fns.h, tests/runtime/device_fn_eval_test.cc) hold here too, so the two
// evaluators agree through the same host formulas; narrow types round as CUDA rounds; a loop that
// never ends, a lambda that calls itself without end and an integer division by zero stop with a
// named error instead of hanging or killing the process; the reference computes with the real body
// (a planted wrong body changes the numbers); and `mkc verify` of moe_ffn_combine at R 1 and 3
// passes with its SwiGLU as written.
#include "compiler/oracle/clang_eval.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/oracle/reference.h"
#include "compiler/sema/check.h"
#include "compiler/verify_schedule.h"
#include "dsl/parser.h"
#include "support/error.h"
#include "tests/support/device_fns.h"
#include "tools/mkc/cli.h"

namespace mkc::plan {
namespace {

compiler::CheckedSchedule checked(const std::string& text) {
  dsl::Diagnostics diags;
  auto file = std::make_shared<dsl::SourceFile>("fns.mks", text);
  const dsl::Module m = dsl::parse(file, diags);
  compiler::CheckOptions opts;
  opts.clang_device_fns = true;
  opts.ranks = {1};
  std::vector<compiler::CheckedSchedule> s = compiler::check(m, opts, diags);
  REQUIRE_MESSAGE(!diags.has_errors(), dsl::render_text(diags.all(), false));
  REQUIRE(s.size() == 1);
  return s[0];
}

// A schedule around `devices` (device function definitions) with one map over f32 vectors.
std::string schedule_with(const std::string& devices, const std::string& mapped = "f") {
  return "schedule fns {\n  input X : f32[64]\n  output Z : f32[64]\n" + devices +
         "  compute a = map(" + mapped + ", X -> Z) tile(64)\n}\n";
}

HostFns compile(const compiler::CheckedSchedule& s, uint64_t max_steps = kDeviceFnMaxSteps) {
  ClangFunctions c = clang_device_functions(s, max_steps);
  REQUIRE_MESSAGE(!c.fns.empty(), c.why);
  REQUIRE(c.fns.size() == s.device_fns.size());
  return c.fns;
}

// The functions the GPU evaluator's test holds too (tests/support/device_fns.h).
constexpr const char* kFunctions = testing::kDeviceFns;

TEST_CASE("the GPU evaluator's functions give its expected values on the CPU") {
  const HostFns fns = compile(checked(kFunctions));
  std::mt19937_64 rng(20261205);
  std::uniform_real_distribution<double> u(-6, 6);
  double worst = 0;
  for (int e = 0; e < 100'003; ++e) {
    const double g = u(rng), up = u(rng);
    const double gf = static_cast<float>(g), uf = static_cast<float>(up);
    const double want = gf / (1 + std::exp(-gf)) * uf;
    worst = std::max(worst, std::abs(fns.at("swiglu")({g, up}) - want) / (1 + std::abs(want)));
  }
  CHECK(worst < 1e-5);
  for (double x : {0.1, -3.25, 1e10}) CHECK(fns.at("twice")({x}) == 2.0 * x + 1e-12);  // f64 kept
  // bf16 rounding: 1 + 2^-10 is not a bf16 (8 bits of mantissa) and rounds to 1.
  CHECK(fns.at("round_bf16")({1.0 + 1.0 / 1024}) == 1.0);
  CHECK(fns.at("round_bf16")({3.0}) == 3.0);
  CHECK(fns.at("round_bf16")({-0.5}) == -0.5);
  CHECK(fns.at("floor_i")({7, 5'000'000'000.0}) == 5'000'000'021.0);
  CHECK(fns.at("floor_i")({-2, 1}) == -5.0);
  // An i32 argument out of range saturates, as the GPU's conversion does; NaN becomes 0.
  CHECK(fns.at("floor_i")({5e9, 0}) == 3.0 * 2147483647.0);
  CHECK(fns.at("floor_i")({-5e9, 0}) == -3.0 * 2147483648.0);
  CHECK(fns.at("floor_i")({std::nan(""), 4}) == 4.0);
  CHECK(fns.at("half_sum")({1.5, 2.25}) == 3.75);
  CHECK(fns.at("half_sum")({1000, 0.25}) == 1000.0);  // 1000.25 is not an f16 near 1000
}

TEST_CASE("narrow float types round to nearest as CUDA's conversions do") {
  const HostFns fns =
      compile(checked(schedule_with("  device f(x: f32) -> f32 { return x; }\n"
                                    "  device h(x: f16) -> f32 { return x; }\n"
                                    "  device b(x: bf16) -> f32 { return x; }\n")));
  CHECK(fns.at("h")({0.1}) == 0.0999755859375);            // the f16 nearest 0.1
  CHECK(fns.at("h")({65519.0}) == 65504.0);                // below half an ulp over the largest
  CHECK(std::isinf(fns.at("h")({65520.0})));               // a tie rounds to even: infinity
  CHECK(fns.at("h")({1e-7}) == std::ldexp(1.0, -24) * 2);  // subnormal spacing 2^-24
  CHECK(fns.at("b")({1.0 + 3.0 / 256}) == 1.015625);       // 1 + 3 * 2^-8 ties to 1 + 4 * 2^-8
  CHECK(std::isnan(fns.at("h")({std::nan("")})));
  // An f32 argument is rounded to f32 on the way in, as the kernel reads an f32 element.
  CHECK(fns.at("f")({0.1}) == static_cast<double>(0.1f));
}

TEST_CASE("CUDA's math functions that the C library lacks") {
  const HostFns fns = compile(
      checked(schedule_with("  device f(x: f64) -> f64 { return erfinv(erf(x)); }\n"
                            "  device g(x: f64) -> f64 { return normcdfinv(normcdf(x)); }\n"
                            "  device r(x: f32) -> f32 { return rsqrtf(x) * __saturatef(x); }\n")));
  for (double x : {-2.0, -0.3, 0.0, 0.7, 1.9}) {
    CHECK(fns.at("f")({x}) == doctest::Approx(x).epsilon(1e-9));
    CHECK(fns.at("g")({x}) == doctest::Approx(x).epsilon(1e-9));
  }
  CHECK(fns.at("r")({4.0}) == 0.5);  // saturated to 1
  CHECK(fns.at("r")({0.25}) == doctest::Approx(0.5));
}

TEST_CASE("a loop that never ends is stopped, with the function and its arguments named") {
  const compiler::CheckedSchedule s = checked(schedule_with(
      "  device f(x: f32) -> f32 { float y = x; while (y == y) { y = y * 1.0f; } return y; }\n"
      "  device g(x: f32) -> f32 { float s = 0.0f; for (int i = 0; i < 1000; ++i) s += x; "
      "return s; }\n"));
  const HostFns fns = compile(s, 100'000);
  const auto start = std::chrono::steady_clock::now();
  try {
    fns.at("f")({2.5});
    FAIL("the endless loop returned");
  } catch (const UserError& e) {
    const std::string what = e.what();
    CHECK(what.find("device function `f`") != std::string::npos);
    CHECK(what.find("x = 2.5") != std::string::npos);
    CHECK(what.find("loop") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  // A loop within the budget runs to its end, and the evaluator still works after a stop.
  CHECK(fns.at("g")({0.5}) == 500.0);
}

TEST_CASE("a lambda that calls itself without end is stopped, not a stack overflow") {
  // The contract's recursion check sees calls of the function itself, not a generic lambda's of
  // itself; the evaluator bounds the calls open at once.
  const compiler::CheckedSchedule s = checked(schedule_with(
      "  device f(x: f32) -> f32 {\n"
      "    auto g = [](auto self, int n) -> int { return n > 0 ? self(self, n - 1) + 1 : 0; };\n"
      "    return x + static_cast<float>(g(g, x > 0.0f ? 100000000 : 10));\n"
      "  }\n"));
  const HostFns fns = compile(s);
  CHECK(fns.at("f")({-1.0}) == 9.0);  // ten calls deep: fine
  try {
    fns.at("f")({1.0});
    FAIL("the endless recursion returned");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("open at once") != std::string::npos);
  }
  CHECK(fns.at("f")({-2.0}) == 8.0);  // and the evaluator works after the stop
}

TEST_CASE("an integer division by zero is an error, not the end of the process") {
  const compiler::CheckedSchedule s = checked(
      "schedule fns {\n  input X : i32[64]\n  input Y : i32[64]\n  output Z : i32[64]\n"
      "  device f(a: i32, b: i32) -> i32 { return a / b; }\n"
      "  compute a = map(f, X, Y -> Z) tile(64)\n}\n");
  const HostFns fns = compile(s);
  CHECK(fns.at("f")({7, 2}) == 3.0);
  for (int round = 0; round < 2; ++round) {  // by zero, then the least integer by -1
    try {
      fns.at("f")({round == 0 ? 7.0 : -2147483648.0, round == 0 ? 0.0 : -1.0});
      FAIL("a trapping division returned");
    } catch (const UserError& e) {
      const std::string what = e.what();
      CHECK(what.find("divided an integer by zero") != std::string::npos);
      CHECK(what.find(round == 0 ? "b = 0" : "b = -1") != std::string::npos);
    }
  }
  CHECK(fns.at("f")({-9, 3}) == -3.0);
}

TEST_CASE("the reference computes with the body as written: a planted wrong body is caught") {
  const std::string right =
      "  device f(g: f32) -> f32 { return g / (1.0f + expf(-g)); }\n";  // SiLU
  const std::string wrong = "  device f(g: f32) -> f32 { return g / (1.0f + expf(g)); }\n";
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-4, 4);
  std::vector<double> x(64);
  for (double& v : x) v = static_cast<float>(u(rng));
  // Z = map(f, X) by the reference, on one rank, against SiLU computed here in f64.
  auto error_of = [&](const std::string& body) {
    const compiler::CheckedSchedule s = checked(schedule_with(body));
    const HostFns fns = compile(s);
    REQUIRE(s.ranks == 1);
    std::vector<std::vector<std::vector<double>>> data(1);
    data[0].resize(s.tensors.size());
    for (size_t t = 0; t < s.tensors.size(); ++t) {
      data[0][t].assign(64, std::numeric_limits<double>::quiet_NaN());
      if (s.tensors[t].name == "X") data[0][t] = x;
    }
    reference(s, fns, data);
    double worst = 0;
    for (size_t t = 0; t < s.tensors.size(); ++t) {
      if (s.tensors[t].name != "Z") continue;
      for (size_t e = 0; e < 64; ++e) {
        const double want = x[e] / (1 + std::exp(-x[e]));
        worst = std::max(worst, std::abs(data[0][t][e] - want));
      }
    }
    return worst;
  };
  CHECK(error_of(right) < 1e-5);
  CHECK(error_of(wrong) > 0.1);
}

TEST_CASE("mkc verify runs moe_ffn_combine's SwiGLU as written, at 1 and 3 ranks") {
  for (const char* ranks : {"1", "3"}) {
    std::ostringstream out, err;
    const int code = cli::run({"verify", "--ranks", ranks, "-D", "T=16", "-D", "H=64", "-D", "F=32",
                               "-D", "E=12", "-D", "TOPK=2", "samples/moe_ffn_combine.mks"},
                              out, err);
    CHECK_MESSAGE(code == 0, err.str());
    CHECK_MESSAGE(out.str().find("run on the CPU as written, compiled by Clang: `swiglu`") !=
                      std::string::npos,
                  out.str());
  }
}

TEST_CASE("without the plugin, verify says why it falls back to the stand-in") {
  const char* before = std::getenv("MKC_CLANG_PLUGIN");
  const std::string saved = before != nullptr ? before : "";
  setenv("MKC_CLANG_PLUGIN", "/nonexistent/libmkc_clang.so", 1);
  const compiler::CheckedSchedule s =
      checked(schedule_with("  device f(x: f32) -> f32 { return x; }\n"));
  const ClangFunctions c = clang_device_functions(s);
  CHECK(c.fns.empty());
  CHECK(c.why.find("not loaded") != std::string::npos);
  if (before != nullptr) {
    setenv("MKC_CLANG_PLUGIN", saved.c_str(), 1);
  } else {
    unsetenv("MKC_CLANG_PLUGIN");
  }
}

}  // namespace
}  // namespace mkc::plan
