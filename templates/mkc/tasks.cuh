// The device side of every task kind of the plan (compiler/plan.h): what one CTA (256 or 384
// threads) does for one task. Simple, correct versions; the fast GEMM and attention tiles come with
// their own templates. Each takes the kernel arguments, the task's views and its integer arguments,
// with the meaning documented beside the lowering that builds them (compiler/lower.cc).
#pragma once

#include "mkc/device.cuh"
#include "mkc/types.cuh"

namespace mkc {

// -infinity without <math.h> (NVRTC has none).
__device__ __forceinline__ float neg_inf() {
  return __int_as_float(0xff800000);
}

__device__ __forceinline__ long long elems_from(const View& v, int d) {
  long long p = 1;
  for (int i = d; i < v.ndim; ++i) p *= v.shape[i];
  return p;
}

// Flat offset (within the view) of element `idx` of the box whose extents are `ext`, starting at
// `lo`, in a view of shape `v`.
__device__ __forceinline__ long long box_offset(const View& v, const long long* lo,
                                                const long long* ext, int n, long long idx) {
  long long off = 0, stride = 1;
  for (int d = n - 1; d >= 0; --d) {
    const long long i = idx % ext[d];
    idx /= ext[d];
    off += (lo[d] + i) * stride;
    stride *= v.shape[d];
  }
  return off;
}

// Vectors a thread reduces at a time in reduce_slots (the generator lowers it where registers
// are scarce).
#ifndef MKC_REDUCE_UNROLL
#define MKC_REDUCE_UNROLL 4
#endif

// Data movement in 16-byte vectors. A box of extents ext[n] lies in each of its views as runs of
// contiguous elements: the innermost dimensions the box covers fully in every view, times the
// first one it does not. Where every run starts 16-byte aligned in every view and is a whole
// number of vectors, a CTA moves the box as vectors, several loads in flight per thread; otherwise
// element by element. Plain (coherent) loads: the data may have come from a peer or another CTA.
typedef unsigned long long uptr;

__device__ __forceinline__ long long box_run(const View* const* views, int nviews,
                                             const long long* ext, int n) {
  long long len = 1;
  for (int d = n - 1; d >= 0; --d) {
    len *= ext[d];
    bool full = true;
    for (int k = 0; k < nviews; ++k) full = full && ext[d] == views[k]->shape[d];
    if (!full) break;
  }
  return len;
}

// True when every run of the box (starting at lo in view v, base pointer p) starts on a 16-byte
// boundary: the first run does, and so does every stride between runs.
template <typename T>
__device__ __forceinline__ bool runs_aligned(const T* p, const View& v, const long long* lo,
                                             const long long* ext, int n, long long run) {
  constexpr long long V = 16 / sizeof(T);
  if ((reinterpret_cast<uptr>(p) & 15) != 0 || run % V != 0) return false;
  long long off = 0, stride = 1, covered = 1;
  bool aligned = true;
  for (int d = n - 1; d >= 0; --d) {
    off += lo[d] * stride;
    if (covered >= run && stride % V != 0) aligned = false;  // a stride between runs
    covered *= ext[d];
    stride *= v.shape[d];
  }
  return aligned && off % V == 0;
}

// Vector j (of `per_run` per run) of the box: its element offset in view v.
__device__ __forceinline__ long long run_vec_offset(const View& v, const long long* lo,
                                                    const long long* ext, int n, long long run,
                                                    long long per_run, long long j, long long V) {
  return box_offset(v, lo, ext, n, (j / per_run) * run) + (j % per_run) * V;
}

// C[m0:m1, n0:n1] = fn(A[m0:m1, :] x B[:, n0:n1] (+ bias)), f32 accumulation, 64x64 sub-blocks
// through shared memory. args {m0, m1, n0, n1, k_step, fn, has_bias}; views {A, B, C[, bias]}.
template <typename TA, typename TB, typename TC, typename TBias, typename Fn>
__device__ void gemm_tile(const KernelArgs& a, const View* v, const long long* args, int nb,
                          Fn fn) {
  const TA* A = view_ptr<TA>(a, v[0], nb);
  const TB* B = view_ptr<TB>(a, v[1], nb);
  TC* C = view_ptr<TC>(a, v[2], nb);
  const TBias* bias = args[6] ? view_ptr<TBias>(a, v[3], nb) : nullptr;
  const long long m0 = args[0], m1 = args[1], n0 = args[2], n1 = args[3];
  const long long K = v[0].shape[1], N = v[1].shape[1];
  __shared__ float As[16][64];
  __shared__ float Bs[16][64];
  // 256 threads compute (a 16 x 16 grid of 4 x 4 blocks); any more only help load.
  const int tx = threadIdx.x % 16, ty = (threadIdx.x / 16) % 16;
  const bool computes = threadIdx.x < 256;
  for (long long mb = m0; mb < m1; mb += 64) {
    for (long long nb0 = n0; nb0 < n1; nb0 += 64) {
      float acc[4][4] = {};
      for (long long k0 = 0; k0 < K; k0 += 16) {
        for (int i = threadIdx.x; i < 1024; i += blockDim.x) {
          const int mm = i / 16, kk = i % 16;
          const long long row = mb + mm, k = k0 + kk;
          As[kk][mm] = (row < m1 && k < K) ? to_f32(A[row * K + k]) : 0.0f;
          const int kb = i / 64, nn = i % 64;
          const long long col = nb0 + nn, kr = k0 + kb;
          Bs[kb][nn] = (col < n1 && kr < K) ? to_f32(B[kr * N + col]) : 0.0f;
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

// Rows grouped by group: Y[r, n0:n1] = fn(X[r, :] x W[g(r), :, n0:n1]) for r in [r0, r1) below
// the total of counts. args {r0, r1, n0, n1, fn}; views {X, W, Y, counts (i32, [..., G])}.
template <typename TX, typename TW, typename TY, typename Fn>
__device__ void grouped_gemm_tile(const KernelArgs& a, const View* v, const long long* args, int nb,
                                  Fn fn) {
  const TX* X = view_ptr<TX>(a, v[0], nb);
  const TW* W = view_ptr<TW>(a, v[1], nb);
  TY* Y = view_ptr<TY>(a, v[2], nb);
  const int* counts = view_ptr<int>(a, v[3], nb);
  const long long G = v[1].shape[0], K = v[1].shape[1], N = v[1].shape[2];
  const long long lead = elems_from(v[3], 0) / G;
  __shared__ long long start[1025];
  if (threadIdx.x == 0) {
    start[0] = 0;
    for (long long g = 0; g < G && g < 1024; ++g) {
      long long rows = 0;
      for (long long l = 0; l < lead; ++l) rows += counts[l * G + g];
      start[g + 1] = start[g] + rows;
    }
  }
  __syncthreads();
  const long long total = start[G < 1024 ? G : 1024];
  const long long r0 = args[0], r1 = args[1] < total ? args[1] : total, n0 = args[2], n1 = args[3];
  const long long cols = n1 - n0;
  for (long long i = threadIdx.x; r0 < r1 && i < (r1 - r0) * cols; i += blockDim.x) {
    const long long r = r0 + i / cols, n = n0 + i % cols;
    long long g = 0;
    while (start[g + 1] <= r) ++g;
    float acc = 0;
    for (long long k = 0; k < K; ++k) acc += to_f32(X[r * K + k]) * to_f32(W[(g * K + k) * N + n]);
    Y[r * N + n] = from_f32<TY>(fn(acc));
  }
}

// n contiguous elements, src to dst, by the whole CTA: 16-byte vectors (four loads in flight per
// thread) where both pointers are 16-byte aligned, the tail and anything unaligned one by one.
template <typename T>
__device__ __forceinline__ void cta_copy(T* dst, const T* src, long long n) {
  constexpr long long V = 16 / sizeof(T);
  long long done = 0;
  if (((reinterpret_cast<uptr>(dst) | reinterpret_cast<uptr>(src)) & 15) == 0) {
    const long long nv = n / V;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    const long long step = blockDim.x;
    long long i = threadIdx.x;
    for (; i + 3 * step < nv; i += 4 * step) {
      const uint4 x0 = s[i], x1 = s[i + step], x2 = s[i + 2 * step], x3 = s[i + 3 * step];
      d[i] = x0;
      d[i + step] = x1;
      d[i + 2 * step] = x2;
      d[i + 3 * step] = x3;
    }
    for (; i < nv; i += step) d[i] = s[i];
    done = nv * V;
  }
  for (long long e = done + threadIdx.x; e < n; e += blockDim.x) dst[e] = src[e];
}

// Rows [r0, r1) of the leading dimension: Y = X. args {r0, r1}; views {X, Y}.
template <typename T>
__device__ void copy_rows(const KernelArgs& a, const View* v, const long long* args, int nb) {
  const T* X = view_ptr<T>(a, v[0], nb);
  T* Y = view_ptr<T>(a, v[1], nb);
  const long long row = elems_from(v[1], 1);
  cta_copy(Y + args[0] * row, X + args[0] * row, (args[1] - args[0]) * row);
}

// op 0: sum, 1: max, 2: min, in the accumulation type A.
template <typename A>
__device__ __forceinline__ A reduce_acc(long long op, A x, A y) {
  return op == 0 ? x + y : op == 1 ? (x > y ? x : y) : (x < y ? x : y);
}

// Elements [y0, y1) of Y (flat) = op over `axis` of X. args {y0, y1, axis, op}; views {X, Y}.
template <typename TX, typename TY>
__device__ void reduce_tile(const KernelArgs& a, const View* v, const long long* args, int nb) {
  const TX* X = view_ptr<TX>(a, v[0], nb);
  TY* Y = view_ptr<TY>(a, v[1], nb);
  const int axis = static_cast<int>(args[2]);
  const long long inner = elems_from(v[0], axis + 1), n = v[0].shape[axis];
  for (long long e = args[0] + threadIdx.x; e < args[1]; e += blockDim.x) {
    const long long outer = e / inner, in = e % inner;
    float acc = to_f32(X[outer * n * inner + in]);
    for (long long k = 1; k < n; ++k)
      acc = reduce_acc(args[3], acc, to_f32(X[(outer * n + k) * inner + in]));
    Y[e] = from_f32<TY>(acc);
  }
}

// Attention of queries [q0, q1) of batch-head `l` against all keys of the block, with an online
// softmax carried in acc/max/sum (f32 state) when accumulating over a loop. One thread per
// (query, output dim): each recomputes the row's scores (simple, not fast).
// args {l, q0, q1, causal, accumulate, first, last, scale bits}; views {Q, K, V, O[, acc, max,
// sum]} as [L, S, D].
template <typename TQ, typename TO>
__device__ void attention_tile(const KernelArgs& a, const View* v, const long long* args, int nb) {
  const TQ* Q = view_ptr<TQ>(a, v[0], nb);
  const TQ* Kp = view_ptr<TQ>(a, v[1], nb);
  const TQ* Vp = view_ptr<TQ>(a, v[2], nb);
  TO* O = view_ptr<TO>(a, v[3], nb);
  const long long l = args[0], q0 = args[1], q1 = args[2];
  const bool causal = args[3], acc_on = args[4], first = args[5], last = args[6];
  const double scale = __longlong_as_double(args[7]);
  const long long Sq = v[0].shape[1], D = v[0].shape[2], Sk = v[1].shape[1], Dv = v[2].shape[2];
  float* st_acc = acc_on ? view_ptr<float>(a, v[4], nb) : nullptr;
  float* st_max = acc_on ? view_ptr<float>(a, v[5], nb) : nullptr;
  float* st_sum = acc_on ? view_ptr<float>(a, v[6], nb) : nullptr;
  const long long pairs = (q1 - q0) * Dv;
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
    for (long long j = 0; j < Sk; ++j) {
      if (causal && j > qi) continue;
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
    if (last) O[row * Dv + d] = from_f32<TO>(acc / s);
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

// Copies the box [lo, hi) of src to the box of the same extents at lo2 (default lo) of dst, which
// may be a peer's memory. args {n, lo[n], hi[n][, n, lo2[n], hi2[n]]}; views {src, dst}.
template <typename T>
__device__ void send_box(const KernelArgs& a, const View* v, const long long* args, int nb,
                         int nargs) {
  const T* src = view_ptr<T>(a, v[0], nb);
  T* dst = view_ptr<T>(a, v[1], nb);
  const int n = static_cast<int>(args[0]);
  const long long* lo = args + 1;
  const long long* hi = args + 1 + n;
  const long long* lo2 = nargs > 1 + 2 * n ? args + 2 + 2 * n : lo;
  long long ext[6];
  long long total = 1;
  for (int d = 0; d < n; ++d) {
    ext[d] = hi[d] - lo[d];
    total *= ext[d];
  }
  const View* views[2] = {&v[0], &v[1]};
  const long long run = box_run(views, 2, ext, n);
  if (run == total) {  // one run: a flat copy
    cta_copy(dst + box_offset(v[1], lo2, ext, n, 0), src + box_offset(v[0], lo, ext, n, 0), total);
    return;
  }
  constexpr long long V = 16 / sizeof(T);
  if (runs_aligned(src, v[0], lo, ext, n, run) && runs_aligned(dst, v[1], lo2, ext, n, run)) {
    const long long per_run = run / V, nv = total / V;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
      d[run_vec_offset(v[1], lo2, ext, n, run, per_run, j, V) / V] =
          s[run_vec_offset(v[0], lo, ext, n, run, per_run, j, V) / V];
    }
    return;
  }
  for (long long i = threadIdx.x; i < total; i += blockDim.x) {
    dst[box_offset(v[1], lo2, ext, n, i)] = src[box_offset(v[0], lo, ext, n, i)];
  }
}

// The accumulator of a reduction: f64 for f64 data, 64-bit integers for integers, f32 otherwise.
template <typename T>
struct Acc {
  typedef float type;
};
template <>
struct Acc<double> {
  typedef double type;
};
template <>
struct Acc<int> {
  typedef long long type;
};
template <>
struct Acc<long long> {
  typedef long long type;
};
template <typename A, typename T>
__device__ __forceinline__ A to_acc(T v) {
  if constexpr (is_same<A, float>::value) {
    return to_f32(v);
  } else {
    return static_cast<A>(v);
  }
}
template <typename T, typename A>
__device__ __forceinline__ T from_acc(A v) {
  if constexpr (is_same<A, float>::value) {
    return from_f32<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

// The vector path of reduce_slots: each thread reduces U vectors of V elements at a time: own,
// then every peer's slot in rank order (the order of the scalar path and the reference), U loads
// in flight per source. FLAT: the box is one run, offsets are plain.
template <typename T, typename A, int U, bool FLAT>
__device__ __forceinline__ void reduce_vectors(const T* own, const T* slots, T* out,
                                               long long slot_elems, long long R, long long self,
                                               long long op, const View& vx, const View& vs,
                                               const View& vo, const long long* xlo,
                                               const long long* lo, const long long* olo,
                                               const long long* ext, int n, long long run) {
  constexpr long long V = 16 / sizeof(T);
  long long total = 1;
  for (int d = 0; d < n; ++d) total *= ext[d];
  const long long per_run = run / V, nv = total / V, step = blockDim.x;
  const long long xo0 = box_offset(vx, xlo, ext, n, 0), so0 = box_offset(vs, lo, ext, n, 0),
                  oo0 = box_offset(vo, olo, ext, n, 0);
  for (long long j0 = threadIdx.x; j0 < nv; j0 += U * step) {
    long long so[U], oo[U];
    bool live[U];
    uint4 in[U];
    A acc[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long j = j0 + u * step;
      live[u] = j < nv;
      long long xo;
      if (FLAT) {
        xo = xo0 + j * V;
        so[u] = so0 + j * V;
        oo[u] = oo0 + j * V;
      } else {
        xo = run_vec_offset(vx, xlo, ext, n, run, per_run, j, V);
        so[u] = run_vec_offset(vs, lo, ext, n, run, per_run, j, V);
        oo[u] = run_vec_offset(vo, olo, ext, n, run, per_run, j, V);
      }
      if (live[u]) in[u] = *reinterpret_cast<const uint4*>(own + xo);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const T* e = reinterpret_cast<const T*>(&in[u]);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[u][k] = live[u] ? to_acc<A>(e[k]) : A(0);
    }
    for (long long s = 0; s < R; ++s) {
      if (s == self) continue;
      const T* src = slots + s * slot_elems;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (live[u]) in[u] = *reinterpret_cast<const uint4*>(src + so[u]);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const T* e = reinterpret_cast<const T*>(&in[u]);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[u][k] = reduce_acc(op, acc[u][k], to_acc<A>(e[k]));
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!live[u]) continue;
      uint4 res;
      T* e = reinterpret_cast<T*>(&res);
#pragma unroll
      for (int k = 0; k < V; ++k) e[k] = from_acc<T>(acc[u][k]);
      *reinterpret_cast<uint4*>(out + oo[u]) = res;
    }
  }
}

// out[box] = op(own[x box], slots[s][slot box] for s != self). args {op, self, out_in_x_coords,
// n, xlo, xhi, n, lo, hi}; views {own, slots [R, ...], out}.
template <typename T>
__device__ void reduce_slots(const KernelArgs& a, const View* v, const long long* args, int nb) {
  const T* own = view_ptr<T>(a, v[0], nb);
  const T* slots = view_ptr<T>(a, v[1], nb);
  T* out = view_ptr<T>(a, v[2], nb);
  const long long op = args[0], self = args[1];
  const bool out_x = args[2];
  const int n = static_cast<int>(args[3]);
  const long long* xlo = args + 4;
  const long long* lo = args + 4 + 2 * n + 1;
  View one = v[1];
  one.ndim -= 1;
  for (int d = 0; d < one.ndim; ++d) one.shape[d] = v[1].shape[d + 1];
  const long long slot_elems = elems_from(v[1], 1), R = v[1].shape[0];
  long long ext[6];
  long long total = 1;
  for (int d = 0; d < n; ++d) {
    ext[d] = args[4 + n + d] - xlo[d];
    total *= ext[d];
  }
  typedef typename Acc<T>::type A;
  const long long* olo = out_x ? xlo : lo;
  const View* views[3] = {&v[0], &one, &v[2]};
  const long long run = box_run(views, 3, ext, n);
  bool vec = runs_aligned(own, v[0], xlo, ext, n, run) && runs_aligned(out, v[2], olo, ext, n, run);
  for (long long s = 0; s < R && vec; ++s)
    vec = runs_aligned(slots + s * slot_elems, one, lo, ext, n, run);
  if (vec) {
    // One run (the usual chunk): plain offsets, four vectors per thread in flight; several runs:
    // each vector finds its run (64-bit divisions), one at a time.
    if (run == total) {
      reduce_vectors<T, A, MKC_REDUCE_UNROLL, true>(own, slots, out, slot_elems, R, self, op, v[0],
                                                    one, v[2], xlo, lo, olo, ext, n, run);
    } else {
      reduce_vectors<T, A, 1, false>(own, slots, out, slot_elems, R, self, op, v[0], one, v[2], xlo,
                                     lo, olo, ext, n, run);
    }
    return;
  }
  for (long long i = threadIdx.x; i < total; i += blockDim.x) {
    const long long xo = box_offset(v[0], xlo, ext, n, i);
    const long long so = box_offset(one, lo, ext, n, i);
    A acc = to_acc<A>(own[xo]);
    for (long long s = 0; s < R; ++s) {
      if (s != self) acc = reduce_acc(op, acc, to_acc<A>(slots[s * slot_elems + so]));
    }
    out[box_offset(v[2], olo, ext, n, i)] = from_acc<T>(acc);
  }
}

// MoE dispatch, step 1: this rank's rows per expert, into every rank's xcounts[rank, :].
// args {E, K}; views {route (i32 [T, K]), xcounts_d for d in ranks}.
__device__ inline void a2a_counts(const KernelArgs& a, const View* v, const long long* args, int nb,
                                  int ranks) {
  const int* route = view_ptr<int>(a, v[0], nb);
  const long long E = args[0], n = elems_from(v[0], 0);
  for (long long e = threadIdx.x; e < E; e += blockDim.x) {
    int c = 0;
    for (long long i = 0; i < n; ++i) c += route[i] == e;
    for (int d = 0; d < ranks; ++d) view_ptr<int>(a, v[1 + d], nb)[a.rank * E + e] = c;
  }
}

// MoE dispatch, step 2: rows [r0, r1) go to their experts' ranks, expert-major, then by source
// rank, then in source order; origin records (source rank, row, k). One warp per (row, k).
// args {r0, r1, E, K}; views {X, route, xcounts (this rank's, [R, E]), Y_d..., origin_d...}.
template <typename T>
__device__ void a2a_send(const KernelArgs& a, const View* v, const long long* args, int nb,
                         int ranks) {
  const T* X = view_ptr<T>(a, v[0], nb);
  const int* route = view_ptr<int>(a, v[1], nb);
  const int* xc = view_ptr<int>(a, v[2], nb);
  const long long r0 = args[0], r1 = args[1], E = args[2], K = args[3], per = E / ranks,
                  H = v[0].shape[1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (long long p = r0 * K + warp; p < r1 * K; p += warps) {
    const long long tok = p / K, k = p % K;
    const int e = route[p];
    const long long d = e / per, le = e % per;
    // The row's place in Y_d: rows of d's lower experts (every source), of expert e from lower
    // source ranks, then this rank's earlier (row, k) pairs routed to e — counted by the warp, 32
    // route entries a step.
    long long pos = 0;
    for (long long e2 = d * per + lane; e2 < d * per + le; e2 += 32) {
      for (int s = 0; s < ranks; ++s) pos += xc[s * E + e2];
    }
    for (int s = lane; s < a.rank; s += 32) pos += xc[s * E + e];
    for (long long i = lane; i < p; i += 32) pos += route[i] == e;
    for (int o = 16; o > 0; o /= 2) pos += __shfl_xor_sync(0xffffffffu, pos, o);
    T* Y = view_ptr<T>(a, v[3 + d], nb);
    for (long long h = lane; h < H; h += 32) Y[pos * H + h] = X[tok * H + h];
    if (lane == 0) {
      int* origin = view_ptr<int>(a, v[3 + ranks + d], nb);
      origin[pos * 3 + 0] = a.rank;
      origin[pos * 3 + 1] = static_cast<int>(tok);
      origin[pos * 3 + 2] = static_cast<int>(k);
    }
  }
}

// MoE dispatch, step 3: counts[s, e] = xcounts[s, rank * E / R + e]. args {E}; views {xcounts,
// counts}.
__device__ inline void a2a_finish(const KernelArgs& a, const View* v, const long long* args, int nb,
                                  int ranks) {
  const int* xc = view_ptr<int>(a, v[0], nb);
  int* counts = view_ptr<int>(a, v[1], nb);
  const long long E = args[0], per = E / ranks;
  for (long long i = threadIdx.x; i < ranks * per; i += blockDim.x)
    counts[i] = xc[(i / per) * E + a.rank * per + i % per];
}

// MoE combine, step 1: every received row back to back_s[row, k] of its origin. One warp per row.
// args {E}; views {Y, origin, xcounts, back_s...}.
template <typename T>
__device__ void combine_send(const KernelArgs& a, const View* v, const long long* args, int nb,
                             int ranks) {
  const T* Y = view_ptr<T>(a, v[0], nb);
  const int* origin = view_ptr<int>(a, v[1], nb);
  const int* xc = view_ptr<int>(a, v[2], nb);
  const long long E = args[0], per = E / ranks, H = v[0].shape[1];
  long long total = 0;
  for (int s = 0; s < ranks; ++s) {
    for (long long le = 0; le < per; ++le) total += xc[s * E + a.rank * per + le];
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (long long p = warp; p < total; p += warps) {
    const int s = origin[p * 3], tok = origin[p * 3 + 1], k = origin[p * 3 + 2];
    T* back = view_ptr<T>(a, v[3 + s], nb);
    const long long K = v[3 + s].shape[1];
    for (long long h = lane; h < H; h += 32) back[(tok * K + k) * H + h] = Y[p * H + h];
  }
}

// MoE combine, step 2: Out[t] = sum_k W[t, k] * back[t, k] for rows [r0, r1).
// args {r0, r1, has_weights}; views {back [T, K, H], W (f32 [T, K]) or back, Out}.
template <typename T>
__device__ void combine_reduce(const KernelArgs& a, const View* v, const long long* args, int nb) {
  const T* back = view_ptr<T>(a, v[0], nb);
  const float* w = args[2] ? view_ptr<float>(a, v[1], nb) : nullptr;
  T* out = view_ptr<T>(a, v[2], nb);
  const long long K = v[0].shape[1], H = v[0].shape[2];
  for (long long i = args[0] * H + threadIdx.x; i < args[1] * H; i += blockDim.x) {
    const long long tok = i / H, h = i % H;
    float acc = 0.0f;
    for (long long k = 0; k < K; ++k)
      acc += (w ? w[tok * K + k] : 1.0f) * to_f32(back[(tok * K + k) * H + h]);
    out[i] = from_f32<T>(acc);
  }
}

}  // namespace mkc
