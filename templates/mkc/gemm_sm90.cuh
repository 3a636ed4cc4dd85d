// The Hopper GEMM tile: C[m0:m1, n0:n1] = fn(A x B (+ bias)) with bf16/f16 inputs, f32
// accumulation, `wgmma` tensor-core instructions fed by TMA bulk tensor copies.
//
// One CTA of 384 threads (three warpgroups) computes BM x BN output tiles (128 x 256, 128 x 128 or,
// for few rows, 64 x 128 / 64 x 256 where the consumers split the columns):
//   - warpgroup 0 is the producer: one thread issues, for each K step of 64, a TMA copy of the A
//     tile (128 x 64, K-major) and of the B tile (64 x BN, N-major, in 64-column boxes) into one
//     stage of a STAGES-deep shared-memory ring, completing on that stage's `full` mbarrier;
//   - warpgroups 1 and 2 are consumers, each owning 64 rows of the tile: they wait on `full`,
//     issue four m64nBNk16 wgmma per stage (A and B read from shared memory through descriptors,
//     128-byte swizzle), keep one wgmma group in flight, and release the stage before on its
//     `empty` mbarrier; then apply the epilogue (bias, device function, cast) from registers.
// The ring and its mbarriers persist across the CTA's tasks (PipeState): when the next task in
// the CTA's list is a GEMM tile of the same class that waits for nothing, the producer loads its
// first stages while the consumers run this tile's epilogue.
// Tensor maps are built on the host per operand view (runtime/tensor_map.*), with 128-byte
// swizzle and zero fill outside the view, so ragged M, N and K need no special code on the load
// side; stores are guarded. The rank of a task that uses it makes no difference: the maps hold
// the addresses of the views, wherever they live.
//
// Without sm_90a (no wgmma), the same entry point runs the mma.sync tile of gemm_sm80.cuh (sm_80
// and later, 16-byte aligned rows) or else the scalar tile in tasks.cuh.
#pragma once

#include "mkc/gemm_sm80.cuh"
#include "mkc/tasks.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MKC_HAS_WGMMA 1
#else
#define MKC_HAS_WGMMA 0
#endif

namespace mkc {

namespace sm90 {

constexpr int kBK = 64;        // K step: 64 bf16 = one 128-byte swizzle row
constexpr int kThreads = 384;  // producer + two consumers

// A BM x BN tile (BM = 128: each consumer warpgroup takes 64 rows and all BN columns; BM = 64:
// each takes all 64 rows and BN / 2 columns, for shapes with few rows).
template <int BM, int BN>
struct Shape {
  static constexpr int kABytes = BM * kBK * 2;
  static constexpr int kBBytes = kBK * BN * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // As deep as 192 KB allows (4 x 48 KB, 6 x 32 KB, 8 x 24 KB), at most 8 (the header's room).
  static constexpr int kStages = 196608 / kStageBytes < 8 ? 196608 / kStageBytes : 8;
  static constexpr int kWarpgroupN = BM == 128 ? BN : BN / 2;  // columns per consumer
  static constexpr int kKey = BM * 1000 + BN;                  // the ring's geometry
  // Header (pipeline state, mbarriers) + slack to align the ring to 1024 bytes + the ring.
  static constexpr int kSmemBytes = kStages * kStageBytes + 2048;
};

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

#if MKC_HAS_WGMMA

__device__ __forceinline__ void mbar_init(u64* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(u64* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(u64* bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, "
      "0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

// Waits for phase `parity` of `bar` to complete. A copy or MMA that never completes is a bug or a
// fault, not a peer's delay; after `timeout_ns` the kernel traps rather than hold the GPU.
__device__ __forceinline__ void mbar_wait(u64* bar, unsigned parity, u64 timeout_ns) {
  if (mbar_try_wait(bar, parity)) return;
  const u64 start = globaltimer();
  while (!mbar_try_wait(bar, parity)) {
    if (globaltimer() - start > timeout_ns) __trap();
  }
}

// 2-D TMA load of the box at (c0 = column, c1 = row) into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, int c0, int c1,
                                            u64* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3}], [%4];" ::"r"(smem_addr(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}

// wgmma shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride
// byte offsets, all in 16-byte units (PTX ISA, "Matrix Descriptor Format").
__device__ __forceinline__ u64 smem_desc(const void* p, unsigned lbo, unsigned sbo) {
  return static_cast<u64>((smem_addr(p) & 0x3FFFF) >> 4) |
         (static_cast<u64>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<u64>((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// D(64 x N, f32) += A(64 x 16, K-major) x B(16 x N, N-major); scale-d = 1, B transposed.
// One generator per width (the operand lists differ), instantiated for bf16 and f16.
#define MKC_DEFINE_WGMMA_64(AB)                                                                    \
  __device__ __forceinline__ void wgmma_m64n64k16_##AB(float* d, u64 da, u64 db) {                 \
    asm volatile(                                                                                  \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                               \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." #AB "." #AB                                  \
        " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "  \
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, " \
        "1;\n}\n"                                                                                  \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),      \
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),  \
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),            \
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),            \
          "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])             \
        : "l"(da), "l"(db), "r"(1));                                                               \
  }
MKC_DEFINE_WGMMA_64(bf16)
MKC_DEFINE_WGMMA_64(f16)
#undef MKC_DEFINE_WGMMA_64

#define MKC_DEFINE_WGMMA_128(AB)                                                                  \
  __device__ __forceinline__ void wgmma_m64n128k16_##AB(float* d, u64 da, u64 db) {               \
    asm volatile(                                                                                 \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                              \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." #AB "." #AB                                \
        " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "   \
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "   \
        "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 1;\n}\n"   \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),     \
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),           \
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),           \
          "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),           \
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),           \
          "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),           \
          "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),           \
          "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),           \
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),           \
          "+f"(d[62]), "+f"(d[63])                                                                \
        : "l"(da), "l"(db), "r"(1));                                                              \
  }
