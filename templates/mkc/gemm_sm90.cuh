// The Hopper GEMM tile: C[m0:m1, n0:n1] = fn(A x B (+ bias)) with bf16/f16 inputs, f32
// accumulation, `wgmma` tensor-core instructions fed by TMA bulk tensor copies.
//
// One CTA of 384 threads (three warpgroups) computes BM x BN output tiles (128 x 256, 128 x 128 or,
// for few rows, 64 x 128 / 64 x 256 where the consumers split the columns, and for at most 32
// rows the swapped 8/16/32 x 128/256 tiles of SwapShape below):
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
// In 2-CTA clusters (kPair; GemmTileArgs::cluster, compiler/passes/lower_compute.cc), CTAs 2c
// and 2c + 1 run row blocks 2q and 2q + 1 of one column block together: each producer loads its
// own A box and every other 64-column box of B for both CTAs (TMA multicast), so each SM pulls
// half of B from L2; a slot is free when the consumers of both CTAs are done with it (each
// releases it in its own ring and in the partner's). The scheduler's pair rule
// (plan/schedule.cc) keeps the two CTAs' lists in step.
// Tensor maps are built on the host per operand view (runtime/tensor_map.*), with 128-byte
// swizzle and zero fill outside the view, so ragged M, N and K need no special code on the load
// side; stores are guarded. The rank of a task that uses it makes no difference: the maps hold
// the addresses of the views, wherever they live.
//
// Without sm_90a (no wgmma), the same entry point runs the mma.sync tile of gemm_sm80.cuh (sm_80
// and later, 16-byte aligned rows) or else the SIMT tile of gemm_simt.cuh.
#pragma once

#include "mkc/gemm_sm80.cuh"
#include "mkc/hopper.cuh"
#include "mkc/split_k.cuh"

