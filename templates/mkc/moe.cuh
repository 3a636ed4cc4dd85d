// MoE routing tasks: the all-to-all dispatch (counts, rows, finish) and the combine (rows back to
// their origin, weighted sum). Data-dependent: how many rows move where comes from the routing
// table at run time. Simple versions; see docs/COMPILER.md.
// Compiled by NVRTC only.
#pragma once

#include "mkc/views.cuh"

namespace mkc {

// MoE dispatch, step 1: this rank's rows per expert, into every rank's xcounts[rank, :].
// Args A2aCountsArgs; views {route (i32 [T, K]), xcounts_d for d in ranks}.
__device__ inline void a2a_counts(const KernelArgs& a, const View* v, const long long* args, int nb,
                                  int ranks) {
  const int* route = view_ptr<int>(a, v[0], nb);
  const long long E = args_as<abi::A2aCountsArgs>(args).experts, n = elems_from(v[0], 0);
  for (long long e = threadIdx.x; e < E; e += blockDim.x) {
    int c = 0;
    for (long long i = 0; i < n; ++i) c += route[i] == e;
    for (int d = 0; d < ranks; ++d) view_ptr<int>(a, v[1 + d], nb)[a.rank * E + e] = c;
  }
}

// MoE dispatch, step 2: rows [r0, r1) go to their experts' ranks, expert-major, then by source
// rank, then in source order; origin records (source rank, row, k). One warp per (row, k).
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
  for (long long p = r0 * K + warp; p < r1 * K; p += warps) {
    const long long tok = p / K, k = p % K;
    const int e = route[p];
    const long long d = e / per, le = e % per;
    // The row's place in Y_d: rows of d's lower experts (every source), of expert e from lower
    // source ranks, then this rank's earlier (row, k) pairs routed to e — counted by the warp, 32
    // route entries a step.
    long long pos = 0;
    for (long long e2 = d * per + lane; e2 < d * per + le; e2 += 32) {
      for (int s = 0; s < ranks; ++s) pos += xc[s * E + e2];
    }
    for (int s = lane; s < a.rank; s += 32) pos += xc[s * E + e];
    for (long long i = lane; i < p; i += 32) pos += route[i] == e;
    for (int o = 16; o > 0; o /= 2) pos += __shfl_xor_sync(0xffffffffu, pos, o);
    T* Y = view_ptr<T>(a, v[3 + d], nb);
    for (long long h = lane; h < H; h += 32) Y[pos * H + h] = X[tok * H + h];
    if (lane == 0) {
      int* origin = view_ptr<int>(a, v[3 + ranks + d], nb);
      origin[pos * 3 + 0] = a.rank;
      origin[pos * 3 + 1] = static_cast<int>(tok);
      origin[pos * 3 + 2] = static_cast<int>(k);
    }
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
    for (long long h = lane; h < H; h += 32) back[(tok * K + k) * H + h] = Y[p * H + h];
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
