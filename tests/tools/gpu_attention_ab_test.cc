// tools/gpu_attention_ab.sh on the CPU: its --help, and the usage errors before anything runs
// (the comparison itself needs a GPU and two builds: docs/RESULTS.md records its runs).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "tests/support/run.h"

namespace {

using mkc::testing::run_command;

TEST_CASE("gpu_attention_ab.sh: --help, and refusals without two builds") {
  auto [rc, out] = run_command("bash tools/gpu_attention_ab.sh --help");
  CHECK(rc == 0);
  CHECK_MESSAGE(out.find("Two builds of the attention tile") != std::string::npos, out);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  std::tie(rc, out) = run_command(fmt::format("bash tools/gpu_attention_ab.sh {}", dir));
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("give two build folders") != std::string::npos, out);
  std::tie(rc, out) = run_command(fmt::format("bash tools/gpu_attention_ab.sh {0} {0}", dir));
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("libmkc.so: no such file") != std::string::npos, out);
  std::tie(rc, out) = run_command("bash tools/gpu_attention_ab.sh --bogus");
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("unknown option --bogus") != std::string::npos, out);
  // An option without its value, or a value of the wrong form: the usage, not a shell error.
  std::tie(rc, out) =
      run_command(fmt::format("bash tools/gpu_attention_ab.sh {0} {0} --rounds", dir));
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("--rounds needs a value") != std::string::npos, out);
  std::tie(rc, out) =
      run_command(fmt::format("bash tools/gpu_attention_ab.sh {0} {0} --rounds two", dir));
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("--rounds two is not a count") != std::string::npos, out);
  std::tie(rc, out) = run_command(
      fmt::format("bash tools/gpu_attention_ab.sh {0} {0} --sass-shape 4096x64x0", dir));
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("is not BxHxSxDxCAUSAL") != std::string::npos, out);
}

}  // namespace
