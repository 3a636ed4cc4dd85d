// The host JIT API (runtime/api.h): compile from a string, set and get tensors by name, launch;
// the caller's mistakes named (unknown tensor, wrong element count, rank out of range, a schedule
// with errors); the caller's device memory bound to tensors and launches on the caller's stream;
// without a GPU, a clear environment error.
#include "runtime/api.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/cuda_driver.h"
#include "support/error.h"
#include "tests/support/gpu.h"

namespace mkc {
namespace {

const char* kScale = R"(schedule scale {
  param N = 1000
  input  X : f32[N]
  output Y : f32[N]
  device twice(x: f32) -> f32 { return 2.0f * x + 1.0f; }
  compute y = map(twice, X -> Y)
}
)";

// Skipped, not passed, where a GPU is present: the GPU cases below cover that machine.
TEST_CASE("api: without a GPU, compiling for the machine is an environment error" *
          doctest::skip(testing::gpu_present())) {
  CHECK_THROWS_AS(Kernel::from_string("scale.mks", kScale), EnvironmentError);
}

GPU_TEST_CASE("api: set, launch, get by tensor name; mistakes are named") {
  Kernel k = Kernel::from_string("scale.mks", kScale, {.defines = {{"N", 4099}}, .ranks = 1});
  REQUIRE(k.ranks() == 1);
  CHECK(k.tensor("X").elements() == 4099);
  CHECK(k.tensor("X").input);
  CHECK(!k.tensor("Y").input);
  std::vector<double> x(4099);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1 * static_cast<double>(i)) * 100;
  k.set("X", 0, x);
  k.launch();
  const std::vector<double> y = k.get("Y", 0);
  REQUIRE(y.size() == x.size());
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = 2.0 * static_cast<float>(x[i]) + 1.0;
    bad += std::fabs(y[i] - want) > 1e-4 * std::fabs(want) + 1e-6;
  }
  CHECK(bad == 0);
  CHECK(k.time(10) > 0);

  CHECK_THROWS_WITH_AS(k.set("Z", 0, x), doctest::Contains("has no tensor `Z` (it has X, Y)"),
                       UserError);
  CHECK_THROWS_WITH_AS(k.set("X", 0, std::vector<double>(5)),
                       doctest::Contains("5 values for a f32[4099] tensor"), UserError);
  CHECK_THROWS_WITH_AS(k.get("Y", 1), doctest::Contains("rank 1 is not in [0, 1)"), UserError);
  CHECK_THROWS_WITH_AS(Kernel::from_string("bad.mks", "schedule s { input X : f33[4] }"),
                       doctest::Contains("bad.mks:1:"), UserError);
}

// Device memory of the caller's own, in a context, freed at the end of the scope.
class DeviceMemory {
 public:
  DeviceMemory(CUcontext ctx, size_t bytes) : ctx_(ctx) {
    const rt::Driver& d = rt::Driver::get();
    MKC_CU(d, cuCtxSetCurrent, ctx_);
    MKC_CU(d, cuMemAlloc, &ptr_, bytes);
  }
  ~DeviceMemory() {
    const rt::Driver& d = rt::Driver::get();
    d.cuCtxSetCurrent(ctx_);
    d.cuMemFree(ptr_);
  }
  CUdeviceptr ptr() const { return ptr_; }
  void* get(size_t offset = 0) const { return reinterpret_cast<void*>(ptr_ + offset); }

 private:
  CUcontext ctx_;
  CUdeviceptr ptr_ = 0;
};

std::vector<float> read_floats(CUcontext ctx, CUdeviceptr p, size_t n) {
  const rt::Driver& d = rt::Driver::get();
  std::vector<float> out(n);
  MKC_CU(d, cuCtxSetCurrent, ctx);
  MKC_CU(d, cuMemcpyDtoH, out.data(), p, n * 4);
  return out;
}

