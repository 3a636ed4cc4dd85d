// The Hopper attention tile: O[l, q0:q1] = softmax(scale * Q Kᵀ) V for one slice l of the leading
// dims, bf16 or f16 in, f32 accumulation, `wgmma` tensor-core instructions fed by TMA bulk tensor
// copies, online softmax in registers (FlashAttention's recurrence, in the exp2 domain).
//
// One CTA of 384 threads (three warpgroups) computes a 128-query tile against every key block of
// BN keys (head dims 64 and 128, the same for Q, K and V; BN 128, or 192 at head dim 64, where
// a block's fixed costs weigh twice as much against its MMAs); at head dim 64 a CTA of 512
// threads may take 192 queries in three consumer warpgroups instead (BQ = 192, BN = 128, as
// FlashAttention-3 does there):
//   - warpgroup 0 is the producer: one thread loads the Q tile once, then each key block's K and V
//     tiles into a ring of stages (two for D = 128, four or three for D = 64), K and V
//     completing on their own mbarriers; it runs on 40 registers, giving the consumers 232
//     (setmaxnreg; 32 and 160 with three consumers);
//   - warpgroups 1 and 2 (and 3) each own 64 query rows. Per key block: S = Q Kᵀ (wgmma, A = Q
//     and B = K both K-major in shared memory, 128-byte swizzle), the causal / ragged mask, the
//     online softmax (row max across the quad, exp2 with the scale folded in, the running sum kept
//     per thread and reduced once at the end), then O += P V with P straight from registers (the
//     accumulator layout of S is the A-fragment layout of the next wgmma, two 8-column groups per
//     16-key step) and V N-major in shared memory. Block j's Q Kᵀ is issued with block j-1's
//     P V, so the softmax of j runs under that P V, and the warpgroups take turns at the
//     tensor cores (ping-pong or round robin, named barriers), so one's softmax runs under the
//     others' MMAs. The stage is released once every consumer's P V has completed.
// Across tiles: when the CTA's next task is an attention tile of the same class that waits for
// nothing, the producer loads its Q (into the second of two Q slots) and its first key blocks
// while this tile's consumers finish, so a tile's fixed costs (the loads' latency, the epilogue)
// overlap; the ring and its mbarriers then persist, numbered as the GEMM numbers its ring.
// Causal masking: key j is visible to query i when j <= i + causal_offset (0: top-left aligned in
// the slice's coordinates; ring attention's blocks sit elsewhere in the whole sequence); key
// blocks past the tile's last visible key are skipped, by both sides, and a tile that sees no key
// of an instance that neither starts nor ends the accumulation returns at once. The tensor maps
// are 3-D ([L][S][D]), so a box never reads into the next slice and ragged S is zero-filled; keys
// past S are masked, queries past S are computed on zeros and not stored.
// With `accumulate` (a loop's instances merged, ring attention), the running max (natural log),
// sum and unnormalised O are read from and written to the f32 state the lowering gives the task,
// in the same form the SIMT tile uses, so either tile can continue the other's state.
//
// Without sm_90a the same entry point runs the mma.sync tile of attention_sm80.cuh (sm_80 and
// later; the SIMT tile of attention_simt.cuh before).
#pragma once

#include "mkc/attention_sm80.cuh"
#include "mkc/gemm_sm90.cuh"
#include "mkc/hopper.cuh"

