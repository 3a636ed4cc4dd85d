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
    // Eight 16-byte loads in flight per lane before their stores (4 KB per warp; a row is 14 KB
    // at H = 7168): the copy is bound by the bytes in flight, not by instructions.
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    const long long n = H / V;
    long long i = lane;
    for (; i + 7 * 32 < n; i += 8 * 32) {
      uint4 x[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) x[u] = s[i + 32 * u];
#pragma unroll
      for (int u = 0; u < 8; ++u) d[i + 32 * u] = x[u];
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
      for (int d = 0; d < ranks; ++d) {
#ifdef MKC_HAS_PROXY
        if (other_node(a, d)) continue;
#endif
        view_ptr<int>(a, v[1 + d], nb)[a.rank * E + e0 + i] = hist[i];
      }
    }
    __syncthreads();
  }
#ifdef MKC_HAS_PROXY
  // To ranks of other nodes: this rank's row of its own xcounts, now whole, through the proxy.
  if (threadIdx.x == 0) {
    const int* own = view_ptr<int>(a, v[1 + a.rank], nb) + a.rank * E;
    __threadfence_system();  // the CTA's writes of the row, before the proxy reads it
    u64 last = ~0ull;
    for (int d = 0; d < ranks; ++d) {
      if (!other_node(a, d)) continue;
      const u64 e = proxy_claim(a, 1);
      if (e == ~0ull) return;  // recorded
      proxy_publish(a, e, own_heap_offset(a, own),
                    remote_heap_offset<int>(a, v[1 + d], nb) + a.rank * E * 4,
                    E * static_cast<long long>(sizeof(int)), d, -1);
      last = e;
    }
    if (last != ~0ull) proxy_drain(a, last);
  }
#endif
}

