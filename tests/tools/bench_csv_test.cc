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

TEST_CASE("compile_bench: a row per sample, world size and mode; a refused schedule is a row") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string csv = dir + "/compile.csv";
  // `allreduce` matches allreduce and gemm_allreduce: 2 samples x 2 world sizes x 2 modes.
  const auto [rc, out] = run_command(
      fmt::format("python3 bench/compile_bench.py --mkc ./mkc --only allreduce --ranks 1,3 "
                  "--modes plan,verify --timeout 120 --csv {}",
                  csv));
  REQUIRE_MESSAGE(rc == 0, out);
  const std::vector<std::string> rows = lines_of(csv);
  REQUIRE_MESSAGE(rows.size() == 9, out);
  CHECK(rows[0] ==
        "bench,sample,ranks,mode,wall_ms,planned_ms,peak_mb,tasks,tasks_per_rank,status");
  for (size_t i = 1; i < rows.size(); ++i) {
    CHECK_MESSAGE(rows[i].rfind("compile_", 0) == 0, rows[i]);
    const bool ok = rows[i].size() > 3 && rows[i].substr(rows[i].size() - 3) == ",ok";
    CHECK_MESSAGE(ok, rows[i]);
  }
  // The plan at 3 ranks has tasks on every rank, and the summary's planning time is read.
  CHECK_MESSAGE(out.find("gemm_allreduce             3 plan") != std::string::npos, out);
  CHECK(out.find("R=3") != std::string::npos);  // the text plot

  // `own`: one rank's kernel, NVRTC included; its tasks are that rank's.
  const std::string own_csv = dir + "/own.csv";
  const auto [orc, oout] = run_command(fmt::format(
      "python3 bench/compile_bench.py --mkc ./mkc --only allgather --ranks 4 --modes own "
      "--timeout 120 --csv {}",
      own_csv));
  REQUIRE_MESSAGE(orc == 0, oout);
  const std::vector<std::string> own = lines_of(own_csv);
  REQUIRE_MESSAGE(own.size() == 3, oout);  // allgather and allgather_gemm
  for (size_t i = 1; i < own.size(); ++i) {
    CHECK_MESSAGE(own[i].find(",4,own,") != std::string::npos, own[i]);
    CHECK_MESSAGE(own[i].substr(own[i].size() - 3) == ",ok", own[i]);
    // tasks and tasks_per_rank are the same number: the kernel holds rank 0's tasks only.
    const size_t end = own[i].rfind(',');
    const size_t per = own[i].rfind(',', end - 1);
    const size_t tasks = own[i].rfind(',', per - 1);
    CHECK_MESSAGE(
        own[i].substr(tasks + 1, per - tasks - 1) == own[i].substr(per + 1, end - per - 1), own[i]);
  }

  // A schedule mkc refuses: a row with its reason, not a failed bench.
  const std::string bad_dir = dir + "/bad_samples";
  REQUIRE(run_command("mkdir -p " + bad_dir).first == 0);
  std::ofstream(bad_dir + "/broken.mks") << "schedule broken {\n  ranks R\n  input X : f32[R\n}\n";
  const auto [brc, bout] = run_command(fmt::format(
      "python3 bench/compile_bench.py --mkc ./mkc --samples {} --ranks 2 --modes plan", bad_dir));
  CHECK_MESSAGE(brc == 0, bout);
  CHECK_MESSAGE(bout.find("exit 1: ") != std::string::npos, bout);
  // Bad flags: exit non-zero with the reason.
  const auto [frc, fout] =
      run_command("python3 bench/compile_bench.py --mkc ./mkc --ranks 0 --modes plan");
  CHECK(frc != 0);
  CHECK_MESSAGE(fout.find("at least 1") != std::string::npos, fout);
  CHECK(run_command("python3 bench/compile_bench.py --mkc ./mkc --modes fast").first != 0);
}

}  // namespace
