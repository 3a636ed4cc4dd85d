// The GEMM tile for sm_80 and later without wgmma (A100, L40, or Hopper built for plain sm_90):
// C[m0:m1, n0:n1] = fn(A x B (+ bias)), bf16/f16 inputs, f32 accumulation on `mma.sync`.
//
// 128 x 128 output blocks, K steps of 32, two shared-memory stages filled with 16-byte cp.async
// (zero fill past M, N and K); 8 warps compute, each a 32 x 64 piece as 2 x 8 m16n8k16 MMAs per
// 16 of K, A fragments through ldmatrix, B (row-major K x N) through ldmatrix.trans. Rows are
// padded by 16 bytes so ldmatrix's eight row addresses fall in different banks. Needs rows of A
// and B that are 16-byte aligned (the caller falls back to the scalar tile otherwise) and
// kSmemBytes of dynamic shared memory.
#pragma once

#include "mkc/gemm_simt.cuh"

namespace mkc {
namespace sm80 {

constexpr int kBM = 128, kBN = 128, kBK = 32;
constexpr int kAStride = kBK + 8;  // elements per A row in shared memory (80 bytes)
constexpr int kBStride = kBN + 8;  // elements per B row (272 bytes)
constexpr int kStageElems = kBM * kAStride + kBK * kBStride;
constexpr int kSmemBytes = 2 * kStageElems * 2 + 128;

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)

__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(p))));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(p))));
}

template <typename T>
__device__ __forceinline__ void mma16816(float* d, const unsigned* a, const unsigned* b) {
  if constexpr (is_same<T, __nv_bfloat16>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Loads the K step at k0 of block (mb, nb) into one stage; every thread of the CTA helps. A's rows
// are K long; K beyond kend (the end of this task's part) reads as zeros.
template <typename T>
__device__ __forceinline__ void load_stage(T* sa, T* sb, const T* A, const T* B, long long M,
                                           long long N, long long K, long long kend, long long mb,
                                           long long nb, long long k0) {
  // A: 128 rows x 4 chunks of 8 elements; B: 32 rows x 16 chunks.
  for (int i = threadIdx.x; i < kBM * (kBK / 8) + kBK * (kBN / 8); i += blockDim.x) {
    if (i < kBM * (kBK / 8)) {
      const int r = i / (kBK / 8), c = (i % (kBK / 8)) * 8;
      const long long row = mb + r, k = k0 + c;
      const long long left = row < M ? (kend - k) : 0;
      const int bytes = left <= 0 ? 0 : left >= 8 ? 16 : static_cast<int>(left) * 2;
      cp_async16(sa + r * kAStride + c, bytes ? A + row * K + k : A, bytes);
    } else {
      const int j = i - kBM * (kBK / 8);
      const int r = j / (kBN / 8), c = (j % (kBN / 8)) * 8;
      const long long k = k0 + r, col = nb + c;
      const long long left = k < kend ? (N - col) : 0;
      const int bytes = left <= 0 ? 0 : left >= 8 ? 16 : static_cast<int>(left) * 2;
      cp_async16(sb + r * kBStride + c, bytes ? B + k * N + col : B, bytes);
    }
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

#endif

// args {m0, m1, n0, n1, ...}; views {A, B, C[, bias]}. Returns false (doing nothing) when the rows
// are not 16-byte aligned, for the caller's scalar fallback.
template <typename TAB, typename TC, typename TBias, typename Fn>
__device__ bool gemm_tile_mma(const KernelArgs& a, const View* v, const long long* args, int nb,
                              unsigned char* smem, Fn fn) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  const TAB* A = view_ptr<TAB>(a, v[0], nb);
  const TAB* B = view_ptr<TAB>(a, v[1], nb);
  TC* C = view_ptr<TC>(a, v[2], nb);
  const abi::GemmTileArgs& g = args_as<abi::GemmTileArgs>(args);
  const TBias* bias = g.has_bias ? view_ptr<TBias>(a, v[3], nb) : nullptr;
  const long long m0 = g.m0, m1 = g.m1, n0 = g.n0, n1 = g.n1;
  const long long M = v[0].shape[0], K = v[0].shape[1], N = v[1].shape[1], ldc = v[2].shape[1];
  if (K % 8 != 0 || N % 8 != 0 || (reinterpret_cast<unsigned long long>(A) & 15) != 0 ||
      (reinterpret_cast<unsigned long long>(B) & 15) != 0)
    return false;
  TAB* base = reinterpret_cast<TAB*>((reinterpret_cast<unsigned long long>(smem) + 127) & ~127ull);
  TAB* sa[2] = {base, base + kStageElems};
  TAB* sb[2] = {base + kBM * kAStride, base + kStageElems + kBM * kAStride};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool computes = warp < 8;
  const int wm = (warp % 8) / 2, wn = warp % 2;  // 4 x 2 warps of 32 x 64
  for (long long mb = m0; mb < m1; mb += kBM) {
    for (long long nb0 = n0; nb0 < n1; nb0 += kBN) {
      float acc[2][8][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
      const int ksteps = static_cast<int>((g.k1 - g.k0 + kBK - 1) / kBK);
      load_stage(sa[0], sb[0], A, B, M, N, K, g.k1, mb, nb0, g.k0);
      for (int ks = 0; ks < ksteps; ++ks) {
        const int cur = ks & 1;
        if (ks + 1 < ksteps) {
          load_stage(sa[cur ^ 1], sb[cur ^ 1], A, B, M, N, K, g.k1, mb, nb0,
                     g.k0 + static_cast<long long>(ks + 1) * kBK);
          asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
          asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();
        if (computes) {
#pragma unroll
          for (int kk = 0; kk < kBK; kk += 16) {
            unsigned af[2][4], bf[8][2];
#pragma unroll
            for (int i = 0; i < 2; ++i)
              ldmatrix_x4(af[i], sa[cur] + (wm * 32 + i * 16 + lane % 16) * kAStride + kk +
                                     (lane / 16) * 8);
#pragma unroll
            for (int j = 0; j < 8; j += 2) {
              unsigned r[4];
              ldmatrix_x4_trans(
                  r, sb[cur] + (kk + lane % 16) * kBStride + wn * 64 + j * 8 + (lane / 16) * 8);
              bf[j][0] = r[0];
              bf[j][1] = r[1];
              bf[j + 1][0] = r[2];
              bf[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
              for (int j = 0; j < 8; ++j) mma16816<TAB>(acc[i][j], af[i], bf[j]);
          }
        }
        __syncthreads();  // the stage is free for the load two steps on
      }
      if (computes) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const long long col = nb0 + wn * 64 + j * 8 + 2 * (lane % 4);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const long long row = mb + wm * 32 + i * 16 + lane / 4 + 8 * h;
              if (row >= m1) continue;
              if (col < n1)
                C[row * ldc + col] =
                    from_f32<TC>(fn(acc[i][j][2 * h] + (bias ? to_f32(bias[col]) : 0.0f)));
              if (col + 1 < n1)
                C[row * ldc + col + 1] =
                    from_f32<TC>(fn(acc[i][j][2 * h + 1] + (bias ? to_f32(bias[col + 1]) : 0.0f)));
            }
          }
        }
      }
    }
  }
  return true;
#else
  (void)a, (void)v, (void)args, (void)nb, (void)smem, (void)fn;
  return false;
#endif
}

}  // namespace sm80
}  // namespace mkc
