// libFuzzer target: any bytes as a device-function body through dsl::scan_cpp_body. Besides never
// crashing, the scan must be consistent: an end it finds is a `}` inside the text, a problem lies
// inside the text, and the body up to that end, closed again, ends at the same place. Built and run
// by tools/fuzz.sh (clang 14), not by Bazel.
#include <cstddef>
#include <cstdint>
#include <string>

#include "dsl/cpp_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using mkc::dsl::CppBodyScan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const CppBodyScan s = mkc::dsl::scan_cpp_body(text);
  if (s.problem_at != CppBodyScan::kNone && s.problem_at + s.problem_length > text.size())
    __builtin_trap();
  if (s.fatal && s.end != CppBodyScan::kNone) __builtin_trap();
  if (s.end == CppBodyScan::kNone) return 0;
  if (s.end >= text.size() || text[s.end] != '}') __builtin_trap();
  const CppBodyScan again = mkc::dsl::scan_cpp_body(text.substr(0, s.end + 1));
  if (again.end != s.end) __builtin_trap();
  return 0;
}
