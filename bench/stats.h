// A benchmark's samples summarised: min, median, p99 and mean (of microseconds, or any unit).
#pragma once

#include <algorithm>
#include <vector>

namespace mkc::bench {

struct Summary {
  double min = 0, median = 0, p99 = 0, mean = 0;
};

// Sorts `v`; an empty `v` gives zeros.
inline Summary summarize(std::vector<double>& v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  for (double x : v) s.mean += x / static_cast<double>(v.size());
  s.min = v.front();
  s.median = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  return s;
}

}  // namespace mkc::bench