namespace mkc {
namespace sm90 {

template <int D, int BN, int BQ = 128>
struct AttnShape {
  static_assert(D == 64 || D == 128, "the tensor-core attention tile takes head dims 64 and 128");
  static_assert(BN == 128 || (D == 64 && BN == 192),
                "key blocks of 128 keys, or 192 at head dim 64 (compiler/kinds/attention_tile.cc)");
  static_assert(BQ == 128 || (D == 64 && BN == 128 && BQ == 192),
                "query tiles of 128, or 192 at head dim 64 with key blocks of 128");
  static constexpr int kBQ = BQ;              // queries per tile: 64 per consumer warpgroup
  static constexpr int kConsumers = BQ / 64;  // consumer warpgroups
  static constexpr int kThreads = abi::attention_threads(BQ);
  // Registers a thread: the kernel's allocation (__launch_bounds__(kThreads, 1)), the producer's
  // and the consumers' while the tile runs (setmaxnreg; P + kConsumers C = (kConsumers + 1) base:
  // 40 + 2 x 232 = 3 x 168, 32 + 3 x 160 = 4 x 128).
  static constexpr int kBaseRegs = kConsumers == 2 ? 168 : 128;
  static constexpr int kProducerRegs = kConsumers == 2 ? 40 : 32;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 232 : 160;
  static_assert(kProducerRegs + kConsumers * kConsumerRegs == (kConsumers + 1) * kBaseRegs,
                "the register pool is handed over whole");
  static constexpr int kBN = BN;         // keys per block
  static constexpr int kBoxes = D / 64;  // 64-column (128-byte) TMA boxes per row
  static constexpr int kQBoxBytes = kBQ * 128;
  static constexpr int kKBoxBytes = kBN * 128;
  static constexpr int kQBytes = kBoxes * kQBoxBytes;
  static constexpr int kKBytes = kBoxes * kKBoxBytes;
  static constexpr int kStageBytes = 2 * kKBytes;  // K then V
  static constexpr int kStages = abi::attention_stages(D, BN);
  // Header (PipeState of the GEMM, this tile's mbarriers) + slack to align to 1024 + two Q slots
  // (the next tile's Q loads while this one's is in use) + ring.
  static constexpr int kSmemBytes = 2048 + 2 * kQBytes + kStages * kStageBytes;
  static_assert(kSmemBytes == abi::attention_smem_bytes(D, BN, BQ),
                "the kind's launch asks for this");
  // PipeState::bn while the ring is the attention's: no GEMM geometry (BM * 1000 + BN) is negative.
  static constexpr int kKey = -(BQ * 1000000 + D * 1000 + BN);
};

// Byte offsets of this tile's mbarriers in the header (the GEMM's PipeState and its barriers use
// bytes [0, 192), a 2-CTA pair's peer barriers [192, 256) while a paired ring is in use: a ring
// of another class starts afresh).
constexpr int kAttnBarOffset =
    192;  // q_full[2], q_free[2], full_k[], full_v[], empty_k[], empty_v[]
// Each consumer warpgroup's place in a chain (attention_chain_tma), two copies of 4 words.
constexpr int kAttnCursorOffset = 512;

// Key blocks a tile sees: all of them, or (causal) those with a key visible to its last query.
template <int D, int BN>
__device__ __forceinline__ int attn_blocks(const abi::AttentionTileArgs& at, long long Sk) {
  long long keys = Sk;
  if (at.causal && at.q1 + at.causal_offset < keys) keys = at.q1 + at.causal_offset;
  if (keys < 0) keys = 0;
  return static_cast<int>((keys + AttnShape<D, BN>::kBN - 1) / AttnShape<D, BN>::kBN);
}

// A tile with nothing to merge and nothing to set up or write (a block of a later rank in causal
// ring attention) returns at once: the state stays as the instances before left it.
__device__ __forceinline__ bool attn_returns_at_once(const abi::AttentionTileArgs& at,
                                                     int nblocks) {
  return nblocks == 0 && at.accumulate && !at.first && !at.last;
}

// The key blocks [b0, b0 + n) a tile sees: attn_blocks from 0, or with packed sequences (kVarlen,
// attention_varlen.cuh) those of its rows' sequences.
struct AttnBlocks {
  int b0, n;
};
template <int D, int BN, bool kVarlen>
__device__ __forceinline__ AttnBlocks attn_key_blocks(const KernelArgs& a, const View* v,
                                                      const abi::AttentionTileArgs& at, int nb) {
  if constexpr (!kVarlen) {
    return {0, attn_blocks<D, BN>(at, v[1].shape[1])};
  } else {
    constexpr int kN = AttnShape<D, BN>::kBN;
    const AttnKeys k =
        attn_rows_keys(attn_seqs(a, v, at, nb), at.q0, at.q1, at.causal != 0, v[1].shape[1]);
    if (k.lo >= k.hi) return {0, 0};
    return {k.lo / kN, (k.hi + kN - 1) / kN - k.lo / kN};
  }
}

#if MKC_HAS_WGMMA

// Register reallocation between the warpgroups (hopper.cuh; off with MKC_NO_SETMAXNREG, an
// NVRTC -D): the producer runs on 40 registers and the consumers on 232. setmaxnreg.inc blocks
// until the CTA's pool has the registers, so the producer takes its 168 back only after both
// consumers have given theirs (named barrier kBarRegs); taking them back earlier (the first
// version, which hung at head dim 128 on an H200 on 2026-12-01) could leave the consumers waiting
// for registers and the producer waiting for the consumers to free a stage.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Named barriers of the tile (0 is __syncthreads): the producer waits on kBarRegs for every
// consumer to have given its registers back; the consumers take turns at their MMAs on
// kBarTurn + w; each consumer warpgroup meets on kBarGroup + w before its setmaxnreg (kBarRegs
// and kBarGroup, 1 and 4 to 6: hopper.cuh).
constexpr int kBarTurn = 8;

// Pins registers that an asynchronous wgmma writes or reads at this point of the program, so that
// no arithmetic on them moves across the wgmma.wait_group before it or the wgmma.fence after it.
template <int N>
__device__ __forceinline__ void pin_regs(float* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void pin_regs(unsigned* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Turns between the n consumer warpgroups (on unless MKC_ATTN_NO_PINGPONG; ping-pong for two,
// round robin for three): warpgroup w issues a block's MMAs only in its turn and hands the turn
// to w + 1 (mod n) once they are issued, so the tensor cores run one warpgroup's Q Kᵀ and P V
// while the others compute their softmax. A turn is a bar.sync of kBarTurn + w for 256 threads,
// 128 of them the previous warpgroup's bar.arrive. The last warpgroup starts by giving warpgroup
// 0 the first turn and does not hand over its last one, so every barrier ends with as many
// arrivals as waits (all warpgroups of a tile take the same number of turns), and no barrier
// gets a second arrival before its wait: warpgroup w hands to w + 1 again only after its own next
// turn, which needs w + 1's turn to have come and gone.
// A chain of tiles takes its turns as one sequence: AttnTurns::open once at its start, then an
// AttnTurns per tile that carries on from the turns handed so far.
struct AttnTurns {
  int w, n, points, handed;
  __device__ __forceinline__ AttnTurns(int w_, int n_, int points_, int handed_ = 0)
      : w(w_), n(n_), points(points_), handed(handed_) {}
  __device__ __forceinline__ static void open(int w, int n, int points) {
#ifndef MKC_ATTN_NO_PINGPONG
    if (w == n - 1 && points > 0) named_bar_arrive(kBarTurn + 0, 256);
#endif
  }
  __device__ __forceinline__ void begin() {
#ifndef MKC_ATTN_NO_PINGPONG
    named_bar_sync(kBarTurn + w, 256);
#endif
  }
  __device__ __forceinline__ void end() {
#ifndef MKC_ATTN_NO_PINGPONG
    if (!(w == n - 1 && handed == points - 1)) named_bar_arrive(kBarTurn + (w + 1) % n, 256);
#endif
    ++handed;
  }
  // After a failed wait: the turns not taken are still taken and handed over, without MMAs, so
  // that the other warpgroup never waits for them (its own waits fail at the same deadline). Not
  // arrivals alone: two in a row would complete a barrier without its waiter.
  __device__ __forceinline__ void give_up() {
    while (handed < points) {
      begin();
      end();
    }
  }
};

// Mask where a key is past the slice or (causal) after the query; positions in the slice as int
// (2^31 keys of one slice would be 256 GiB at head dim 64: not checked anywhere).
// `row0` and `qrow` are the last keys visible to the warpgroup's first row and to this thread's
// rows (the rows plus the causal offset).
template <int kN>
__device__ __forceinline__ void attn_mask(float* sc, int key0, int Sk, bool causal, int row0,
                                          const int* qrow, int lane) {
  const bool ragged = key0 + kN > Sk;
  const bool diagonal = causal && key0 + kN - 1 > row0;
  if (!ragged && !diagonal) return;
  // Row h sees the keys up to its last, min(Sk - 1, qrow[h]); as an offset from this thread's
  // first column, each element's test is one compare with a constant (and one select): two
  // instructions an element, not the three or four of comparing its key against both bounds.
  int last[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = causal && qrow[h] < Sk - 1 ? qrow[h] : Sk - 1;
    last[h] = k - key0 - 2 * (lane % 4);
  }
#pragma unroll
  for (int g = 0; g < kN / 8; ++g) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (8 * g + e > last[h]) sc[4 * g + 2 * h + e] = neg_inf();
      }
    }
  }
}

// attn_mask with packed sequences: key j is visible to row h when rlo[h] <= j < rhi[h] (its
// sequence's, within the slice) and (causal) j <= the row; `wlo` and `whi` bound the keys every
// row of the warpgroup sees (a block inside them and before the diagonal needs no mask). Its own
// loop, not attn_mask's through a predicate: with one loop taking a lambda, ptxas made the head
// dim 64 block loop (192-query chains) 1,410 instructions, not 872 (2026-12-07, sass_loops.py).
template <int kN>
__device__ __forceinline__ void attn_mask_seqs(float* sc, int key0, bool causal, int row0,
                                               const int* qrow, const int* rlo, const int* rhi,
                                               int wlo, int whi, int lane) {
  const bool inside = key0 >= wlo && key0 + kN <= whi;
  const bool diagonal = causal && key0 + kN - 1 > row0;
  if (inside && !diagonal) return;
  // Row h's first and last visible keys as offsets from this thread's first column (attn_mask).
  int first[2], last[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = causal && qrow[h] < rhi[h] - 1 ? qrow[h] : rhi[h] - 1;
    first[h] = rlo[h] - key0 - 2 * (lane % 4);
    last[h] = k - key0 - 2 * (lane % 4);
  }
#pragma unroll
  for (int g = 0; g < kN / 8; ++g) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (8 * g + e < first[h] || 8 * g + e > last[h]) sc[4 * g + 2 * h + e] = neg_inf();
      }
    }
  }
}

