// bench/gemm_bench's command line, where no GPU is needed: --list prints issue 36's sweep (33
// shapes, each M x N x K once) or the given shapes; bad flags (and bad --picks items) exit 1
// naming the flag; without a GPU a run exits 2 with an error line, never a crash. The
// measurements themselves run on a GPU (docs/RESULTS.md).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run.h"

namespace {

using mkc::testing::run_command;

std::vector<std::string> lines(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST_CASE("gemm_bench --sweep --list: issue 36's GEMM cases") {
  const auto [rc, out] = run_command("bench/gemm_bench --sweep --list");
  REQUIRE_MESSAGE(rc == 0, out);
  const std::vector<std::string> shapes = lines(out);
  CHECK(shapes.size() == 33);
  CHECK(std::set<std::string>(shapes.begin(), shapes.end()).size() == 33);
  for (const char* want : {"1x1280x8192", "16384x7168x2048", "512x8192x3584", "8192x8192x8192",
                           "3000x5000x4000", "1000x3000x520"}) {
    CHECK_MESSAGE(out.find(std::string(want) + "\n") != std::string::npos, want);
  }
  const auto [src, sout] = run_command("bench/gemm_bench --shapes 7x9x11,64x64x64 --list");
  CHECK(src == 0);
  CHECK(sout == "7x9x11\n64x64x64\n");
}

TEST_CASE("gemm_bench: bad flags name themselves and exit 1") {
  for (const char* args :
       {"--shapes 7x9", "--tune -1", "--tune x", "--iters 0", "--bogus", "--sweep --shapes 8x8x8",
        "--csv", "--picks 128x96", "--picks 128x128/0", "--picks 32x128", "--picks 128x128/2x",
        "--picks 128x128,", "--picks", "--picks 128x256/2c2", "--picks 128x256c3"}) {
    const auto [rc, out] = run_command(fmt::format("bench/gemm_bench --list {}", args));
    CHECK_MESSAGE(rc == 1, args, ": ", out);
    CHECK_MESSAGE(out.find("gemm_bench: error: ") != std::string::npos, args, ": ", out);
  }
  const auto [hrc, hout] = run_command("bench/gemm_bench --help");
  CHECK(hrc == 0);
  CHECK(hout.find("--tune N") != std::string::npos);
  CHECK(hout.find("--picks L") != std::string::npos);
  // A bad pick names the item and what a pick is.
  const auto [prc, pout] = run_command("bench/gemm_bench --list --picks 128x128/4,128x96/2");
  CHECK(prc == 1);
  CHECK_MESSAGE(pout.find("`128x96/2` is not BMxBN[/S|c2]") != std::string::npos, pout);
  // Good picks parse (the list then prints the shapes; nothing is measured).
  const auto [grc, gout] = run_command(
      "bench/gemm_bench --shapes 8x8x8 --picks 128x128/4,64x256,64x64/16,128x256c2 --list");
  CHECK_MESSAGE(grc == 0, gout);
  CHECK(gout == "8x8x8\n");
}

TEST_CASE("gemm_bench without a GPU: an error line and exit 2, not a crash") {
  const auto [probe, pout] = run_command("nvidia-smi -L");
  if (probe == 0 && pout.find("GPU 0") != std::string::npos) {
    MESSAGE("a GPU is here: the no-GPU path is not exercised");
    return;
  }
  const auto [rc, out] = run_command("bench/gemm_bench --shapes 64x64x64 --iters 1 --rounds 1");
  CHECK_MESSAGE(rc == 2, out);
  CHECK_MESSAGE(out.find("gemm_bench: error: ") != std::string::npos, out);
}

}  // namespace
