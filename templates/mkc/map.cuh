// map: an elementwise device function over one contiguous range of its operands (a tile of rows),
// by the whole CTA. Where every operand is aligned at the range's start, each thread takes runs of
// 8 elements (one 16-byte vector of a 16-bit type, two of an f32), kMapRuns runs at once, so that
// each thread has several loads in flight before it stores anything (the output may be one of the
// inputs: a run is loaded whole before it is written, and no two threads touch one element). The
// tail past the last whole run and ranges that are not aligned go one element per thread.
// Compiled by NVRTC only.
#pragma once

#include "mkc/types.cuh"

namespace mkc {

// Runs in flight per thread: 4 for 16-bit operands; 2 when the inputs take more than 8 bytes an
// element together (f32, or three and more 16-bit inputs), to stay inside the kernel's 168
// registers.
template <typename... TX>
constexpr int kMapRuns = (sizeof(TX) + ... + 0) <= 8 ? 4 : 2;

// y[e] = fn(x[e]...) for e in [e0, e1). fn takes the inputs' element values (it converts them to
// the device function's parameter types) and returns the function's result, converted to TY here.
template <typename TY, typename Fn, typename... TX>
__device__ __forceinline__ void map_range(TY* y, long long e0, long long e1, Fn fn,
                                          const TX*... x) {
  long long e = e0;
  if (run8_aligned(y + e0) && (run8_aligned(x + e0) && ...)) {
    constexpr int U = kMapRuns<TX...>;
    const long long runs = (e1 - e0) / 8, step = blockDim.x;
    long long i = threadIdx.x;
    for (; i + (U - 1) * step < runs; i += U * step) {
      Run8<TY> out[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const long long at = e0 + 8 * (i + u * step);
        [&](const Run8<TX>&... in) {
#pragma unroll
          for (int k = 0; k < 8; ++k) out[u].v[k] = convert<TY>(fn(in.v[k]...));
        }(load_run8(x + at)...);
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
        *reinterpret_cast<Run8<TY>*>(y + e0 + 8 * (i + u * step)) = out[u];
    }
    for (; i < runs; i += step) {
      const long long at = e0 + 8 * i;
      Run8<TY> out;
      [&](const Run8<TX>&... in) {
#pragma unroll
        for (int k = 0; k < 8; ++k) out.v[k] = convert<TY>(fn(in.v[k]...));
      }(load_run8(x + at)...);
      *reinterpret_cast<Run8<TY>*>(y + at) = out;
    }
    e = e0 + runs * 8;
  }
  for (e += threadIdx.x; e < e1; e += blockDim.x) y[e] = convert<TY>(fn(x[e]...));
}

}  // namespace mkc
