// The driver loader without a GPU: a missing library must give a clear EnvironmentError that names
// the library and says what to do, never a crash.
#include <doctest/doctest.h>

#include <string>

#include "runtime/cuda_driver.h"
#include "support/error.h"

namespace mkc::rt {
namespace {

TEST_CASE("loading a driver library that does not exist names it and gives a hint") {
  try {
    Driver::load("libmkc_no_such_driver.so.1");
    FAIL("loading a missing driver did not throw");
  } catch (const EnvironmentError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("no CUDA driver") != std::string::npos);
    CHECK(msg.find("libmkc_no_such_driver.so.1") != std::string::npos);
    CHECK(msg.find("libcuda.so.1 is on the loader path") != std::string::npos);
  }
}

TEST_CASE("a library that is not a CUDA driver is refused by name") {
  // libc is present everywhere and has no cuGetProcAddress_v2.
  try {
    Driver::load("libc.so.6");
    FAIL("loading libc as a driver did not throw");
  } catch (const EnvironmentError& e) {
    CHECK(std::string(e.what()).find("cuGetProcAddress_v2") != std::string::npos);
  }
}

TEST_CASE("device arch: Hopper gets the arch-specific target") {
  DeviceInfo h200{0, "H200", 9, 0, 132, 0};
  DeviceInfo a100{0, "A100", 8, 0, 108, 0};
  CHECK(h200.arch() == "sm_90a");
  CHECK(a100.arch() == "sm_80");
}

}  // namespace
}  // namespace mkc::rt
