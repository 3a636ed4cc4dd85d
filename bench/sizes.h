// Numbers on a benchmark's command line: counts in a range, byte sizes ("4K", "64M", "65536",
// lists "4K,1M"); and sizes in its tables ("4 KB", "64 MB", "8 B").
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/error.h"

namespace mkc::bench {

// `value` of `flag` as a whole number in [lo, hi], or UserError naming both.
inline long parse_count(const std::string& flag, const std::string& value, long lo, long hi) {
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || n < lo || n > hi)
    throw mkc::UserError(fmt::format("{}: `{}` is not a number in [{}, {}]", flag, value, lo, hi));
  return n;
}

inline int64_t parse_size(const std::string& flag, const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit(end);
  const int64_t mul = unit.empty()  ? 1
                      : unit == "K" ? 1024
                      : unit == "M" ? 1 << 20
                      : unit == "G" ? int64_t{1} << 30
                                    : 0;
  if (end == s.c_str() || mul == 0 || v <= 0 || v * mul > double(int64_t{1} << 34))
    throw mkc::UserError(fmt::format("{}: `{}` is not a size (e.g. 4K, 64M, 65536)", flag, s));
  return static_cast<int64_t>(v * mul);
}

inline std::vector<int64_t> parse_sizes(const std::string& flag, const std::string& list) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    out.push_back(parse_size(flag, list.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return out;
}

inline std::string size_text(int64_t b) {
  if (b % (1 << 20) == 0) return fmt::format("{} MB", b >> 20);
  if (b % 1024 == 0) return fmt::format("{} KB", b >> 10);
  return fmt::format("{} B", b);
}

}  // namespace mkc::bench
