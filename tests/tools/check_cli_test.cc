// `mkc check` end to end, in-process: exit codes, --emit=ast, JSON diagnostics, and robustness on
// hostile input (empty, binary, 10 MB, deeply nested), each answered with diagnostics and exit 1
// (a hang is the test timeout's to catch), and a generated 1,000-line schedule checked. How long
// checking takes is measured by bench/check_bench, not asserted here.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "tools/mkc/cli.h"

namespace mkc::cli {
namespace {

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result run_cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = run(args, out, err);
  return {code, out.str(), err.str()};
}

std::string temp_file(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

TEST_CASE("check: a good schedule exits 0 with a summary") {
  const Result r = run_cli({"check", "samples/gemm_allreduce.mks"});
  CHECK(r.code == 0);
  CHECK(r.out.find("schedule `gemm_allreduce` ok: 3 tensors, 2 operations") != std::string::npos);
  CHECK(r.err.empty());
}

TEST_CASE("check: several files, one bad, exit 1 and both reported") {
  const std::string bad = temp_file("bad.mks", "schedule b { input X : f32[Q] }\n");
  const Result r = run_cli({"check", "samples/allreduce.mks", bad});
  CHECK(r.code == 1);
  CHECK(r.out.find("schedule `allreduce` ok") != std::string::npos);
  CHECK(r.err.find("bad.mks:1:28: error: undefined name `Q` [undefined-name]") !=
        std::string::npos);
}

TEST_CASE("check: flags") {
  CHECK(run_cli({"check", "-D", "M=256", "--ranks", "2", "samples/gemm_allreduce.mks"}).code == 0);
  CHECK(run_cli({"check", "-DM=256", "--ranks=2", "samples/gemm_allreduce.mks"}).code == 0);
  const Result bad_d = run_cli({"check", "-D", "M=abc", "samples/gemm_allreduce.mks"});
  CHECK(bad_d.code == 1);
  CHECK(bad_d.err.find("`abc` is not an integer") != std::string::npos);
  const Result missing = run_cli({"check", "no/such/file.mks"});
  CHECK(missing.code == 1);
  CHECK(missing.err.find("cannot read `no/such/file.mks`") != std::string::npos);
  CHECK(run_cli({"check"}).code == 1);
  CHECK(run_cli({"check", "--bogus", "samples/gemm.mks"}).code == 1);
  CHECK(run_cli({"check", "--ranks", "0", "samples/gemm.mks"}).code == 1);
}

TEST_CASE("check --emit=ast prints the tree as JSON") {
  const Result r = run_cli({"check", "--emit=ast", "samples/gemm_allreduce.mks"});
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["schedules"][0]["name"] == "gemm_allreduce");
  CHECK(j["schedules"][0]["ranks"]["name"] == "R");
  bool found_gemm = false, found_allreduce = false;
  for (const auto& item : j["schedules"][0]["items"]) {
    if (item.value("op", "") == "gemm") {
      found_gemm = true;
      CHECK(item["loc"].get<std::string>().find("samples/gemm_allreduce.mks:") == 0);
    }
    if (item.value("op", "") == "allreduce") {
      found_allreduce = true;
      REQUIRE(item["clauses"].is_array());
      REQUIRE(item["clauses"].size() == 2);
      CHECK(item["clauses"][0]["clause"] == "chunk");
      CHECK(item["clauses"][1]["clause"] == "after");
    }
  }
  CHECK(found_gemm);
  CHECK(found_allreduce);
}

TEST_CASE("check --diagnostics-format=json") {
  const std::string bad = temp_file("bad_json.mks", "schedule b {\n  input X : f32[Q]\n}\n");
  const Result r = run_cli({"check", "--diagnostics-format=json", bad});
  CHECK(r.code == 1);
  const nlohmann::json j = nlohmann::json::parse(r.err);
  REQUIRE(j["diagnostics"].size() == 1);
  CHECK(j["diagnostics"][0]["kind"] == "undefined-name");
  CHECK(j["diagnostics"][0]["line"] == 2);
  CHECK(j["diagnostics"][0]["column"] == 17);
}

TEST_CASE("check --emit=ast: bytes that are not UTF-8 in a device body do not break the JSON") {
  // Found by the fuzzer: nlohmann::json refused to print invalid UTF-8 and threw.
  const std::string path = temp_file(
      "latin1.mks", "schedule s { device f(x: f32) -> f32 { /* caf\xe9 */ return x; } }\n");
  const Result r = run_cli({"check", "--emit=ast", path});
  CHECK(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["schedules"][0]["items"][0]["body"].get<std::string>().find("caf\xef\xbf\xbd") !=
        std::string::npos);
}

TEST_CASE("robustness: hostile inputs get diagnostics and exit 1") {
  std::mt19937 rng(42);
  std::string binary(64 << 10, '\0');
  for (char& c : binary) c = static_cast<char>(rng());
  std::string big;
  while (big.size() < (10u << 20)) big += "param P = (1 + 2) * 3 # a line of a very large file\n";
  struct Case {
    const char* name;
    std::string text;
  };
  const Case cases[] = {
      {"empty", ""},
      {"binary", binary},
      {"ten_mb", big},
      {"deep_parens", "schedule s { param M = " + std::string(1 << 20, '(') + " }"},
      {"deep_braces", std::string(1 << 20, '{')},
      {"deep_loops",
       [] {
         std::string s = "schedule s {";
         for (int i = 0; i < 10000; ++i) s += fmt::format(" loop i{} in 0 .. 2 {{", i);
         return s;
       }()},
      {"unterminated_device", "schedule s { device f(x: f32) -> f32 { return x; "},
  };
  for (const Case& c : cases) {
    const Result r = run_cli({"check", temp_file(std::string(c.name) + ".mks", c.text)});
    CHECK_MESSAGE(r.code == 1, c.name);
    CHECK_MESSAGE(r.err.find("error:") != std::string::npos, c.name);
  }
}

// A schedule of about 1,000 lines: params, 335 tensors and a chain of 660 dependent operations.
std::string thousand_lines() {
  std::string s = "schedule big {\n  ranks R\n  param N = 4096\n";
  for (int i = 0; i < 335; ++i) s += fmt::format("  scratch T{} : f32[N, 64] symmetric\n", i);
  for (int i = 0; i + 1 < 335; ++i) {
    s += fmt::format("  compute c{} = copy(T{} -> T{}) tile(64, 64){}\n", i, i, i + 1,
                     i > 0 ? fmt::format(" after a{}.chunk", i - 1) : "");
    s += fmt::format("  comm    a{} = allreduce(T{}, sum) chunk(64, 64) after c{}.tile\n", i, i + 1,
                     i);
  }
  return s + "}\n";
}

TEST_CASE("a 1,000-line schedule checks clean") {
  const std::string text = thousand_lines();
  const int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  CHECK(lines >= 1000);
  const Result r = run_cli({"check", "--ranks", "8", temp_file("thousand.mks", text)});
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("schedule `big` ok: 335 tensors") != std::string::npos);
}

}  // namespace
}  // namespace mkc::cli
