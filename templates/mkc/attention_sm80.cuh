// The attention tile for sm_80 and later without wgmma (A100, L40, or Hopper built for plain
// sm_90): queries [q0, q1) of slice l against their keys, bf16/f16 Q, K, V at head dims 64 and 128,
// f32 accumulation on `mma.sync` m16n8k16, FlashAttention-2's online softmax (exp2 domain, the
// scale folded in) in registers. The same task as attention_tile (attention_simt.cuh): causal
// masks with an offset, packed sequences, the f32 state of a merge group (acc, max, sum in the
// SIMT tile's convention: max in natural-log units, acc unnormalised).
//
// Every warp of the CTA takes 16 query rows at a time (in its own part of shared memory); key
// blocks (64 keys at head dim 64, 32 at 128: abi::attention_portable_keys) go through two
// shared-memory stages filled with 16-byte cp.async by every thread (zero fill past the slice's
// keys), rows padded by 16 bytes so that the fragments' loads (Q through ldmatrix, K as 32-bit
// words, V through ldmatrix.trans) fall in distinct banks; the softmax steps over 32 keys at a
// time. A warp masks only the sub-blocks its rows do not all see whole, and skips those none of
// them sees. Needs 16-byte aligned rows (the caller checks: abi views offset by a multiple of 8
// elements) and abi::attention_portable_smem_bytes(D, threads) of dynamic shared memory (at most
// 87,168 bytes, within the 99 KB an sm_86/sm_89 CTA may have; the runtime launches with
// Generated::portable_smem wherever the target has no wgmma, support/arch.h). Compiled by NVRTC
// only.
#pragma once

#include "mkc/attention_simt.cuh"
#include "mkc/attention_varlen.cuh"
#include "mkc/gemm_sm80.cuh"

