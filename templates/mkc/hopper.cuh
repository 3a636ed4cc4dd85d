// Hopper (sm_90a) primitives shared by the tensor-core tiles (gemm_sm90.cuh, attention_sm90.cuh):
// mbarriers, TMA bulk tensor copies, wgmma shared-memory descriptors and instructions. One
// wrapper per PTX instruction (wgmma.mma_async: per shape, type and source of A); the PTX ISA's
// names are kept. The tiles declare no wgmma of their own.
// Compiled by NVRTC only.
#pragma once

#include "mkc/sync.cuh"
#include "mkc/types.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MKC_HAS_WGMMA 1
#else
#define MKC_HAS_WGMMA 0
#endif

namespace mkc {
namespace sm90 {

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

// Waits for phase `parity` of `bar` (stage `stage` of a ring) to complete, until the task's
// deadline (sync.cuh). A copy or MMA that never completes is a bug or a fault, not a peer's
// delay: it is reported through the error record like every other wait (no trap, which would
// leave the context unusable), and the caller gives up its tile (false).
__device__ __forceinline__ bool mbar_wait(const KernelArgs& a, u64* bar, unsigned parity,
                                          int stage) {
  if (mbar_try_wait(bar, parity)) return true;
  const u64 deadline = task_state().deadline;
  while (!mbar_try_wait(bar, parity)) {
    if (globaltimer() > deadline) return pipeline_timeout(a, stage, parity);
  }
  return true;
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

// 3-D TMA load of the box at (c0 = column, c1 = row, c2 = slice) into shared memory.
__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map, int c0, int c1, int c2,
                                            u64* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3, %4}], [%5];" ::"r"(smem_addr(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

// 2-D TMA load of the box at (c0, c1) into the same shared-memory offset of every CTA of the
// cluster in `mask`, completing on the mbarrier at `bar`'s offset in each of them (a 2-CTA
// pair's shared operand: each CTA loads half of it for both).
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const TensorMap* map, int c0,
                                                      int c1, u64* bar, unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::"
      "cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(smem_addr(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(smem_addr(bar)), "h"(mask)
      : "memory");
}

// 2-D TMA store of the box at (c0 = column, c1 = row) from shared memory (`src`, written before
// by this CTA's threads, then fence_proxy_async_smem and a barrier), in this thread's open bulk
// group: the map clips what lies past the tensor's end.
__device__ __forceinline__ void tma_store_2d(const TensorMap* map, const void* src, int c0,
                                             int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(map),
      "r"(c0), "r"(c1), "r"(smem_addr(src))
      : "memory");
}

// Closes this thread's open bulk group (the stores issued since the last commit).
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Until all but the N most recent bulk groups this thread committed have read their shared
// memory (which may then be written again); the global writes may still be under way.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Generic-proxy writes to shared memory made visible to the async proxy (a TMA store's reads).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Four 8 x 8 matrices of 16-bit elements from the warp's registers into shared memory: lanes
// 8i .. 8i + 7 give the row addresses of matrix i, and each lane's r[i] holds its two elements of
// row lane / 4 of matrix i (the mma accumulator layout).
__device__ __forceinline__ void stmatrix_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2,
                                            unsigned r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// This CTA's rank in its cluster.
__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Arrives on the mbarrier at `bar`'s offset in the shared memory of the other CTA of a 2-CTA
// cluster, with plain arrive semantics (a release at cluster scope, issued by consumers after
// each stage, made a paired tile 1.7-2.5x slower on an H100).
__device__ __forceinline__ void mbar_arrive_peer(u64* bar) {
  asm volatile(
      "{\n.reg .b32 pr, ra;\nmov.u32 pr, %%cluster_ctarank;\nxor.b32 pr, pr, 1;\n"
      "mapa.shared::cluster.u32 ra, %0, pr;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}" ::"r"(smem_addr(bar))
      : "memory");
}

// Every thread of every CTA of the cluster: the cluster's barrier (release, then acquire).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}

