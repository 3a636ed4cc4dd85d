// bench/proxy_gpu_bench where no GPU is needed: its kernels (which call the proxy protocol of
// templates/mkc/sync.cuh) still compile with NVRTC, with no spill; a bad flag is refused.
// The measurement itself runs on a GPU machine (docs/RESULTS.md).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "tests/support/run.h"

namespace {

using mkc::testing::run_command;

std::string cache_env() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return fmt::format("MKC_CACHE_DIR={}/mkc-cache", tmp != nullptr ? tmp : "/tmp");
}

TEST_CASE("proxy_gpu_bench --compile-only: the kernels compile, without spills") {
  const auto [rc, out] =
      run_command(fmt::format("{} bench/proxy_gpu_bench --compile-only", cache_env()));
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK_MESSAGE(out.find("kernels compiled") != std::string::npos, out);
  CHECK_MESSAGE(out.find(" 0 spill bytes") != std::string::npos, out);
}

TEST_CASE("proxy_gpu_bench: --help, and a bad flag exits 1 naming it") {
  const auto [hrc, help] = run_command("bench/proxy_gpu_bench --help");
  CHECK(hrc == 0);
  CHECK(help.find("usage: proxy_gpu_bench") != std::string::npos);
  const auto [rc, out] = run_command("bench/proxy_gpu_bench --iters x");
  CHECK(rc == 1);
  CHECK_MESSAGE(out.find("--iters: `x` is not a number") != std::string::npos, out);
  const auto [src, sout] = run_command("bench/proxy_gpu_bench --sizes 4Q");
  CHECK(src == 1);
  CHECK_MESSAGE(sout.find("is not a size") != std::string::npos, sout);
}

}  // namespace