namespace mkc {
namespace sm80 {

// Keys per block and elements per K, V or Q row in shared memory (padded by 16 bytes).
template <int D>
constexpr int attn_keys() {
  return abi::attention_portable_keys(D);
}
template <int D>
constexpr int attn_stride() {
  return D + 8;
}

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)

__device__ __forceinline__ float attn_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Key block kb (keys kb * attn_keys<D>() ...) into one stage: K then V, a row per key (K and V
// the slice's).
template <typename T, int D>
__device__ __forceinline__ void attn_load_kv(T* sk, T* sv, const T* K, const T* V, int Sk, int kb) {
  constexpr int kAttnKeys = attn_keys<D>(), kChunks = D / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < 2 * kAttnKeys * kChunks; i += blockDim.x) {
    const int which = i / (kAttnKeys * kChunks), j = i % (kAttnKeys * kChunks);
    const int r = j / kChunks, c = (j % kChunks) * 8;
    const int key = kb * kAttnKeys + r;
    const T* src = which == 0 ? K : V;
    T* dst = (which == 0 ? sk : sv) + r * attn_stride<D>() + c;
    const bool in = key < Sk;
    cp_async16(dst, src + (in ? static_cast<long long>(key) * D + c : 0), in ? 16 : 0);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// The keys [lo, hi) query row q of the task sees (empty when lo >= hi).
__device__ __forceinline__ AttnKeys attn_row_keys(const KernelArgs& a, const View* v,
                                                  const abi::AttentionTileArgs& at, int nb, int q,
                                                  int Sk) {
  long long hi = at.causal ? q + at.causal_offset + 1 : Sk;
  hi = hi < 0 ? 0 : hi > Sk ? Sk : hi;
  int lo = 0;
  if (at.seqlens) {
    const AttnKeys k = attn_seq_keys(attn_seqs(a, v, at, nb), q, Sk);
    lo = k.lo;
    if (k.hi < hi) hi = k.hi;
  }
  return {lo, static_cast<int>(hi)};
}

#endif

// The tile (args AttentionTileArgs; views {Q, K, V, O[, acc, max, sum][, L]} as [L, S, D]). Every
// thread of the CTA calls it; it meets the others at CTA barriers.
template <typename T, typename TO, int D>
__device__ void attention_tile_mma(const KernelArgs& a, const View* v, const long long* args,
                                   int nb, unsigned char* smem) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  static_assert(D % 16 == 0 && D <= 128, "head dims of 16 to 128 in steps of 16");
  constexpr int kAttnKeys = attn_keys<D>(), kS = attn_stride<D>(), kSub = 32, kN = kSub / 8,
                kDn = D / 8;
  static_assert(kAttnKeys % kSub == 0, "whole sub-blocks a block");
  const abi::AttentionTileArgs& at = args_as<abi::AttentionTileArgs>(args);
  // Rows and keys of one slice fit in 32 bits (2^31 rows of 64 elements would be 256 GB);
  // element offsets are 64-bit. The pointers are the slice's.
  const int q0 = static_cast<int>(at.q0), q1 = static_cast<int>(at.q1);
  const int Sq = static_cast<int>(v[0].shape[1]), Sk = static_cast<int>(v[1].shape[1]);
  const bool acc_on = at.accumulate, first = at.first, last = at.last;
  // A tile that sees no key and neither opens nor closes its merge leaves the state as it is.
  if (acc_on && !first && !last && at.causal && at.q1 + at.causal_offset <= 0) return;
  const long long sq = at.l * Sq, sk = at.l * Sk;
  const T* Q = view_ptr<T>(a, v[0], nb) + sq * D;
  const T* K = view_ptr<T>(a, v[1], nb) + sk * D;
  const T* V = view_ptr<T>(a, v[2], nb) + sk * D;
  TO* O = view_ptr<TO>(a, v[3], nb) + sq * D;
  // The state (acc_on), read where the tile does not open its merge group.
  float* st_acc = acc_on ? view_ptr<float>(a, v[4], nb) + sq * D : nullptr;
  float* st_max = acc_on ? view_ptr<float>(a, v[5], nb) + sq : nullptr;
  float* st_sum = acc_on ? view_ptr<float>(a, v[6], nb) + sq : nullptr;
  const bool resume = acc_on && !first;
  const float scale2 = static_cast<float>(__longlong_as_double(at.scale_bits) * 1.4426950408889634);
  T* base = reinterpret_cast<T*>((reinterpret_cast<unsigned long long>(smem) + 127) & ~127ull);
  // Stage i: K at base + 2i blocks, V after it; Q after the stages (stage_k(2)).
  const auto stage_k = [&](int i) { return base + 2 * i * kAttnKeys * kS; };
  const auto stage_v = [&](int i) { return base + (2 * i + 1) * kAttnKeys * kS; };
  const int warps = static_cast<int>(blockDim.x / 32), warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const int groups = (q1 - q0 + 15) / 16;
  for (int round = 0; round < groups; round += warps) {
    const bool active = round + warp < groups;
    const int r0 = q0 + 16 * (round + warp);  // the warp's first row
    // Its two rows' keys (a row past q1 sees every key: nothing is written for it).
    AttnKeys rk[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r0 + g + 8 * h;
      rk[h] = active && row < q1 ? attn_row_keys(a, v, at, nb, row, Sk) : AttnKeys{0, Sk};
    }
    // The warp's blocks seen whole by every row ([all_lo, all_hi)) and by some row.
    const int all_lo = __reduce_max_sync(0xffffffffu, rk[0].lo > rk[1].lo ? rk[0].lo : rk[1].lo);
    const int all_hi = __reduce_min_sync(0xffffffffu, rk[0].hi < rk[1].hi ? rk[0].hi : rk[1].hi);
    const int any_lo = __reduce_min_sync(0xffffffffu, rk[0].lo < rk[1].lo ? rk[0].lo : rk[1].lo);
    const int any_hi = __reduce_max_sync(0xffffffffu, rk[0].hi > rk[1].hi ? rk[0].hi : rk[1].hi);
    // The round's key blocks, the same for the whole CTA: the keys its rows see together.
    const int ra = q0 + 16 * round, rb = ra + 16 * warps < q1 ? ra + 16 * warps : q1;
    AttnKeys keys{0, Sk};
    if (at.seqlens) {
      keys = attn_rows_keys(attn_seqs(a, v, at, nb), ra, rb, at.causal, Sk);
    } else if (at.causal) {
      const long long hi = rb + at.causal_offset;
      keys.hi = static_cast<int>(hi < 0 ? 0 : hi > Sk ? Sk : hi);
    }
    const int b0 = keys.lo / kAttnKeys;
    const int nblocks = keys.lo < keys.hi ? (keys.hi + kAttnKeys - 1) / kAttnKeys - b0 : 0;

    // The warp's 16 rows of Q into its own place in shared memory (rows past q1 as zeros), read
    // as A fragments by ldmatrix for every sub-block: in registers they spilled beside S and O.
    T* qs = stage_k(2) + warp * 16 * kS;
    if (active) {
      for (int i = lane; i < 16 * (D / 8); i += 32) {
        const int r = i / (D / 8), c = (i % (D / 8)) * 8;
        uint4 x = make_uint4(0, 0, 0, 0);
        if (r0 + r < q1)
          x = *reinterpret_cast<const uint4*>(Q + static_cast<long long>(r0 + r) * D + c);
        *reinterpret_cast<uint4*>(qs + r * kS + c) = x;
      }
    }
    __syncwarp();
    // The state: row g's values in [0] and [1] of each fragment, row g + 8's in [2] and [3].
    float o[kDn][4], m[2], s[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r0 + g + 8 * h;
      const bool in = resume && active && row < q1;
      m[h] = in ? st_max[row] * 1.4426950408889634f : neg_inf();
      s[h] = in && t == 0 ? st_sum[row] : 0.0f;
#pragma unroll
      for (int n = 0; n < kDn; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e)
          o[n][2 * h + e] = in ? st_acc[static_cast<long long>(row) * D + n * 8 + 2 * t + e] : 0.0f;
      }
    }

    if (nblocks > 0) attn_load_kv<T, D>(stage_k(0), stage_v(0), K, V, Sk, b0);
    for (int j = 0; j < nblocks; ++j) {
      const int cur = j & 1;
      if (j + 1 < nblocks) {
        attn_load_kv<T, D>(stage_k(cur ^ 1), stage_v(cur ^ 1), K, V, Sk, b0 + j + 1);
        asm volatile("cp.async.wait_group 1;" ::: "memory");
      } else {
        asm volatile("cp.async.wait_group 0;" ::: "memory");
      }
      __syncthreads();
      // The block in sub-blocks of kSub keys, each with its own softmax step: S of 64 keys beside
      // O and Q's fragments spilled at head dim 128 (168 registers at 384 threads).
#pragma unroll 1
      for (int sub = 0; sub < kAttnKeys; sub += kSub) {
        const int kbase = (b0 + j) * kAttnKeys + sub;
        if (!active || kbase >= any_hi || kbase + kSub <= any_lo) continue;
        // S = Q Kᵀ for the warp's 16 rows and the sub-block's keys.
        float sc[kN][4];
#pragma unroll
        for (int n = 0; n < kN; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) sc[n][e] = 0.0f;
        }
        const T* kr = stage_k(cur) + (sub + g) * kS + 2 * t;
        // Two steps of D at a time: unrolled whole, ptxas loaded every K fragment up front.
#pragma unroll 2
        for (int k = 0; k < D / 16; ++k) {
          unsigned qf[4];
          ldmatrix_x4(qf, qs + (lane % 16) * kS + k * 16 + (lane / 16) * 8);
#pragma unroll
          for (int n = 0; n < kN; ++n) {
            unsigned b[2];
            b[0] = *reinterpret_cast<const unsigned*>(kr + n * 8 * kS + k * 16);
            b[1] = *reinterpret_cast<const unsigned*>(kr + n * 8 * kS + k * 16 + 8);
            mma16816<T>(sc[n], qf, b);
          }
        }
        // Scaled into the exp2 domain; keys a row does not see to -inf (only where some row of
        // the warp misses some key of the sub-block).
        const bool whole = kbase >= all_lo && kbase + kSub <= all_hi;
        float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
        for (int n = 0; n < kN; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float x = sc[n][e] * scale2;
            if (!whole) {
              const int key = kbase + n * 8 + 2 * t + (e % 2);
              if (key < rk[e / 2].lo || key >= rk[e / 2].hi) x = neg_inf();
            }
            sc[n][e] = x;
            mx[e / 2] = fmaxf(mx[e / 2], x);
          }
        }
        float corr[2], mb[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
          const float mn = fmaxf(m[h], mx[h]);
          // A row that has seen no key yet keeps -inf; its exps are taken against 0 (all 0).
          mb[h] = mn == neg_inf() ? 0.0f : mn;
          corr[h] = attn_ex2(m[h] - mb[h]);
          m[h] = mn;
          s[h] *= corr[h];
        }
#pragma unroll
        for (int n = 0; n < kDn; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) o[n][e] *= corr[e / 2];
        }
        // P = exp2(S - m), 16 keys at a time as an A fragment, into O += P V.
        const T* vr = stage_v(cur) + (sub + (lane / 8 % 2) * 8 + lane % 8) * kS + (lane / 16) * 8;
#pragma unroll
        for (int kk = 0; kk < kSub / 16; ++kk) {
          unsigned pa[4];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            float p[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              p[e] = attn_ex2(sc[2 * kk + half][e] - mb[e / 2]);
              s[e / 2] += p[e];
            }
            pa[2 * half] = pack2<T>(p[0], p[1]);
            pa[2 * half + 1] = pack2<T>(p[2], p[3]);
          }
#pragma unroll
          for (int dn = 0; dn < kDn; dn += 2) {
            unsigned r[4];
            ldmatrix_x4_trans(r, vr + kk * 16 * kS + dn * 8);
            mma16816<T>(o[dn], pa, r);
            mma16816<T>(o[dn + 1], pa, r + 2);
          }
        }
      }
      __syncthreads();  // the stage is free for the load two blocks on
    }

    // The rows' sums across the quad, then O (normalised) and the state.
    if (active) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        s[h] += __shfl_xor_sync(0xffffffffu, s[h], 1);
        s[h] += __shfl_xor_sync(0xffffffffu, s[h], 2);
        const int row = r0 + g + 8 * h;
        if (row >= q1) continue;
        const float inv = s[h] > 0.0f ? 1.0f / s[h] : 0.0f;
#pragma unroll
        for (int n = 0; n < kDn; ++n) {
          const long long el = static_cast<long long>(row) * D + n * 8 + 2 * t;
          if (last) {
            O[el] = from_f32<TO>(o[n][2 * h] * inv);
            O[el + 1] = from_f32<TO>(o[n][2 * h + 1] * inv);
          }
          if (acc_on) {
            st_acc[el] = o[n][2 * h];
            st_acc[el + 1] = o[n][2 * h + 1];
          }
        }
        if (acc_on && t == 0) {
          st_max[row] = m[h] == neg_inf() ? neg_inf() : m[h] * 0.6931471805599453f;
          st_sum[row] = s[h];
        }
      }
    }
  }
#else
  (void)smem;
  attention_tile<T, TO>(a, v, args, nb);
#endif
}

}  // namespace sm80
}  // namespace mkc
