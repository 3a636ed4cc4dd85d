// The SIMT attention tile: one thread per (query, output dim), each recomputing its row's
// scores. Correct for any shape and the last fallback only; attention_sm90.cuh is the fast tile.
// Compiled by NVRTC only.
#pragma once

#include "mkc/attention_varlen.cuh"
#include "mkc/views.cuh"

namespace mkc {

// Attention of queries [q0, q1) of batch-head `l` against all keys of the block, with an online
// softmax carried in acc/max/sum (f32 state) when accumulating over a loop. One thread per
// (query, output dim): each recomputes the row's scores (simple, not fast).
// Args AttentionTileArgs; views {Q, K, V, O[, acc, max, sum]} as [L, S, D][, seqlens].
template <typename TQ, typename TO>
__device__ void attention_tile(const KernelArgs& a, const View* v, const long long* args, int nb) {
  const TQ* Q = view_ptr<TQ>(a, v[0], nb);
  const TQ* Kp = view_ptr<TQ>(a, v[1], nb);
  const TQ* Vp = view_ptr<TQ>(a, v[2], nb);
  TO* O = view_ptr<TO>(a, v[3], nb);
  const abi::AttentionTileArgs& at = args_as<abi::AttentionTileArgs>(args);
  const long long l = at.l, q0 = at.q0, q1 = at.q1;
  const bool causal = at.causal, acc_on = at.accumulate, first = at.first, last = at.last;
  const double scale = __longlong_as_double(at.scale_bits);
  const long long Sq = v[0].shape[1], D = v[0].shape[2], Sk = v[1].shape[1], Dv = v[2].shape[2];
  float* st_acc = acc_on ? view_ptr<float>(a, v[4], nb) : nullptr;
  float* st_max = acc_on ? view_ptr<float>(a, v[5], nb) : nullptr;
  float* st_sum = acc_on ? view_ptr<float>(a, v[6], nb) : nullptr;
  const long long pairs = (q1 - q0) * Dv;
  // A tile that sees no key and neither opens nor closes its merge leaves the state as it is.
  if (acc_on && !first && !last && causal && q1 + at.causal_offset <= 0) return;
  // New row statistics, published after every thread has read the old ones (at most 256 rows a
  // tile: the lowering caps the query tile).
  __shared__ float row_max[256];
  __shared__ float row_sum[256];
  for (long long i = threadIdx.x; i < pairs; i += blockDim.x) {
    const long long qi = q0 + i / Dv, d = i % Dv;
    const long long row = l * Sq + qi;
    float m = neg_inf(), s = 0.0f, acc = 0.0f;
    if (acc_on && !first) {
      m = st_max[row];
      s = st_sum[row];
      acc = st_acc[row * Dv + d];
    }
    // Causal: the keys up to qi + causal_offset (where Q and K sit in the whole sequence).
    // Packed sequences: those of the row's own.
    long long from = 0, keys = causal ? min(Sk, qi + at.causal_offset + 1) : Sk;
    if (at.seqlens) {
      const AttnKeys k = attn_seq_keys(attn_seqs(a, v, at, nb), qi, Sk);
      from = k.lo;
      keys = min(keys, static_cast<long long>(k.hi));
    }
    for (long long j = from; j < keys; ++j) {
      float dot = 0.0f;
      for (long long e = 0; e < D; ++e)
        dot += to_f32(Q[row * D + e]) * to_f32(Kp[(l * Sk + j) * D + e]);
      dot *= static_cast<float>(scale);
      const float m_new = fmaxf(m, dot);
      const float corr = m == neg_inf() ? 0.0f : __expf(m - m_new);
      const float p = __expf(dot - m_new);
      s = s * corr + p;
      acc = acc * corr + p * to_f32(Vp[(l * Sk + j) * Dv + d]);
      m = m_new;
    }
    if (acc_on) st_acc[row * Dv + d] = acc;
    // A query that saw no key gets zeros.
    if (last) O[row * Dv + d] = from_f32<TO>(s > 0.0f ? acc / s : 0.0f);
    if (d == 0) {
      row_max[qi - q0] = m;
      row_sum[qi - q0] = s;
    }
  }
  __syncthreads();
  if (acc_on) {
    for (long long r = threadIdx.x; r < q1 - q0; r += blockDim.x) {
      st_max[l * Sq + q0 + r] = row_max[r];
      st_sum[l * Sq + q0 + r] = row_sum[r];
    }
  }
}

}  // namespace mkc
