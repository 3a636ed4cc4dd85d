// Element types as the generated code names them, and their conversions to and from float (all
// arithmetic is done in f32, or f64 for f64 data).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace mkc {

// std::is_same without <type_traits> (NVRTC compiles these headers without the host library).
template <typename A, typename B>
struct is_same {
  static constexpr bool value = false;
};
template <typename A>
struct is_same<A, A> {
  static constexpr bool value = true;
};

template <typename T>
__device__ __forceinline__ float to_f32(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_f32<__nv_fp8_e4m3>(__nv_fp8_e4m3 v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float to_f32<__nv_fp8_e5m2>(__nv_fp8_e5m2 v) {
  return static_cast<float>(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half(v);
}
template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_f32<__nv_fp8_e4m3>(float v) {
  return __nv_fp8_e4m3(v);
}
template <>
__device__ __forceinline__ __nv_fp8_e5m2 from_f32<__nv_fp8_e5m2>(float v) {
  return __nv_fp8_e5m2(v);
}

// A 16-bit or 8-bit float: converted through f32.
template <typename T>
struct is_narrow_float {
  static constexpr bool value = is_same<T, __nv_bfloat16>::value || is_same<T, __half>::value ||
                                is_same<T, __nv_fp8_e4m3>::value ||
                                is_same<T, __nv_fp8_e5m2>::value;
};

// One element type to another as a device function's arguments and results see them: a narrow
// float goes through f32 (rounded to nearest on the way in); f32, f64 and the integers convert
// directly (static_cast), so f64 data and large integers stay exact.
template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (is_same<To, From>::value) {
    return v;
  } else if constexpr (is_narrow_float<From>::value) {
    return convert<To>(to_f32(v));
  } else if constexpr (is_narrow_float<To>::value) {
    return from_f32<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// Eight consecutive elements, loaded or stored as one aligned block (16 bytes of a 16-bit type;
// an f32 run is two 16-byte vectors, an fp8 one 8 bytes): the elementwise tasks' vector access.
template <typename T>
struct alignas(8 * sizeof(T) < 16 ? 8 * sizeof(T) : 16) Run8 {
  T v[8];
};

template <typename T>
__device__ __forceinline__ bool run8_aligned(const T* p) {
  constexpr unsigned long long kAlign = alignof(Run8<T>);
  return (reinterpret_cast<unsigned long long>(p) & (kAlign - 1)) == 0;
}

template <typename T>
__device__ __forceinline__ Run8<T> load_run8(const T* p) {
  return *reinterpret_cast<const Run8<T>*>(p);
}

// The identity epilogue.
struct NoFn {
  __device__ __forceinline__ float operator()(float x) const { return x; }
};

// Two values as one 32-bit word of a 16-bit type (bf16x2 or half2), x in the low half.
template <typename TC>
__device__ __forceinline__ unsigned pack2(float x, float y) {
  unsigned u;
  if constexpr (is_same<TC, __nv_bfloat16>::value) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    u = *reinterpret_cast<const unsigned*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(x, y);
    u = *reinterpret_cast<const unsigned*>(&v);
  }
  return u;
}

}  // namespace mkc