// wgmma shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride
// byte offsets, all in 16-byte units (PTX ISA, "Matrix Descriptor Format").
__device__ __forceinline__ u64 smem_desc(const void* p, unsigned lbo, unsigned sbo) {
  return static_cast<u64>((smem_addr(p) & 0x3FFFF) >> 4) |
         (static_cast<u64>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<u64>((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

// The descriptor of d's matrix moved `units` 16-byte units further into shared memory: the start
// address is the low word's bits 0-13 and an address stays below 256 KB, so the sum never
// carries into the leading byte offset (bits 16-29) and the high word is kept as it is. One
// 32-bit add where smem_desc of the moved pointer costs five uniform instructions (mask, shift,
// or, and the high word's move) in front of every wgmma.
__device__ __forceinline__ u64 desc_plus(u64 d, unsigned units) {
  return (d & 0xFFFFFFFF00000000ull) | static_cast<unsigned>(static_cast<unsigned>(d) + units);
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

// The accumulator operands of the wgmma wrappers below: D (64 x N, f32) is N / 2 registers per
// thread, PTX operands %0.. (strings) and "+f" constraints, for N = 64, 128, 192 and 256.
#define MKC_WGMMA_D32                                                                          \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define MKC_WGMMA_D64                                                                       \
  MKC_WGMMA_D32                                                                             \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, " \
  "%49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MKC_WGMMA_D128                                                                         \
  MKC_WGMMA_D64                                                                                \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, "    \
  "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, " \
  "%99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, "  \
  "%114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define MKC_WGMMA_D96                                                                       \
  MKC_WGMMA_D64                                                                             \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, " \
  "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define MKC_WGMMA_D32_OPS(d)                                                                      \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define MKC_WGMMA_D64_OPS(d)                                                                     \
  MKC_WGMMA_D32_OPS(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),         \
      "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
      "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), \
      "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define MKC_WGMMA_D96_OPS(d)                                                                     \
  MKC_WGMMA_D64_OPS(d), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]),         \
      "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), \
      "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), \
      "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), \
      "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define MKC_WGMMA_D128_OPS(d)                                                                    \
  MKC_WGMMA_D64_OPS(d), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]),         \
      "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), \
      "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), \
      "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), \
      "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), \
      "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]),           \
      "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]),        \
      "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]),        \
      "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]),        \
      "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]),        \
      "+f"(d[127])

// D(64 x N, f32) = (accumulate ? D : 0) + A(64 x 16) x B(16 x N), scale-a = scale-b = 1, one
// wgmma.mma_async per call, in two forms:
//   wgmma_m64n<N>k16_<ab>:    A and B in shared memory (descriptors da, db), A K-major;
//   wgmma_m64n<N>k16_rs_<ab>: A from registers (four 32-bit words of two 16-bit values each, in
//                             the accumulator layout of a 64 x 16 tile), B in shared memory.
// kTransB: B N-major (1, the GEMM's B and attention's V) or K-major (0, attention's K in Q Kᵀ).
// One generator per (width, type); I0..I6 are the PTX operand numbers after D's (32 .. 128):
// the shared-memory form takes da, db, accumulate, kTransB; the register form a[0..3], db,
// accumulate, kTransB. The GEMM tiles always accumulate (their accumulators start at zero).
#define MKC_DEFINE_WGMMA(N, AB, DREGS, DOPS, I0, I1, I2, I3, I4, I5, I6)                          \
  template <int kTransB = 1>                                                                      \
  __device__ __forceinline__ void wgmma_m64n##N##k16_##AB(float* d, u64 da, u64 db,               \
                                                          int accumulate = 1) {                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #I2                                         \
                 ", 0;\n"                                                                         \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #AB "." #AB " {" DREGS         \
                 "}, %" #I0 ", %" #I1 ", p, 1, 1, 0, %" #I3 ";\n}\n"                              \
                 : DOPS(d)                                                                        \
                 : "l"(da), "l"(db), "r"(accumulate), "n"(kTransB));                              \
  }                                                                                               \
  template <int kTransB = 1>                                                                      \
  __device__ __forceinline__ void wgmma_m64n##N##k16_rs_##AB(float* d, const unsigned* a, u64 db, \
                                                             int accumulate = 1) {                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #I5                                         \
                 ", 0;\n"                                                                         \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #AB "." #AB " {" DREGS         \
                 "}, {%" #I0 ", %" #I1 ", %" #I2 ", %" #I3 "}, %" #I4 ", p, 1, 1, %" #I6 ";\n}\n" \
                 : DOPS(d)                                                                        \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate),          \
                   "n"(kTransB));                                                                 \
  }
