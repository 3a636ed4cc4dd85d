// Index arithmetic over plan views, for the CPU interpreter and the kinds' interpreter steps: flat
// element indices of multi-indices, the contiguous rows of a box, and the ranges of abi.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "compiler/plan/plan.h"

namespace mkc::kinds {

inline int64_t product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

// Flat index of a multi-index inside a view (no allocation: this is the interpreter's inner loop).
template <typename... I>
int64_t flat(const plan::View& v, I... idx) {
  const int64_t ix[] = {static_cast<int64_t>(idx)...};
  int64_t f = 0;
  for (size_t d = 0; d < sizeof...(I); ++d) f = f * v.shape[d] + ix[d];
  return v.offset + f;
}

inline int64_t flat_vec(const plan::View& v, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < v.shape.size(); ++d) f = f * v.shape[d] + idx[d];
  return v.offset + f;
}

// Calls fn(src_flat, dst_flat, n) for each contiguous row of the box [lo, hi) of `src`, paired
// with the box of the same extents starting at `dst_lo` in `dst`.
template <typename F>
void for_rows(const plan::View& src, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
              const plan::View& dst, const std::vector<int64_t>& dst_lo, F fn) {
  const size_t n = lo.size();
  for (size_t d = 0; d < n; ++d) {
    if (lo[d] >= hi[d]) return;
  }
  const int64_t len = n == 0 ? 1 : hi[n - 1] - lo[n - 1];
  std::vector<int64_t> idx = lo, didx = dst_lo;
  for (;;) {
    fn(flat_vec(src, idx), flat_vec(dst, didx), len);
    if (n <= 1) return;
    size_t d = n - 1;
    for (;;) {
      --d;
      ++idx[d];
      ++didx[d];
      if (idx[d] < hi[d]) break;
      didx[d] -= idx[d] - lo[d];
      idx[d] = lo[d];
      if (d == 0) return;
    }
  }
}

// Reads a range (abi.h, "ranges") at args[pos]; advances pos.
inline void read_range(const std::vector<int64_t>& args, size_t* pos, std::vector<int64_t>* lo,
                       std::vector<int64_t>* hi) {
  int at = static_cast<int>(*pos);
  const abi::Range r = abi::read_range(reinterpret_cast<const abi::i64*>(args.data()), &at);
  lo->assign(r.lo, r.lo + r.n);
  hi->assign(r.hi, r.hi + r.n);
  *pos = static_cast<size_t>(at);
}

// The reduction operators of abi.h: 0 sum, 1 max, 2 min.
inline double reduce2(int64_t op, double a, double b) {
  if (op == 0) return a + b;
  if (op == 1) return std::max(a, b);
  return std::min(a, b);
}

}  // namespace mkc::kinds
