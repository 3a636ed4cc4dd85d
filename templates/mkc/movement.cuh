// Data movement tasks: copy (whole leading rows, into rows as long or longer) and send (a box of
// any rank, to this rank's or a peer's memory; every put, shift and collective phase that moves
// data is a send).
//
// Boxes move in 16-byte vectors where every run starts 16-byte aligned in every view and is a
// whole number of vectors, several loads in flight per thread; otherwise element by element.
// Plain (coherent) loads: the data may have come from a peer or another CTA.
// Compiled by NVRTC only.
#pragma once

#include "mkc/views.cuh"

namespace mkc {

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

// `rows` rows of `xrow` elements, src rows xrow apart to dst rows yrow apart, as words of type W
// (both pointers and both row pitches whole words): a warp per row, its lanes on consecutive
// words, four in flight.
template <typename W, typename T>
__device__ __forceinline__ void copy_pitched_as(T* dst, const T* src, long long rows,
                                                long long xrow, long long yrow) {
  constexpr long long E = sizeof(W) / sizeof(T);
  const long long xw = xrow / E, yw = yrow / E;  // xw: the words of a row, and their pitch
  const W* s = reinterpret_cast<const W*>(src);
  W* d = reinterpret_cast<W*>(dst);
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (long long r = threadIdx.x / 32; r < rows; r += warps) {
    const W* sr = s + r * xw;
    W* dr = d + r * yw;
#pragma unroll 4
    for (long long j = lane; j < xw; j += 32) dr[j] = sr[j];
  }
}

// Word K (0..7) of w0:w1.
template <int K>
__device__ __forceinline__ unsigned word_at(const uint4& w0, const uint4& w1) {
  const uint4& w = K < 4 ? w0 : w1;
  constexpr int k = K % 4;
  return k == 0 ? w.x : k == 1 ? w.y : k == 2 ? w.z : w.w;
}

// One row of n bytes that starts 4Q + b/8 bytes into the aligned 16-byte word base[0] (its last
// byte in base[last]), into the aligned words d[0 .. words): word j is bytes [16j, 16j + 16) of
// the row, made of base[j] and base[j + 1] by a funnel shift (the second loaded only where the
// row reaches into it: nothing past the row's last 16-byte word, which lies in its allocation),
// zero past the row's end. A warp's lanes on consecutive words, eight in flight per lane.
template <int Q>
__device__ __forceinline__ void copy_row_shifted(uint4* d, const uint4* base, int b, long long n,
                                                 long long words, long long last, int lane) {
  constexpr int U = 8;
  for (long long j0 = lane; j0 < words; j0 += U * 32) {
    uint4 w0[U], w1[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long j = j0 + u * 32;
      w0[u] = w1[u] = make_uint4(0, 0, 0, 0);
      if (j < words) w0[u] = base[j];
      if (j < words && j + 1 <= last) w1[u] = base[j + 1];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long j = j0 + u * 32;
      if (j >= words) continue;
      unsigned o[4] = {
          __funnelshift_r(word_at<Q>(w0[u], w1[u]), word_at<Q + 1>(w0[u], w1[u]), b),
          __funnelshift_r(word_at<Q + 1>(w0[u], w1[u]), word_at<Q + 2>(w0[u], w1[u]), b),
          __funnelshift_r(word_at<Q + 2>(w0[u], w1[u]), word_at<Q + 3>(w0[u], w1[u]), b),
          __funnelshift_r(word_at<Q + 3>(w0[u], w1[u]), word_at<Q + 4>(w0[u], w1[u]), b)};
      const long long rem = n - 16 * j;  // the row's bytes from this word on
      if (rem < 16) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const long long valid = rem - 4 * i;
          if (valid < 4) o[i] &= valid <= 0 ? 0u : (1u << (8 * valid)) - 1u;
        }
      }
      d[j] = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

// `rows` rows of `xrow` elements from src (rows xrow apart, any element alignment) to dst (16-byte
// aligned, rows yrow apart, yrow elements a multiple of 16 bytes), a warp per row
// (copy_row_shifted): rows of any length move at 16-byte width (a staged GEMM operand of K 4001
// bf16, whose rows start 2 bytes apart from 16-byte boundaries).
template <typename T>
__device__ __forceinline__ void copy_rows_shifted(T* dst, const T* src, long long rows,
                                                  long long xrow, long long yrow) {
  const long long n = xrow * static_cast<long long>(sizeof(T)), words = (n + 15) / 16;
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (long long r = threadIdx.x / 32; r < rows; r += warps) {
    const uptr from = reinterpret_cast<uptr>(src + r * xrow);
    const int sh = static_cast<int>(from & 15), b = 8 * (sh % 4);
    const uint4* base = reinterpret_cast<const uint4*>(from - sh);
    const long long last = (sh + n - 1) / 16;
    uint4* d = reinterpret_cast<uint4*>(dst + r * yrow);
    switch (sh / 4) {  // the same in the whole warp
      case 0:
        copy_row_shifted<0>(d, base, b, n, words, last, lane);
        break;
      case 1:
        copy_row_shifted<1>(d, base, b, n, words, last, lane);
        break;
      case 2:
        copy_row_shifted<2>(d, base, b, n, words, last, lane);
        break;
      default:
        copy_row_shifted<3>(d, base, b, n, words, last, lane);
        break;
    }
  }
}

// copy: rows [r0, r1) of the leading dimension, Y = X. Views {X, Y}; Y's rows may be longer
// (compiler/kinds/copy.cc): each X row goes to the start of Y's, the rest is left alone, except
// that a destination with 16-byte aligned rows gets the rest of the row's last 16-byte word
// zeroed (the staged GEMM operands it is for are zero there anyway). Rows of one length are one
// flat copy; pitched rows into 16-byte aligned ones go 16 bytes at a time whatever the source's
// alignment (copy_rows_shifted), others as the widest words both layouts allow.
template <typename T>
__device__ void copy_rows(const KernelArgs& a, const View* v, const long long* args, int nb) {
  const abi::CopyArgs& c = args_as<abi::CopyArgs>(args);
  const long long xrow = elems_from(v[0], 1), yrow = elems_from(v[1], 1);
  const T* X = view_ptr<T>(a, v[0], nb) + c.r0 * xrow;
  T* Y = view_ptr<T>(a, v[1], nb) + c.r0 * yrow;
  const long long rows = c.r1 - c.r0;
  if (xrow == yrow) {
    cta_copy(Y, X, rows * xrow);
    return;
  }
  const unsigned long long bits = reinterpret_cast<uptr>(X) | reinterpret_cast<uptr>(Y) |
                                  static_cast<unsigned long long>(xrow * sizeof(T)) |
                                  static_cast<unsigned long long>(yrow * sizeof(T));
  if ((bits & 15) == 0) {
    copy_pitched_as<uint4>(Y, X, rows, xrow, yrow);
  } else if (((reinterpret_cast<uptr>(Y) | static_cast<unsigned long long>(yrow * sizeof(T))) &
              15) == 0) {
    copy_rows_shifted(Y, X, rows, xrow, yrow);
  } else if ((bits & 7) == 0) {
    copy_pitched_as<uint2>(Y, X, rows, xrow, yrow);
  } else if ((bits & 3) == 0 && sizeof(T) <= 4) {
    copy_pitched_as<unsigned>(Y, X, rows, xrow, yrow);
  } else {
    copy_pitched_as<T>(Y, X, rows, xrow, yrow);
  }
}

// A send's box (args {range[, dst range]}, abi.h): its corner in src (lo) and in dst (lo2), its
// extents and its element count.
struct SendBox {
  int n;
  const long long* lo;
  const long long* lo2;
  long long ext[abi::kMaxDims];
  long long total;
};
__device__ __forceinline__ SendBox read_send_box(const long long* args, int nargs) {
  SendBox b;
  int pos = 0;
  const abi::Range box = abi::read_range(args, &pos);
  b.n = box.n;
  b.lo = box.lo;
  b.lo2 = pos < nargs ? abi::read_range(args, &pos).lo : box.lo;
  b.total = 1;
  for (int d = 0; d < b.n; ++d) {
    b.ext[d] = box.hi[d] - box.lo[d];
    b.total *= b.ext[d];
  }
  return b;
}

// send: the box [lo, hi) of src to the box of the same extents at lo2 (default lo) of dst, which
// may be a peer's memory. Args {range[, dst range]} (abi.h); views {src, dst}.
template <typename T>
__device__ void send_box(const KernelArgs& a, const View* v, const long long* args, int nb,
                         int nargs) {
  const T* src = view_ptr<T>(a, v[0], nb);
  T* dst = view_ptr<T>(a, v[1], nb);
  const SendBox b = read_send_box(args, nargs);
  const int n = b.n;
  const long long *lo = b.lo, *lo2 = b.lo2, *ext = b.ext, total = b.total;
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

// send to a rank of another node: the box's contiguous runs become requests to this rank's proxy
// (abi.h, ProxyRing), which moves them from this rank's heap to the destination's. src is this
// rank's memory in its heap; dst's table entry holds the destination buffer's heap offset (abi.h,
// KernelArgs::buffers). Up to blockDim.x runs are claimed at a time and written by as many
// threads; the task ends once the proxy has taken them all (the source may then change). Args
// and views as send_box.
template <typename T>
__device__ void proxy_send_box(const KernelArgs& a, const View* v, const long long* args, int nb,
                               int nargs) {
  const T* src = view_ptr<T>(a, v[0], nb);
  const unsigned long long dst_base =
      reinterpret_cast<unsigned long long>(view_ptr<T>(a, v[1], nb));
  const SendBox b = read_send_box(args, nargs);
  const int n = b.n;
  const long long *lo = b.lo, *lo2 = b.lo2, *ext = b.ext, total = b.total;
  if (total == 0) return;
  const View* views[2] = {&v[0], &v[1]};
  const long long run = box_run(views, 2, ext, n), runs = total / run;
  const long long src_base = reinterpret_cast<const char*>(src) - a.heap;
  __shared__ unsigned long long first;
  for (long long r0 = 0; r0 < runs; r0 += blockDim.x) {
    const long long batch = runs - r0 < blockDim.x ? runs - r0 : blockDim.x;
    if (threadIdx.x == 0) first = proxy_claim(a, static_cast<u64>(batch));
    __syncthreads();
    if (first == ~0ull) return;  // reported
    const long long j = r0 + threadIdx.x;
    if (threadIdx.x < batch) {
      const long long s = box_offset(v[0], lo, ext, n, j * run);
      const long long d = box_offset(v[1], lo2, ext, n, j * run);
      proxy_publish(a, first + threadIdx.x, src_base + s * static_cast<long long>(sizeof(T)),
                    static_cast<long long>(dst_base) + d * static_cast<long long>(sizeof(T)),
                    run * static_cast<long long>(sizeof(T)), v[1].rank, -1);
    }
    __syncthreads();
    if (r0 + batch >= runs && threadIdx.x == 0) proxy_drain(a, first + batch - 1);
  }
}

}  // namespace mkc
