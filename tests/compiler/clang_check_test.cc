// Device functions through Clang (compiler/sema/clang_check.h, the plugin compiler/clang): each
// way of breaking the device-function contract is found at its own .mks line and column
// (tests/compiler/clang_golden/contract.mks and .expected, exactly what `mkc check` prints); every
// sample's functions are accepted; a function is checked in well under 100 ms; hostile bodies end
// in a located error in bounded time; the text Clang reads declares the functions before it.
#include "compiler/sema/clang_check.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "compiler/sema/check.h"
#include "dsl/parser.h"
#include "tools/mkc/cli.h"

namespace mkc::compiler {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `mkc check --ranks 1` of `text` in a file named `name`: its exit code and stderr.
std::pair<int, std::string> check_text(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  std::ostringstream out, err;
  const int code = cli::run({"check", "--ranks", "1", path}, out, err);
  return {code, err.str()};
}

std::string schedule_with(const std::string& device_fns) {
  return "schedule s {\n  input X : f32[1024]\n  output Y : f32[1024]\n" + device_fns +
         "  compute m = map(f, X -> Y)\n}\n";
}

TEST_CASE("the plugin loads here") {
  std::string why;
  REQUIRE_MESSAGE(ClangPlugin::get(&why) != nullptr, why);
}

TEST_CASE("lossy conversions are warnings at their place: the golden output") {
  const std::string input = "tests/compiler/clang_golden/lossy.mks";
  std::ostringstream out, err;
  CHECK(cli::run({"check", "--ranks", "1", input}, out, err) == 0);
  const std::string expected = read("tests/compiler/clang_golden/lossy.expected");
  CHECK_MESSAGE(err.str() == expected, "mkc check " << input << " printed:\n"
                                                    << err.str() << "\nexpected:\n"
                                                    << expected);
}

TEST_CASE("every way of breaking the contract, at its place: the golden output") {
  const std::string input = "tests/compiler/clang_golden/contract.mks";
  std::ostringstream out, err;
  CHECK(cli::run({"check", "--ranks", "1", input}, out, err) == 1);
  const std::string expected = read("tests/compiler/clang_golden/contract.expected");
  CHECK_MESSAGE(err.str() == expected, "mkc check " << input << " printed:\n"
                                                    << err.str() << "\nexpected:\n"
                                                    << expected);
  // One finding per broken function at least, none for the two that keep the contract.
  for (const char* fn : {"arity", "operand", "global", "unknown", "pointer", "noreturn", "recurse",
                         "keeps", "assembly", "allocates", "io"}) {
    CHECK_MESSAGE(err.str().find(fmt::format("in device function `{}`", fn)) != std::string::npos,
                  fn);
  }
  CHECK(err.str().find("in device function `good`") == std::string::npos);
  CHECK(err.str().find("in device function `scale`") == std::string::npos);
}

TEST_CASE("every sample's device functions are accepted, without a warning") {
  int with_fns = 0;
  for (const auto& entry : std::filesystem::directory_iterator("samples")) {
    if (entry.path().extension() != ".mks") continue;
    const std::string text = read(entry.path().string());
    with_fns += text.find("device ") != std::string::npos;
    std::ostringstream out, err;
    CHECK_MESSAGE(cli::run({"check", "--ranks", "2", entry.path().string()}, out, err) == 0,
                  err.str());
    CHECK_MESSAGE(err.str().find("device function") == std::string::npos, err.str());
  }
  CHECK(with_fns >= 1);
}

TEST_CASE("a function is checked in well under 100 ms") {
  std::string why;
  const ClangPlugin* clang = ClangPlugin::get(&why);
  REQUIRE(clang != nullptr);
  std::vector<DeviceFunction> fns(1);
  fns[0].name = "gelu";
  fns[0].params = {{"x", DType::kF32}};
  fns[0].ret = DType::kF32;
  double worst = 0;
  for (int i = 0; i < 5; ++i) {
    // A new body each time: the plugin keeps what it has seen.
    fns[0].body = fmt::format(
        " return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))) + {}; ", i);
    size_t body_at = 0;
    const std::string text = clang_check_text(fns, 0, &body_at);
    CHECK(text.compare(body_at, fns[0].body.size(), fns[0].body) == 0);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(clang->check(text, "gelu").empty());
    worst = std::max(worst,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  MESSAGE(fmt::format("slowest of 5 checks: {:.1f} ms", worst * 1e3));
  CHECK(worst < 0.1);
}

TEST_CASE("the functions before one are declared in its text, not defined") {
  std::vector<DeviceFunction> fns(2);
  fns[0] = DeviceFunction{"a", {{"x", DType::kF32}}, DType::kF32, " return x + missing; ", {}};
  fns[1] = DeviceFunction{"b", {{"x", DType::kBf16}}, DType::kF32, " return a(x); ", {}};
  size_t body_at = 0, definition_at = 0;
  const std::string text = clang_check_text(fns, 1, &body_at, &definition_at);
  CHECK(text.find("float a(float x);") != std::string::npos);
  CHECK(text.find("missing") == std::string::npos);  // a's body is checked on its own
  CHECK(text.compare(definition_at, 26, "__device__ __forceinline__") == 0);
  CHECK(text.compare(body_at, 13, " return a(x);") == 0);
  std::string why;
  REQUIRE(ClangPlugin::get(&why) != nullptr);
  for (const ClangFinding& f : ClangPlugin::get(&why)->check(text, "b"))
    FAIL_CHECK("unexpected finding: " << f.message << " at " << f.offset);
}

TEST_CASE("without the plugin: a warning per function says it was not parsed, and why") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string missing = std::string(tmp != nullptr ? tmp : "/tmp") + "/none/libmkc_clang.so";
  ::setenv("MKC_CLANG_PLUGIN", missing.c_str(), 1);
  const auto [code, err] = check_text(
      "no_plugin.mks", schedule_with("  device f(x: f32) -> f32 { return x + nope; }\n"));
  ::unsetenv("MKC_CLANG_PLUGIN");
  CHECK_MESSAGE(code == 0, err);  // the unknown name is NVRTC's to find, then
  CHECK_MESSAGE(err.find("no_plugin.mks:4:10: warning: device function `f` was not parsed: mkc's "
                         "Clang plugin is not available (" +
                         missing) != std::string::npos,
                err);
  // And with the plugin back, the same function is refused.
  const auto [code2, err2] =
      check_text("plugin.mks", schedule_with("  device f(x: f32) -> f32 { return x + nope; }\n"));
  CHECK(code2 == 1);
  CHECK_MESSAGE(err2.find("plugin.mks:4:40: error: in device function `f`: use of undeclared "
                          "identifier 'nope'") != std::string::npos,
                err2);
}

TEST_CASE("hostile bodies: a located error in bounded time, never a crash or a hang") {
  const std::string huge_literal(200000, '9');
  const std::string deep(5000, '(');
  const std::string undeep(5000, ')');
  const std::vector<std::pair<std::string, std::string>> cases = {
      // Instantiations without end: the template depth stops them.
      {"device f(x: f32) -> f32 { auto g = [](auto& self, auto v) { struct W { decltype(v) w; }; "
       "return self(self, W{v}); }; g(g, x); return x; }\n",
       "recursive template instantiation"},
      {"device f(x: f32) -> f32 { return x + " + huge_literal + "; }\n", "integer literal"},
      {"device f(x: f32) -> f32 { return " + deep + "x" + undeep + "; }\n", "bracket nesting"},
      {"device f(x: f32) -> f32 { constexpr int n = [] { int s = 0; for (int i = 0; i >= 0; ++i) "
       "s += i; return s; }(); return x + n; }\n",
       "constant expression"},
  };
  for (const auto& [fns, what] : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto [code, err] = check_text("hostile.mks", schedule_with(fns));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(what << ": " << err.substr(0, 600));
    CHECK(code == 1);
    CHECK(err.find("hostile.mks:4:") != std::string::npos);
    CHECK(err.find("[device-function]") != std::string::npos);
    CHECK(s < 10.0);
  }
}

}  // namespace
}  // namespace mkc::compiler
