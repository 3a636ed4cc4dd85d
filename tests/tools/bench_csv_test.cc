// The benchmarks' --csv tables, on the one bench that needs no GPU (bench/check_bench): a header,
// then one row per measured case with every column; and bench/plot.py drawing it, where the
// python3 on the test's PATH has matplotlib (the GPU machines do; elsewhere that part is skipped).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "tests/support/run.h"

namespace {

using mkc::testing::run_command;

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST_CASE("check_bench --csv: a header and one row per case; plot.py draws it") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string csv = dir + "/check.csv";
  const auto [rc, out] = run_command(
      fmt::format("bench/check_bench --lines 40,80,120 --repeat 1 --ranks 2 --csv {}", csv));
  REQUIRE_MESSAGE(rc == 0, out);
  const std::vector<std::string> rows = lines_of(csv);
  REQUIRE(rows.size() == 4);
  CHECK(rows[0] == "bench,case,lines,ranks,best_ms,median_ms");
  for (size_t i = 1; i < rows.size(); ++i) {
    CHECK_MESSAGE(rows[i].rfind("check_bench,", 0) == 0, rows[i]);
    CHECK(std::count(rows[i].begin(), rows[i].end(), ',') == 5);
  }
  // A bad flag: exit 1, and no table left behind.
  const std::string bad = dir + "/bad.csv";
  CHECK(run_command(fmt::format("bench/check_bench --lines x --csv {}", bad)).first == 1);
  CHECK_FALSE(std::ifstream(bad).good());

  if (run_command("python3 -c 'import matplotlib'").first != 0) {
    MESSAGE("python3 has no matplotlib here: bench/plot.py not run");
    return;
  }
  const auto [prc, pout] = run_command(fmt::format("python3 bench/plot.py {} -o {}/png", csv, dir));
  CHECK_MESSAGE(prc == 0, pout);
  CHECK(std::ifstream(dir + "/png/check_bench.png").good());
}

}  // namespace
