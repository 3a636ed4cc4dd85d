// Split-K's fused reduction (abi.h, GemmTileArgs::parts). The parts of a tile run as independent
// tasks on any CTAs, none waiting for another: each stores its f32 sums in its slice of the
// partials [parts, M, N], then takes a ticket from the tile's counter. The part whose ticket
// completes the launch's count (the counter only grows: launch e's last ticket is e * parts,
// taken by whichever part finishes last) sums every part's slice (its own too, read back) and
// runs the normal epilogue: bias, the epilogue function, the cast, the store into C. So a split
// GEMM has no reduction phase of its own, and bias and epilogue functions apply to the whole sum.
//
// Ordering: every thread's partial stores, then a barrier of the threads that made them, then one
// thread's ticket (an acquire-release atomic at the GPU's scope: it releases this part's stores
// and acquires the earlier parts'), then a barrier before the elected threads read the parts'
// sums (through L2: __ldcg, never a stale L1 line). The next
// launch's stores come after this launch's reads (launches on a rank are kernels in stream order).
// A failed launch leaves the counters short, like the events' (sync.cuh): the job then reports
// its error and is not launched again.
//
// Here: the ticket, the last part's sum and epilogue (per consumer warpgroup of the TMA tile,
// gemm_sm90.cuh, or CTA-wide), and the portable path (SIMT or mma.sync tiles into the partials).
// Compiled by NVRTC only.
#pragma once

#include "mkc/gemm_simt.cuh"

namespace mkc {

// The running split part of a TMA tile (gemm_sm90.cuh), in shared memory: part 0's f32 sums
// [M, N] (parts `stride` elements apart), this part, the parts, the tile's two tickets, and per
// consumer warpgroup whether its ticket completed the tile.
struct SplitState {
  float* partials;
  unsigned long long* tickets;
  long long stride, part, parts;
  unsigned last[2];
};

__device__ __forceinline__ SplitState& split_state() {
  __shared__ SplitState state;
  return state;
}

// A barrier of `threads` threads: the CTA's (__syncthreads) for bar 0, else named barrier `bar`.
__device__ __forceinline__ void split_barrier(int bar, int threads) {
  if (bar == 0)
    __syncthreads();
  else
    asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(threads) : "memory");
}

// After a barrier of the threads that stored this part's sums (split_barrier(bar, threads)),
// thread t == 0 takes the ticket; returns on every thread whether this part completes the tile
// (then its threads sum every part's). `slot`: a shared word the threads read the answer from.
__device__ __forceinline__ bool split_last(unsigned long long* ticket, long long parts, int t,
                                           volatile unsigned* slot, int bar, int threads) {
  split_barrier(bar, threads);
  if (t == 0) {
    // One acquire-release atomic at the GPU's scope: it releases the threads' stores (ordered
    // before it by the barrier) and, in the last part, acquires every other part's. Two
    // sequentially consistent fences around a relaxed atomic (MEMBAR.SC.GPU, each waiting for
    // every store in flight) cost a few µs per part (ncu, H100, 2026-12-06).
    unsigned long long old;
    asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], 1;"
                 : "=l"(old)
                 : "l"(ticket)
                 : "memory");
    *slot = (old + 1) % static_cast<unsigned long long>(parts) == 0 ? 1u : 0u;
  }
  split_barrier(bar, threads);
  return *slot != 0u;
}

// Parts whose loads sum_parts issues together (4, 2, then 1 at a time, in part order). An A/B
// switch for template experiments ($MKC_NVRTC_OPTIONS=-DMKC_SPLIT_SUM_GROUP=1: one part at a time,
// the sum before 2026-12-06's twenty-seventh session).
#ifndef MKC_SPLIT_SUM_GROUP
#define MKC_SPLIT_SUM_GROUP 4
#endif

// One round of sum_parts: kBatch items' loads of G parts (from part q on) all issued, then added
// in part order, so the sum is the same, bit for bit, however the parts are grouped.
template <int G, int kBatch>
__device__ __forceinline__ void sum_round(const float* P, long long stride, long long q,
                                          const long long* at, float4* x) {
  float4 v[G][kBatch];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float* p = P + (q + g) * stride;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) v[g][u] = __ldcg(reinterpret_cast<const float4*>(p + at[u]));
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      x[u].x += v[g][u].x;
      x[u].y += v[g][u].y;
      x[u].z += v[g][u].z;
      x[u].w += v[g][u].w;
    }
  }
}