MKC_DEFINE_WGMMA(64, bf16, MKC_WGMMA_D32, MKC_WGMMA_D32_OPS, 32, 33, 34, 35, 36, 37, 38)
MKC_DEFINE_WGMMA(64, f16, MKC_WGMMA_D32, MKC_WGMMA_D32_OPS, 32, 33, 34, 35, 36, 37, 38)
MKC_DEFINE_WGMMA(128, bf16, MKC_WGMMA_D64, MKC_WGMMA_D64_OPS, 64, 65, 66, 67, 68, 69, 70)
MKC_DEFINE_WGMMA(128, f16, MKC_WGMMA_D64, MKC_WGMMA_D64_OPS, 64, 65, 66, 67, 68, 69, 70)
MKC_DEFINE_WGMMA(192, bf16, MKC_WGMMA_D96, MKC_WGMMA_D96_OPS, 96, 97, 98, 99, 100, 101, 102)
MKC_DEFINE_WGMMA(192, f16, MKC_WGMMA_D96, MKC_WGMMA_D96_OPS, 96, 97, 98, 99, 100, 101, 102)
MKC_DEFINE_WGMMA(256, bf16, MKC_WGMMA_D128, MKC_WGMMA_D128_OPS, 128, 129, 130, 131, 132, 133, 134)
MKC_DEFINE_WGMMA(256, f16, MKC_WGMMA_D128, MKC_WGMMA_D128_OPS, 128, 129, 130, 131, 132, 133, 134)
#undef MKC_DEFINE_WGMMA
#undef MKC_WGMMA_D32
#undef MKC_WGMMA_D64
#undef MKC_WGMMA_D96
#undef MKC_WGMMA_D128
#undef MKC_WGMMA_D32_OPS
#undef MKC_WGMMA_D64_OPS
#undef MKC_WGMMA_D96_OPS
#undef MKC_WGMMA_D128_OPS

// The swapped GEMM tile's wgmma (gemm_sm90.cuh, SwapShape): D(64 x N, f32) += A(64 x 16) x
// B(16 x N) for N = 8, 16 and 32, with A MN-major (imm-trans-a 1: the GEMM's B box, 64 columns
// contiguous, read as Bᵀ) and B K-major (the GEMM's A box of N rows). D is N / 2 registers.
#define MKC_WGMMA_D4 "%0, %1, %2, %3"
#define MKC_WGMMA_D8 MKC_WGMMA_D4 ", %4, %5, %6, %7"
#define MKC_WGMMA_D16 MKC_WGMMA_D8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define MKC_WGMMA_D4_OPS(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define MKC_WGMMA_D8_OPS(d) MKC_WGMMA_D4_OPS(d), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define MKC_WGMMA_D16_OPS(d)                                                                       \
  MKC_WGMMA_D8_OPS(d), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
      "+f"(d[14]), "+f"(d[15])
#define MKC_DEFINE_WGMMA_TA(N, AB, DREGS, DOPS, I0, I1)                                     \
  __device__ __forceinline__ void wgmma_m64n##N##k16_ta_##AB(float* d, u64 da, u64 db) {    \
    asm volatile(                                                                           \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                          \
        "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #AB "." #AB " {" DREGS "}, %" #I0 \
        ", %" #I1 ", p, 1, 1, 1, 0;\n}\n"                                                   \
        : DOPS(d)                                                                           \
        : "l"(da), "l"(db));                                                                \
  }
MKC_DEFINE_WGMMA_TA(8, bf16, MKC_WGMMA_D4, MKC_WGMMA_D4_OPS, 4, 5)
MKC_DEFINE_WGMMA_TA(8, f16, MKC_WGMMA_D4, MKC_WGMMA_D4_OPS, 4, 5)
MKC_DEFINE_WGMMA_TA(16, bf16, MKC_WGMMA_D8, MKC_WGMMA_D8_OPS, 8, 9)
MKC_DEFINE_WGMMA_TA(16, f16, MKC_WGMMA_D8, MKC_WGMMA_D8_OPS, 8, 9)
MKC_DEFINE_WGMMA_TA(32, bf16, MKC_WGMMA_D16, MKC_WGMMA_D16_OPS, 16, 17)
MKC_DEFINE_WGMMA_TA(32, f16, MKC_WGMMA_D16, MKC_WGMMA_D16_OPS, 16, 17)
#undef MKC_DEFINE_WGMMA_TA
#undef MKC_WGMMA_D4
#undef MKC_WGMMA_D8
#undef MKC_WGMMA_D16
#undef MKC_WGMMA_D4_OPS
#undef MKC_WGMMA_D8_OPS
#undef MKC_WGMMA_D16_OPS

// One swapped wgmma: 64 columns of the GEMM (A MN-major) by N of its rows (B K-major).
template <typename T, int N>
__device__ __forceinline__ void wgmma_tile_ta(float* d, u64 da, u64 db) {
  constexpr bool bf = is_same<T, __nv_bfloat16>::value;
  static_assert(N == 8 || N == 16 || N == 32, "swapped wgmma tiles are 8, 16 or 32 rows here");
  if constexpr (N == 8) {
    if constexpr (bf)
      wgmma_m64n8k16_ta_bf16(d, da, db);
    else
      wgmma_m64n8k16_ta_f16(d, da, db);
  } else if constexpr (N == 16) {
    if constexpr (bf)
      wgmma_m64n16k16_ta_bf16(d, da, db);
    else
      wgmma_m64n16k16_ta_f16(d, da, db);
  } else {
    if constexpr (bf)
      wgmma_m64n32k16_ta_bf16(d, da, db);
    else
      wgmma_m64n32k16_ta_f16(d, da, db);
  }
}