GPU_TEST_CASE("api: tensors bound to the caller's memory, launches on the caller's stream") {
  const int64_t n = 4099;
  Kernel k = Kernel::from_string("scale.mks", kScale, {.defines = {{"N", n}}, .ranks = 1});
  const rt::Driver& d = rt::Driver::get();
  const CUcontext ctx = k.job().context(0);
  DeviceMemory x(ctx, n * 4), y(ctx, n * 4 + 64), small(ctx, 64);
  std::vector<float> xs(n);
  for (int64_t i = 0; i < n; ++i) xs[i] = static_cast<float>(std::cos(0.37 * i) * 50.0);
  MKC_CU(d, cuCtxSetCurrent, ctx);
  MKC_CU(d, cuMemcpyHtoD, x.ptr(), xs.data(), n * 4);
  MKC_CU(d, cuMemsetD8, y.ptr(), 0xFF, n * 4 + 64);  // NaN where the kernel does not write
  k.bind("X", 0, x.get(), compiler::DType::kF32, {n});
  k.bind("Y", 0, y.get(), compiler::DType::kF32, {n});
  CHECK(k.data("X", 0) == x.get());
  CUstream stream{};
  MKC_CU(d, cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  auto count_bad = [&](const std::vector<float>& got) {
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += !(got[i] == 2.0f * xs[i] + 1.0f);
    return bad;
  };
  SUBCASE("launch_async on the caller's stream; results in the caller's memory") {
    k.launch_async({stream});
    k.synchronize();
    CHECK(count_bad(read_floats(ctx, y.ptr(), n)) == 0);
    const std::vector<double> via_get = k.get("Y", 0);  // get reads the bound memory too
    CHECK(via_get[17] == 2.0f * xs[17] + 1.0f);
    // Beyond the tensor, the caller's bytes are untouched.
    const std::vector<float> tail = read_floats(ctx, y.ptr() + n * 4, 16);
    CHECK(std::isnan(tail[0]));
    // Back to back without waiting, then once more after the caller changed X in place.
    for (int i = 0; i < 200; ++i) k.launch_async({stream});
    for (float& v : xs) v = -v;
    MKC_CU(d, cuCtxSetCurrent, ctx);
    MKC_CU(d, cuStreamSynchronize, stream);
    MKC_CU(d, cuMemcpyHtoD, x.ptr(), xs.data(), n * 4);
    k.launch_async({nullptr});  // the default stream
    k.synchronize();
    CHECK(count_bad(read_floats(ctx, y.ptr(), n)) == 0);
    CHECK(k.job().launches() == 202);
  }
  SUBCASE("unbind: back to the job's heap") {
    k.unbind("Y", 0);
    CHECK(k.data("Y", 0) != y.get());
    k.launch();
    const std::vector<double> got = k.get("Y", 0);
    CHECK(got[5] == 2.0f * xs[5] + 1.0f);
  }
  SUBCASE("the caller's mistakes are named") {
    CHECK_THROWS_WITH_AS(
        k.bind("X", 0, x.get(), compiler::DType::kBf16, {n}),
        doctest::Contains("the memory given holds bf16[4099], the schedule's `X` is f32[4099]"),
        UserError);
    CHECK_THROWS_WITH_AS(k.bind("X", 0, x.get(), compiler::DType::kF32, {n, 1}),
                         doctest::Contains("holds f32[4099, 1]"), UserError);
    CHECK_THROWS_WITH_AS(k.bind("X", 0, x.get(4), compiler::DType::kF32, {n}),
                         doctest::Contains("is not 16-byte aligned"), UserError);
    CHECK_THROWS_WITH_AS(k.bind("X", 0, small.get(), compiler::DType::kF32, {n}),
                         doctest::Contains("the allocation holds 64 bytes"), UserError);
    std::vector<float> host(n);
    CHECK_THROWS_WITH_AS(k.bind("X", 0, host.data(), compiler::DType::kF32, {n}),
                         doctest::Contains("is not device memory"), UserError);
    CHECK_THROWS_WITH_AS(k.bind("X", 1, x.get(), compiler::DType::kF32, {n}),
                         doctest::Contains("rank 1 is not in [0, 1)"), UserError);
    CHECK_THROWS_WITH_AS(k.launch_async({stream, stream}),
                         doctest::Contains("2 stream(s) for 1 local rank(s)"), UserError);
    // The failed binds left the good one in place.
    CHECK(k.data("X", 0) == x.get());
  }
  k.synchronize();
  MKC_CU(d, cuCtxSetCurrent, ctx);
  MKC_CU(d, cuStreamDestroy, stream);
}

// A launch captured in a CUDA graph is the next launch at every replay: the kernel numbers its
// launches on the GPU (abi::KernelArgs::launches), so a consumer's waits (b's tiles on a's) move
// on with each replay. 200 replays, each after fresh inputs were copied in on the stream, each
// result checked; the kernel's own count says every replay ran as a launch of its own.
GPU_TEST_CASE("api: a launch captured in a CUDA graph replays with fresh inputs") {
  const char* chain = R"(schedule chain {
  param N = 100000
  input  X : f32[N]
  scratch T : f32[N]
  output Y : f32[N]
  device twice(x: f32) -> f32 { return 2.0f * x + 1.0f; }
  compute a = map(twice, X -> T)
  compute b = map(twice, T -> Y) after a.tile
}
)";
  const int64_t n = 100000;
  Kernel k = Kernel::from_string("chain.mks", chain, {.ranks = 1});
  const rt::Driver& d = rt::Driver::get();
  const CUcontext ctx = k.job().context(0);
  DeviceMemory x(ctx, n * 4), y(ctx, n * 4);
  k.bind("X", 0, x.get(), compiler::DType::kF32, {n});
  k.bind("Y", 0, y.get(), compiler::DType::kF32, {n});
  MKC_CU(d, cuCtxSetCurrent, ctx);
  CUstream stream{};
  MKC_CU(d, cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  std::vector<float> xs(n);
  const auto fill = [&](int round) {
    for (int64_t i = 0; i < n; ++i)
      xs[i] = static_cast<float>(std::sin(0.001 * i + round) * 100.0 + round);
  };
  const auto count_bad = [&] {
    const std::vector<float> got = read_floats(ctx, y.ptr(), n);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += !(got[i] == 2.0f * (2.0f * xs[i] + 1.0f) + 1.0f);
    return bad;
  };
  // One launch before the capture (the first one loads the module and tables).
  fill(0);
  MKC_CU(d, cuMemcpyHtoD, x.ptr(), xs.data(), n * 4);
  k.launch_async({stream});
  k.synchronize();
  CHECK(count_bad() == 0);
  MKC_CU(d, cuCtxSetCurrent, ctx);
  MKC_CU(d, cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  k.launch_async({stream});
  CUgraph graph{};
  MKC_CU(d, cuStreamEndCapture, stream, &graph);
  CUgraphExec exec{};
  MKC_CU(d, cuGraphInstantiateWithFlags, &exec, graph, 0);
  int bad_rounds = 0;
  for (int round = 1; round <= 200; ++round) {
    fill(round);
    MKC_CU(d, cuCtxSetCurrent, ctx);
    MKC_CU(d, cuMemcpyHtoDAsync, x.ptr(), xs.data(), n * 4, stream);
    MKC_CU(d, cuMemsetD8Async, y.ptr(), 0xFF, n * 4, stream);  // NaN: every element rewritten
    MKC_CU(d, cuGraphLaunch, exec, stream);
    MKC_CU(d, cuStreamSynchronize, stream);
    const int bad = count_bad();
    if (bad != 0 && bad_rounds++ < 3) MESSAGE("replay ", round, ": ", bad, " wrong elements");
  }
  CHECK(bad_rounds == 0);
  CHECK(k.job().device_launches(0) == 201);  // the launch before the capture, then 200 replays
  MKC_CU(d, cuCtxSetCurrent, ctx);
  MKC_CU(d, cuGraphExecDestroy, exec);
  MKC_CU(d, cuGraphDestroy, graph);
  // Launches after the graph go on counting from there.
  fill(500);
  MKC_CU(d, cuMemcpyHtoD, x.ptr(), xs.data(), n * 4);
  k.launch_async({stream});
  k.synchronize();
  CHECK(count_bad() == 0);
  CHECK(k.job().device_launches(0) == 202);
  MKC_CU(d, cuCtxSetCurrent, ctx);
  MKC_CU(d, cuStreamDestroy, stream);
}

// Two ranks in this process, sharing the GPU if there is one: a symmetric tensor (peers read it)
// in the caller's memory on both ranks, all-reduced in place on the caller's streams.
GPU_TEST_CASE("api: a symmetric tensor in the caller's memory when every rank is in this process") {
  const int64_t n = 65536;
  Kernel k = Kernel::from_file(
      "samples/allreduce.mks",
      {.defines = {{"N", n}}, .ranks = 2, .share_gpus = true, .use_launcher = false});
  const rt::Driver& d = rt::Driver::get();
  std::vector<std::unique_ptr<DeviceMemory>> mem;
  std::vector<CUstream> streams;
  std::vector<std::vector<double>> xs(2, std::vector<double>(n));
  for (int r = 0; r < 2; ++r) {
    const CUcontext ctx = k.job().context(r);
    mem.push_back(std::make_unique<DeviceMemory>(ctx, n * 2));
    for (int64_t i = 0; i < n; ++i) xs[r][i] = std::sin(0.01 * i + r) * 4.0;
    k.set("X", r, xs[r]);  // through the heap, then copied into the caller's memory
    std::vector<uint16_t> bf(n);
    const std::vector<double> back = k.get("X", r);
    for (int64_t i = 0; i < n; ++i) bf[i] = rt::to_bf16(static_cast<float>(back[i]));
    MKC_CU(d, cuCtxSetCurrent, ctx);
    MKC_CU(d, cuMemcpyHtoD, mem[r]->ptr(), bf.data(), n * 2);
    k.bind("X", r, mem[r]->get(), compiler::DType::kBf16, {n});
    CUstream s{};
    MKC_CU(d, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
    streams.push_back(s);
  }
  k.launch_async(streams);
  k.synchronize();
  int bad = 0;
  for (int r = 0; r < 2; ++r) {
    std::vector<uint16_t> bf(n);
    MKC_CU(d, cuCtxSetCurrent, k.job().context(r));
    MKC_CU(d, cuMemcpyDtoH, bf.data(), mem[r]->ptr(), n * 2);
    for (int64_t i = 0; i < n; ++i) {
      const float want =
          static_cast<float>(rt::from_bf16(rt::to_bf16(static_cast<float>(xs[0][i]))) +
                             rt::from_bf16(rt::to_bf16(static_cast<float>(xs[1][i]))));
      bad += rt::from_bf16(bf[i]) != rt::from_bf16(rt::to_bf16(want));
    }
  }
  CHECK(bad == 0);
  for (int r = 0; r < 2; ++r) {
    MKC_CU(d, cuCtxSetCurrent, k.job().context(r));
    MKC_CU(d, cuStreamDestroy, streams[r]);
  }
}

// Kernel::tune: a GEMM without tile(...) measured on the GPU, the winner stored in the database
// and the kernel rebuilt with it; the rebuilt kernel still computes the product (against the
// inputs' fp64 product on a few entries); a schedule with nothing to tune returns 0 and keeps
// the kernel.
GPU_TEST_CASE("api: Kernel::tune measures, stores and rebuilds") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string db = std::string(tmp != nullptr ? tmp : "/tmp") + "/api_tune.json";
  std::remove(db.c_str());
  const char* gemm = R"(schedule g {
  param M = 128, N = 1024, K = 2048
  input  A : bf16[M, K]
  input  B : bf16[K, N]
  output C : f32[M, N]
  compute mm = gemm(A, B -> C)
}
)";
  Kernel k = Kernel::from_string("g.mks", gemm, {.ranks = 1, .tune_db = db});
  std::ostringstream progress;
  const double us = k.tune({.candidates = 2, .budget_s = 60, .iters = 3}, &progress);
  CHECK(us > 0);
  CHECK_MESSAGE(progress.str().find("the compiler's own choice") != std::string::npos,
                progress.str());
  std::ifstream in(db);
  std::stringstream stored;
  stored << in.rdbuf();
  CHECK(stored.str().find("\"mkc-tune-db\"") != std::string::npos);
  k.set_random_inputs(7);
  k.launch();
  const std::vector<double> a = k.get("A", 0), b = k.get("B", 0), c = k.get("C", 0);
  for (int64_t i : {0, 77, 127}) {
    for (int64_t j : {0, 500, 1023}) {
      double want = 0;
      for (int64_t x = 0; x < 2048; ++x) want += a[i * 2048 + x] * b[x * 1024 + j];
      CHECK(c[i * 1024 + j] == doctest::Approx(want).epsilon(1e-3).scale(1.0));
    }
  }
  Kernel scale = Kernel::from_string("scale.mks", kScale, {.ranks = 1, .tune_db = db});
  CHECK(scale.tune() == 0);
  CHECK(scale.tensor("X").elements() == 1000);
}

}  // namespace
}  // namespace mkc