MKC_DEFINE_WGMMA_128(bf16)
MKC_DEFINE_WGMMA_128(f16)
#undef MKC_DEFINE_WGMMA_128

#define MKC_DEFINE_WGMMA_256(AB)                                                                   \
  __device__ __forceinline__ void wgmma_m64n256k16_##AB(float* d, u64 da, u64 db) {                \
    asm volatile(                                                                                  \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                              \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." #AB "." #AB                                 \
        " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "  \
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "    \
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "    \
        "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "    \
        "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, "    \
        "%87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, "      \
        "%103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, "     \
        "%117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, " \
        "0, 1;\n}\n"                                                                               \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),      \
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),  \
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),            \
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),            \
          "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),            \
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),            \
          "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),            \
          "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),            \
          "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),            \
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),            \
          "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]),            \
          "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]),            \
          "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),            \
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]),            \
          "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),            \
          "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),            \
          "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),        \
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),      \
          "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),      \
          "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),      \
          "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])       \
        : "l"(da), "l"(db), "r"(1));                                                               \
  }
MKC_DEFINE_WGMMA_256(bf16)
MKC_DEFINE_WGMMA_256(f16)
#undef MKC_DEFINE_WGMMA_256

template <typename T, int BN>
__device__ __forceinline__ void wgmma_tile(float* d, u64 da, u64 db) {
  constexpr bool bf = is_same<T, __nv_bfloat16>::value;
  static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma tiles are 64, 128 or 256 wide here");
  if constexpr (BN == 256) {
    if constexpr (bf)
      wgmma_m64n256k16_bf16(d, da, db);
    else
      wgmma_m64n256k16_f16(d, da, db);
  } else if constexpr (BN == 64) {
    if constexpr (bf)
      wgmma_m64n64k16_bf16(d, da, db);
    else
      wgmma_m64n64k16_f16(d, da, db);
  } else {
    if constexpr (bf)
      wgmma_m64n128k16_bf16(d, da, db);
    else
      wgmma_m64n128k16_f16(d, da, db);
  }
}

#endif  // MKC_HAS_WGMMA

template <typename TC>
__device__ __forceinline__ void store_pair(TC* p, float x, float y, bool both, bool aligned) {
  if (both && aligned) {
    if constexpr (is_same<TC, __nv_bfloat16>::value) {
      *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
      return;
    } else if constexpr (is_same<TC, __half>::value) {
      *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
      return;
    } else if constexpr (is_same<TC, float>::value) {
      *reinterpret_cast<float2*>(p) = make_float2(x, y);
      return;
    }
  }
  p[0] = from_f32<TC>(x);
  if (both) p[1] = from_f32<TC>(y);
}

