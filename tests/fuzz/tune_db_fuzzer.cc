// libFuzzer target: any bytes as a tuning database file (tune/db.h). Reading it must give its
// entries or throw UserError (not a database, or inconsistent) or EnvironmentError, never another
// exception, a crash or a sanitizer report; lookup() must turn every problem into a warning. An
// accepted file must keep its entries through a store of one more. Built and run by
// tools/fuzz.sh (clang 14).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "support/error.h"
#include "tune/db.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "tune_db_fuzz." + std::to_string(::getpid()) + ".json";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  mkc::tune::Key key;
  key.schedule = "gemm";
  key.defines = {{"M", 16}};
  key.arch = "sm_90a";
  std::vector<std::string> warnings;
  (void)mkc::tune::lookup(path, key, &warnings);
  size_t before = 0;
  try {
    before = mkc::tune::read_all(path).size();
  } catch (const mkc::UserError&) {
    if (warnings.empty()) __builtin_trap();  // the reader refused what lookup accepted
    return 0;
  } catch (const mkc::EnvironmentError&) {
    return 0;
  }
  mkc::tune::Entry e;
  e.ops["mm"] = mkc::tune::OpKnobs{{128, 256, 64}, 1, 1.0};
  e.tuned_at = "2026-12-05T00:00:00Z";
  mkc::tune::store(path, key, e);
  const auto after = mkc::tune::read_all(path);
  if (after.size() != before && after.size() != before + 1) __builtin_trap();
  if (!mkc::tune::lookup(path, key, &warnings).has_value()) __builtin_trap();
  return 0;
}
