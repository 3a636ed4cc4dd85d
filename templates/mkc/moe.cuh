// MoE routing tasks: the all-to-all dispatch (counts, rows, finish) and the combine (rows back to
// their origin, weighted sum). Data-dependent: how many rows move where comes from the routing
// table at run time. Simple versions; see docs/COMPILER.md.
// Compiled by NVRTC only.
#pragma once

#include "mkc/views.cuh"

namespace mkc {

// Shared memory of the routing tasks: one per-expert table (kMoeBins experts at a time).
constexpr int kMoeBins = 2048;
__device__ __forceinline__ int* moe_bins() {
  __shared__ int bins[kMoeBins];
  return bins;
}

// A row of H elements, 16 bytes at a time when both rows allow it, by the lanes of a warp.
template <typename T>
__device__ __forceinline__ void copy_row_warp(T* dst, const T* src, long long H, int lane) {
  constexpr long long V = 16 / sizeof(T);
  if (H % V == 0 &&
      ((reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src)) &
       15) == 0) {
    // Four 16-byte loads in flight per lane before their stores (a row is 14 KB at H = 7168).
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    const long long n = H / V;
    long long i = lane;
    for (; i + 96 < n; i += 128) {
      const uint4 x0 = s[i], x1 = s[i + 32], x2 = s[i + 64], x3 = s[i + 96];
      d[i] = x0;
      d[i + 32] = x1;
      d[i + 64] = x2;
      d[i + 96] = x3;
    }
    for (; i < n; i += 32) d[i] = s[i];
    return;
  }
  for (long long h = lane; h < H; h += 32) dst[h] = src[h];
}

// MoE dispatch, step 1: this rank's rows per expert (a shared-memory histogram), into every
// rank's xcounts[rank, :]. Route entries outside [0, E) are not counted (nor sent).
// Args A2aCountsArgs; views {route (i32 [T, K]), xcounts_d for d in ranks}.
__device__ inline void a2a_counts(const KernelArgs& a, const View* v, const long long* args, int nb,
                                  int ranks) {
  const int* route = view_ptr<int>(a, v[0], nb);
  const long long E = args_as<abi::A2aCountsArgs>(args).experts, n = elems_from(v[0], 0);
  int* hist = moe_bins();
  for (long long e0 = 0; e0 < E; e0 += kMoeBins) {
    const long long bins = E - e0 < kMoeBins ? E - e0 : kMoeBins;
    for (long long i = threadIdx.x; i < bins; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
      const long long e = route[i] - e0;
      if (e >= 0 && e < bins) atomicAdd(hist + e, 1);
    }
    __syncthreads();
    for (long long i = threadIdx.x; i < bins; i += blockDim.x) {
      for (int d = 0; d < ranks; ++d) view_ptr<int>(a, v[1 + d], nb)[a.rank * E + e0 + i] = hist[i];
    }
    __syncthreads();
  }
}

