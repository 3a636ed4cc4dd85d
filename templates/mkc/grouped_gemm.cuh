// The grouped GEMM's tiles (MoE experts): which rows a task computes is known only at run time,
// from the counts the dispatch wrote. Each group's rows are cut into tiles of bm rows, numbered
// in group order; the task finds its items' groups and rows here (worker_items), then runs an
// ordinary GEMM tile on them with that group's weights: the wgmma + TMA tile of
// grouped_gemm_sm90.cuh, or the SIMT tile of gemm_simt.cuh below. A task is a persistent worker
// over several such items. Args GroupedGemmTileArgs (abi.h); views {X [rows, K], W [groups, K, N],
// Y [rows, N], counts (i32, [..., groups], summed over the leading dims)}. Compiled by NVRTC only.
#pragma once

#include "mkc/gemm_simt.cuh"

namespace mkc {

// A work item: rows [m0, m1) of X and Y (weights W[group]), columns [n0, n1). group < 0: past the
// last item; m0 == m1: an item with no rows below the capacity.
struct GroupTile {
  long long group, m0, m1, n0, n1;
};

// The items a worker takes in one batch: first, first + workers, ... (at most kWorkerItems).
constexpr int kWorkerItems = 64;

// Fills items[0, n) with the worker's items first + j * workers, j < n, from the counts (an item
// with no rows below the capacity gets m0 == m1 == 0) and returns n: kWorkerItems, fewer for the
// worker's last batch, 0 when its items ran out. Items are in group order, within a group by
// column block, then by tile (abi.h), so that the workers running side by side share a block of
// the group's weights in L2. Warp 0 scans the groups 32 at a time (a lane per group; rows and
// items per group, prefix sums by shuffles), once for the whole batch, and stops after the group
// holding the batch's last item; each lane fills in the batch's items that fall in its group.
// Rows past `cap` (the capacity of X and Y) are never touched, whatever the counts say. Every
// thread gets n (one block barrier); items[] must not be in use by another thread of the block.
__device__ __forceinline__ int worker_items(const int* counts, long long groups, long long lead,
                                            long long first, long long workers, long long bm,
                                            long long bn, long long N, long long cap,
                                            GroupTile* items) {
  __shared__ int count;
  const long long nblocks = (N + bn - 1) / bn;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const long long last = first + (kWorkerItems - 1) * workers;
    long long rows_before = 0, items_before = 0;
    for (long long g0 = 0; g0 < groups && items_before <= last; g0 += 32) {
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
      const long long first_row = rows_before + rows_incl - n;
      if (g < groups && ni > 0 && first_item + ni > first) {
        long long j = first_item <= first ? 0 : (first_item - first + workers - 1) / workers;
        for (; j < kWorkerItems; ++j) {
          const long long item = first + j * workers;
          if (item >= first_item + ni) break;
          const long long local = item - first_item, bj = local / tiles;
          const long long m0 = first_row + (local % tiles) * bm;
          long long m1 = first_row + n < m0 + bm ? first_row + n : m0 + bm;
          m1 = m1 < cap ? m1 : cap;
          items[j] = GroupTile{g, m0 < m1 ? m0 : 0, m0 < m1 ? m1 : 0, bj * bn,
                               bj * bn + bn < N ? bj * bn + bn : N};
        }
      }
      rows_before += __shfl_sync(0xffffffffu, rows_incl, 31);
      items_before += __shfl_sync(0xffffffffu, items_incl, 31);
    }
    if (lane == 0) {
      // Stopped early: the batch is full. Else items_before is the number of items.
      long long n =
          items_before > last
              ? kWorkerItems
              : (items_before > first ? (items_before - first + workers - 1) / workers : 0);
      count = static_cast<int>(n < kWorkerItems ? n : kWorkerItems);
    }
  }
  __syncthreads();
  return count;
}

// The work of a grouped GEMM task: items worker, worker + workers, ... (abi.h). Calls body(item)
// for each item with rows (every thread of the block), batch by batch, until the items run out.
template <typename Body>
__device__ __forceinline__ void for_each_group_item(const KernelArgs& a, const View* v,
                                                    const long long* args, int nb, Body body) {
  const abi::GroupedGemmTileArgs& gg = args_as<abi::GroupedGemmTileArgs>(args);
  const long long groups = v[1].shape[0];
  const long long cap = v[0].shape[0] < v[2].shape[0] ? v[0].shape[0] : v[2].shape[0];
  __shared__ GroupTile items[kWorkerItems];
  for (long long first = gg.worker;; first += kWorkerItems * gg.workers) {
    const int n = worker_items(view_ptr<int>(a, v[3], nb), groups, elems_from(v[3], 0) / groups,
                               first, gg.workers, gg.bm, gg.bn, v[1].shape[2], cap, items);
    for (int j = 0; j < n; ++j) {
      const GroupTile gt = items[j];
      if (gt.m0 < gt.m1) body(gt);
    }
    __syncthreads();  // items[] is read by all before the next batch is written
    if (n < kWorkerItems) return;
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
    g.k0 = 0;
    g.k1 = K;
    gemm_tile<TX, TW, TY, TY>(a, views, reinterpret_cast<const long long*>(&g), nb, fn);
  });
}

}  // namespace mkc
