// The host JIT API (runtime/api.h): compile from a string, set and get tensors by name, launch;
// the caller's mistakes named (unknown tensor, wrong element count, rank out of range, a schedule
// with errors); without a GPU, a clear environment error.
#include "runtime/api.h"

#include <doctest/doctest.h>

#include <cmath>

#include "support/error.h"
#include "tests/support/gpu.h"

namespace mkc {
namespace {

const char* kScale = R"(schedule scale {
  param N = 1000
  input  X : f32[N]
  output Y : f32[N]
  device twice(x: f32) -> f32 { return 2.0f * x + 1.0f; }
  compute y = map(twice, X -> Y)
}
)";

TEST_CASE("api: without a GPU, compiling for the machine is an environment error") {
  if (testing::gpu_present()) return;  // the GPU case below covers the machine with one
  CHECK_THROWS_AS(Kernel::from_string("scale.mks", kScale), EnvironmentError);
}

GPU_TEST_CASE("api: set, launch, get by tensor name; mistakes are named") {
  Kernel k = Kernel::from_string("scale.mks", kScale, {.defines = {{"N", 4099}}, .ranks = 1});
  REQUIRE(k.ranks() == 1);
  CHECK(k.tensor("X").elements() == 4099);
  CHECK(k.tensor("X").input);
  CHECK(!k.tensor("Y").input);
  std::vector<double> x(4099);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1 * static_cast<double>(i)) * 100;
  k.set("X", 0, x);
  k.launch();
  const std::vector<double> y = k.get("Y", 0);
  REQUIRE(y.size() == x.size());
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = 2.0 * static_cast<float>(x[i]) + 1.0;
    bad += std::fabs(y[i] - want) > 1e-4 * std::fabs(want) + 1e-6;
  }
  CHECK(bad == 0);
  CHECK(k.time(10) > 0);

  CHECK_THROWS_WITH_AS(k.set("Z", 0, x), doctest::Contains("has no tensor `Z` (it has X, Y)"),
                       UserError);
  CHECK_THROWS_WITH_AS(k.set("X", 0, std::vector<double>(5)),
                       doctest::Contains("5 values for a f32[4099] tensor"), UserError);
  CHECK_THROWS_WITH_AS(k.get("Y", 1), doctest::Contains("rank 1 is not in [0, 1)"), UserError);
  CHECK_THROWS_WITH_AS(Kernel::from_string("bad.mks", "schedule s { input X : f33[4] }"),
                       doctest::Contains("bad.mks:1:"), UserError);
}

}  // namespace
}  // namespace mkc