// Two values as one 32-bit word of a 16-bit type (bf16x2 or half2).
template <typename TC>
__device__ __forceinline__ unsigned pack2(float x, float y) {
  unsigned u;
  if constexpr (is_same<TC, __nv_bfloat16>::value) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    u = *reinterpret_cast<const unsigned*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(x, y);
    u = *reinterpret_cast<const unsigned*>(&v);
  }
  return u;
}

// The epilogue of one consumer warpgroup: its 64 x BN accumulators (rows row0.., columns
// col0..), plus bias, through fn, cast to TC, into C (row stride ldc) below row m1 and column n1.
// Thread t holds rows (t/32)*16 + (t%32)/4 (+8) and the column pairs 8j + 2(t%4).
template <typename TC, typename TBias, int BN, typename Fn>
__device__ __forceinline__ void store_tile(const float* acc, TC* C, long long ldc,
                                           const TBias* bias, long long row0, long long col0,
                                           long long m1, long long n1, int t, Fn fn) {
  const int warp = t / 32, lane = t % 32;
  const bool aligned = (ldc % 2) == 0;
  const long long r = row0 + warp * 16 + lane / 4, c = col0 + 2 * (lane % 4);
  if constexpr (sizeof(TC) == 2) {
    if (ldc % 8 == 0 && (reinterpret_cast<unsigned long long>(C) & 15) == 0 && row0 + 64 <= m1 &&
        col0 + BN <= n1) {
      // 16-bit C, wholly inside, rows 16-byte aligned: the four lanes of a quad trade pairs (a
      // 4 x 4 transpose over 4 column blocks, 3 shuffles) so each lane holds 8 consecutive
      // columns and stores them as 16 bytes: a quad writes 64 contiguous bytes of a row.
      const int q = lane % 4;
      TC* const row_ptr = C + r * ldc + col0 + 8 * q;
#pragma unroll
      for (int g = 0; g < BN / 32; ++g) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          unsigned x[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const int j = 4 * g + k;
            const float b0 = bias ? to_f32(bias[c + 8 * j]) : 0.0f;
            const float b1 = bias ? to_f32(bias[c + 8 * j + 1]) : 0.0f;
            x[k] = pack2<TC>(fn(acc[4 * j + 2 * h] + b0), fn(acc[4 * j + 2 * h + 1] + b1));
          }
          unsigned y0 = 0, y1 = 0, y2 = 0, y3 = 0;
#pragma unroll
          for (int rr = 0; rr < 4; ++rr) {
            // Lane q sends its pair of block (q + rr) % 4 and receives, from lane s = (q - rr)
            // % 4, that lane's pair of block q: columns 2s, 2s + 1 of block q.
            const int out = (q + rr) & 3, src = (q - rr) & 3;
            const unsigned send = out == 0 ? x[0] : out == 1 ? x[1] : out == 2 ? x[2] : x[3];
            const unsigned got = __shfl_sync(0xffffffffu, send, (lane & ~3) | src);
            y0 = src == 0 ? got : y0;
            y1 = src == 1 ? got : y1;
            y2 = src == 2 ? got : y2;
            y3 = src == 3 ? got : y3;
          }
          *reinterpret_cast<uint4*>(row_ptr + (h ? 8 * ldc : 0) + 32 * g) =
              make_uint4(y0, y1, y2, y3);
        }
      }
      return;
    }
  }
  if (aligned && row0 + 64 <= m1 && col0 + BN <= n1) {
    // Wholly inside C: pairs straight out, no guards.
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const float b0 = bias ? to_f32(bias[c + 8 * j]) : 0.0f;
      const float b1 = bias ? to_f32(bias[c + 8 * j + 1]) : 0.0f;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        store_pair(C + (r + 8 * h) * ldc + c + 8 * j, fn(acc[4 * j + 2 * h] + b0),
                   fn(acc[4 * j + 2 * h + 1] + b1), true, true);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const long long col = c + 8 * j;
    if (col >= n1) continue;
    const bool both = col + 1 < n1;
    const float b0 = bias ? to_f32(bias[col]) : 0.0f;
    const float b1 = bias && both ? to_f32(bias[col + 1]) : 0.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (r + 8 * h < m1)
        store_pair(C + (r + 8 * h) * ldc + col, fn(acc[4 * j + 2 * h] + b0),
                   fn(acc[4 * j + 2 * h + 1] + b1), both, aligned);
    }
  }
}

