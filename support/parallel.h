// parallel_for: a host loop over [0, n) split across the machine's cores, for the per-element
// work on whole tensors that checking a launch does (random inputs, the reference, conversions,
// comparisons: hundreds of millions of elements at 256 MB). `fn(begin, end)` runs on disjoint
// ranges at once and must not throw; below `grain` elements per part it runs once, inline.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace mkc {

// The number of parts parallel_for(n, ...) uses (callers that keep per-part results size by it).
inline int64_t parallel_parts(int64_t n, int64_t grain = int64_t{1} << 18) {
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  return std::clamp<int64_t>((n + grain - 1) / grain, 1, cores);
}

// fn(part, begin, end) for each part of [0, n); part numbers are 0 .. parallel_parts(n) - 1.
template <typename F>
void parallel_parts_for(int64_t n, F&& fn, int64_t grain = int64_t{1} << 18) {
  const int64_t parts = parallel_parts(n, grain);
  const int64_t step = (n + parts - 1) / parts;
  std::vector<std::thread> threads;
  for (int64_t p = 1; p < parts; ++p) {
    threads.emplace_back([&fn, p, step, n] { fn(p, p * step, std::min(n, (p + 1) * step)); });
  }
  if (n > 0) fn(int64_t{0}, int64_t{0}, std::min(n, step));
  for (std::thread& t : threads) t.join();
}

template <typename F>
void parallel_for(int64_t n, F&& fn, int64_t grain = int64_t{1} << 18) {
  parallel_parts_for(
      n, [&fn](int64_t, int64_t b, int64_t e) { fn(b, e); }, grain);
}

}  // namespace mkc