// Online softmax of one block, per row h: the block's max, the factor alpha[h] that rescales what
// came before, P = exp2(scale2 * S - m) in f32 in place of S (packed to 16 bits once the last
// P V is done with the registers of P, attn_pack_p), and the running sum (per thread; the quad's
// parts are added at the end). The row's max and sum over the thread's kN / 4 values run as four
// chains each, not one: while the other warpgroup holds the tensor cores, one warp per scheduler
// runs this, and a chain of kN / 4 dependent adds would leave it waiting on each add's latency
// (MKC_ATTN_SERIAL_ROWS, an NVRTC -D, keeps the single chains, for comparison).
template <int kN>
__device__ __forceinline__ void attn_softmax(float* sc, float* m, float* l, float scale2,
                                             float* alpha) {
#ifdef MKC_ATTN_SERIAL_ROWS
  constexpr int kChains = 1;
#else
  constexpr int kChains = 4;
#endif
  static_assert((kN / 8) % kChains == 0, "the chains split the row's groups evenly");
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Each chain starts from its first group, not from -inf or 0: a max with -inf and an add of
    // 0 are instructions ptxas may not drop (8 of each a block).
    float part[kChains];
#pragma unroll
    for (int g = 0; g < kN / 8; ++g) {
      const float pair = fmaxf(sc[4 * g + 2 * h], sc[4 * g + 2 * h + 1]);
      part[g % kChains] = g < kChains ? pair : fmaxf(part[g % kChains], pair);
    }
    float mx = part[0];
#pragma unroll
    for (int c = 1; c < kChains; ++c) mx = fmaxf(mx, part[c]);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[h], mx * scale2);
    // A row that has seen no key yet keeps the rescale finite (nothing to rescale).
    const float m_use = m_new == neg_inf() ? 0.0f : m_new;
    alpha[h] = ex2(m[h] - m_use);
    m[h] = m_new;
#pragma unroll
    for (int g = 0; g < kN / 8; ++g) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        sc[4 * g + 2 * h + e] = ex2(fmaf(sc[4 * g + 2 * h + e], scale2, -m_use));
        part[g % kChains] =
            g < kChains && e == 0 ? sc[4 * g + 2 * h] : part[g % kChains] + sc[4 * g + 2 * h + e];
      }
    }
    float sum = part[0];
#pragma unroll
    for (int c = 1; c < kChains; ++c) sum += part[c];
    l[h] = l[h] * alpha[h] + sum;
  }
}

// P (f32, the accumulator layout of S) as 16-bit pairs in the A-fragment order of the P V wgmma:
// key step kk = g / 2 takes groups 2kk (words 0, 1) and 2kk + 1 (words 2, 3); row h is the
// word's second index.
template <typename T, int kN>
__device__ __forceinline__ void attn_pack_p(const float* sc, unsigned* p) {
#pragma unroll
  for (int g = 0; g < kN / 8; ++g) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
      p[(g / 2) * 4 + (g % 2) * 2 + h] = pack2<T>(sc[4 * g + 2 * h], sc[4 * g + 2 * h + 1]);
  }
}

template <int D>
__device__ __forceinline__ void attn_rescale(float* o, const float* alpha) {
#pragma unroll
  for (int g = 0; g < D / 8; ++g) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      o[4 * g + 2 * h] *= alpha[h];
      o[4 * g + 2 * h + 1] *= alpha[h];
    }
  }
}

// The descriptors a consumer warpgroup's wgmmas start from, computed once per tile: its 64 rows
// of Q, and the ring's first stage's K (K-major) and V (N-major); a stage's and a step's are
// these moved by a constant (desc_plus), so the block loop builds none (it built two for each of
// its wgmmas: 60 uniform instructions of a block's 500 at head dim 64).
struct AttnDescs {
  u64 q, k, v;
};
template <int D, int BN, int BQ>
__device__ __forceinline__ AttnDescs attn_descs(const unsigned char* q_smem,
                                                const unsigned char* ring, int w) {
  using S = AttnShape<D, BN, BQ>;
  return {smem_desc(q_smem + w * 64 * 128, 16, 1024), smem_desc(ring, 16, 1024),
          smem_desc(ring + S::kKBytes, S::kKBoxBytes, 1024)};
}

