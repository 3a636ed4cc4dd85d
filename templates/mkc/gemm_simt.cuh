// The SIMT GEMM tiles: plain f32 FMA loops through shared memory, for any element types and any
// shape. The last fallback: gemm_sm90.cuh (wgmma + TMA) and gemm_sm80.cuh (mma.sync) are the fast
// tiles; the compile summary says which one a kernel got.
// Compiled by NVRTC only.
#pragma once

#include "mkc/views.cuh"

namespace mkc {

// gemm_tile: C[m0:m1, n0:n1] = fn(A[m0:m1, k0:k1] x B[k0:k1, n0:n1] (+ bias)), f32 accumulation,
// 64x64 sub-blocks through shared memory. Args GemmTileArgs; views {A, B, C[, bias]}.
template <typename TA, typename TB, typename TC, typename TBias, typename Fn>
__device__ void gemm_tile(const KernelArgs& a, const View* v, const long long* args, int nb,
                          Fn fn) {
  const TA* A = view_ptr<TA>(a, v[0], nb);
  const TB* B = view_ptr<TB>(a, v[1], nb);
  TC* C = view_ptr<TC>(a, v[2], nb);
  const abi::GemmTileArgs& g = args_as<abi::GemmTileArgs>(args);
  const TBias* bias = g.has_bias ? view_ptr<TBias>(a, v[3], nb) : nullptr;
  const long long m0 = g.m0, m1 = g.m1, n0 = g.n0, n1 = g.n1;
  const long long K = v[0].shape[1], N = v[1].shape[1];
  __shared__ float As[16][64];
  __shared__ float Bs[16][64];
  // 256 threads compute (a 16 x 16 grid of 4 x 4 blocks); any more only help load.
  const int tx = threadIdx.x % 16, ty = (threadIdx.x / 16) % 16;
  const bool computes = threadIdx.x < 256;
  for (long long mb = m0; mb < m1; mb += 64) {
    for (long long nb0 = n0; nb0 < n1; nb0 += 64) {
      float acc[4][4] = {};
      for (long long ks = g.k0; ks < g.k1; ks += 16) {
        for (int i = threadIdx.x; i < 1024; i += blockDim.x) {
          const int mm = i / 16, kk = i % 16;
          const long long row = mb + mm, k = ks + kk;
          As[kk][mm] = (row < m1 && k < g.k1) ? to_f32(A[row * K + k]) : 0.0f;
          const int kb = i / 64, nn = i % 64;
          const long long col = nb0 + nn, kr = ks + kb;
          Bs[kb][nn] = (col < n1 && kr < g.k1) ? to_f32(B[kr * N + col]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 16; ++kk) {
          float ar[4], br[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            ar[i] = As[kk][ty * 4 + i];
            br[i] = Bs[kk][tx * 4 + i];
          }
#pragma unroll
          for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] += ar[i] * br[j];
          }
        }
        __syncthreads();
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const long long row = mb + ty * 4 + i, col = nb0 + tx * 4 + j;
          if (computes && row < m1 && col < n1) {
            float x = acc[i][j];
            if (bias != nullptr) x += to_f32(bias[col]);
            C[row * N + col] = from_f32<TC>(fn(x));
          }
        }
      }
    }
  }
}

}  // namespace mkc