// Exclusive prefix sum of x[0, n) in place, by the whole block (n <= kMoeBins); returns the sum.
// Each thread sums a run of ceil(n / blockDim) values, the runs' sums are scanned by shuffles in
// each warp and across warps, then each thread writes its run's prefix. Three block barriers.
__device__ inline int block_exclusive_scan(int* x, int n) {
  __shared__ int warp_sum[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int per = (n + blockDim.x - 1) / blockDim.x;
  const int lo = threadIdx.x * per, hi = lo + per < n ? lo + per : n;
  int own = 0;
  for (int i = lo; i < hi; ++i) own += x[i];
  int incl = own;
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) warp_sum[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int w = lane < warps ? warp_sum[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    warp_sum[lane] = w;
  }
  __syncthreads();
  int run = (warp > 0 ? warp_sum[warp - 1] : 0) + incl - own;
  for (int i = lo; i < hi; ++i) {
    const int v = x[i];
    x[i] = run;
    run += v;
  }
  const int total = warp_sum[warps - 1];
  __syncthreads();
  return total;
}

// Pairs (row, k) of a send task placed at a time (shared memory: 4 bytes each).
constexpr int kSendChunk = 1024;

// MoE dispatch, step 2: rows [r0, r1) go to their experts' ranks, expert-major, then by source
// rank, then in source order; origin records (source rank, row, k). Linear in the routing table
// and in the rows moved:
//  - per expert e (of destination d), the place of this task's first row: the rows of d's lower
//    experts from every source (an exclusive block scan of the counts summed over sources), this
//    expert's rows from lower source ranks, and this rank's (row, k) pairs before r0 (a
//    shared-memory histogram);
//  - then kSendChunk pairs at a time, warp 0 gives each pair its place in source order (32 pairs
//    a step: __match_any_sync groups the lanes of one expert, the lowest lane bumps the expert's
//    next place), and every warp copies rows, one (row, k) pair per warp, 16 bytes per lane.
// Experts are taken kMoeBins at a time; a destination's experts may straddle two windows (`carry`
// keeps the scan's running total and the start of the destination that straddles).
// Across nodes (MKC_HAS_PROXY), a destination of another node gets one request per expert for
// the task's rows (and one for their origin entries), not one per row: the warps copy such rows
// into the sender's `staged` (and their origin entries into `sent`) grouped by expert, then a
// thread per expert asks the proxy for the run. A task's staging region is its pairs' own,
// [r0 * K, r1 * K); inside it a window's experts follow each other in expert order (a histogram
// of the task's pairs and its exclusive scan, kept in `before` as "stage offset - first place",
// so that a run's end is base[e] + before[e] and its start is the previous expert's end).
// Args A2aSendArgs; views {X, route, xcounts (this rank's, [R, E]), Y_d..., origin_d...
// [, sent, staged]}.
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
  __shared__ int before[kMoeBins];  // exclusive scan of rows per expert (all sources)
  __shared__ int place[kSendChunk];
  // Scan total of earlier windows; start of a straddling group; staged rows of earlier windows.
  __shared__ long long carry[3];
  if (threadIdx.x == 0) carry[0] = carry[1] = carry[2] = 0;
#ifdef MKC_HAS_PROXY
  if (threadIdx.x == 0) proxy_task_end() = 0;  // before the window loop's first barrier
  // The rows to other nodes and their origin entries, staged where the proxy reads (this heap):
  // staged [T * K, H], sent [T * K, 3].
  int* const sent = view_ptr<int>(a, v[3 + 2 * ranks], nb);
  T* const staged = view_ptr<T>(a, v[4 + 2 * ranks], nb);
  const long long row_bytes = H * static_cast<long long>(sizeof(T));
#endif
  for (long long e0 = 0; e0 < E; e0 += kMoeBins) {
    const int bins = static_cast<int>(E - e0 < kMoeBins ? E - e0 : kMoeBins);
    for (int i = threadIdx.x; i < bins; i += blockDim.x) {
      const long long e = e0 + i;
      int all = 0, lower = 0;
      for (int r = 0; r < ranks; ++r) {
        const int c = xc[r * E + e];
        all += c;
        lower += r < a.rank ? c : 0;
      }
      before[i] = all;
      base[i] = lower;
    }
    __syncthreads();
    for (long long i = threadIdx.x; i < r0 * K; i += blockDim.x) {
      const long long e = route[i] - e0;
      if (e >= 0 && e < bins) atomicAdd(base + e, 1);
    }
    const int total = block_exclusive_scan(before, bins);  // its barriers order the histogram
    const long long done = carry[0];
    for (int i = threadIdx.x; i < bins; i += blockDim.x) {
      const long long g = (e0 + i) / per * per;  // the destination's first expert
      const long long start = g >= e0 ? before[g - e0] + done : carry[1];
      base[i] += static_cast<int>(before[i] + done - start);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const long long g = (e0 + bins) / per * per;  // the group that goes on in the next window
      if (g >= e0 && g < e0 + bins) carry[1] = before[g - e0] + done;
      carry[0] = done + total;
    }
#ifdef MKC_HAS_PROXY
    // The task's pairs per expert, scanned: before[i] = stage offset of expert i's run (in the
    // window) - its first place.
    __syncthreads();  // thread 0 has read `before`
    for (int i = threadIdx.x; i < bins; i += blockDim.x) before[i] = 0;
    __syncthreads();
    for (long long i = r0 * K + threadIdx.x; i < r1 * K; i += blockDim.x) {
      const long long e = route[i] - e0;
      if (e >= 0 && e < bins) atomicAdd(before + e, 1);
    }
    __syncthreads();  // the scan reads its runs before its first barrier
    const int mine = block_exclusive_scan(before, bins);
    for (int i = threadIdx.x; i < bins; i += blockDim.x) before[i] -= base[i];
    const long long stage0 = r0 * K + carry[2];  // the window's first staged row
    __syncthreads();
#endif
    for (long long c0 = r0 * K; c0 < r1 * K; c0 += kSendChunk) {
      const long long c1 = c0 + kSendChunk < r1 * K ? c0 + kSendChunk : r1 * K;
      if (warp == 0) {
        for (long long p0 = c0; p0 < c1; p0 += 32) {
          const long long p = p0 + lane;
          const long long e = p < c1 ? route[p] - e0 : -1;
          const bool mine = e >= 0 && e < bins;
          const unsigned same = __match_any_sync(0xffffffffu, mine ? e : -1);
          const int first = __ffs(same) - 1;
          int at = 0;
          if (mine && lane == first) {
            at = base[e];
            base[e] = at + __popc(same);
          }
          at = __shfl_sync(0xffffffffu, at, first);
          if (p < c1) place[p - c0] = mine ? at + __popc(same & ((1u << lane) - 1)) : -1;
          __syncwarp();
        }
      }
      __syncthreads();
      for (long long p = c0 + warp; p < c1; p += warps) {
        const int pos = place[p - c0];
        if (pos < 0) continue;
        const long long tok = p / K, k = p % K, d = (route[p]) / per;
        T* dst = view_ptr<T>(a, v[3 + d], nb) + pos * H;
        int* origin = view_ptr<int>(a, v[3 + ranks + d], nb) + pos * 3;
#ifdef MKC_HAS_PROXY
        if (other_node(a, d)) {  // staged for the run's request below
          const long long at = stage0 + pos + before[route[p] - e0];
          dst = staged + at * H;
          origin = sent + at * 3;
        }
#endif
        copy_row_warp(dst, X + tok * H, H, lane);
        if (lane == 0) {
          origin[0] = a.rank;
          origin[1] = static_cast<int>(tok);
          origin[2] = static_cast<int>(k);
        }
      }
      __syncthreads();
    }
#ifdef MKC_HAS_PROXY
    // A thread per expert of another node's rank: its run of staged rows, and of their origin
    // entries, to their places [first, first + n) in that rank's Y and origin.
    for (int i = threadIdx.x; i < bins; i += blockDim.x) {
      const long long d = (e0 + i) / per;
      const long long end = base[i] + before[i], start = i > 0 ? base[i - 1] + before[i - 1] : 0;
      if (end == start || !other_node(a, d)) continue;
      const long long n = end - start, first = base[i] - n;
      __threadfence_system();  // the CTA's staging (ordered by the barrier), before the proxy
      proxy_put_for_task(
          a, static_cast<int>(d), 2,
          {own_heap_offset(a, staged + (stage0 + start) * H),
           remote_heap_offset<T>(a, v[3 + d], nb) + first * row_bytes, n * row_bytes},
          {own_heap_offset(a, sent + (stage0 + start) * 3),
           remote_heap_offset<int>(a, v[3 + ranks + d], nb) + first * 12, n * 12});
    }
    if (threadIdx.x == 0) carry[2] += mine;
#endif
    __syncthreads();  // thread 0 read `before` for the carry
  }
#ifdef MKC_HAS_PROXY
  proxy_task_drain(a);
#endif
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

// MoE combine, step 1: part `part` of `parts` of the received rows back to back_s[row, k] of their
// origin (the parts split the run-time total evenly). One warp per row.
// Args CombineSendArgs; views {Y, origin, xcounts, back_s...}.
template <typename T>
__device__ void combine_send(const KernelArgs& a, const View* v, const long long* args, int nb,
                             int ranks) {
  const T* Y = view_ptr<T>(a, v[0], nb);
  const int* origin = view_ptr<int>(a, v[1], nb);
  const int* xc = view_ptr<int>(a, v[2], nb);
  const abi::CombineSendArgs& cs = args_as<abi::CombineSendArgs>(args);
  const long long E = cs.experts, per = E / ranks, H = v[0].shape[1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  // The total by warp 0 (a lane per expert), then to every thread.
  __shared__ long long received;
#ifdef MKC_HAS_PROXY
  if (threadIdx.x == 0) proxy_task_end() = 0;  // before the barrier below
#endif
  if (warp == 0) {
    long long n = 0;
    for (long long i = lane; i < ranks * per; i += 32)
      n += xc[(i / per) * E + a.rank * per + i % per];
    for (int o = 16; o > 0; o /= 2) n += __shfl_xor_sync(0xffffffffu, n, o);
    if (lane == 0) received = n;
  }
  __syncthreads();
  const long long total = received;
  const long long p0 = total * cs.part / cs.parts, p1 = total * (cs.part + 1) / cs.parts;
  for (long long p = p0 + warp; p < p1; p += warps) {
    const int s = origin[p * 3], tok = origin[p * 3 + 1], k = origin[p * 3 + 2];
    const long long K = v[3 + s].shape[1];
#ifdef MKC_HAS_PROXY
    if (other_node(a, s)) {  // the row back through the proxy
      if (lane == 0) {
        const long long row = H * static_cast<long long>(sizeof(T));
        proxy_put_for_task(a, s, 1,
                           {own_heap_offset(a, Y + p * H),
                            remote_heap_offset<T>(a, v[3 + s], nb) + (tok * K + k) * row, row},
                           {});
      }
      continue;
    }
#endif
    T* back = view_ptr<T>(a, v[3 + s], nb);
    copy_row_warp(back + (tok * K + k) * H, Y + p * H, H, lane);
  }
#ifdef MKC_HAS_PROXY
  proxy_task_drain(a);
#endif
}

// MoE combine, step 2: Out[t] = sum_k W[t, k] * back[t, k] for rows [r0, r1), summed in f32.
// Args CombineReduceArgs; views {back [T, K, H], W (f32 [T, K]) or back, Out}. A thread takes 8
// consecutive h of a token (16-byte loads of a 16-bit type, 4 of the K rows in flight) where H is
// a multiple of 8 and both tensors are aligned; one element at a time otherwise.
template <typename T>
__device__ void combine_reduce(const KernelArgs& a, const View* v, const long long* args, int nb) {
  const T* back = view_ptr<T>(a, v[0], nb);
  const abi::CombineReduceArgs& c = args_as<abi::CombineReduceArgs>(args);
  const float* w = c.has_weights ? view_ptr<float>(a, v[1], nb) : nullptr;
  T* out = view_ptr<T>(a, v[2], nb);
  const long long K = v[0].shape[1], H = v[0].shape[2];
  if (H % 8 == 0 && run8_aligned(back) && run8_aligned(out)) {
    const long long per_row = H / 8;
    for (long long i = c.r0 * per_row + threadIdx.x; i < c.r1 * per_row; i += blockDim.x) {
      const long long tok = i / per_row, h = (i - tok * per_row) * 8;
      float acc[8] = {};
#pragma unroll 4
      for (long long k = 0; k < K; ++k) {
        const Run8<T> r = load_run8(back + (tok * K + k) * H + h);
        const float wk = w ? w[tok * K + k] : 1.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] += wk * to_f32(r.v[j]);
      }
      Run8<T> o;
#pragma unroll
      for (int j = 0; j < 8; ++j) o.v[j] = from_f32<T>(acc[j]);
      *reinterpret_cast<Run8<T>*>(out + tok * H + h) = o;
    }
    return;
  }
  for (long long i = c.r0 * H + threadIdx.x; i < c.r1 * H; i += blockDim.x) {
    const long long tok = i / H, h = i % H;
    float acc = 0.0f;
    for (long long k = 0; k < K; ++k)
      acc += (w ? w[tok * K + k] : 1.0f) * to_f32(back[(tok * K + k) * H + h]);
    out[i] = from_f32<T>(acc);
  }
}

}  // namespace mkc