// S = Q Kᵀ for this warpgroup's 64 rows (descriptor dd.q) against the key block of stage s
// (issued, not waited).
template <typename T, int D, int BN, int BQ>
__device__ __forceinline__ void attn_issue_qk(float* sc, const AttnDescs& dd, int s) {
  using S = AttnShape<D, BN, BQ>;
  const u64 dk = desc_plus(dd.k, s * (S::kStageBytes / 16));
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    // 16 head-dim columns = 32 bytes along a row inside a 64-column box.
    const int box = kk / 4, within = (kk % 4) * 32;
    const u64 da = desc_plus(dd.q, (box * S::kQBoxBytes + within) / 16);
    const u64 db = desc_plus(dk, (box * S::kKBoxBytes + within) / 16);
    // B = K is K-major (no transpose); the first step overwrites S.
    wgmma_tile<T, S::kBN, 0>(sc, da, db, kk > 0);
  }
}

// O += P V for the key block whose V is in stage s (issued, not waited).
template <typename T, int D, int BN>
__device__ __forceinline__ void attn_issue_pv(float* o, const unsigned* p, const AttnDescs& dd,
                                              int s) {
  using S = AttnShape<D, BN>;
  const u64 dv = desc_plus(dd.v, s * (S::kStageBytes / 16));
#pragma unroll
  for (int kk = 0; kk < S::kBN / 16; ++kk) {
    // V N-major: 16 keys = 16 rows of 128 bytes down; 64-column boxes kKBoxBytes apart.
    const u64 db = desc_plus(dv, kk * 16 * 128 / 16);
    // A = P from registers, four words per 16-key step (attn_pack_p).
    wgmma_tile_rs<T, D>(o, p + 4 * kk, db);
  }
}

// The consumer warpgroup's part of the tile: rows row0.. (64 of them) of the slice. Key block j
// is the ring's load c0 + j (stage (c0 + j) % kStages); Q is in q_smem once q_bar completes its
// phase q_phase; the warpgroup arrives on q_free once its Q Kᵀs are done with it. Its turns are
// the chain's (attention_chain_tma): this tile takes nblocks + 1 of them (none without blocks).
// False when a wait failed or the task failed (the tile's turns are then not all taken).
// Blocks overlap inside the warpgroup (FlashAttention-3's order): block j's Q Kᵀ and block j-1's
// P V are issued together, and block j's softmax runs while P V is on the tensor cores; the
// rescale of O waits for that P V. P of block j-1 stays in its registers until its wgmma is done.
template <typename T, typename TO, int D, int BN, int BQ, bool kVarlen>
__device__ __forceinline__ bool attention_consumer(
    const KernelArgs& a, const View* v, const abi::AttentionTileArgs& at, int nb,
    const unsigned char* q_smem, const unsigned char* ring, u64* q_bar, unsigned q_phase,
    u64* q_free, u64* full_k, u64* full_v, u64* empty_k, u64* empty_v, int nblocks, int kb0,
    unsigned c0, int w, int t, AttnTurns& turns) {
  using S = AttnShape<D, BN, BQ>;
  constexpr int kN = S::kBN;
  // The turns this tile takes, whatever this warpgroup's rows see (the others count on them).
  const int turns_end = turns.handed + (nblocks > 0 ? nblocks + 1 : 0);
  const long long Sq = v[0].shape[1], Sk = v[1].shape[1];
  const int warp = t / 32, lane = t % 32;
  const int row0 = static_cast<int>(at.q0) + 64 * w;
  // This thread's two rows (h = 0, 1) and the columns of its pairs: 8g + 2(lane % 4) + {0, 1}.
  const int qrow[2] = {row0 + warp * 16 + lane / 4, row0 + warp * 16 + lane / 4 + 8};
  // The last key each sees (causal; the lowering clamps the offset to [-Sq, Sk]).
  const int off = static_cast<int>(at.causal_offset);
  // Read once: the block loop's barrier waits clobber memory, so `at.causal` in the mask's test
  // was loaded from the task's arguments again for every block.
  const bool causal = at.causal != 0;
  const int krow0 = row0 + off;
  const int krow[2] = {qrow[0] + off, qrow[1] + off};
  // The key blocks this warpgroup's rows see (`mine`, at most the tile's): under a causal mask
  // its last row sees fewer keys than the tile's last (192-query tiles of 128-key blocks: one
  // block less for two of three warpgroups on every other tile), and rows past the slice's end
  // (a ragged last tile) see none. The blocks past `mine` it only releases, taking its turns
  // without MMAs (below).
  int mine = nblocks;
  if (row0 >= at.q1) {
    mine = 0;
  } else if (causal) {
    const long long last = (at.q1 < row0 + 64 ? at.q1 : row0 + 64) - 1 + off;
    const long long keys = last + 1 < Sk ? last + 1 : Sk;
    const long long seen = keys > 0 ? (keys + kN - 1) / kN : 0;
    if (seen < mine) mine = static_cast<int>(seen);
  }
  // Packed sequences (kb0: the tile's first block): each row's keys, the keys all of the
  // warpgroup's rows see, and the blocks up to its last row's last key.
  int rlo[2] = {0, 0}, rhi[2] = {0, 0}, wlo = 0, whi = 0;
  if constexpr (kVarlen) {
    const AttnSeqs seqs = attn_seqs(a, v, at, nb);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const AttnKeys k = qrow[h] < at.q1 ? attn_seq_keys(seqs, qrow[h], Sk) : AttnKeys{0, 0};
      rlo[h] = k.lo;
      rhi[h] = k.hi;
    }
    if (row0 < at.q1) {
      const long long r1 = at.q1 < row0 + 64 ? at.q1 : row0 + 64;
      const AttnKeys first = attn_seq_keys(seqs, row0, Sk), last = attn_seq_keys(seqs, r1 - 1, Sk);
      wlo = last.lo < last.hi ? last.lo : static_cast<int>(Sk);
      whi = first.hi;
      const AttnKeys all = attn_rows_keys(seqs, row0, r1, causal, Sk);
      const int end = all.lo < all.hi ? (all.hi + kN - 1) / kN - kb0 : 0;
      if (end < mine) mine = end > 0 ? end : 0;
    }
  }
  // Warp-uniform, and now visibly so to the compiler (it depends on the warpgroup's index, which
  // it does not know to be uniform): without the broadcast the block loop's shared-memory
  // descriptors were computed per thread and moved to uniform registers (32 R2UR a block), and
  // the loop ran 10% slower (H100, 2026-12-07).
  mine = __shfl_sync(0xffffffffu, mine, 0);
  // The tile's descriptors; Q's start address broadcast for the same reason (the slot and w).
  AttnDescs dd = attn_descs<D, BN, BQ>(q_smem, ring, w);
  dd.q = (dd.q & 0xFFFFFFFF00000000ull) | __shfl_sync(0xffffffffu, static_cast<unsigned>(dd.q), 0);
  const float scale2 = static_cast<float>(__longlong_as_double(at.scale_bits) * 1.4426950408889634);
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};
  float* st_acc = nullptr;
  float* st_max = nullptr;
  float* st_sum = nullptr;
  if (at.accumulate) {
    st_acc = view_ptr<float>(a, v[4], nb) + at.l * Sq * D;
    st_max = view_ptr<float>(a, v[5], nb) + at.l * Sq;
    st_sum = view_ptr<float>(a, v[6], nb) + at.l * Sq;
    if (!at.first) {
      // The state of the instances before: max (natural log) to exp2 units; the sum in one
      // thread of the quad (the quad's partial sums are added at the end).
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (qrow[h] < at.q1) {
          m[h] = st_max[qrow[h]] * 1.4426950408889634f;
          l[h] = lane % 4 == 0 ? st_sum[qrow[h]] : 0.0f;
#pragma unroll
          for (int g = 0; g < D / 8; ++g) {
            const long long c = 8 * g + 2 * (lane % 4);
            o[4 * g + 2 * h] = st_acc[static_cast<long long>(qrow[h]) * D + c];
            o[4 * g + 2 * h + 1] = st_acc[static_cast<long long>(qrow[h]) * D + c + 1];
          }
        }
      }
    }
  }
  // Step j issues block j's Q Kᵀ and (j > 0) block j-1's P V in one turn; a last turn issues the
  // last block's P V. K's slot is released once Q Kᵀ is done, V's once P V is.
  // P is carried from one step to the next: defined here, or ptxas keeps its registers live from
  // the kernel's entry, through the producer's 40-register part (spilled).
  unsigned p[kN / 4];
