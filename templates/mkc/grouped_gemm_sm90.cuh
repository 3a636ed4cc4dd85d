// The Hopper grouped GEMM (MoE experts): a persistent worker; it finds the groups and rows of a
// batch of its items from the counts at once (worker_items, grouped_gemm.cuh), then runs the
// batch back to back through the wgmma + TMA pipeline of gemm_sm90.cuh (the next item's loads
// overlap this one's epilogue):
// A from X's 2-D map at the tile's first row, B from slice `group` of W's 3-D map [groups, K, N]
// (zero fill past K stays inside the group). Rows of the A box past the group's end belong to the
// next group (or are stale): they are multiplied but not stored (the epilogue stops at m1).
// The ring is shared with the GEMM tiles of the same geometry; a grouped tile neither prefetches
// the next task nor is prefetched (its rows are unknown until it runs).
// Compiled by NVRTC only.
#pragma once

#include "mkc/gemm_sm90.cuh"
#include "mkc/grouped_gemm.cuh"

namespace mkc {
namespace sm90 {

// Args GroupedGemmTileArgs with map_x and map_w set; views {X, W, Y, counts}. Same threads and
// shared memory as gemm_tile_tma<.., BM, BN>.
template <typename TAB, typename TC, int BM, int BN, typename Fn>
__device__ void grouped_gemm_tile_tma(const KernelArgs& a, const View* v, const long long* args,
                                      int nb, unsigned char* smem, Fn fn) {
#if MKC_HAS_WGMMA
  const abi::GroupedGemmTileArgs& g = args_as<abi::GroupedGemmTileArgs>(args);
  const TensorMap* map_x = a.tensor_maps + g.map_x;
  const TensorMap* map_w = a.tensor_maps + g.map_w;
  TC* Y = view_ptr<TC>(a, v[2], nb);
  const long long K = v[0].shape[1], ldc = v[2].shape[1];
  const long long groups = v[1].shape[0], lead = elems_from(v[3], 0) / groups;
  const long long cap = v[0].shape[0] < v[2].shape[0] ? v[0].shape[0] : v[2].shape[0];
  __shared__ GroupTile items[kWorkerItems];
  for (long long first = g.worker;; first += kWorkerItems * g.workers) {
    const int n = worker_items(view_ptr<int>(a, v[3], nb), groups, lead, first, g.workers, g.bm,
                               g.bn, v[1].shape[2], cap, items);
    if (n == 0) return;
    // The batch's items back to back through one run of the pipeline.
    gemm_run_jobs<TAB, TC, TC, BM, BN>(
        a, n,
        [&](int j) {
          const GroupTile gt = items[j];
          TileJob<TC, TC> job;
          job.m0 = gt.m0;
          job.m1 = gt.m1;
          job.n0 = gt.n0;
          job.n1 = gt.n1;
          job.k0 = 0;
          job.K = K;
          job.ldc = ldc;
          job.bz = static_cast<int>(gt.group);
          job.map_a = map_x;
          job.map_b = map_w;
          job.map_c = nullptr;
          job.C = Y;
          job.bias = nullptr;
          return job;
        },
        args, smem, fn);
    if (n < kWorkerItems) return;
  }
#else
  (void)smem;
  grouped_gemm_tile<TAB, TAB, TC>(a, v, args, nb, fn);
#endif
}

}  // namespace sm90
}  // namespace mkc