// The last part's epilogue over a region of the tile: C[r0:r1, c0:c1] = fn(the sum of every
// part's sums (P: part 0's [M, N], parts `stride` elements apart, row stride ldc) + bias), by
// `threads` threads (t: this one's index), four columns at a time: reads of every part's rows
// and stores of C's, consecutive threads on consecutive columns. Every part is read from memory,
// this one's own too (it stored them before its ticket): the accumulators are dead by then, which
// the 128 x 256 tile's registers need (holding them through the sum spilled 2 KB, ptxas). Not
// inlined: beside the tile's main loop in one function, any batching of the loads spilled.
template <typename TC, typename TBias, int kBatch = 4, typename Fn>
__device__ __noinline__ void sum_parts(const float* P, long long stride, long long parts,
                                       long long ldc, TC* C, const TBias* bias, long long r0,
                                       long long r1, long long c0, long long c1, int t, int threads,
                                       Fn fn) {
  if (r1 <= r0 || c1 <= c0) return;
  // kBatch items (four columns each) per thread at a time, and the loads of up to
  // MKC_SPLIT_SUM_GROUP parts issued before any add: the sum is bound by the loads' latency
  // (L2 round trips), not bandwidth. A load per item behind a branch of its own was waited for
  // before the next was issued (about 2 GB/s per warpgroup, H100, 2026-12-06); one part at a
  // time with 6 items in flight made a split part's sum take parts x items / 6 round trips.
  const int cols = static_cast<int>(c1 - c0), quads = (cols + 3) / 4;
  const int items = static_cast<int>(r1 - r0) * quads;
  const bool vec = ldc % 4 == 0 && c0 % 4 == 0 && stride % 4 == 0 &&
                   (reinterpret_cast<unsigned long long>(P) & 15) == 0;
#pragma unroll 1
  for (int i0 = t; i0 < items; i0 += kBatch * threads) {
    long long at[kBatch];
    int n[kBatch], col[kBatch];
    bool full = vec;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * threads;
      const int c = 4 * (i % quads);
      n[u] = i >= items ? 0 : cols - c < 4 ? cols - c : 4;
      col[u] = c;
      at[u] = (r0 + i / quads) * ldc + c0 + c;
      full = full && n[u] == 4;
    }
    float4 x[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) x[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (full) {
      long long q = 0;
#pragma unroll 1
      for (; MKC_SPLIT_SUM_GROUP >= 4 && q + 4 <= parts; q += 4)
        sum_round<4, kBatch>(P, stride, q, at, x);
      if (MKC_SPLIT_SUM_GROUP >= 2 && q + 2 <= parts) {
        sum_round<2, kBatch>(P, stride, q, at, x);
        q += 2;
      }
#pragma unroll 1
      for (; q < parts; ++q) sum_round<1, kBatch>(P, stride, q, at, x);
    } else {
#pragma unroll 1
      for (long long q = 0; q < parts; ++q) {
        const float* p = P + q * stride;
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          if (n[u] > 0) x[u].x += __ldcg(p + at[u]);
          if (n[u] > 1) x[u].y += __ldcg(p + at[u] + 1);
          if (n[u] > 2) x[u].z += __ldcg(p + at[u] + 2);
          if (n[u] > 3) x[u].w += __ldcg(p + at[u] + 3);
        }
      }
    }
    // Four columns as one store where whole and aligned (8 bytes of a 16-bit C, 16 of f32).
    struct alignas(4 * sizeof(TC)) Quad {
      TC v[4];
    };
    const bool packed = full && (reinterpret_cast<unsigned long long>(C) & 15) == 0;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      float e[4] = {x[u].x, x[u].y, x[u].z, x[u].w};
#pragma unroll
      for (int k = 0; k < 4; ++k)
        e[k] = fn(e[k] + (bias && k < n[u] ? to_f32(bias[c0 + col[u] + k]) : 0.0f));
      if (packed) {
        Quad qd;
#pragma unroll
        for (int k = 0; k < 4; ++k) qd.v[k] = from_f32<TC>(e[k]);
        *reinterpret_cast<Quad*>(C + at[u]) = qd;
        continue;
      }
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (k < n[u]) C[at[u] + k] = from_f32<TC>(e[k]);
    }
  }
}

// The portable split part: views {A, B, C[, bias], partials, tickets}. `tile(w, g2)` computes this
// part's sums into the view list w (A, B, this part's [M, N] slice of the partials) with the
// arguments g2 (no bias, no function); then the CTA takes the ticket and, when it completes the
// tile, sums every part's slice (its own from memory too) into C with bias and fn.
template <typename TC, typename TBias, typename Tile, typename Fn>
__device__ void gemm_split_part(const KernelArgs& a, const View* v, const long long* args, int nb,
                                Tile tile, Fn fn) {
  const abi::GemmTileArgs& g = args_as<abi::GemmTileArgs>(args);
  const int pv = 3 + static_cast<int>(g.has_bias);
  const long long M = v[2].shape[0], N = v[2].shape[1];
  View w[3] = {v[0], v[1], v[pv]};
  w[2].offset += g.part * M * N;
  w[2].ndim = 2;
  w[2].shape[0] = M;
  w[2].shape[1] = N;
  abi::GemmTileArgs g2 = g;
  g2.fn = abi::kNoFn;
  g2.has_bias = 0;
  tile(static_cast<const View*>(w), reinterpret_cast<const long long*>(&g2));
  __shared__ unsigned last;
  unsigned long long* ticket = view_ptr<unsigned long long>(a, v[pv + 1], nb) + 2 * g.tile;
  if (!split_last(ticket, g.parts, threadIdx.x, &last, 0, blockDim.x)) return;
  sum_parts<TC, TBias>(view_ptr<float>(a, v[pv], nb), M * N, g.parts, N, view_ptr<TC>(a, v[2], nb),
                       g.has_bias ? view_ptr<TBias>(a, v[3], nb) : nullptr, g.m0, g.m1, g.n0, g.n1,
                       threadIdx.x, blockDim.x, fn);
}

// gemm_tile's SIMT path for a split part (gemm_simt.cuh's tile into the partials).
template <typename TA, typename TB, typename TC, typename TBias, typename Fn>
__device__ void gemm_tile_split(const KernelArgs& a, const View* v, const long long* args, int nb,
                                Fn fn) {
  gemm_split_part<TC, TBias>(
      a, v, args, nb,
      [&](const View* w, const long long* g2) {
        gemm_tile<TA, TB, float, float>(a, w, g2, nb, NoFn{});
      },
      fn);
}

}  // namespace mkc
