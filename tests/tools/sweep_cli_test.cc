// bench/sweep.py without a GPU: --dry-run lists one command per family and model (gemm_bench
// --sweep, gemm_allreduce_bench at R 1, moe_bench.py at the four models); --summarize reads
// the tables a run leaves and prints each family's geometric mean and minimum, the tuned GEMMs
// apart; bad flags are errors. The sweep itself runs on a GPU (docs/RESULTS.md).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/run.h"

namespace {

using mkc::testing::run_command;

TEST_CASE("sweep.py --dry-run: a command per family and model") {
  const auto [rc, out] = run_command("python3 bench/sweep.py --dry-run --bin /b --tune 2");
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK(out.find("gemm: /b/gemm_bench --sweep --tune 2") != std::string::npos);
  CHECK(out.find("gemm_allreduce: /b/gemm_allreduce_bench --ranks 1 --m 16,128,1024,4096") !=
        std::string::npos);
  for (const char* model : {"--experts 256 --topk 8 --hidden 7168 --ffn 2048",
                            "--experts 128 --topk 8 --hidden 2048 --ffn 768",
                            "--experts 8 --topk 2 --hidden 6144 --ffn 16384",
                            "--experts 16 --topk 1 --hidden 5120 --ffn 8192"}) {
    CHECK_MESSAGE(out.find(model) != std::string::npos, model);
  }
  const auto [orc, oout] = run_command("python3 bench/sweep.py --dry-run --only gemm");
  CHECK(orc == 0);
  CHECK(oout.find("moe") == std::string::npos);
  CHECK(run_command("python3 bench/sweep.py --only gemm,fft --dry-run").first == 2);
  CHECK(run_command("python3 bench/sweep.py --tune -1 --dry-run").first == 2);
}

TEST_CASE("sweep.py --summarize: each family's geometric mean and minimum") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/sweep_tables";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/gemm.csv") << "bench,case,cublas_over_mkc,cublas_over_tuned\n"
                                      "gemm_bench,1x8x8,0.5,0.8\n"
                                      "gemm_bench,2x8x8,2.0,1.25\n";
  std::ofstream(dir + "/gemm_allreduce.csv") << "bench,case,m,mkc_over_gemm\n"
                                                "gemm_allreduce_bench,x,16,1.25\n";
  std::ofstream(dir + "/moe_8_2.csv") << "T,case,ratio\n128,moe_dispatch_gemm,0.9\n";
  const auto [rc, out] = run_command(fmt::format("python3 bench/sweep.py --summarize {}", dir));
  REQUIRE_MESSAGE(rc == 0, out);
  // gemm auto: sqrt(0.5 * 2.0) = 1; tuned: sqrt(0.8 * 1.25) = 1; fused: GEMM alone / fused = 0.8.
  CHECK_MESSAGE(out.find("sweep: gemm            auto     2 cases: geometric mean 1.000, minimum "
                         "0.500 (1x8x8)") != std::string::npos,
                out);
  CHECK(out.find("tuned    2 cases: geometric mean 1.000, minimum 0.800") != std::string::npos);
  CHECK(out.find("gemm_allreduce  fused    1 cases: geometric mean 0.800") != std::string::npos);
  CHECK(out.find("moe_dispatch_gemm E 8 top-2 T 128") != std::string::npos);
  // The whole sweep at mkc's own pick: 0.5, 2.0, 0.8, 0.9 (the tuned column apart).
  CHECK(out.find("geometric mean 0.921, minimum 0.500 over 4 cases") != std::string::npos);
  // An empty folder has nothing to summarize: exit 1.
  std::filesystem::create_directories(dir + "/empty");
  CHECK(run_command(fmt::format("python3 bench/sweep.py --summarize {}/empty", dir)).first == 1);
}

}  // namespace