// The ring's state, kept in the first bytes of dynamic shared memory across the tasks of a CTA:
// loads and consumptions are numbered from the ring's (re)initialisation, so stage = n % stages
// and phase = (n / stages) & 1, and a task can start on stages an earlier task loaded for it.
struct PipeState {
  unsigned next_load;     // the producer's next load
  unsigned next_consume;  // the consumers' next stage
  int bn;                 // the ring geometry in use; 0: mbarriers not initialised
  int prefetched;         // loads already issued for the task whose args are prefetched_args
  const long long* prefetched_args;
};
constexpr int kHeaderBytes = 256;  // PipeState at 0, full[8] at 64, empty[8] at 128

// At kernel start (thread 0, then a CTA barrier): no ring yet.
__device__ __forceinline__ void reset_pipeline(unsigned char* smem) {
  PipeState* st = reinterpret_cast<PipeState*>(smem);
  st->next_load = st->next_consume = 0;
  st->bn = 0;
  st->prefetched = 0;
  st->prefetched_args = nullptr;
}

#if MKC_HAS_WGMMA
// One stage load: A box (k, row m), B boxes (columns n.., k), completing on full[n % stages]
// after the consumers released the stage's previous use.
template <int BM, int BN>
__device__ __forceinline__ void load_stage(unsigned n, unsigned char* ring, u64* full, u64* empty,
                                           const TensorMap* map_a, const TensorMap* map_b,
                                           long long m, long long nn, int kt, u64 timeout_ns) {
  using S = Shape<BM, BN>;
  const int s = n % S::kStages;
  if (n >= static_cast<unsigned>(S::kStages))
    mbar_wait(empty + s, ((n / S::kStages) - 1) & 1, timeout_ns);
  unsigned char* st = ring + s * S::kStageBytes;
  mbar_expect_tx(full + s, S::kStageBytes);
  tma_load_2d(st, map_a, kt * kBK, static_cast<int>(m), full + s);
#pragma unroll
  for (int j = 0; j < BN / 64; ++j)
    tma_load_2d(st + S::kABytes + j * (kBK * 128), map_b, static_cast<int>(nn) + 64 * j, kt * kBK,
                full + s);
}
#endif

