// GPU_TEST_CASE: a doctest case that needs a GPU. Where no driver or no device is present (CI, a
// developer laptop) doctest reports it skipped, never passed. Targets holding such cases are also
// tagged "gpu" (mkc_test(gpu = True)) so a GPU machine can select them.
#pragma once

#include <doctest/doctest.h>

namespace mkc::testing {

// True when the CUDA driver loads and sees at least `min_devices` GPUs (cached).
bool gpu_present(int min_devices = 1);

}  // namespace mkc::testing

#define GPU_TEST_CASE(name) TEST_CASE(name* doctest::skip(!::mkc::testing::gpu_present()))
#define MULTI_GPU_TEST_CASE(name, n) TEST_CASE(name* doctest::skip(!::mkc::testing::gpu_present(n)))
