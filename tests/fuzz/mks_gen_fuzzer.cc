// libFuzzer target: the bytes choose a well-formed schedule (tests/fuzz/mks_gen.h: loops, clashing
// names, `after` in every direction, hostile and benign device bodies), which goes through check,
// planning, code generation and `mkc verify` at R 1, 2 and 3. It aborts, printing the schedule,
// when the property breaks: an exception other than UserError, a schedule `compile` accepts that
// `verify` finds a race, deadlock or wrong output in, or a hostile device body accepted. Built and
// run by tools/fuzz.sh (clang 14), not by Bazel; tests/fuzz/mks_gen_test runs it on fixed seeds.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tests/fuzz/mks_gen.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mkc::fuzz::Choices choices(std::string_view(reinterpret_cast<const char*>(data), size));
  const mkc::fuzz::Generated schedule = mkc::fuzz::generate_schedule(choices);
  const std::string broke = mkc::fuzz::check_property(schedule);
  if (!broke.empty()) {
    std::fprintf(stderr, "mks_gen_fuzzer: the property broke: %s\n", broke.c_str());
    std::abort();
  }
  return 0;
}
