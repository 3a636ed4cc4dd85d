// tools/ncu_lines.py on a made-up `ncu --page source --csv --print-source sass` listing: totals by
// opcode and by how often a line runs, the stretches of lines run equally often, and bad input.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fstream>
#include <string>

#include "tests/support/run.h"

namespace {

using mkc::testing::run_command;
constexpr auto temp = mkc::testing::temp_path;

TEST_CASE("ncu_lines: a loop's lines against a tile's, by opcode and by count") {
  const std::string path = temp("k.csv");
  // A kernel line, the header, then five lines: a set-up line run 100 times, a three-line loop
  // body run 1,000 times (thousands separators as ncu writes them), and a line never run.
  std::ofstream(path)
      << "\"Kernel Name\",\"k\",\n"
         "\"Address\",\"Source\",\"Warp Stall Sampling (All Samples)\",\"Instructions "
         "Executed\"\n"
         "\"0x7f0000000000\",\"      MOV R1, c[0x0][0x28]\",\"2\",\"100\"\n"
         "\"0x7f0000000010\",\"      FMNMX R2, R2, R3, !PT\",\"5\",\"1,000\"\n"
         "\"0x7f0000000020\",\"@!P0  FMNMX.FTZ R4, R4, R5, !PT\",\"1\",\"1,000\"\n"
         "\"0x7f0000000030\",\"      MUFU.EX2 R6, R6\",\"2\",\"1,000\"\n"
         "\"0x7f0000000040\",\"      EXIT\",\"0\",\"0\"\n";
  const auto [rc, out] = run_command(fmt::format("python3 tools/ncu_lines.py {} --top 2", path));
  REQUIRE_MESSAGE(rc == 0, out);
  // 3,100 instructions, 5 lines, 10 stall samples.
  CHECK_MESSAGE(out.find("0.00 M warp instructions executed, 5 SASS lines, 10 stall samples") !=
                    std::string::npos,
                out);
  // FMNMX (predicate and modifiers dropped): 2,000 of 3,100 = 64.5%, 6 of 10 stall samples.
  CHECK_MESSAGE(out.find("FMNMX          0.00 M  64.5%   stalls  60.0%") != std::string::npos, out);
  // Lines run 1,000 times: 3 of them, 96.8% of the instructions; run 100 times: 1, 3.2%.
  CHECK_MESSAGE(out.find("1000 times:     3 lines,     0.00 M  96.8%") != std::string::npos, out);
  CHECK_MESSAGE(out.find("100 times:     1 lines,     0.00 M   3.2%") != std::string::npos, out);
  // The loop body as one stretch, offsets from the first line, then the set-up line.
  const size_t loop = out.find("0x00010-0x00030    3 lines x      1000 =");
  const size_t setup = out.find("0x00000-0x00000    1 lines x       100 =");
  CHECK_MESSAGE(loop != std::string::npos, out);
  CHECK_MESSAGE(setup != std::string::npos, out);
  CHECK(loop < setup);
  CHECK_MESSAGE(out.find("FMNMX 2 MUFU 1") != std::string::npos, out);
}

TEST_CASE("ncu_lines: a file that is not ncu's source page is an error naming it") {
  const std::string path = temp("bad.csv");
  std::ofstream(path) << "\"a\",\"b\"\n1,2\n";
  auto [rc, out] = run_command(fmt::format("python3 tools/ncu_lines.py {}", path));
  CHECK(rc == 1);
  CHECK_MESSAGE(
      out.find("no header with `Source` and `Instructions Executed`") != std::string::npos, out);
  std::tie(rc, out) = run_command(fmt::format("python3 tools/ncu_lines.py {}", temp("none.csv")));
  CHECK(rc == 1);
  CHECK_MESSAGE(out.find("none.csv") != std::string::npos, out);
  std::tie(rc, out) = run_command(fmt::format("python3 tools/ncu_lines.py {} --top -1", path));
  CHECK(rc == 2);
}

}  // namespace
