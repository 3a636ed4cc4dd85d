// Addressing inside views and boxes: the helpers every task kind's device code shares. A view is
// a contiguous sub-tensor of a buffer (templates/mkc/abi.h); a box [lo, lo + ext) over its
// dimensions lies in it as runs of contiguous elements.
// Compiled by NVRTC only.
#pragma once

#include "mkc/sync.cuh"
#include "mkc/types.cuh"

namespace mkc {

typedef unsigned long long uptr;

// -infinity without <math.h> (NVRTC has none).
__device__ __forceinline__ float neg_inf() {
  return __int_as_float(0xff800000);
}

// Elements of a view from dimension d on (the row length of dimension d - 1).
__device__ __forceinline__ long long elems_from(const View& v, int d) {
  long long p = 1;
  for (int i = d; i < v.ndim; ++i) p *= v.shape[i];
  return p;
}

// Flat offset (within the view) of element `idx` of the box whose extents are `ext`, starting at
// `lo`, in a view of shape `v`.
__device__ __forceinline__ long long box_offset(const View& v, const long long* lo,
                                                const long long* ext, int n, long long idx) {
  long long off = 0, stride = 1;
  for (int d = n - 1; d >= 0; --d) {
    const long long i = idx % ext[d];
    idx /= ext[d];
    off += (lo[d] + i) * stride;
    stride *= v.shape[d];
  }
  return off;
}

// The length of the box's runs, contiguous in every one of `views`: the innermost dimensions the
// box covers fully in every view, times the first one it does not.
__device__ __forceinline__ long long box_run(const View* const* views, int nviews,
                                             const long long* ext, int n) {
  long long len = 1;
  for (int d = n - 1; d >= 0; --d) {
    len *= ext[d];
    bool full = true;
    for (int k = 0; k < nviews; ++k) full = full && ext[d] == views[k]->shape[d];
    if (!full) break;
  }
  return len;
}

// True when every run of the box (starting at lo in view v, base pointer p) starts on a 16-byte
// boundary: the first run does, and so does every stride between runs.
template <typename T>
__device__ __forceinline__ bool runs_aligned(const T* p, const View& v, const long long* lo,
                                             const long long* ext, int n, long long run) {
  constexpr long long V = 16 / sizeof(T);
  if ((reinterpret_cast<uptr>(p) & 15) != 0 || run % V != 0) return false;
  long long off = 0, stride = 1, covered = 1;
  bool aligned = true;
  for (int d = n - 1; d >= 0; --d) {
    off += lo[d] * stride;
    if (covered >= run && stride % V != 0) aligned = false;  // a stride between runs
    covered *= ext[d];
    stride *= v.shape[d];
  }
  return aligned && off % V == 0;
}

// Vector j (of `per_run` per run) of the box: its element offset in view v.
__device__ __forceinline__ long long run_vec_offset(const View& v, const long long* lo,
                                                    const long long* ext, int n, long long run,
                                                    long long per_run, long long j, long long V) {
  return box_offset(v, lo, ext, n, (j / per_run) * run) + (j % per_run) * V;
}

}  // namespace mkc
