// tools/trace_summary.py on a made-up trace of two CTAs: the per-kind table, and with --gaps the
// mean task time and the mean gap between one CTA's consecutive tasks (what the persistent loop
// spends outside its tasks).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/support/run.h"

namespace {

using mkc::testing::run_command;

std::string write_trace(const std::string& dir) {
  const std::string path = dir + "/trace.json";
  std::ofstream out(path);
  // CTA 0: two attention tiles with a 3 us gap, then a copy after 1 us; CTA 1: one tile.
  out << R"({"traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank 0"}},
    {"ph": "X", "name": "att.q0", "cat": "attention_tile", "pid": 0, "tid": 0, "ts": 0, "dur": 10},
    {"ph": "X", "name": "att.q1", "cat": "attention_tile", "pid": 0, "tid": 0, "ts": 13, "dur": 6},
    {"ph": "X", "name": "out.c0", "cat": "copy", "pid": 0, "tid": 0, "ts": 20, "dur": 2},
    {"ph": "X", "name": "att.q2", "cat": "attention_tile", "pid": 0, "tid": 1, "ts": 1, "dur": 8}
  ]})";
  return path;
}

TEST_CASE("trace_summary --gaps: mean task time and the gap before a CTA's next task") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string trace = write_trace(tmp != nullptr ? tmp : "/tmp");
  const auto [rc, out] =
      run_command(fmt::format("python3 tools/trace_summary.py {} --gaps", trace));
  REQUIRE_MESSAGE(rc == 0, out);
  // The kinds' table: 3 tiles from 0 to 19 us, 24 CTA-us, the longest 10.
  CHECK_MESSAGE(
      out.find("attention_tile            3        0.0       19.0        24.0        10.0") !=
          std::string::npos,
      out);
  // The gaps: the tiles take 8 us on average, one gap of 3 us before a tile; the copy 1 us.
  CHECK_MESSAGE(out.find("attention_tile            3      8.00         3.00        3.00") !=
                    std::string::npos,
                out);
  CHECK_MESSAGE(out.find("copy                      1      2.00         1.00        1.00") !=
                    std::string::npos,
                out);
  // Without --gaps no second table.
  const auto [rc2, plain] = run_command(fmt::format("python3 tools/trace_summary.py {}", trace));
  REQUIRE(rc2 == 0);
  CHECK(plain.find("mean gap") == std::string::npos);
}

TEST_CASE("trace_summary: a trace without task events is an error") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/empty.json";
  std::ofstream(path) << R"({"traceEvents": []})";
  const auto [rc, out] = run_command(fmt::format("python3 tools/trace_summary.py {}", path));
  CHECK(rc == 1);
  CHECK(out.find("no task events") != std::string::npos);
}

}  // namespace
