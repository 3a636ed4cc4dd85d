// The Hopper grouped GEMM (MoE experts): a persistent worker; for each of its items it finds the
// group and rows from the counts (grouped_gemm.cuh), then runs the wgmma + TMA pipeline of
// gemm_sm90.cuh on them:
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
  for_each_group_item(a, v, args, nb, [&](const GroupTile& gt) {
    TileJob<TC, TC> job;
    job.m0 = gt.m0;
    job.m1 = gt.m1;
    job.n0 = gt.n0;
    job.n1 = gt.n1;
    job.K = K;
    job.ldc = ldc;
    job.bz = static_cast<int>(gt.group);
    job.map_a = map_x;
    job.map_b = map_w;
    job.C = Y;
    job.bias = nullptr;
    gemm_run<TAB, TC, TC, BM, BN>(a, job, args, smem, nullptr, nullptr, fn);
  });
#else
  (void)smem;
  grouped_gemm_tile<TAB, TAB, TC>(a, v, args, nb, fn);
#endif
}

}  // namespace sm90
}  // namespace mkc
