// libFuzzer target: any bytes as a .npy file through rt::read_npy, with and without an expected
// shape. It must return or throw UserError, never crash, hang, trip a sanitizer or allocate past
// the fuzzer's memory limit (the reader bounds every allocation by the file's size). Built and run
// by tools/fuzz.sh (clang 14), not by Bazel.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/npy.h"
#include "support/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "npy_fuzz." + std::to_string(::getpid()) + ".npy";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  static const std::vector<int64_t> expected = {2, 3};
  for (const std::vector<int64_t>* shape :
       {static_cast<const std::vector<int64_t>*>(nullptr), &expected}) {
    try {
      const mkc::rt::NpyArray a = mkc::rt::read_npy(path, shape);
      int64_t count = 1;
      for (int64_t d : a.shape) count *= d;
      if (static_cast<int64_t>(a.values.size()) != count) __builtin_trap();
      if (shape != nullptr && a.shape != *shape) __builtin_trap();
    } catch (const mkc::UserError&) {
    }
  }
  return 0;
}