// One wgmma of a 64 x BN tile with 16-bit inputs T (bf16 or f16), A in shared memory.
template <typename T, int BN, int kTransB = 1>
__device__ __forceinline__ void wgmma_tile(float* d, u64 da, u64 db, int accumulate = 1) {
  constexpr bool bf = is_same<T, __nv_bfloat16>::value;
  static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256,
                "wgmma tiles are 64, 128, 192 or 256 wide here");
  if constexpr (BN == 256) {
    if constexpr (bf)
      wgmma_m64n256k16_bf16<kTransB>(d, da, db, accumulate);
    else
      wgmma_m64n256k16_f16<kTransB>(d, da, db, accumulate);
  } else if constexpr (BN == 192) {
    if constexpr (bf)
      wgmma_m64n192k16_bf16<kTransB>(d, da, db, accumulate);
    else
      wgmma_m64n192k16_f16<kTransB>(d, da, db, accumulate);
  } else if constexpr (BN == 64) {
    if constexpr (bf)
      wgmma_m64n64k16_bf16<kTransB>(d, da, db, accumulate);
    else
      wgmma_m64n64k16_f16<kTransB>(d, da, db, accumulate);
  } else {
    if constexpr (bf)
      wgmma_m64n128k16_bf16<kTransB>(d, da, db, accumulate);
    else
      wgmma_m64n128k16_f16<kTransB>(d, da, db, accumulate);
  }
}

// The same with A from registers (`a`: the four words of this thread's A fragment).
template <typename T, int BN, int kTransB = 1>
__device__ __forceinline__ void wgmma_tile_rs(float* d, const unsigned* a, u64 db,
                                              int accumulate = 1) {
  constexpr bool bf = is_same<T, __nv_bfloat16>::value;
  static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma tiles are 64, 128 or 256 wide here");
  if constexpr (BN == 256) {
    if constexpr (bf)
      wgmma_m64n256k16_rs_bf16<kTransB>(d, a, db, accumulate);
    else
      wgmma_m64n256k16_rs_f16<kTransB>(d, a, db, accumulate);
  } else if constexpr (BN == 64) {
    if constexpr (bf)
      wgmma_m64n64k16_rs_bf16<kTransB>(d, a, db, accumulate);
    else
      wgmma_m64n64k16_rs_f16<kTransB>(d, a, db, accumulate);
  } else {
    if constexpr (bf)
      wgmma_m64n128k16_rs_bf16<kTransB>(d, a, db, accumulate);
    else
      wgmma_m64n128k16_rs_f16<kTransB>(d, a, db, accumulate);
  }
}

// Register reallocation between the warpgroups of a producer/consumer tile (the GEMM pipeline
// and the attention tile): the producer warpgroup drops to P registers and the n consumer
// warpgroups rise to C, with P + n C = (n + 1) B, B the kernel's allocation (168 for
// __launch_bounds__(384, 1), 128 for 512 threads); at the tile's end the consumers return to B
// before the producer takes its B back, because setmaxnreg.inc blocks until the CTA's pool has the
// registers. Each is executed by a whole warpgroup; counts are multiples of 8 in [24, 256]. Off
// with MKC_NO_SETMAXNREG (an NVRTC -D, for experiments).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg.dec: a multiple of 8 in [24, 256]");
#ifndef MKC_NO_SETMAXNREG
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N) : "memory");
#endif
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg.inc: a multiple of 8 in [24, 256]");
#ifndef MKC_NO_SETMAXNREG
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N) : "memory");
#endif
}

// Named barriers (0 is __syncthreads). kBarRegs: the producer warpgroup waits there for every
// consumer warpgroup to have given its registers back (the CTA's threads: 128 sync, the rest
// arrive). kBarGroup + w (w < 3): consumer warpgroup w meets before it gives them back.
constexpr int kBarRegs = 1, kBarGroup = 4;

__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// A named barrier that also answers whether `pred` held in every thread that met there: one
// decision for a warpgroup whose threads may each have seen a failure at another time.
__device__ __forceinline__ bool named_bar_all(int id, int threads, bool pred) {
  unsigned all;
  asm volatile(
      "{\n .reg .pred q, r;\n setp.ne.u32 q, %1, 0;\n bar.red.and.pred r, %2, %3, q;\n"
      " selp.u32 %0, 1, 0, r;\n}"
      : "=r"(all)
      : "r"(pred ? 1u : 0u), "r"(id), "r"(threads)
      : "memory");
  return all != 0;
}

#endif  // MKC_HAS_WGMMA

}  // namespace sm90
}  // namespace mkc