namespace mkc {

namespace sm90 {

constexpr int kBK = 64;        // K step: 64 bf16 = one 128-byte swizzle row
constexpr int kThreads = 384;  // producer + two consumers
// Staging buffers of C per consumer warpgroup for TMA stores (store_bufs below).
#ifndef MKC_STORE_BUFS
#define MKC_STORE_BUFS 2
#endif

// The ring of a tile whose A box has ARows rows and whose B is BN columns: a stage holds A (ARows
// x 64 of K) and B (64 x BN in 64-column boxes). StoreBytes: the C tile's staging for TMA stores
// (store_tile_tma), after the ring; 0 without.
template <int ARows, int BN, int StoreBytes = 0, bool kShallow = false>
struct Ring {
  static constexpr int kABytes = ARows * kBK * 2;
  static constexpr int kBBytes = kBK * BN * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // As deep as 192 KB allows (4 x 48 KB, 6 x 32 KB, 8 x 24 KB), at most 8 (the header's room);
  // kShallow (MKC_STORE_BUFS=0, an experiment): as deep as 208 KB less the staging allows.
  // compiler/kinds/kinds.h (gemm_ring_bytes) computes the default on the host.
  static constexpr int kRoom = StoreBytes > 0 && kShallow ? 212992 - StoreBytes : 196608;
  static constexpr int kStages = kRoom / kStageBytes < 8 ? kRoom / kStageBytes : 8;
  static constexpr int kBN = BN;
  static constexpr int kStoreBytes = StoreBytes;
  // Header (pipeline state, mbarriers) + slack to align the ring to 1024 bytes + the ring + the
  // staging.
  static constexpr int kSmemBytes = kStages * kStageBytes + StoreBytes + 2048;
};

// Buffers of 64 x 64 16-bit elements (8 KB) each consumer warpgroup of a BM x BN tile stages its
// part of C in for TMA stores (store_tile_tma): MKC_STORE_BUFS (2), at most its part's boxes.
// Measured on an H100 (2026-12-06, docs/RESULTS.md): the whole part with a ring one stage
// shallower (MKC_STORE_BUFS=0; the host's smem covers it) lost 6% in the 128 x 256 main loop.
template <int BM, int BN>
constexpr int store_bufs() {
  constexpr int boxes = (BM == 128 ? BN : BN / 2) / 64;
  return MKC_STORE_BUFS == 0 || MKC_STORE_BUFS > boxes ? boxes : MKC_STORE_BUFS;
}
template <int BM, int BN, bool kStoreTma>
constexpr int store_bytes() {
  return kStoreTma ? 2 * store_bufs<BM, BN>() * 8192 : 0;
}

// A BM x BN tile (BM = 128: each consumer warpgroup takes 64 rows and all BN columns; BM = 64:
// each takes all 64 rows and BN / 2 columns, for shapes with few rows). kStoreTma: C leaves
// through shared memory and TMA stores (store_tile_tma), its staging after the ring.
template <int BM, int BN, bool kStoreTma = false>
struct Shape : Ring<BM, BN, store_bytes<BM, BN, kStoreTma>(), MKC_STORE_BUFS == 0> {
  static constexpr int kWarpgroupN = BM == 128 ? BN : BN / 2;  // columns per consumer
  static constexpr int kAcc = kWarpgroupN / 2;                 // f32 accumulators per thread
  static constexpr int kConsumers = 2;                         // consumer warpgroups at work
  // The ring's geometry (its stage count differs with a staged C).
  static constexpr int kKey = BM * 1000 + BN + (kStoreTma ? 500000 : 0);
  static constexpr bool kSwap = false;
  static constexpr bool kStore = kStoreTma;
  static constexpr int kStoreBufs = store_bufs<BM, BN>();
};

// The swapped tile for few rows (MP = 8, 16 or 32, the tile's rows rounded up): Cᵀ = Bᵀ Aᵀ, so
// the GEMM's columns fill wgmma's M of 64 and its few rows are wgmma's N. A 64 x BN tile would
// spend the tensor cores on 64 - M padded rows (a 1-row GEMM ran at 1/64 of their work per byte
// of B, bound by them instead of by memory); here the padding is at most 7 rows. Same stages as
// Shape (A: MP rows x 64 of K; B: 64 x BN in 64-column boxes), same producer; each consumer
// warpgroup takes BN / 2 columns (BN 64: the first takes them all, the second idles: the narrow
// wgmma are far from binding, and 64-column tiles give a decode GEMM twice the CTAs to stream B
// with), one m64nMPk16 wgmma per 64-column box with the B box as the MN-major A operand and the
// A box as the K-major B operand, and stores its accumulators transposed (store_tile_swap).
template <int MP, int BN>
struct SwapShape : Ring<MP, BN> {
  static constexpr int kConsumers = BN == 64 ? 1 : 2;
  static constexpr int kWarpgroupN = BN / kConsumers;
  static constexpr int kAcc = kWarpgroupN / 64 * (MP / 2);
  static constexpr int kKey = 900000 + MP * 1000 + BN;
  static constexpr int kMP = MP;
  static constexpr bool kSwap = true;
  static constexpr bool kStore = false;
  static_assert(MP == 8 || MP == 16 || MP == 32, "swapped tiles of 8, 16 or 32 rows");
  static_assert(BN == 64 || BN == 128 || BN == 256, "swapped tiles of 64, 128 or 256 columns");
  static_assert(Ring<MP, BN>::kStageBytes % 1024 == 0,
                "stages stay aligned for the 128-byte swizzle");
};

// The tile's shape: swapped for at most 32 rows, else the BM x BN one (kStoreTma: with C staged
// for TMA stores; never swapped).
template <int BM, int BN, bool kStoreTma = false, bool kSwapped = (BM < 64)>
struct TileShape {
  using type = Shape<BM, BN, kStoreTma>;
};
template <int BM, int BN>
struct TileShape<BM, BN, false, true> {
  using type = SwapShape<BM, BN>;
};

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
  if constexpr (is_same<TC, float>::value) {
    if (aligned && row0 + 64 <= m1 && col0 + BN <= n1) {
      // f32 C wholly inside (split-K's partial sums): each pair one 8-byte global store from two
      // row pointers (a warp's store: 8 rows x 32 bytes, whole sectors), written out in PTX:
      // through a C++ float2 store the compiler cut each pair into two 4-byte generic stores, 64
      // a thread, about 6 µs of a 128 x 128 split part (ncu, H100, 2026-12-06). (A quad
      // transpose to 16-byte stores, as the 16-bit path above does, made ptxas serialize the
      // wgmma pipeline and spill the 128 x 256 split tile.)
      float* const p0 = C + r * ldc + c;
      float* const p1 = p0 + 8 * ldc;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const float b0 = bias ? to_f32(bias[c + 8 * j]) : 0.0f;
        const float b1 = bias ? to_f32(bias[c + 8 * j + 1]) : 0.0f;
        asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(p0 + 8 * j), "f"(fn(acc[4 * j] + b0)),
                     "f"(fn(acc[4 * j + 1] + b1)));
        asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(p1 + 8 * j),
                     "f"(fn(acc[4 * j + 2] + b0)), "f"(fn(acc[4 * j + 3] + b1)));
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

#if MKC_HAS_WGMMA
// The epilogue of one consumer warpgroup through shared memory and TMA (Shape's kStore): its 64 x
// WN results (plus bias, through fn, cast to the 16-bit TC), box by box of 64 rows x 64 columns,
// go by stmatrix into one of `buf`'s kBufs 8 KB buffers (rows of 128 bytes under the 128-byte
// swizzle the map of C was made with); then thread 0 of the warpgroup stores the box, if it
// starts inside the task (row0 < m1, column < n1), with a bulk tensor copy, and nobody waits for
// the last kBufs of them: they drain while the next tile's main loop runs. The lowering gives this
// path only to tasks whose boxes are whole or end at C's edge, where the map clips them
// (compiler/kinds/gemm_tile.cc). A buffer is written again only after its last store has read it
// (bulk_wait_read); the stores are complete before anything may read C (gemm_run's end when no tile
// of this class follows, sync.cuh's bulk_stores_drain before signals and the kernel's end). `bar`:
// a named barrier of this warpgroup's 128 threads.
template <typename TC, typename TBias, int WN, int kBufs, typename Fn>
__device__ __forceinline__ void store_tile_tma(const float* acc, unsigned char* buf,
                                               const TensorMap* map_c, const TBias* bias,
                                               long long row0, long long col0, long long m1,
                                               long long n1, int t, int bar, Fn fn) {
  static_assert(sizeof(TC) == 2, "TMA-stored tiles are 16-bit");
  static_assert((WN / 64) % kBufs == 0, "boxes rotate through the buffers");
  if (row0 >= m1) return;  // the same in the whole warpgroup
  const int warp = t / 32, lane = t % 32;
  // stmatrix: lane l gives the address of row l % 8 of matrix l / 8; matrices 0 and 1 are rows
  // 0-7 and 8-15 of the warp's 16 rows in column group j, 2 and 3 the same in group j + 1.
  const int i = lane % 8, mat = lane / 8;
  const unsigned row_addr = smem_addr(buf) + (warp * 16 + (mat & 1) * 8 + i) * 128;
  const long long c = col0 + 2 * (lane % 4);
#pragma unroll
  for (int q = 0; q < WN / 64; ++q) {
    // Box q goes through buffer q % kBufs, whose last store was kBufs groups ago (one group per
    // box, in order, across tiles too): that one must have read it.
    if (t == 0) bulk_wait_read<kBufs - 1>();
    named_bar_sync(bar, 128);
    const unsigned box = row_addr + (q % kBufs) * 8192;
#pragma unroll
    for (int j = 8 * q; j < 8 * q + 8; j += 2) {
      unsigned r[4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long col = c + 8 * (j + h);
        const float b0 = bias != nullptr && col < n1 ? to_f32(bias[col]) : 0.0f;
        const float b1 = bias != nullptr && col + 1 < n1 ? to_f32(bias[col + 1]) : 0.0f;
        r[2 * h] = pack2<TC>(fn(acc[4 * (j + h)] + b0), fn(acc[4 * (j + h) + 1] + b1));
        r[2 * h + 1] = pack2<TC>(fn(acc[4 * (j + h) + 2] + b0), fn(acc[4 * (j + h) + 3] + b1));
      }
      // Group g of 16 bytes in its 128-byte row, swizzled: at (g ^ row % 8) * 16.
      const int g = (j % 8) + (mat >> 1);
      stmatrix_x4(box + ((g ^ i) << 4), r[0], r[1], r[2], r[3]);
    }
    fence_proxy_async_smem();
    named_bar_sync(bar, 128);
    if (t == 0) {
      if (col0 + 64 * q < n1)
        tma_store_2d(map_c, buf + (q % kBufs) * 8192, static_cast<int>(col0 + 64 * q),
                     static_cast<int>(row0));
      bulk_commit();
    }
  }
}
#endif

// The epilogue of one consumer warpgroup of a swapped tile (SwapShape): C[row0.., col0..] from
// its accumulators, WN / 64 boxes of a 64 (columns) x MP (rows) product each, plus bias, through
// fn, cast to TC, below row m1 and column n1. In box b thread t holds columns 64b + (t/32)*16 +
// (t%32)/4 (+8) and the row pairs 8j + 2(t%4); a warp's store covers 8 consecutive columns (16
// bytes of a 16-bit C) in each of 4 rows: C is MP x BN, small next to the B it took to compute.
template <typename TC, typename TBias, int MP, int WN, typename Fn>
__device__ __forceinline__ void store_tile_swap(const float* acc, TC* C, long long ldc,
                                                const TBias* bias, long long row0, long long col0,
                                                long long m1, long long n1, int t, Fn fn) {
  const int warp = t / 32, lane = t % 32;
  const long long r = row0 + 2 * (lane % 4);
#pragma unroll
  for (int b = 0; b < WN / 64; ++b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long col = col0 + 64 * b + 16 * warp + lane / 4 + 8 * h;
      if (col >= n1) continue;
      const float bv = bias ? to_f32(bias[col]) : 0.0f;
#pragma unroll
      for (int j = 0; j < MP / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const long long row = r + 8 * j + e;
          if (row < m1)
            C[row * ldc + col] = from_f32<TC>(fn(acc[b * (MP / 2) + 4 * j + 2 * h + e] + bv));
        }
      }
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
  unsigned tiles;  // attention tiles run on the ring since its initialisation (attention_sm90.cuh)
  int pair_end;    // a 2-CTA pair's task is its CTA's last pair in a row (gemm_run's kPair)
};
// PipeState at 0, full[8] at 64, empty[8] at 128, a 2-CTA pair's peer[8] at 192.
constexpr int kHeaderBytes = 256;
static_assert(sizeof(PipeState) <= 64, "PipeState ends before the GEMM's mbarriers");

// At kernel start (thread 0, then a CTA barrier): no ring yet.
__device__ __forceinline__ void reset_pipeline(unsigned char* smem) {
  PipeState* st = reinterpret_cast<PipeState*>(smem);
  st->next_load = st->next_consume = 0;
  st->bn = 0;
  st->prefetched = 0;
  st->prefetched_args = nullptr;
  st->tiles = 0;
}

#if MKC_HAS_WGMMA
// One stage load: A box (k, row m), B boxes (columns n.., k), completing on full[n % stages]
// after the consumers released the stage's previous use.
// False when the stage never came free before the task's deadline (reported).
// B is a 2-D [K, N] map, or with bz >= 0 slice bz of a 3-D [groups, K, N] one (a grouped GEMM's
// weights: the zero fill then stops at the slice's K).
// `kc`: the stage's first K element.
template <typename S>
__device__ __forceinline__ bool load_stage_of(const KernelArgs& a, unsigned n, unsigned char* ring,
                                              u64* full, u64* empty, const TensorMap* map_a,
                                              const TensorMap* map_b, long long m, long long nn,
                                              int kc, int bz = -1) {
  constexpr int BN = S::kBN;
  const int s = n % S::kStages;
  if (n >= static_cast<unsigned>(S::kStages) &&
      !mbar_wait(a, empty + s, ((n / S::kStages) - 1) & 1, s))
    return false;
  unsigned char* st = ring + s * S::kStageBytes;
  mbar_expect_tx(full + s, S::kStageBytes);
  tma_load_2d(st, map_a, kc, static_cast<int>(m), full + s);
#pragma unroll
  for (int j = 0; j < BN / 64; ++j) {
    if (bz < 0) {
      tma_load_2d(st + S::kABytes + j * (kBK * 128), map_b, static_cast<int>(nn) + 64 * j, kc,
                  full + s);
    } else {
      tma_load_3d(st + S::kABytes + j * (kBK * 128), map_b, static_cast<int>(nn) + 64 * j, kc, bz,
                  full + s);
    }
  }
  return true;
}
// The same stage load for half of a 2-CTA pair (gemm_run's kPair): this CTA's own A box, and
// every other 64-column box of the B the pair shares, multicast into both CTAs (the partner loads
// the rest), all completing on full[n % stages] of the CTA they land in, which expects the whole
// stage. The slot must be free in both CTAs: this CTA's consumers released it (`empty`), and
// the partner's relay thread said its consumers did (this CTA's `peer`; gemm_run's relay). The
// consumers' code is the unpaired tile's: a remote arrive there cost the 128 x 256 tile's
// consumers spills.
template <typename S>
__device__ __forceinline__ bool load_stage_pair(const KernelArgs& a, unsigned n,
                                                unsigned char* ring, u64* full, u64* empty,
                                                u64* peer, const TensorMap* map_a,
                                                const TensorMap* map_b, long long m, long long nn,
                                                int kc, unsigned rank) {
  constexpr int BN = S::kBN;
  const int s = n % S::kStages;
  if (n >= static_cast<unsigned>(S::kStages)) {
    const unsigned parity = ((n / S::kStages) - 1) & 1;
    if (!mbar_wait(a, empty + s, parity, s)) return false;
    if (!mbar_wait(a, peer + s, parity, s)) return false;
  }
  unsigned char* st = ring + s * S::kStageBytes;
  mbar_expect_tx(full + s, S::kStageBytes);
  tma_load_2d(st, map_a, kc, static_cast<int>(m), full + s);
#pragma unroll
  for (int j = 0; j < BN / 64; ++j) {
    if ((j & 1) == static_cast<int>(rank))
      tma_load_2d_multicast(st + S::kABytes + j * (kBK * 128), map_b, static_cast<int>(nn) + 64 * j,
                            kc, full + s, 0x3);
  }
  return true;
}
template <int BM, int BN>
__device__ __forceinline__ bool load_stage(const KernelArgs& a, unsigned n, unsigned char* ring,
                                           u64* full, u64* empty, const TensorMap* map_a,
                                           const TensorMap* map_b, long long m, long long nn,
                                           int kc, int bz = -1) {
  return load_stage_of<Shape<BM, BN>>(a, n, ring, full, empty, map_a, map_b, m, nn, kc, bz);
}
#endif

#if MKC_HAS_WGMMA
// What one run of the pipeline computes: C[m0:m1, n0:n1] (row stride ldc) from A's TMA map (rows
// m0.., columns k0 .. K) and B's (rows k0 .. K; slice bz of a 3-D map when bz >= 0), plus bias.
// k0 is a multiple of 64 (a split-K part); K is where this job's K ends.
template <typename TC, typename TBias>
struct TileJob {
  long long m0, m1, n0, n1, k0, K, ldc;
  int bz;
  const TensorMap* map_a;
  const TensorMap* map_b;
  const TensorMap* map_c;  // C's 64 x 64 boxes for TMA stores (Shape's kStore), else unused
  TC* C;
  const TBias* bias;
};

// One consumer warpgroup's main loop over a tile's `ktiles` stages from ring position c (advanced
// past them): acc = the sum of the stages' wgmma products, each stage given back to the producer
// as soon as the next one's wgmma are issued. False when a stage never arrived before the task's
// deadline (reported).
template <typename TAB, int BM, int BN>
__device__ __forceinline__ bool consume_tile(const KernelArgs& a,
                                             float (&acc)[Shape<BM, BN>::kWarpgroupN / 2],
                                             unsigned& c, int ktiles, const unsigned char* ring,
                                             u64* full, u64* empty, int row_off, int col_off,
                                             int t) {
  using S = Shape<BM, BN>;
  constexpr int kStages = S::kStages, WN = S::kWarpgroupN;
#pragma unroll
  for (int i = 0; i < WN / 2; ++i) acc[i] = 0.0f;
  for (int kt = 0; kt < ktiles; ++kt, ++c) {
    const int s = c % kStages;
    if (!mbar_wait(a, full + s, (c / kStages) & 1, s)) {
      wgmma_wait<0>();
      return false;
    }
    const unsigned char* st = ring + s * S::kStageBytes;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      // A: this warpgroup's 64 rows, K-major; 16 elements of K = 32 bytes along the row.
      const u64 da = smem_desc(st + row_off * 128 + kk * 32, 16, 1024);
      // B: N-major, 16 rows of K = 2 KB down; 64-column boxes 8 KB apart (leading), groups of 8
      // K rows 1 KB apart (stride); this warpgroup's columns start col_off / 64 boxes in.
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
  return true;
}

// The pipeline (see the top of this file) over jobs(0) .. jobs(njobs - 1), one after the other
// with no break between them: the producer loads the next job's stages while the consumers run
// the last one's epilogue. `jobs(j)` returns the TileJob (every thread calls it, the consumers
// again for each tile's epilogue instead of holding the job in registers: it must be cheap and give
// every thread the same answer, e.g. a list in shared memory). No cross-task prefetch either way
// (a list's rows are known only when it runs). gemm_run below is the one-job
// version, the job in registers: kept apart because the GEMM tile needs every register (the
// list version's loop shape costs the plain tile 12 B of spills).
// The list runs with its registers reallocated (hopper.cuh): the producer on 56, the consumers on
// 224. At the kernel's 168 a 128 x 256 tile's consumers spilled 32 B (ptxas, CUDA 13.0); 40 / 232
// spills in the producer's loop over the list, 88 / 208 in the consumers'.
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
static_assert(kProducerRegs + 2 * kConsumerRegs == 3 * 168, "the CTA's register pool");
template <typename TAB, typename TC, typename TBias, int BM, int BN, typename Jobs, typename Fn>
__device__ __forceinline__ void gemm_run_jobs(const KernelArgs& a, int njobs, Jobs jobs,
                                              const long long* args, unsigned char* smem, Fn fn) {
  using S = Shape<BM, BN>;
  constexpr int kStages = S::kStages, WN = S::kWarpgroupN;
  static_assert(kStages <= 8, "the header holds 8 mbarriers of each kind");
  PipeState* ps = reinterpret_cast<PipeState*>(smem);
  u64* full = reinterpret_cast<u64*>(smem + 64);
  u64* empty = reinterpret_cast<u64*>(smem + 128);
  unsigned char* ring = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(smem) + kHeaderBytes + 1023) & ~1023ull);
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
    setmaxnreg_dec<kProducerRegs>();
    if (t == 0) {
      unsigned n = ps->next_load;
      int skip = ps->prefetched_args == args ? ps->prefetched : 0;
      bool ok = true;
      for (int j = 0; ok && j < njobs; ++j) {
        const TileJob<TC, TBias> job = jobs(j);
        const int ktiles = static_cast<int>((job.K - job.k0 + kBK - 1) / kBK);
        for (long long mt = job.m0; ok && mt < job.m1; mt += BM) {
          for (long long nt = job.n0; ok && nt < job.n1; nt += BN) {
            for (int kt = skip; ok && kt < ktiles; ++kt)
              ok = load_stage<BM, BN>(a, n++, ring, full, empty, job.map_a, job.map_b, mt, nt,
                                      static_cast<int>(job.k0) + kt * kBK, job.bz);
            skip = 0;
          }
        }
      }
      ps->next_load = n;
      ps->prefetched = 0;
      ps->prefetched_args = nullptr;
    }
    __syncwarp();
    named_bar_sync(kBarRegs, 384);
    setmaxnreg_inc<168>();
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    const int w = wg - 1;
    unsigned c = ps->next_consume;
    // This warpgroup's part of each tile: rows row_off.., columns col_off..
    const int row_off = BM == 128 ? 64 * w : 0, col_off = BM == 128 ? 0 : WN * w;
    bool ok = true;
    for (int j = 0; ok && j < njobs; ++j) {
      // Only small integers stay live across the main loop; the job is fetched again for the
      // epilogue (a list of jobs in shared memory is re-read, not held in registers).
      int ktiles, mtiles, ntiles;
      {
        const TileJob<TC, TBias> job = jobs(j);
        ktiles = static_cast<int>((job.K - job.k0 + kBK - 1) / kBK);
        mtiles = job.m1 > job.m0 ? static_cast<int>((job.m1 - job.m0 + BM - 1) / BM) : 0;
        ntiles = job.n1 > job.n0 ? static_cast<int>((job.n1 - job.n0 + BN - 1) / BN) : 0;
      }
      for (int tile = 0; ok && tile < mtiles * ntiles; ++tile) {
        float acc[WN / 2];
        ok = consume_tile<TAB, BM, BN>(a, acc, c, ktiles, ring, full, empty, row_off, col_off, t);
        if (!ok) break;
        const TileJob<TC, TBias> job = jobs(j);
        const long long mt = job.m0 + static_cast<long long>(tile / ntiles) * BM;
        const long long nt = job.n0 + static_cast<long long>(tile % ntiles) * BN;
        store_tile<TC, TBias, WN>(acc, job.C, job.ldc, job.bias, mt + row_off, nt + col_off, job.m1,
                                  job.n1, t, fn);
      }
    }
    if (threadIdx.x == 128) ps->next_consume = c;
    __syncwarp();
    named_bar_sync(kBarGroup + w, 128);
    setmaxnreg_dec<168>();
    named_bar_arrive(kBarRegs, 384);
  }
  // The state is published before the next task reads it.
  __syncthreads();
}

