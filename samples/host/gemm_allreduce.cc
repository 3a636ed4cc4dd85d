// A host program on mkc's JIT API (runtime/api.h): GEMM + all-reduce on every local GPU.
//
// Each rank r holds A_r (M x K) and B_r (K x N); the fused kernel computes C = sum_r A_r x B_r on
// every rank, reducing each C tile as soon as it is done. The program fills the inputs, launches,
// checks C on every rank against an fp64 host computation, times back-to-back launches and writes
// a trace of one launch.
//
//   bazel build -c opt //samples/host:gemm_allreduce
//   bazel-bin/samples/host/gemm_allreduce [M N K] [--trace FILE]      (run from the repository
//   root)
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/api.h"
#include "support/error.h"

int main(int argc, char** argv) {
  int64_t M = 256, N = 1024, K = 512;
  std::string trace_path = "gemm_allreduce_trace.json";
  std::vector<int64_t> dims;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--trace" && i + 1 < argc) {
      trace_path = argv[++i];
    } else {
      dims.push_back(std::atoll(argv[i]));
    }
  }
  if (dims.size() == 3) M = dims[0], N = dims[1], K = dims[2];
  try {
    mkc::Kernel k = mkc::Kernel::from_file("samples/gemm_allreduce.mks",
                                           {.defines = {{"M", M}, {"N", N}, {"K", K}}});
    const int R = k.ranks();
    fmt::print("gemm_allreduce: M={} N={} K={} on {} rank(s); kernel {} ({} registers, {} tasks)\n",
               M, N, K, R, k.generated().kernel_name, k.binary().registers, k.plan().tasks.size());
    // Inputs, rounded to bf16 as the GPU will hold them, so the host reference sees the same.
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const auto bf16 = [](float x) {
      return static_cast<double>(mkc::rt::from_bf16(mkc::rt::to_bf16(x)));
    };
    std::vector<std::vector<double>> A(R), B(R);
    for (int r = 0; r < R; ++r) {
      A[r].resize(M * K);
      B[r].resize(K * N);
      for (double& x : A[r]) x = bf16(dist(rng));
      for (double& x : B[r]) x = bf16(dist(rng));
      k.set("A", r, A[r]);
      k.set("B", r, B[r]);
    }
    k.launch();
    // C = sum_r A_r B_r in fp64.
    std::vector<double> want(M * N, 0.0);
    for (int r = 0; r < R; ++r) {
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t kk = 0; kk < K; ++kk) {
          const double a = A[r][i * K + kk];
          const double* b = &B[r][kk * N];
          double* c = &want[i * N];
          for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
        }
      }
    }
    bool ok = true;
    for (int r = 0; r < R; ++r) {
      const std::vector<double> got = k.get("C", r);
      double num = 0, den = 0;
      for (size_t e = 0; e < got.size(); ++e) {
        num += (got[e] - want[e]) * (got[e] - want[e]);
        den += want[e] * want[e];
      }
      const double rel = std::sqrt(num / den);
      ok = ok && rel <= 1e-2;
      fmt::print("  rank {}: C rel. L2 error {:.2e} against fp64 ({})\n", r, rel,
                 rel <= 1e-2 ? "ok" : "FAILED");
    }
    const double us = k.time(20);
    fmt::print("  {:.1f} us per launch, {:.1f} TFLOP/s per GPU\n", us, 2.0 * M * N * K / us / 1e6);
    const int events = k.trace(trace_path);
    fmt::print("  trace of one launch: {} task events in {}\n", events, trace_path);
    return ok ? 0 : 1;
  } catch (const mkc::UserError& e) {
    fmt::print(stderr, "gemm_allreduce: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gemm_allreduce: {}\n", e.what());
    return 2;
  }
}
