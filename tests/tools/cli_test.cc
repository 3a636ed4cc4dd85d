// The mkc command line, driven in-process: output and exit codes of the foundation commands.
#include "tools/mkc/cli.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <sstream>

#include "support/version.h"
#include "tests/support/gpu.h"

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

TEST_CASE("--version prints mkc's and NVRTC's versions") {
  const Result r = run_cli({"--version"});
  CHECK(r.code == 0);
  CHECK(r.out.find(std::string("mkc ") + kVersion) == 0);
  CHECK(r.out.find("NVRTC 1") != std::string::npos);
  CHECK(r.err.empty());
}

TEST_CASE("--help and help print the usage on stdout") {
  for (const char* flag : {"--help", "-h", "help"}) {
    const Result r = run_cli({flag});
    CHECK(r.code == 0);
    CHECK(r.out.find("usage: mkc") == 0);
  }
}

TEST_CASE("no arguments: usage on stderr, exit 1") {
  const Result r = run_cli({});
  CHECK(r.code == 1);
  CHECK(r.err.find("usage: mkc") == 0);
}

TEST_CASE("an unknown command is a user error naming it") {
  const Result r = run_cli({"frobnicate"});
  CHECK(r.code == 1);
  CHECK(r.err.find("unknown command or option `frobnicate`") != std::string::npos);
}

TEST_CASE("devices: lists GPUs, or exits 2 with a clear message when there is no driver") {
  const Result r = run_cli({"devices"});
  if (mkc::testing::gpu_present()) {
    CHECK(r.code == 0);
    CHECK(r.out.find("device(s)") != std::string::npos);
  } else {
    CHECK(r.code == 2);
    CHECK(r.err.find("no CUDA driver") != std::string::npos);
  }
}

TEST_CASE("run under a launcher: its variables are checked first, --ranks must agree with them") {
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  Result r = run_cli({"run", "samples/gemm.mks", "--ranks", "4"});
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("4 ranks asked for (--ranks), but this process is rank 1 of a job of 2 "
                           "(torchrun/mkrun)") != std::string::npos,
                r.err);
  ::setenv("RANK", "2", 1);
  r = run_cli({"run", "samples/gemm.mks"});
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("RANK") != std::string::npos, r.err);
}

}  // namespace
}  // namespace mkc::cli