#pragma unroll
  for (int i = 0; i < kN / 4; ++i) p[i] = 0u;
  float alpha[2] = {1.0f, 1.0f};
  bool ok = mbar_wait(a, q_bar, q_phase, -1);
  // Block 0's Q Kᵀ and softmax. The steps have no branch between their wgmmas and the code that
  // uses their registers: ptxas serialises every wgmma of a kernel that has one (C7520).
  if (ok && mine > 0) {
    const int s0 = static_cast<int>(c0 % S::kStages);
    ok = mbar_wait(a, full_k + s0, (c0 / S::kStages) & 1, s0);
    if (ok) {
      float sc[kN / 2];
      turns.begin();
      wgmma_fence();
      attn_issue_qk<T, D, BN, BQ>(sc, dd, s0);
      wgmma_commit();
      turns.end();
      wgmma_wait<0>();
      pin_regs<kN / 2>(sc);
      if (t == 0) mbar_arrive(empty_k + s0);
      if constexpr (kVarlen) {
        attn_mask_seqs<kN>(sc, kb0 * kN, causal, krow0, krow, rlo, rhi, wlo, whi, lane);
      } else {
        attn_mask<kN>(sc, 0, static_cast<int>(Sk), causal, krow0, krow, lane);
      }
      attn_softmax<kN>(sc, m, l, scale2, alpha);
      attn_pack_p<T, kN>(sc, p);
      pin_regs<kN / 4>(p);
    }
  }
  for (int j = 1; ok && j < mine; ++j) {
    const unsigned g = c0 + j;
    const int s = static_cast<int>(g % S::kStages), sp = static_cast<int>((g - 1) % S::kStages);
    const unsigned phase = (g / S::kStages) & 1, pphase = ((g - 1) / S::kStages) & 1;
    if (!mbar_wait(a, full_k + s, phase, s) || !mbar_wait(a, full_v + sp, pphase, sp)) {
      ok = false;
      break;
    }
    float sc[kN / 2];
    turns.begin();
    wgmma_fence();
    attn_issue_qk<T, D, BN, BQ>(sc, dd, s);
    wgmma_commit();
    // O is not in use by a wgmma here: the rescale of the last softmax goes under Q Kᵀ.
    attn_rescale<D>(o, alpha);
    pin_regs<D / 2>(o);
    wgmma_fence();
    attn_issue_pv<T, D, BN>(o, p, dd, sp);
    wgmma_commit();
    turns.end();
    wgmma_wait<1>();
    pin_regs<kN / 2>(sc);
    if (t == 0) mbar_arrive(empty_k + s);
    if constexpr (kVarlen) {
      attn_mask_seqs<kN>(sc, (kb0 + j) * kN, causal, krow0, krow, rlo, rhi, wlo, whi, lane);
    } else {
      attn_mask<kN>(sc, j * kN, static_cast<int>(Sk), causal, krow0, krow, lane);
    }
    attn_softmax<kN>(sc, m, l, scale2, alpha);
    wgmma_wait<0>();
    pin_regs<D / 2>(o);
    if (t == 0) mbar_arrive(empty_v + sp);
    // P to 16 bits only now: the last P V read these registers.
    attn_pack_p<T, kN>(sc, p);
    pin_regs<kN / 4>(p);
  }
  // Every Q Kᵀ of this warpgroup is done: the producer may load a later tile's Q into this slot.
  if (ok && t == 0) mbar_arrive(q_free);
  // The last block's P V.
  if (ok && mine > 0) {
    const unsigned g = c0 + mine - 1;
    const int s = static_cast<int>(g % S::kStages);
    const unsigned phase = (g / S::kStages) & 1;
    ok = mbar_wait(a, full_v + s, phase, s);
    if (ok) {
      turns.begin();
      attn_rescale<D>(o, alpha);
      pin_regs<D / 2>(o);
      wgmma_fence();
      attn_issue_pv<T, D, BN>(o, p, dd, s);
      wgmma_commit();
      turns.end();
      wgmma_wait<0>();
      pin_regs<D / 2>(o);
      if (t == 0) mbar_arrive(empty_v + s);
    }
  }
  // The blocks past this warpgroup's rows: each stage released once loaded (the wait on its full
  // barriers puts the arrivals in the phase the other consumers' go to), and a turn without MMAs
  // per block, released first: the producer may need the stage before the others' next turn.
  for (int j = mine; ok && j < nblocks; ++j) {
    const unsigned g = c0 + j;
    const int s = static_cast<int>(g % S::kStages);
    const unsigned phase = (g / S::kStages) & 1;
    ok = mbar_wait(a, full_k + s, phase, s) && mbar_wait(a, full_v + s, phase, s);
    if (ok && t == 0) {
      mbar_arrive(empty_k + s);
      mbar_arrive(empty_v + s);
    }
    if (ok) {
      turns.begin();
      turns.end();
    }
  }
  // A warpgroup whose rows see no key took a turn per block: one more without MMAs, as every
  // warpgroup takes nblocks + 1 (a review of 2026-12-07: without it, causal tiles whose first
  // warpgroup's rows see no key hung at the next one's last turn, and a ragged last tile left
  // an arrival on a turn barrier for the CTA's next chain).
  while (ok && turns.handed < turns_end) {
    turns.begin();
    turns.end();
  }
  // After a failed wait the chain gives up the turns not taken (attention_chain_tma).
  if (!ok || task_state().failed) return false;
    // The rows' sums over the quad; O normalised (last instance) or the state kept (not last).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
  if (at.accumulate) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (lane % 4 == 0 && qrow[h] < at.q1) {
        st_max[qrow[h]] = m[h] * 0.6931471805599453f;
        st_sum[qrow[h]] = l[h];
      }
    }
    store_tile<float, float, D>(o, st_acc, D, nullptr, row0, 0, at.q1, D, t, NoFn{});
  }
  if (at.last) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // A row that saw no key gets zeros.
      const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
