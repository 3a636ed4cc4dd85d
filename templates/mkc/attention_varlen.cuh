// Packed sequences (`attention(..., seqlens = L)`, abi::AttentionTileArgs::seqlens): which keys a
// query row sees, from the sequences' cumulative lengths L (i32 [n + 1], non-decreasing within
// [0, S]). Row i of sequence d (L[d] <= i < L[d + 1]) sees keys [L[d], L[d + 1]); a row before
// L[0] or from L[n] on is padding, in no sequence, and sees none. Shared by the SIMT and the
// tensor-core tiles.
// Compiled by NVRTC only.
#pragma once

#include "mkc/views.cuh"

namespace mkc {

// Keys [lo, hi) (empty: lo >= hi).
struct AttnKeys {
  int lo, hi;
};

// The lengths of a task's packed sequences: L's elements and n (sequences).
struct AttnSeqs {
  const int* cu;
  int n;
};

__device__ __forceinline__ AttnSeqs attn_seqs(const KernelArgs& a, const View* v,
                                              const abi::AttentionTileArgs& at, int nb) {
  const View& lv = v[at.seqlens];
  return {view_ptr<int>(a, lv, nb), static_cast<int>(lv.shape[0]) - 1};
}

// The keys of row i's sequence, clipped to [0, Sk): the last d < n with L[d] <= i by bisection
// (a malformed L gives some range inside the slice, never a load outside L).
__device__ __forceinline__ AttnKeys attn_seq_keys(AttnSeqs s, long long i, long long Sk) {
  if (s.n < 1 || i < s.cu[0]) return {0, 0};
  int a = 0, b = s.n;
  while (b - a > 1) {
    const int m = (a + b) / 2;
    if (s.cu[m] <= i) {
      a = m;
    } else {
      b = m;
    }
  }
  const long long lo = s.cu[a], hi = s.cu[a + 1];
  if (i >= hi) return {0, 0};
  return {static_cast<int>(lo < 0 ? 0 : lo), static_cast<int>(hi < Sk ? hi : Sk)};
}

// The keys rows [r0, r1) see together (r0 < r1): from the first row's sequence to the last row's
// (or L[n] where the last rows are past it), and under a causal mask no key past r1 - 1. Rows
// before L[0] are skipped; empty when no row is in a sequence.
__device__ __forceinline__ AttnKeys attn_rows_keys(AttnSeqs s, long long r0, long long r1,
                                                   bool causal, long long Sk) {
  AttnKeys f = attn_seq_keys(s, r0, Sk);
  if (f.lo >= f.hi && s.n >= 1 && r0 < s.cu[0] && s.cu[0] < r1) f = attn_seq_keys(s, s.cu[0], Sk);
  if (f.lo >= f.hi) return {0, 0};
  const AttnKeys l = attn_seq_keys(s, r1 - 1, Sk);
  long long hi = l.lo < l.hi ? l.hi : (s.cu[s.n] < Sk ? s.cu[s.n] : Sk);
  if (causal && r1 < hi) hi = r1;
  return {f.lo, static_cast<int>(hi)};
}

}  // namespace mkc