// MoE dispatch, step 2: rows [r0, r1) go to their experts' ranks, expert-major, then by source
// rank, then in source order; origin records (source rank, row, k). Linear in the routing table:
// per expert, the place of this task's first row (rows of d's lower experts from every source, of
// lower source ranks, and this rank's (row, k) pairs before r0 — a shared-memory histogram), then
// one warp per (row, k) adds the earlier pairs of the task's own rows and copies the row.
// Args A2aSendArgs; views {X, route, xcounts (this rank's, [R, E]), Y_d..., origin_d...}.
template <typename T>
__device__ void a2a_send(const KernelArgs& a, const View* v, const long long* args, int nb,
                         int ranks) {
  const T* X = view_ptr<T>(a, v[0], nb);
  const int* route = view_ptr<int>(a, v[1], nb);
  const int* xc = view_ptr<int>(a, v[2], nb);
  const abi::A2aSendArgs& s = args_as<abi::A2aSendArgs>(args);
  const long long r0 = s.r0, r1 = s.r1, E = s.experts, K = s.k, per = E / ranks, H = v[0].shape[1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  int* base = moe_bins();
  for (long long e0 = 0; e0 < E; e0 += kMoeBins) {
    const long long bins = E - e0 < kMoeBins ? E - e0 : kMoeBins;
    for (long long i = threadIdx.x; i < bins; i += blockDim.x) base[i] = 0;
    __syncthreads();
    for (long long i = threadIdx.x; i < r0 * K; i += blockDim.x) {
      const long long e = route[i] - e0;
      if (e >= 0 && e < bins) atomicAdd(base + e, 1);
    }
    __syncthreads();
    for (long long i = threadIdx.x; i < bins; i += blockDim.x) {
      const long long e = e0 + i, d = e / per;
      long long off = 0;
      for (long long e2 = d * per; e2 < e; ++e2) {
        for (int r = 0; r < ranks; ++r) off += xc[r * E + e2];
      }
      for (int r = 0; r < a.rank; ++r) off += xc[r * E + e];
      base[i] += static_cast<int>(off);
    }
    __syncthreads();
    for (long long p = r0 * K + warp; p < r1 * K; p += warps) {
      const long long e = route[p];
      if (e < e0 || e >= e0 + bins) continue;
      long long pos = 0;
      for (long long i = r0 * K + lane; i < p; i += 32) pos += route[i] == e;
      for (int o = 16; o > 0; o /= 2) pos += __shfl_xor_sync(0xffffffffu, pos, o);
      pos += base[e - e0];
      const long long tok = p / K, k = p % K, d = e / per;
      copy_row_warp(view_ptr<T>(a, v[3 + d], nb) + pos * H, X + tok * H, H, lane);
      if (lane == 0) {
        int* origin = view_ptr<int>(a, v[3 + ranks + d], nb);
        origin[pos * 3 + 0] = a.rank;
        origin[pos * 3 + 1] = static_cast<int>(tok);
        origin[pos * 3 + 2] = static_cast<int>(k);
      }
    }
    __syncthreads();
  }
}

// MoE dispatch, step 3: counts[s, e] = xcounts[s, rank * E / R + e]. Args ExpertsArgs; views
// {xcounts, counts}.
__device__ inline void a2a_finish(const KernelArgs& a, const View* v, const long long* args, int nb,
                                  int ranks) {
  const int* xc = view_ptr<int>(a, v[0], nb);
  int* counts = view_ptr<int>(a, v[1], nb);
  const long long E = args_as<abi::ExpertsArgs>(args).experts, per = E / ranks;
  for (long long i = threadIdx.x; i < ranks * per; i += blockDim.x)
    counts[i] = xc[(i / per) * E + a.rank * per + i % per];
}

// MoE combine, step 1: every received row back to back_s[row, k] of its origin. One warp per row.
// Args ExpertsArgs; views {Y, origin, xcounts, back_s...}.
template <typename T>
__device__ void combine_send(const KernelArgs& a, const View* v, const long long* args, int nb,
                             int ranks) {
  const T* Y = view_ptr<T>(a, v[0], nb);
  const int* origin = view_ptr<int>(a, v[1], nb);
  const int* xc = view_ptr<int>(a, v[2], nb);
  const long long E = args_as<abi::ExpertsArgs>(args).experts, per = E / ranks, H = v[0].shape[1];
  long long total = 0;
  for (int s = 0; s < ranks; ++s) {
    for (long long le = 0; le < per; ++le) total += xc[s * E + a.rank * per + le];
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (long long p = warp; p < total; p += warps) {
    const int s = origin[p * 3], tok = origin[p * 3 + 1], k = origin[p * 3 + 2];
    T* back = view_ptr<T>(a, v[3 + s], nb);
    const long long K = v[3 + s].shape[1];
    copy_row_warp(back + (tok * K + k) * H, Y + p * H, H, lane);
  }
}

// MoE combine, step 2: Out[t] = sum_k W[t, k] * back[t, k] for rows [r0, r1).
// Args CombineReduceArgs; views {back [T, K, H], W (f32 [T, K]) or back, Out}.
template <typename T>
__device__ void combine_reduce(const KernelArgs& a, const View* v, const long long* args, int nb) {
  const T* back = view_ptr<T>(a, v[0], nb);
  const abi::CombineReduceArgs& c = args_as<abi::CombineReduceArgs>(args);
  const float* w = c.has_weights ? view_ptr<float>(a, v[1], nb) : nullptr;
  T* out = view_ptr<T>(a, v[2], nb);
  const long long K = v[0].shape[1], H = v[0].shape[2];
  for (long long i = c.r0 * H + threadIdx.x; i < c.r1 * H; i += blockDim.x) {
    const long long tok = i / H, h = i % H;
    float acc = 0.0f;
    for (long long k = 0; k < K; ++k)
      acc += (w ? w[tok * K + k] : 1.0f) * to_f32(back[(tok * K + k) * H + h]);
    out[i] = from_f32<T>(acc);
  }
}

}  // namespace mkc
