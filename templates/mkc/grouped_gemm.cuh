// The grouped GEMM's tiles (MoE experts): which rows a task computes is known only at run time,
// from the counts the dispatch wrote. Each group's rows are cut into tiles of bm rows, numbered
// in group order; the task finds an item's group and rows here (group_tile), then runs an ordinary
// GEMM tile on them with that group's weights: the wgmma + TMA tile of grouped_gemm_sm90.cuh, or
// the SIMT tile of gemm_simt.cuh below. A task is a persistent worker over several such items.
// Args GroupedGemmTileArgs (abi.h); views {X [rows, K], W [groups, K, N], Y [rows, N], counts
// (i32, [..., groups], summed over the leading dims)}.
// Compiled by NVRTC only.
#pragma once

#include "mkc/gemm_simt.cuh"

namespace mkc {

// A work item: rows [m0, m1) of X and Y (weights W[group]), columns [n0, n1). group < 0: past the
// last item; m0 == m1: an item with no rows below the capacity.
struct GroupTile {
  long long group, m0, m1, n0, n1;
};

// Work item `item` (abi.h: items in group order; within a group by column block, then by tile, so
// that the workers running side by side share a block of the group's weights in L2), from the
// counts. Rows past `cap` (the capacity of X and Y) are never touched, whatever the counts say.
// Warp 0 scans the groups 32 at a time (rows and items per group, prefix sums by shuffles) and
// stops at the group holding the item; every thread of the block gets the answer (two block
// barriers).
__device__ __forceinline__ GroupTile group_item(const int* counts, long long groups, long long lead,
                                                long long item, long long bm, long long bn,
                                                long long N, long long cap) {
  __shared__ long long found[5];
  const long long nblocks = (N + bn - 1) / bn;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    if (lane == 0) {
      found[0] = -1;
      found[1] = found[2] = found[3] = found[4] = 0;
    }
    __syncwarp();
    long long rows_before = 0, items_before = 0;
    for (long long g0 = 0; g0 < groups && items_before <= item; g0 += 32) {
      const long long g = g0 + lane;
      long long n = 0;
      if (g < groups) {
        for (long long l = 0; l < lead; ++l) n += counts[l * groups + g];
      }
      n = n < 0 ? 0 : n;
      const long long tiles = (n + bm - 1) / bm, ni = tiles * nblocks;
      long long rows_incl = n, items_incl = ni;
#pragma unroll
      for (int o = 1; o < 32; o *= 2) {
        const long long r = __shfl_up_sync(0xffffffffu, rows_incl, o);
        const long long t = __shfl_up_sync(0xffffffffu, items_incl, o);
        if (lane >= o) {
          rows_incl += r;
          items_incl += t;
        }
      }
      const long long first_item = items_before + items_incl - ni;
      if (g < groups && item >= first_item && item < first_item + ni) {
        const long long local = item - first_item, bj = local / tiles;
        const long long first_row = rows_before + rows_incl - n;
        const long long m0 = first_row + (local % tiles) * bm;
        long long m1 = first_row + n < m0 + bm ? first_row + n : m0 + bm;
        m1 = m1 < cap ? m1 : cap;
        found[0] = g;
        found[1] = m0 < m1 ? m0 : 0;
        found[2] = m0 < m1 ? m1 : 0;
        found[3] = bj * bn;
        found[4] = bj * bn + bn < N ? bj * bn + bn : N;
      }
      rows_before += __shfl_sync(0xffffffffu, rows_incl, 31);
      items_before += __shfl_sync(0xffffffffu, items_incl, 31);
    }
  }
  __syncthreads();
  const GroupTile out{found[0], found[1], found[2], found[3], found[4]};
  __syncthreads();  // read by all before the next call writes it
  return out;
}

// The work of a grouped GEMM task: items worker, worker + workers, ... (abi.h). Calls body(item)
// for each (every thread of the block), until the items run out.
template <typename Body>
__device__ __forceinline__ void for_each_group_item(const KernelArgs& a, const View* v,
                                                    const long long* args, int nb, Body body) {
  const abi::GroupedGemmTileArgs& gg = args_as<abi::GroupedGemmTileArgs>(args);
  const long long groups = v[1].shape[0];
  for (long long item = gg.worker;; item += gg.workers) {
    const GroupTile gt = group_item(view_ptr<int>(a, v[3], nb), groups,
                                    elems_from(v[3], 0) / groups, item, gg.bm, gg.bn, v[1].shape[2],
                                    v[0].shape[0] < v[2].shape[0] ? v[0].shape[0] : v[2].shape[0]);
    if (gt.group < 0) return;
    if (gt.m0 < gt.m1) body(gt);
  }
}

// The SIMT version: the plain GEMM tile on views of the item's group (W[group] as [K, N]).
template <typename TX, typename TW, typename TY, typename Fn>
__device__ void grouped_gemm_tile(const KernelArgs& a, const View* v, const long long* args, int nb,
                                  Fn fn) {
  const long long K = v[1].shape[1], N = v[1].shape[2];
  const long long fn_index = args_as<abi::GroupedGemmTileArgs>(args).fn;
  for_each_group_item(a, v, args, nb, [&](const GroupTile& gt) {
    View views[3] = {v[0], v[1], v[2]};
    views[1].offset += gt.group * K * N;
    views[1].ndim = 2;
    views[1].shape[0] = K;
    views[1].shape[1] = N;
    abi::GemmTileArgs g{};
    g.m0 = gt.m0;
    g.m1 = gt.m1;
    g.n0 = gt.n0;
    g.n1 = gt.n1;
    g.k_step = 64;
    g.fn = fn_index;
    g.has_bias = 0;
    g.map_a = g.map_b = abi::kNoMap;
    gemm_tile<TX, TW, TY, TY>(a, views, reinterpret_cast<const long long*>(&g), nb, fn);
  });
}

}  // namespace mkc
