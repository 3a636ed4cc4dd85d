// tools/fn_eval, the CPU side (its GPU side runs on the GPU machine): the same seeded arguments
// give the same results run after run; --compare passes two equal outputs, and fails an output
// whose one value moved past its result type's tolerance, naming the function; bad arguments
// are refused with the usage.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include "tests/support/run.h"

namespace {

using mkc::testing::run_command;

std::string tmp(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// fn_eval --cpu into `path`; its messages (stderr) come back. The Clang plugin is this test's
// own data: fn_eval finds it in its own runfiles tree only once Bazel has built that, which a
// fresh `bazel test //...` may not have done yet when this test starts.
std::pair<int, std::string> cpu_values(const std::string& path) {
  return run_command(
      "MKC_CLANG_PLUGIN=$PWD/compiler/clang/libmkc_clang.so "
      "tools/fn_eval/fn_eval --cpu --cases --tuples 500 2>" +
      path + ".err > " + path + "; rc=$?; cat " + path + ".err; exit $rc");
}

TEST_CASE("fn_eval: the CPU evaluator is repeatable and --compare holds the tolerances") {
  const std::string a = tmp("cpu_a.txt"), b = tmp("cpu_b.txt"), c = tmp("cpu_c.txt");
  auto [rc, out] = cpu_values(a);
  REQUIRE_MESSAGE(rc == 0, out);
  std::tie(rc, out) = cpu_values(b);
  REQUIRE_MESSAGE(rc == 0, out);
  const std::string first = read(a);
  CHECK(first == read(b));
  for (const char* f : {"swiglu f32", "twice f64", "round_bf16 f32", "floor_i i64", "half_sum f16"})
    CHECK_MESSAGE(first.find(f) != std::string::npos, f);
  std::tie(rc, out) = run_command("tools/fn_eval/fn_eval --compare " + a + " " + b);
  CHECK_MESSAGE(rc == 0, out);
  CHECK(out.find("swiglu (f32, 500 values): largest difference 0") != std::string::npos);

  // twice's first value moved by 1e-6 relative: over f64's tolerance (1e-12).
  std::string moved = first;
  const size_t line = moved.find("twice f64 ");
  REQUIRE(line != std::string::npos);
  const size_t at = line + std::string("twice f64 ").size();
  const size_t end = moved.find(' ', at);
  const double v = std::stod(moved.substr(at, end - at));
  moved.replace(at, end - at, std::to_string(v * (1 + 1e-6) + 1e-6));
  std::ofstream(c) << moved;
  std::tie(rc, out) = run_command("tools/fn_eval/fn_eval --compare " + a + " " + c);
  CHECK(rc == 1);
  CHECK_MESSAGE(out.find("twice (f64, 500 values)") != std::string::npos, out);
  CHECK(out.find("OVER") != std::string::npos);
}

TEST_CASE("fn_eval: bad arguments get the usage") {
  auto [rc, out] = run_command("tools/fn_eval/fn_eval --cpu");
  CHECK(rc == 2);
  CHECK(out.find("usage: fn_eval") != std::string::npos);
  std::tie(rc, out) = run_command("tools/fn_eval/fn_eval --bogus");
  CHECK(rc == 2);
  CHECK(out.find("unknown argument `--bogus`") != std::string::npos);
  std::tie(rc, out) = run_command("tools/fn_eval/fn_eval --help");
  CHECK(rc == 0);
}

}  // namespace
