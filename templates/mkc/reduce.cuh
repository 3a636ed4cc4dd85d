// Reduction tasks: reduce_tile (a reduction over one axis of a tensor) and reduce_slots (a
// collective's reduction of this rank's part with the slots its peers sent).
//
// Accumulation: f32 for floating types, f64 for f64, 64-bit integers for integers; peers' slots in
// rank order (the order of the reference). The vector path reduces 16-byte vectors several deep
// per source (MKC_REDUCE_UNROLL), so that many loads are in flight.
// Compiled by NVRTC only.
#pragma once

#include "mkc/views.cuh"

namespace mkc {

// Vectors a thread reduces at a time in reduce_slots (the generator lowers it where registers
// are scarce).
#ifndef MKC_REDUCE_UNROLL
#define MKC_REDUCE_UNROLL 4
#endif

// op (abi::ReduceOp): 0 sum, 1 max, 2 min, in the accumulation type A.
template <typename A>
__device__ __forceinline__ A reduce_acc(long long op, A x, A y) {
  return op == abi::kSum ? x + y : op == abi::kMax ? (x > y ? x : y) : (x < y ? x : y);
}

// reduce_tile: elements [y0, y1) of Y (flat) = op over `axis` of X. Views {X, Y}.
template <typename TX, typename TY>
__device__ void reduce_tile(const KernelArgs& a, const View* v, const long long* args, int nb) {
  const abi::ReduceTileArgs& r = args_as<abi::ReduceTileArgs>(args);
  const TX* X = view_ptr<TX>(a, v[0], nb);
  TY* Y = view_ptr<TY>(a, v[1], nb);
  const int axis = static_cast<int>(r.axis);
  const long long inner = elems_from(v[0], axis + 1), n = v[0].shape[axis];
  if constexpr (is_same<TX, float>::value && sizeof(TY) <= 4) {
    // f32 over the first axis (split-K's partial sums, at most kMaxParts of them here): 4
    // elements per vector, every source's load issued before the first add, so that a thread
    // waits for one round trip to L2 per vector, not one per source.
    constexpr int kMaxParts = 8;
    if (axis == 0 && n <= kMaxParts && inner % 4 == 0 && r.y0 % 4 == 0 && r.y1 % 4 == 0 &&
        (reinterpret_cast<unsigned long long>(X) & 15) == 0 &&
        (reinterpret_cast<unsigned long long>(Y) & (4 * sizeof(TY) - 1)) == 0) {
      for (long long e = r.y0 + 4 * threadIdx.x; e < r.y1; e += 4LL * blockDim.x) {
        float4 x[kMaxParts];
#pragma unroll
        for (int k = 0; k < kMaxParts; ++k)
          x[k] = k < n ? *reinterpret_cast<const float4*>(X + k * inner + e) : x[0];
        float4 acc = x[0];
#pragma unroll
        for (int k = 1; k < kMaxParts; ++k) {
          const bool in = k < n;
          acc.x = in ? reduce_acc(r.op, acc.x, x[k].x) : acc.x;
          acc.y = in ? reduce_acc(r.op, acc.y, x[k].y) : acc.y;
          acc.z = in ? reduce_acc(r.op, acc.z, x[k].z) : acc.z;
          acc.w = in ? reduce_acc(r.op, acc.w, x[k].w) : acc.w;
        }
        Y[e] = from_f32<TY>(acc.x);
        Y[e + 1] = from_f32<TY>(acc.y);
        Y[e + 2] = from_f32<TY>(acc.z);
        Y[e + 3] = from_f32<TY>(acc.w);
      }
      return;
    }
  }
  if (axis == 0) {  // Y is one slice of X: no index division
    for (long long e = r.y0 + threadIdx.x; e < r.y1; e += blockDim.x) {
      float acc = to_f32(X[e]);
      for (long long k = 1; k < n; ++k) acc = reduce_acc(r.op, acc, to_f32(X[k * inner + e]));
      Y[e] = from_f32<TY>(acc);
    }
    return;
  }
  for (long long e = r.y0 + threadIdx.x; e < r.y1; e += blockDim.x) {
    const long long outer = e / inner, in = e % inner;
    float acc = to_f32(X[outer * n * inner + in]);
    for (long long k = 1; k < n; ++k)
      acc = reduce_acc(r.op, acc, to_f32(X[(outer * n + k) * inner + in]));
    Y[e] = from_f32<TY>(acc);
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

// reduce_slots: out[box] = op(own[x box], slots[s][slot box] for s != self). Args
// {ReduceSlotsHead, x range, slot range} (abi.h); views {own, slots [R, ...], out}.
template <typename T>
__device__ void reduce_slots(const KernelArgs& a, const View* v, const long long* args, int nb) {
  const T* own = view_ptr<T>(a, v[0], nb);
  const T* slots = view_ptr<T>(a, v[1], nb);
  T* out = view_ptr<T>(a, v[2], nb);
  const abi::ReduceSlotsHead& head = args_as<abi::ReduceSlotsHead>(args);
  const long long op = head.op, self = head.self;
  const bool out_x = head.out_in_x_coords;
  int pos = sizeof(abi::ReduceSlotsHead) / 8;
  const abi::Range xr = abi::read_range(args, &pos);
  const abi::Range sr = abi::read_range(args, &pos);
  const int n = xr.n;
  const long long* xlo = xr.lo;
  const long long* lo = sr.lo;
  View one = v[1];
  one.ndim -= 1;
  for (int d = 0; d < one.ndim; ++d) one.shape[d] = v[1].shape[d + 1];
  const long long slot_elems = elems_from(v[1], 1), R = v[1].shape[0];
  long long ext[abi::kMaxDims];
  long long total = 1;
  for (int d = 0; d < n; ++d) {
    ext[d] = xr.hi[d] - xlo[d];
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

}  // namespace mkc
