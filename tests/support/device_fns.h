// Device functions of every scalar parameter type, with values their evaluators must return: held
// by the GPU evaluator's test (tests/runtime/device_fn_eval_test.cc) and the CPU evaluator's
// (tests/compiler/clang_eval_test.cc), so that the two evaluators agree through the same host
// formulas and values.
#pragma once

namespace mkc::testing {

// swiglu(g, u) = g / (1 + exp(-g)) * u in f32; twice(x) = 2x + 1e-12 in f64 (kept exact);
// round_bf16 rounds to bf16 (1 + 2^-10 -> 1); floor_i(x, y) = 3x + y in i64 (5,000,000,021 at
// (7, 5e9)); half_sum adds in f16 (1000 + 0.25 -> 1000).
constexpr const char* kDeviceFns = R"(
schedule fns {
  param N = 64
  input  X : f32[N]
  input  Y : f32[N]
  output Z : f32[N]
  output W : bf16[N]
  device swiglu(g: f32, u: f32) -> f32 {
    return g / (1.0f + expf(-g)) * u;
  }
  device twice(x: f64) -> f64 { return 2.0 * x + 1e-12; }
  device round_bf16(x: bf16) -> f32 { return __bfloat162float(x); }
  device floor_i(x: i32, y: i64) -> i64 { return static_cast<long long>(x) * 3 + y; }
  device half_sum(a: f16, b: f16) -> f16 { return __hadd(a, b); }
  compute a = map(swiglu, X, Y -> Z) tile(64)
  compute b = map(round_bf16, Z -> W) tile(64) after a.tile
}
)";

}  // namespace mkc::testing
