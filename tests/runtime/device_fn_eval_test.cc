// The check's evaluator of device functions (runtime/device_fn_eval.h). On the CPU: its source,
// for functions of every scalar parameter type, compiles with NVRTC. On a GPU: each evaluator
// returns what the function computes (against host formulas on fresh random arguments), rounds
// its arguments to the parameter types, and handles an empty batch and a batch that is not a
// multiple of the block; and a checked launch of moe_ffn_combine, whose `swiglu` has no host
// version, matches the reference at 1, 2 and 4 ranks sharing the GPU, for uniform, skewed and
// empty-expert routing.
#include "runtime/device_fn_eval.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>

#include "compiler/pipeline.h"
#include "compiler/sema/check.h"
#include "dsl/parser.h"
#include "jit/jit.h"
#include "runtime/cuda_driver.h"
#include "runtime/local_job.h"
#include "runtime/verify.h"
#include "tests/support/device_fns.h"
#include "tests/support/gpu.h"

namespace mkc::rt {
namespace {

constexpr const char* kFunctions = testing::kDeviceFns;

compiler::CheckedSchedule checked(const char* text) {
  dsl::Diagnostics diags;
  auto file = std::make_shared<dsl::SourceFile>("fns.mks", text);
  const dsl::Module m = dsl::parse(file, diags);
  compiler::CheckOptions opts;
  std::vector<compiler::CheckedSchedule> s = compiler::check(m, opts, diags);
  REQUIRE_MESSAGE(!diags.has_errors(), dsl::render_text(diags.all(), false));
  REQUIRE(s.size() == 1);
  return s[0];
}

TEST_CASE("the evaluators' source compiles with NVRTC for every parameter type") {
  const compiler::CheckedSchedule s = checked(kFunctions);
  const std::string src = device_function_eval_source(s);
  for (const char* k : {"mkc_eval_swiglu", "mkc_eval_twice", "mkc_eval_round_bf16",
                        "mkc_eval_floor_i", "mkc_eval_half_sum"}) {
    CHECK(src.find(k) != std::string::npos);
  }
  jit::JitOptions jo;
  jo.use_cache = false;
  const jit::JitOutput out = jit::jit_compile(src, "fns_eval.cu", "mkc_eval_swiglu", jo);
  CHECK(!out.cubin.empty());
}

GPU_TEST_CASE("device functions evaluated on the GPU match their host formulas") {
  const compiler::CheckedSchedule s = checked(kFunctions);
  const Driver& d = Driver::get();
  CUdevice dev = 0;
  REQUIRE(d.cuDeviceGet(&dev, 0) == CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  REQUIRE(d.cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS);
  {
    const plan::BatchFns fns = gpu_device_functions(s, ctx);
    REQUIRE(fns.size() == 5);
    std::mt19937_64 rng(20261202);
    std::uniform_real_distribution<double> u(-6, 6);
    const size_t n = 100'003;  // not a multiple of the block
    std::vector<double> two(2 * n), one(n);
    for (double& v : two) v = u(rng);
    for (double& v : one) v = u(rng);

    const std::vector<double> sw = fns.at("swiglu")(two, n);
    REQUIRE(sw.size() == n);
    double worst = 0;
    for (size_t e = 0; e < n; ++e) {
      const double g = static_cast<float>(two[2 * e]), up = static_cast<float>(two[2 * e + 1]);
      const double want = g / (1 + std::exp(-g)) * up;
      worst = std::max(worst, std::abs(sw[e] - want) / (1 + std::abs(want)));
    }
    CHECK(worst < 1e-5);

    const std::vector<double> tw = fns.at("twice")(one, n);
    for (size_t e = 0; e < n; e += 997) CHECK(tw[e] == 2.0 * one[e] + 1e-12);  // f64 kept

    // bf16 rounding: 1 + 2^-10 is not a bf16 (8 bits of mantissa) and rounds to 1.
    const std::vector<double> rb = fns.at("round_bf16")({1.0 + 1.0 / 1024, 3.0, -0.5}, 3);
    CHECK(rb == std::vector<double>{1.0, 3.0, -0.5});

    const std::vector<double> fi = fns.at("floor_i")({7, 5'000'000'000.0, -2, 1}, 2);
    CHECK(fi == std::vector<double>{5'000'000'021.0, -5.0});

    const std::vector<double> hs = fns.at("half_sum")({1.5, 2.25, 1000, 0.25}, 2);
    CHECK(hs == std::vector<double>{3.75, 1000.0});  // 1000.25 is not an f16 near 1000

    CHECK(fns.at("swiglu")({}, 0).empty());
  }
  d.cuDevicePrimaryCtxRelease(dev);
}

// A schedule compiled for `ranks` ranks sharing GPU 0 and JIT-compiled for it.
struct Built {
  std::unique_ptr<compiler::Compilation> c;
  jit::JitOutput jit;
};
Built build(std::shared_ptr<const dsl::SourceFile> file, int ranks,
            std::map<std::string, int64_t> defines) {
  const DeviceInfo dev = device_info(0);
  compiler::CheckOptions opts;
  opts.ranks = {ranks};
  opts.defines = std::move(defines);
  opts.sms = dev.sm_count / ranks;
  Built b;
  b.c = compiler::compile_file(file, opts);
  REQUIRE_MESSAGE(b.c->ok(), dsl::render_text(b.c->diagnostics.all(), false));
  jit::JitOptions jo;
  jo.arch = dev.arch();
  b.jit = jit::jit_compile(b.c->kernels[0].source, b.c->plans[0].schedule + ".cu",
                           b.c->kernels[0].kernel_name, jo);
  return b;
}

GPU_TEST_CASE(
    "moe_ffn_combine checked with its swiglu on the GPU: 1, 2 and 4 ranks, every routing") {
  auto file = dsl::SourceFile::read("samples/moe_ffn_combine.mks");
  for (int ranks : {1, 2, 4}) {
    Built b = build(file, ranks, {{"T", 40}, {"H", 256}, {"F", 136}, {"E", 16}, {"TOPK", 3}});
    const plan::Plan& p = b.c->plans[0];
    LocalJobOptions lo;
    lo.file = file;
    lo.share_gpus = true;
    LocalJob job(p, b.jit.cubin, b.c->kernels[0], lo);
    const std::pair<plan::Routing, const char*> routings[] = {
        {plan::Routing::kUniform, "uniform"},
        {plan::Routing::kSkewed, "skewed"},
        {plan::Routing::kEmptyExperts, "empty experts"}};
    for (const auto& [routing, what] : routings) {
      const uint64_t seed =
          300 + static_cast<uint64_t>(ranks) * 10 + static_cast<uint64_t>(routing);
      for (const TensorCheck& t :
           checked_launch(job, p, {}, plan::random_inputs(p, seed, routing))) {
        INFO(fmt::format("{} ranks, {} routing, rank {} tensor {}", ranks, what, t.rank, t.tensor));
        CHECK(t.unwritten == 0);
        CHECK(t.rel_error <= t.tolerance);
        if (t.tensor == "Y")
          MESSAGE(fmt::format("moe_ffn_combine {} ranks {} rank {} Y: rel. L2 {:.2e}", ranks, what,
                              t.rank, t.rel_error));
      }
    }
  }
}

// map (templates/mkc/map.cuh) takes 8 elements a thread where the operands are aligned at a
// tile's start, one otherwise. Rows of 2,048, 136, 77 and 130 elements in tiles of 5, 3 and 16
// rows: aligned and unaligned tile starts, whole runs and element tails; bf16 and f32 inputs into
// bf16 and f32 outputs; one output rewritten in place; f64 kept exact (tolerance 0); functions
// named like the generated code's own names (p0, out) are still called.
GPU_TEST_CASE("map: aligned runs and the element-wise tail, mixed types, in place") {
  constexpr const char* kMap = R"(
schedule maps {
  param M = 300, N = 2048
  input  X : bf16[M, N]
  input  Y : f32[M, N]
  input  D : f64[M, N]
  output Z : bf16[M, N]
  output W : f32[M, N]
  output E : f64[M, N]
  device mix(a: f32, b: f32) -> f32 { return a * 0.5f - b / (1.0f + fabsf(a)); }
  device p0(a: bf16) -> f32 { return __bfloat162float(a) + 1.0f; }
  device out(x: f64) -> f64 { return x * 3.0 + 1e-9; }
  compute one = map(mix, X, Y -> W) tile(5, N)
  compute two = map(p0, X -> Z) tile(3, N)
  compute three = map(mix, W, W -> W) tile(16, N) after one
  compute four = map(out, D -> E) tile(7, N)
}
)";
  auto file = std::make_shared<dsl::SourceFile>("maps.mks", kMap);
  for (int64_t n : {2048, 136, 77, 130}) {
    Built b = build(file, 1, {{"N", n}});
    CHECK_MESSAGE(b.jit.spill_bytes == 0, jit::resources_text(b.jit));
    LocalJobOptions lo;
    lo.file = file;
    LocalJob job(b.c->plans[0], b.jit.cubin, b.c->kernels[0], lo);
    for (int launch = 0; launch < 2; ++launch) {
      for (const TensorCheck& t : checked_launch(job, b.c->plans[0], {}, 500 + n + launch)) {
        INFO(fmt::format("N {} launch {} tensor {}", n, launch, t.tensor));
        CHECK(t.unwritten == 0);
        CHECK(t.rel_error <= t.tolerance);
      }
    }
  }
}

}  // namespace
}  // namespace mkc::rt