// The pipeline (see the top of this file) over one job, the job held in registers, in tiles of
// shape S (Shape or SwapShape). `args` identifies the task for the cross-task prefetch;
// `next_args`/`next_v`: a GEMM tile of this class that may be prefetched (GemmTileArgs), or null.
// kSplit: the job is one tile's split-K part (split_state(), set before the call): each consumer
// warpgroup stores its sums, takes its half's ticket, and only the last part's runs the epilogue
// on the sum of every part (split_k.cuh).
template <typename TAB, typename TC, typename TBias, typename S, bool kSplit, bool kPair,
          typename Fn>
__device__ __forceinline__ void gemm_run(const KernelArgs& a, const TileJob<TC, TBias>& job,
                                         const long long* args, unsigned char* smem,
                                         const long long* next_args, const View* next_v, Fn fn) {
  constexpr int kStages = S::kStages, WN = S::kWarpgroupN, BN = S::kBN;
  // Rows per tile (the A box's): the swapped tile's MP, else 64 or 128.
  constexpr int BM = S::kABytes / (kBK * 2);
  static_assert(kStages <= 8, "the header holds 8 mbarriers of each kind");
  static_assert(!kPair || (!kSplit && !S::kSwap && BM == 128 && BN >= 128),
                "2-CTA pairs: unsplit 128-row tiles of 128 or 256 columns");
  (void)next_v;  // the next task's K range is in its arguments
  TC* C = job.C;
  const TBias* bias = job.bias;
  const long long m0 = job.m0, m1 = job.m1, n0 = job.n0, n1 = job.n1;
  const long long K = job.K, ldc = job.ldc;
  PipeState* ps = reinterpret_cast<PipeState*>(smem);
  u64* full = reinterpret_cast<u64*>(smem + 64);
  u64* empty = reinterpret_cast<u64*>(smem + 128);
  u64* peer = reinterpret_cast<u64*>(smem + 192);
  unsigned char* ring = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(smem) + kHeaderBytes + 1023) & ~1023ull);
  const int ktiles = static_cast<int>((K - job.k0 + kBK - 1) / kBK);
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  // A pair's partner: the other CTA of the cluster (a pair's two halves run their tasks in step,
  // the scheduler's pair rule, plan/schedule.cc), which multicasts half of B into this CTA's
  // ring and releases its slots here as this CTA does there.
  bool fresh = false;
  if constexpr (kPair) {
    fresh = ps->bn != S::kKey;  // the same on both CTAs: their lists are pairs up to here
    __syncthreads();            // read before thread 0 sets it
    // Whether a pair follows, kept in shared memory for the end: the consumers have no register
    // to hold it through their main loop.
    if (threadIdx.x == 0) ps->pair_end = next_args == nullptr;
  }
  // A ring of another geometry (or none) is drained (no other class prefetches into it): start
  // afresh.
  if (threadIdx.x == 0 && ps->bn != S::kKey) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, S::kConsumers);  // one arrive per consumer at work
      if (kPair) mbar_init(peer + s, 1);    // the partner's producer: its consumers are done
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    ps->bn = S::kKey;
    ps->next_load = ps->next_consume = 0;
    ps->prefetched = 0;
    ps->prefetched_args = nullptr;
  }
  // A fresh pair's barriers are initialised on both CTAs before either multicasts into the other.
  if (kPair && fresh)
    cluster_sync();
  else
    __syncthreads();
  // A pair's relay reads where the producer starts before the producer moves it on.
  unsigned relay_from = 0;
  int relay_skip = 0;
  if constexpr (kPair) {
    relay_from = ps->next_load;
    relay_skip = ps->prefetched_args == args ? ps->prefetched : 0;
    __syncthreads();
  }
  if (wg == 0) {
    if constexpr (kPair) {
      // The relay (warp 1's first thread): as this CTA's consumers release each slot the
      // producer reloads (the loads below, in order), it tells the partner's producer, one hop
      // from consumer to partner, never held up behind the producer's own waits.
      if (t == 32) {
        unsigned n = relay_from;
        int loads = 0;
        for (long long mt = m0; mt < m1; mt += BM)
          for (long long nt = n0; nt < n1; nt += BN) loads += ktiles;
        loads -= loads > 0 ? relay_skip : 0;
        if (next_args != nullptr) {
          const abi::GemmTileArgs& next = args_as<abi::GemmTileArgs>(next_args);
          const int next_ktiles = static_cast<int>((next.k1 - next.k0 + kBK - 1) / kBK);
          loads += next_ktiles < kStages ? next_ktiles : kStages;
        }
        for (const unsigned end = n + static_cast<unsigned>(loads); n < end; ++n) {
          if (n < static_cast<unsigned>(kStages)) continue;
          const int s = n % kStages;
          if (!mbar_wait(a, empty + s, ((n / kStages) - 1) & 1, s)) break;
          mbar_arrive_peer(peer + s);
        }
      }
    }
    if (t == 0) {
      const TensorMap* map_a = job.map_a;
      const TensorMap* map_b = job.map_b;
      const unsigned rank = kPair ? cluster_ctarank() : 0;
      unsigned n = ps->next_load;
      int skip = ps->prefetched_args == args ? ps->prefetched : 0;
      bool ok = true;
      for (long long mt = m0; ok && mt < m1; mt += BM) {
        for (long long nt = n0; ok && nt < n1; nt += BN) {
          for (int kt = skip; ok && kt < ktiles; ++kt) {
            if constexpr (kPair)
              ok = load_stage_pair<S>(a, n++, ring, full, empty, peer, map_a, map_b, mt, nt,
                                      static_cast<int>(job.k0) + kt * kBK, rank);
            else
              ok = load_stage_of<S>(a, n++, ring, full, empty, map_a, map_b, mt, nt,
                                    static_cast<int>(job.k0) + kt * kBK, job.bz);
          }
          skip = 0;
        }
      }
      int pre = 0;
      if (ok && next_args != nullptr) {
        // At most a ring's worth: those slots are freed by this task's own consumption.
        const abi::GemmTileArgs& next = args_as<abi::GemmTileArgs>(next_args);
        const int next_ktiles = static_cast<int>((next.k1 - next.k0 + kBK - 1) / kBK);
        pre = next_ktiles < kStages ? next_ktiles : kStages;
        const TensorMap* next_a = a.tensor_maps + next.map_a;
        const TensorMap* next_b = a.tensor_maps + next.map_b;
        for (int kt = 0; ok && kt < pre; ++kt) {
          if constexpr (kPair)
            ok = load_stage_pair<S>(a, n++, ring, full, empty, peer, next_a, next_b, next.m0,
                                    next.n0, static_cast<int>(next.k0) + kt * kBK, rank);
          else
            ok = load_stage_of<S>(a, n++, ring, full, empty, next_a, next_b, next.m0, next.n0,
                                  static_cast<int>(next.k0) + kt * kBK);
        }
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
    bool ok = w < S::kConsumers;  // else this warpgroup idles (a 64-column swapped tile)
    for (long long mt = m0; ok && mt < m1; mt += BM) {
      for (long long nt = n0; ok && nt < n1; nt += BN) {
        float acc[S::kAcc];
#pragma unroll
        for (int i = 0; i < S::kAcc; ++i) acc[i] = 0.0f;
        for (int kt = 0; kt < ktiles; ++kt, ++c) {
          const int s = c % kStages;
          if (!mbar_wait(a, full + s, (c / kStages) & 1, s)) {
            ok = false;  // reported; the CTA leaves after this task
            break;
          }
          const unsigned char* st = ring + s * S::kStageBytes;
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kBK / 16; ++kk) {
            if constexpr (S::kSwap) {
              // Swapped: the A box (MP rows, K-major) is wgmma's B; each 64-column B box, as
              // below, is wgmma's A, MN-major.
              const u64 dr = smem_desc(st + kk * 32, 16, 1024);
#pragma unroll
              for (int b = 0; b < WN / 64; ++b) {
                const u64 dc =
                    smem_desc(st + S::kABytes + (col_off / 64 + b) * (kBK * 128) + kk * 16 * 128,
                              kBK * 128, 1024);
                wgmma_tile_ta<TAB, S::kMP>(acc + b * (S::kMP / 2), dc, dr);
              }
            } else {
              // A: this warpgroup's 64 rows, K-major; 16 elements of K = 32 bytes along the row.
              const u64 da = smem_desc(st + row_off * 128 + kk * 32, 16, 1024);
              // B: N-major, 16 rows of K = 2 KB down; 64-column boxes 8 KB apart (leading),
              // groups of 8 K rows 1 KB apart (stride); this warpgroup's columns start col_off /
              // 64 boxes in.
              const u64 db = smem_desc(
                  st + S::kABytes + (col_off / 64) * (kBK * 128) + kk * 16 * 128, kBK * 128, 1024);
              wgmma_tile<TAB, WN>(acc, da, db);
            }
          }
          wgmma_commit();
          // The stage before is done with: give it back to the producer.
          wgmma_wait<1>();
          if (kt > 0 && t == 0) mbar_arrive(empty + (c - 1) % kStages);
        }
        wgmma_wait<0>();
        if (!ok) break;
        if (t == 0) mbar_arrive(empty + (c - 1) % kStages);
        if constexpr (kSplit) {
          // Read here, not held through the main loop: the 128 x 256 tile has no register spare.
          SplitState& sp = split_state();
          float* const own = sp.partials + sp.part * sp.stride;
          if constexpr (S::kSwap)
            store_tile_swap<float, float, S::kMP, WN>(acc, own, ldc, nullptr, mt, nt + col_off, m1,
                                                      n1, t, NoFn{});
          else
            store_tile<float, float, WN>(acc, own, ldc, nullptr, mt + row_off, nt + col_off, m1, n1,
                                         t, NoFn{});
          if (split_last(sp.tickets + w, sp.parts, t, &sp.last[w], kBarGroup + w, 128)) {
            // This warpgroup's region: its 64 rows (a swapped tile's MP) and WN columns.
            const long long r0 = S::kSwap ? mt : mt + row_off, c0 = nt + col_off;
            const long long rows = S::kSwap ? BM : 64;
            sum_parts<TC, TBias>(sp.partials, sp.stride, sp.parts, ldc, C, bias, r0,
                                 r0 + rows < m1 ? r0 + rows : m1, c0, c0 + WN < n1 ? c0 + WN : n1,
                                 t, 128, fn);
          }
          continue;
        }
        if constexpr (S::kSwap)
          store_tile_swap<TC, TBias, S::kMP, WN>(acc, C, ldc, bias, mt, nt + col_off, m1, n1, t,
                                                 fn);
        else if constexpr (S::kStore)
          store_tile_tma<TC, TBias, WN, S::kStoreBufs>(
              acc, ring + kStages * S::kStageBytes + w * (S::kStoreBufs * 8192), job.map_c, bias,
              mt + row_off, nt + col_off, m1, n1, t, kBarGroup + w, fn);
        else
          store_tile<TC, TBias, WN>(acc, C, ldc, bias, mt + row_off, nt + col_off, m1, n1, t, fn);
      }
    }
    if (threadIdx.x == 128) ps->next_consume = c;
    // No tile of this class follows (or the ring is drained after this task): the stores are
    // complete before the staging may be reused by another class or C read.
    if constexpr (S::kStore) {
      if (next_args == nullptr && t == 0) {
        asm volatile("cp.async.bulk.wait_group 0;\nfence.proxy.async.global;" ::: "memory");
      }
    }
  }
  // The state is published before the next task reads it. A pair's last task (no pair follows
  // to prefetch) also waits for its partner: until then the partner may still release slots of
  // this CTA's ring, which the next task may initialise afresh, or the kernel end.
  if (kPair && ps->pair_end)
    cluster_sync();
  else
    __syncthreads();
}
#endif