// The task: args {m0, m1, n0, n1, k_step, fn, has_bias, map A, map B}; views {A, B, C[, bias]}.
// Needs kThreads threads and Shape<BM, BN>::kSmemBytes of dynamic shared memory (`smem`, reset by
// reset_pipeline at kernel start). `next_args`/`next_v`: the CTA's next task when it is a task
// of this same class with no waits (else null): once this task's loads are issued, the producer
// loads the first stages of that task's first tile, so they arrive during this epilogue.
template <typename TAB, typename TC, typename TBias, int BM, int BN, typename Fn>
__device__ void gemm_tile_tma(const KernelArgs& a, const View* v, const long long* args, int nb,
                              unsigned char* smem, const long long* next_args, const View* next_v,
                              Fn fn) {
#if MKC_HAS_WGMMA
  using S = Shape<BM, BN>;
  constexpr int kStages = S::kStages, WN = S::kWarpgroupN;
  static_assert(kStages <= 8, "the header holds 8 mbarriers of each kind");
  TC* C = view_ptr<TC>(a, v[2], nb);
  const TBias* bias = args[6] ? view_ptr<TBias>(a, v[3], nb) : nullptr;
  const long long m0 = args[0], m1 = args[1], n0 = args[2], n1 = args[3];
  const long long K = v[0].shape[1], ldc = v[2].shape[1];
  PipeState* ps = reinterpret_cast<PipeState*>(smem);
  u64* full = reinterpret_cast<u64*>(smem + 64);
  u64* empty = reinterpret_cast<u64*>(smem + 128);
  unsigned char* ring = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(smem) + kHeaderBytes + 1023) & ~1023ull);
  const int ktiles = static_cast<int>((K + kBK - 1) / kBK);
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  // A ring of another geometry (or none) is drained (no other class prefetches into it): start
  // afresh.
  if (threadIdx.x == 0 && ps->bn != S::kKey) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 2);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    ps->bn = S::kKey;
    ps->next_load = ps->next_consume = 0;
    ps->prefetched = 0;
    ps->prefetched_args = nullptr;
  }
  __syncthreads();
  if (wg == 0) {
    if (t == 0) {
      const TensorMap* map_a = a.tensor_maps + args[7];
      const TensorMap* map_b = a.tensor_maps + args[8];
      unsigned n = ps->next_load;
      int skip = ps->prefetched_args == args ? ps->prefetched : 0;
      for (long long mt = m0; mt < m1; mt += BM) {
        for (long long nt = n0; nt < n1; nt += BN) {
          for (int kt = skip; kt < ktiles; ++kt)
            load_stage<BM, BN>(n++, ring, full, empty, map_a, map_b, mt, nt, kt, a.timeout_ns);
          skip = 0;
        }
      }
      int pre = 0;
      if (next_args != nullptr) {
        // At most a ring's worth: those slots are freed by this task's own consumption.
        const int next_ktiles = static_cast<int>((next_v[0].shape[1] + kBK - 1) / kBK);
        pre = next_ktiles < kStages ? next_ktiles : kStages;
        const TensorMap* next_a = a.tensor_maps + next_args[7];
        const TensorMap* next_b = a.tensor_maps + next_args[8];
        for (int kt = 0; kt < pre; ++kt)
          load_stage<BM, BN>(n++, ring, full, empty, next_a, next_b, next_args[0], next_args[2], kt,
                             a.timeout_ns);
      }
      ps->next_load = n;
      ps->prefetched = pre;
      ps->prefetched_args = pre > 0 ? next_args : nullptr;
    }
  } else {
    const int w = wg - 1;
    unsigned c = ps->next_consume;
    // This warpgroup's part of each tile: rows row_off.., columns col_off..
    const int row_off = BM == 128 ? 64 * w : 0, col_off = BM == 128 ? 0 : WN * w;
    for (long long mt = m0; mt < m1; mt += BM) {
      for (long long nt = n0; nt < n1; nt += BN) {
        float acc[WN / 2];
#pragma unroll
        for (int i = 0; i < WN / 2; ++i) acc[i] = 0.0f;
        for (int kt = 0; kt < ktiles; ++kt, ++c) {
          const int s = c % kStages;
          mbar_wait(full + s, (c / kStages) & 1, a.timeout_ns);
          const unsigned char* st = ring + s * S::kStageBytes;
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kBK / 16; ++kk) {
            // A: this warpgroup's 64 rows, K-major; 16 elements of K = 32 bytes along the row.
            const u64 da = smem_desc(st + row_off * 128 + kk * 32, 16, 1024);
            // B: N-major, 16 rows of K = 2 KB down; 64-column boxes 8 KB apart (leading), groups
            // of 8 K rows 1 KB apart (stride); this warpgroup's columns start col_off / 64 boxes
            // in.
            const u64 db = smem_desc(st + S::kABytes + (col_off / 64) * (kBK * 128) + kk * 16 * 128,
                                     kBK * 128, 1024);
            wgmma_tile<TAB, WN>(acc, da, db);
          }
          wgmma_commit();
          // The stage before is done with: give it back to the producer.
          wgmma_wait<1>();
          if (kt > 0 && t == 0) mbar_arrive(empty + (c - 1) % kStages);
        }
        wgmma_wait<0>();
        if (t == 0) mbar_arrive(empty + (c - 1) % kStages);
        store_tile<TC, TBias, WN>(acc, C, ldc, bias, mt + row_off, nt + col_off, m1, n1, t, fn);
      }
    }
    if (threadIdx.x == 128) ps->next_consume = c;
  }
  // The state is published before the next task reads it.
  __syncthreads();
#else
  (void)next_args;
  (void)next_v;
  // No wgmma: mma.sync on sm_80+ where the rows allow 16-byte copies, else the scalar tile.
  if (!sm80::gemm_tile_mma<TAB, TC, TBias>(a, v, args, nb, smem, fn))
    gemm_tile<TAB, TAB, TC, TBias>(a, v, args, nb, fn);
#endif
}

}  // namespace sm90
}  // namespace mkc