#pragma unroll
      for (int g = 0; g < D / 8; ++g) {
        o[4 * g + 2 * h] *= inv;
        o[4 * g + 2 * h + 1] *= inv;
      }
    }
    TO* O = view_ptr<TO>(a, v[3], nb) + at.l * Sq * D;
    store_tile<TO, float, D>(o, O, D, nullptr, row0, 0, at.q1, D, t, NoFn{});
  }
  return true;
}

#endif  // MKC_HAS_WGMMA

#if MKC_HAS_WGMMA
// Loads key block j of slice l (K, then V once its stage is free) as the ring's load n; false
// after a failed wait (reported).
template <int D, int BN>
__device__ __forceinline__ bool attn_load_block(const KernelArgs& a, unsigned n,
                                                unsigned char* ring, u64* full_k, u64* full_v,
                                                u64* empty_k, u64* empty_v, const TensorMap* map_k,
                                                const TensorMap* map_v, int j, int l) {
  using S = AttnShape<D, BN>;
  const int s = static_cast<int>(n % S::kStages);
  const unsigned reuse = ((n / S::kStages) - 1) & 1;
  if (n >= S::kStages && !mbar_wait(a, empty_k + s, reuse, s)) return false;
  unsigned char* k_smem = ring + s * S::kStageBytes;
  unsigned char* v_smem = k_smem + S::kKBytes;
  mbar_expect_tx(full_k + s, S::kKBytes);
#pragma unroll
  for (int b = 0; b < S::kBoxes; ++b)
    tma_load_3d(k_smem + b * S::kKBoxBytes, map_k, 64 * b, j * S::kBN, l, full_k + s);
  if (n >= S::kStages && !mbar_wait(a, empty_v + s, reuse, s)) return false;
  mbar_expect_tx(full_v + s, S::kKBytes);
#pragma unroll
  for (int b = 0; b < S::kBoxes; ++b)
    tma_load_3d(v_smem + b * S::kKBoxBytes, map_v, 64 * b, j * S::kBN, l, full_v + s);
  return true;
}

// The Q tile of `at` into a Q slot, completing on q_bar.
template <int D, int BN, int BQ>
__device__ __forceinline__ void attn_load_q(const KernelArgs& a, const abi::AttentionTileArgs& at,
                                            unsigned char* q_smem, u64* q_bar) {
  using S = AttnShape<D, BN, BQ>;
  const TensorMap* map_q = a.tensor_maps + at.map_q;
  mbar_expect_tx(q_bar, S::kQBytes);
#pragma unroll
  for (int b = 0; b < S::kBoxes; ++b)
    tma_load_3d(q_smem + b * S::kQBoxBytes, map_q, 64 * b, static_cast<int>(at.q0),
                static_cast<int>(at.l), q_bar);
}
#endif  // MKC_HAS_WGMMA

