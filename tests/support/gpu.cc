#include "tests/support/gpu.h"

#include "runtime/cuda_driver.h"

namespace mkc::testing {

bool gpu_present(int min_devices) {
  static const int count = [] {
    try {
      return rt::device_count();
    } catch (const std::exception&) {
      return 0;
    }
  }();
  return count >= min_devices;
}

}  // namespace mkc::testing