// The task: args GemmTileArgs (abi.h), map_a and map_b set; views {A, B, C[, bias]}, and with
// kSplit (a split-K part: GemmTileArgs::parts > 1) the partials and tickets after them.
// Needs kThreads threads and Shape<BM, BN>::kSmemBytes of dynamic shared memory (`smem`, reset by
// reset_pipeline at kernel start). `next_args`/`next_v`: the CTA's next task when it is a task
// of this same class with no waits (else null): once this task's loads are issued, the producer
// loads the first stages of that task's first tile, so they arrive during this epilogue.
template <typename TAB, typename TC, typename TBias, int BM, int BN, bool kSplit = false,
          bool kPair = false, bool kStoreTma = false, typename Fn>
__device__ void gemm_tile_tma(const KernelArgs& a, const View* v, const long long* args, int nb,
                              unsigned char* smem, const long long* next_args, const View* next_v,
                              Fn fn) {
#if MKC_HAS_WGMMA
  const abi::GemmTileArgs& g = args_as<abi::GemmTileArgs>(args);
  TileJob<TC, TBias> job;
  job.m0 = g.m0;
  job.m1 = g.m1;
  job.n0 = g.n0;
  job.n1 = g.n1;
  job.k0 = g.k0;
  job.K = g.k1;
  job.ldc = v[2].shape[1];
  job.bz = -1;
  job.map_a = a.tensor_maps + g.map_a;
  job.map_b = a.tensor_maps + g.map_b;
  job.map_c = kStoreTma ? a.tensor_maps + g.map_c : nullptr;
  job.C = view_ptr<TC>(a, v[2], nb);
  job.bias = g.has_bias ? view_ptr<TBias>(a, v[3], nb) : nullptr;
  if constexpr (kSplit) {
    // Published by gemm_run's first barrier; the task before is done with it (its last one).
    if (threadIdx.x == 0) {
      SplitState& sp = split_state();
      const int pv = 3 + static_cast<int>(g.has_bias);
      sp.partials = view_ptr<float>(a, v[pv], nb);
      sp.stride = v[2].shape[0] * v[2].shape[1];
      sp.part = g.part;
      sp.parts = g.parts;
      sp.tickets = view_ptr<unsigned long long>(a, v[pv + 1], nb) + 2 * g.tile;
    }
  }
  gemm_run<TAB, TC, TBias, typename TileShape<BM, BN, kStoreTma>::type, kSplit, kPair>(
      a, job, args, smem, next_args, next_v, fn);
#else
  (void)next_args;
  (void)next_v;
  // No wgmma: mma.sync on sm_80+ where the rows allow 16-byte copies, else the scalar tile.
  const auto tile = [&](const View* w, const long long* g) {
    if constexpr (kSplit) {
      if (!sm80::gemm_tile_mma<TAB, float, float>(a, w, g, nb, smem, NoFn{}))
        gemm_tile<TAB, TAB, float, float>(a, w, g, nb, NoFn{});
    } else {
      if (!sm80::gemm_tile_mma<TAB, TC, TBias>(a, w, g, nb, smem, fn))
        gemm_tile<TAB, TAB, TC, TBias>(a, w, g, nb, fn);
    }
  };
  if constexpr (kSplit)
    gemm_split_part<TC, TBias>(a, v, args, nb, tile, fn);
  else
    tile(v, args);
#endif
}

}  // namespace sm90
}  // namespace mkc