// The tasks: a chain of n attention tiles of one class that the kernel's loop hands over in one
// call (its CTA list holds them back to back; none but the first waits for anything and none but
// the last signals): list[i] is the i-th tile's task, its views and args at
// views + tasks[list[i]].view0 and args + tasks[list[i]].arg0. Args AttentionTileArgs (abi.h)
// with map_q, map_k and map_v set (3-D maps of the [L, S, D] views, boxes of 64 columns x BQ (Q)
// or BN (K, V) rows x 1 slice); views {Q, K, V, O[, acc, max, sum][, L]}; kVarlen: packed
// sequences (args.seqlens, attention_varlen.cuh), the key blocks of the rows' sequences. Needs
// AttnShape<D, BN, BQ>::kThreads threads and ::kSmemBytes of dynamic shared memory.
// The tiles run as one pipeline: the producer loads tile after tile (Q into two slots in turn,
// each freed by q_free once the consumers' Q Kᵀs are done with it; K and V through the ring),
// and the consumers go from one tile's last P V and epilogue to the next tile's first Q Kᵀ
// without a barrier of the CTA, their turns going round across the tiles, so that one warpgroup's
// epilogue runs under the others' MMAs and the tensor cores do not drain at every tile (a
// quarter of the time at 2,048 keys, under a causal mask, where the CTA met at each tile).
// The producer thread refreshes the task's deadline (and the task named in an error) as it starts
// each tile, and writes the trace's start of each tile after the first; consumer warpgroup 0 the
// end of each but the last (the kernel's loop writes the others).
// `next_args`/`next_v`: the CTA's next task after the chain when it is an attention tile of this
// class that waits for nothing (the kernel's loop says so), else null. The ring, its mbarriers
// and two Q slots then persist (PipeState, numbering loads from the ring's initialisation as the
// GEMM does): the producer loads that tile's Q and first key blocks while the chain's consumers
// finish, so it starts on loaded data.
template <typename T, typename TO, int D, int BN = 128, int BQ = 128, bool kVarlen = false>
__device__ void attention_chain_tma(const KernelArgs& a, const abi::TaskRecord* tasks,
                                    const View* views, const long long* args, const int* list,
                                    int n, int nb, unsigned char* smem, const long long* next_args,
                                    const View* next_v) {
  const auto tile_v = [&](int i) { return views + tasks[list[i]].view0; };
  const auto tile_args = [&](int i) { return args + tasks[list[i]].arg0; };
#if MKC_HAS_WGMMA
  using S = AttnShape<D, BN, BQ>;
  PipeState* ps = reinterpret_cast<PipeState*>(smem);
  u64* bars = reinterpret_cast<u64*>(smem + kAttnBarOffset);
  u64* q_full = bars;      // one per Q slot
  u64* q_free = bars + 2;  // one per Q slot: the consumers are done with its Q
  u64* full_k = bars + 4;
  u64* full_v = full_k + S::kStages;
  u64* empty_k = full_v + S::kStages;
  u64* empty_v = empty_k + S::kStages;
  static_assert(kAttnBarOffset + (4 + 4 * S::kStages) * 8 <= kAttnCursorOffset &&
                    kAttnCursorOffset + S::kConsumers * 8 * 4 <= 1024,
                "the attention tile's mbarriers and cursors end before Q (at 1024 bytes or later)");
  unsigned char* q_slots = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(smem) + 1024 + 1023) & ~1023ull);
  unsigned char* ring = q_slots + 2 * S::kQBytes;
  // Turns over the chain, and whether any tile does work: a tile that returns at once (a block of
  // a later rank in causal ring attention) is skipped by every side, so the ring's state (and a
  // prefetch for a later tile) stays valid.
  int points_all = 0;
  bool any = false;
  for (int i = 0; i < n; ++i) {
    const abi::AttentionTileArgs& at = args_as<abi::AttentionTileArgs>(tile_args(i));
    const int nblocks = attn_key_blocks<D, BN, kVarlen>(a, tile_v(i), at, nb).n;
    if (attn_returns_at_once(at, nblocks)) continue;
    any = true;
    points_all += nblocks > 0 ? nblocks + 1 : 0;
  }
  if (!any) return;
  // The thread's index read here, not one the compiler hoisted to the kernel's entry: held across
  // the kernel's whole task loop, it spilled in ring attention's kernel (at 168 registers).
  unsigned tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  const int wg = static_cast<int>(tid / 128), t = static_cast<int>(tid % 128);
  if (tid == 0 && !(ps->bn == S::kKey && ps->prefetched_args == tile_args(0))) {
    // Not the continuation of this class's prefetch: another task may have used the shared memory
    // (the GEMM's ring is overwritten, and starts afresh next time), so the ring starts afresh.
    ps->bn = S::kKey;
    ps->next_load = ps->next_consume = 0;
    ps->tiles = 0;
    ps->prefetched = 0;
    ps->prefetched_args = nullptr;
    for (int q = 0; q < 2; ++q) {
      mbar_init(q_full + q, 1);
      mbar_init(q_free + q, S::kConsumers);
    }
    for (int s = 0; s < S::kStages; ++s) {
      mbar_init(full_k + s, 1);
      mbar_init(full_v + s, 1);
      mbar_init(empty_k + s, S::kConsumers);
      mbar_init(empty_v + s, S::kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  // Read by every thread here; thread 0 updates them only after every consumer is done.
  const unsigned c_first = ps->next_consume, tile_first = ps->tiles;
  // Loads already issued for the first tile: its Q and (prefetched - 1) key blocks, or none.
  const int pre = ps->prefetched_args == tile_args(0) ? ps->prefetched : 0;
  if (wg == 0) {
    setmaxnreg_dec<S::kProducerRegs>();
    unsigned c = c_first, u = tile_first;
    int next_pre = 0;
    if (t == 0) {
      // Q, K and V may have been written with plain stores by an earlier task of this CTA.
      asm volatile("fence.proxy.async.global;" ::: "memory");
      bool ok = true;
      // The Q of the tile counted u into its slot, once the tile two before is done with it.
      const auto load_q = [&](const abi::AttentionTileArgs& at, unsigned tile) {
        if (tile >= 2 && !mbar_wait(a, q_free + (tile & 1), ((tile >> 1) - 1) & 1, -1))
          return false;
        attn_load_q<D, BN, BQ>(a, at, q_slots + (tile & 1) * S::kQBytes, q_full + (tile & 1));
        return true;
      };
      for (int i = 0; ok && i < n; ++i) {
        const abi::AttentionTileArgs& at = args_as<abi::AttentionTileArgs>(tile_args(i));
        const AttnBlocks kb = attn_key_blocks<D, BN, kVarlen>(a, tile_v(i), at, nb);
        const int nblocks = kb.n;
        if (attn_returns_at_once(at, nblocks)) continue;
        if (i > 0) {
          TaskState& st = task_state();
          const u64 now = globaltimer();
          st.deadline = now + a.timeout_ns;
          st.task = list[i];
          if (a.trace != nullptr) a.trace[2 * list[i]] = now;
        }
        const int p = i == 0 ? pre : 0;
        if (p == 0) ok = load_q(at, u);
        for (int j = p > 0 ? p - 1 : 0; ok && j < nblocks; ++j)
          ok = attn_load_block<D, BN>(a, c + j, ring, full_k, full_v, empty_k, empty_v,
                                      a.tensor_maps + at.map_k, a.tensor_maps + at.map_v, kb.b0 + j,
                                      static_cast<int>(at.l));
        c += nblocks;
        ++u;
      }
      if (ok && next_args != nullptr) {
        const abi::AttentionTileArgs& nx = args_as<abi::AttentionTileArgs>(next_args);
        const AttnBlocks next_kb = attn_key_blocks<D, BN, kVarlen>(a, next_v, nx, nb);
        const int next_blocks = next_kb.n;
        if (!attn_returns_at_once(nx, next_blocks)) {
          // Its Q into the next slot, then at most a ring's worth of its key blocks, each as the
          // chain's consumers free a stage.
          ok = load_q(nx, u);
          const int m = next_blocks < S::kStages ? next_blocks : S::kStages;
          int j = 0;
          for (; ok && j < m; ++j)
            ok = attn_load_block<D, BN>(a, c + j, ring, full_k, full_v, empty_k, empty_v,
                                        a.tensor_maps + nx.map_k, a.tensor_maps + nx.map_v,
                                        next_kb.b0 + j, static_cast<int>(nx.l));
          next_pre = ok ? 1 + m : 0;
        }
      }
    }
    // The warpgroup meets (lane 0 ran the loads) and waits for every consumer's registers.
    __syncwarp();
    named_bar_sync(kBarRegs, S::kThreads);
    if (t == 0) {
      // Every consumer is past its last use of the ring's state read above.
      ps->next_consume = c;
      ps->next_load = c + (next_pre > 0 ? next_pre - 1 : 0);
      ps->tiles = u;
      ps->prefetched = next_pre;
      ps->prefetched_args = next_pre > 0 ? next_args : nullptr;
    }
    setmaxnreg_inc<S::kBaseRegs>();
  } else {
    setmaxnreg_inc<S::kConsumerRegs>();
    const int w = wg - 1;
    // The warpgroup's place in the chain (the tile, its first load, its Q slot count, the turns
    // handed) in shared memory, written by its thread 0 after each tile into the copy the next
    // reads, and read by all after the warpgroup's barrier at the top of each tile: held in
    // registers across a tile, it spilled at head dim 64; and without a barrier of the
    // warpgroup's own in the loop ptxas keeps the block loop's descriptors off the uniform
    // datapath (32 R2UR a block, not 8).
    unsigned* cursor = reinterpret_cast<unsigned*>(smem + kAttnCursorOffset) + 8 * w;
    if (t == 0) {
      cursor[0] = 0;
      cursor[1] = c_first;
      cursor[2] = tile_first;
      cursor[3] = 0;
    }
    const int tiles = __shfl_sync(0xffffffffu, n, 0);
    const int points = __shfl_sync(0xffffffffu, points_all, 0);
    AttnTurns::open(w, S::kConsumers, points);
    for (unsigned k = 0;; ++k) {
      named_bar_sync(kBarGroup + w, 128);
      // Broadcast from lane 0 as well: ptxas does not take a load to be warp-uniform.
      const unsigned* cur = cursor + 4 * (k & 1);
      const int i = __shfl_sync(0xffffffffu, static_cast<int>(cur[0]), 0);
      if (i >= tiles) break;
      const unsigned c = __shfl_sync(0xffffffffu, cur[1], 0);
      const unsigned u = __shfl_sync(0xffffffffu, cur[2], 0);
      AttnTurns turns(w, S::kConsumers, points,
                      __shfl_sync(0xffffffffu, static_cast<int>(cur[3]), 0));
      const View* v = tile_v(i);
      const abi::AttentionTileArgs& at = args_as<abi::AttentionTileArgs>(tile_args(i));
      // Warp-uniform, and visibly so to the compiler (as `mine` in attention_consumer).
      const AttnBlocks kb = attn_key_blocks<D, BN, kVarlen>(a, v, at, nb);
      const int nblocks = __shfl_sync(0xffffffffu, kb.n, 0);
      const int kb0 = __shfl_sync(0xffffffffu, kb.b0, 0);
      const bool skip = __shfl_sync(0xffffffffu, attn_returns_at_once(at, nblocks) ? 1 : 0, 0);
      bool ok = true;
      if (!skip) {
        ok = attention_consumer<T, TO, D, BN, BQ, kVarlen>(
            a, v, at, nb, q_slots + (u & 1) * S::kQBytes, ring, q_full + (u & 1), (u >> 1) & 1,
            q_free + (u & 1), full_k, full_v, empty_k, empty_v, nblocks, kb0, c, w, t, turns);
        // One decision for the warpgroup (its threads may have seen a failure at different
        // times; a part of it going on to the next tile's wgmmas would hang).
        ok = __shfl_sync(0xffffffffu,
                         named_bar_all(kBarGroup + w, 128, ok && !task_state().failed) ? 1 : 0, 0);
        if (ok && i + 1 < tiles && w == 0 && t == 0 && a.trace != nullptr)
          a.trace[2 * list[i] + 1] = globaltimer();
      }
      if (!ok) {
        // Every turn of the chain taken, also after a failed wait (the tiles after it without
        // MMAs): the other warpgroups never wait for one not taken.
        turns.give_up();
        break;
      }
      if (t == 0) {
        unsigned* nx = cursor + 4 * ((k + 1) & 1);
        nx[0] = static_cast<unsigned>(i + 1);
        nx[1] = skip ? c : c + nblocks;
        nx[2] = skip ? u : u + 1;
        nx[3] = static_cast<unsigned>(turns.handed);
      }
    }
    __syncwarp();
    named_bar_sync(kBarGroup + w, 128);
    setmaxnreg_dec<S::kBaseRegs>();
    named_bar_arrive(kBarRegs, S::kThreads);
  }
  __syncthreads();
#else
  (void)next_args;
  (void)next_v;
  // Without wgmma: the mma.sync tile (attention_sm80.cuh; the SIMT tile before sm_80).
  for (int i = 0; i < n; ++i) {
    if (i > 0) __syncthreads();
    sm80::attention_tile_mma<T, TO, D>(a, tile_v(i), tile_args(i), nb, smem);
  }
#endif
}

}  // namespace sm90
}  // namespace mkc
