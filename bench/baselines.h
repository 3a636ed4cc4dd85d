// The baselines mkc's benchmarks run beside its kernels, in the same process, on the same data:
// cuBLAS (GEMM) and NCCL (collectives), both loaded with dlopen so that nothing in mkc links
// them. Header-only: each benchmark is one binary.
#pragma once

#include <cublas_api.h>
#include <cuda.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <glob.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/main.h"
#include "runtime/cuda_driver.h"
#include "runtime/local_job.h"
#include "support/error.h"

namespace mkc::bench {

// Row-major C[m, n] = A[m, k] x B[k, n].
struct GemmShape {
  int64_t m, n, k;
};

// cublasGemmEx as the library exports it (C++ sees an inline overload too, so no decltype).
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                  int, const void*, const void*, cudaDataType, int, const void*,
                                  cudaDataType, int, const void*, void*, cudaDataType, int,
                                  cublasComputeType_t, cublasGemmAlgo_t);

class Cublas {
 public:
  explicit Cublas(const std::string& hint) {
    std::vector<std::string> candidates;
    if (!hint.empty()) candidates.push_back(hint);
    candidates.push_back("libcublas.so.13");
    candidates.push_back("/usr/local/cuda/lib64/libcublas.so.13");
    glob_t g{};
    if (glob("/opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib/libcublas.so.13", 0,
             nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) candidates.push_back(g.gl_pathv[i]);
    }
    globfree(&g);
    for (const std::string& c : candidates) {
      lib_ = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib_ != nullptr) {
        path_ = c;
        break;
      }
    }
    if (lib_ == nullptr)
      throw mkc::EnvironmentError("cannot load libcublas.so.13 (the baseline); pass --cublas PATH");
    create_ = sym<decltype(&cublasCreate_v2)>("cublasCreate_v2");
    destroy_ = sym<decltype(&cublasDestroy_v2)>("cublasDestroy_v2");
    set_stream_ = sym<decltype(&cublasSetStream_v2)>("cublasSetStream_v2");
    gemm_ = sym<GemmEx>("cublasGemmEx");
    check(create_(&handle_), "cublasCreate");
  }
  ~Cublas() {
    if (handle_ != nullptr) destroy_(handle_);
  }
  const std::string& path() const { return path_; }

  // Row-major C[M, N] = A[M, K] x B[K, N], as cuBLAS's column-major C^T = B^T x A^T.
  void gemm(CUstream stream, const GemmShape& s, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c,
            cudaDataType c_type) {
    check(set_stream_(handle_, reinterpret_cast<cudaStream_t>(stream)), "cublasSetStream");
    const float one = 1.0f, zero = 0.0f;
    check(gemm_(handle_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(s.n), static_cast<int>(s.m),
                static_cast<int>(s.k), &one, reinterpret_cast<const void*>(b), CUDA_R_16BF,
                static_cast<int>(s.n), reinterpret_cast<const void*>(a), CUDA_R_16BF,
                static_cast<int>(s.k), &zero, reinterpret_cast<void*>(c), c_type,
                static_cast<int>(s.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  }

 private:
  template <typename F>
  F sym(const char* name) {
    void* p = dlsym(lib_, name);
    if (p == nullptr) throw mkc::EnvironmentError(fmt::format("{} has no {}", path_, name));
    return reinterpret_cast<F>(p);
  }
  static void check(cublasStatus_t st, const char* call) {
    if (st != CUBLAS_STATUS_SUCCESS)
      throw mkc::EnvironmentError(
          fmt::format("{} failed: cuBLAS status {}", call, static_cast<int>(st)));
  }
  void* lib_ = nullptr;
  std::string path_;
  cublasHandle_t handle_ = nullptr;
  decltype(&cublasCreate_v2) create_ = nullptr;
  decltype(&cublasDestroy_v2) destroy_ = nullptr;
  decltype(&cublasSetStream_v2) set_stream_ = nullptr;
  GemmEx gemm_ = nullptr;
};

// The NCCL entry points the bench calls, resolved from the library.
class Nccl {
 public:
  explicit Nccl(const std::string& hint) {
    const std::string path = hint.empty() ? "libnccl.so.2" : hint;
    lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      throw mkc::EnvironmentError(fmt::format(
          "cannot load NCCL ({}): {}; pass --nccl /path/to/libnccl.so.2", path, dlerror()));
    }
    get(init_all, "ncclCommInitAll");
    get(destroy, "ncclCommDestroy");
    get(all_reduce, "ncclAllReduce");
    get(group_start, "ncclGroupStart");
    get(group_end, "ncclGroupEnd");
    get(error_string, "ncclGetErrorString");
    get(version, "ncclGetVersion");
  }
  ~Nccl() { dlclose(lib_); }
  Nccl(const Nccl&) = delete;
  Nccl& operator=(const Nccl&) = delete;

  void check(ncclResult_t r, const char* call) const {
    if (r != ncclSuccess)
      throw mkc::EnvironmentError(
          fmt::format("{} failed: {} ({})", call, error_string(r), static_cast<int>(r)));
  }

  decltype(&ncclCommInitAll) init_all = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetVersion) version = nullptr;

 private:
  template <typename F>
  void get(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib_, name));
    if (f == nullptr) throw mkc::EnvironmentError(fmt::format("NCCL has no `{}`", name));
  }
  void* lib_ = nullptr;
};

// One CUDA graph per GPU, captured from one stream per GPU at once (a multi-GPU NCCL group needs
// every stream in capture), replayed together. The streams are the graph set's own.
class MultiGraph {
 public:
  explicit MultiGraph(std::vector<CUcontext> contexts) : ctx_(std::move(contexts)) {
    const rt::Driver& d = rt::Driver::get();
    streams_.resize(ctx_.size());
    for (size_t r = 0; r < ctx_.size(); ++r) {
      MKC_CU(d, cuCtxSetCurrent, ctx_[r]);
      MKC_CU(d, cuStreamCreate, &streams_[r], CU_STREAM_NON_BLOCKING);
    }
  }
  ~MultiGraph() {
    const rt::Driver& d = rt::Driver::get();
    for (size_t r = 0; r < ctx_.size(); ++r) {
      d.cuCtxSetCurrent(ctx_[r]);
      if (r < execs_.size() && execs_[r]) d.cuGraphExecDestroy(execs_[r]);
      d.cuStreamDestroy(streams_[r]);
    }
  }
  MultiGraph(const MultiGraph&) = delete;
  MultiGraph& operator=(const MultiGraph&) = delete;

  CUstream stream(int r) const { return streams_.at(r); }
  void make_current(int r) const { MKC_CU(rt::Driver::get(), cuCtxSetCurrent, ctx_.at(r)); }

  // Runs `enqueue` once eagerly (warm-up: libraries allocate their workspaces outside the
  // capture), then captures it from every stream into one graph per GPU.
  template <typename F>
  void capture(F enqueue) {
    const rt::Driver& d = rt::Driver::get();
    enqueue();
    sync();
    for (size_t r = 0; r < ctx_.size(); ++r) {
      make_current(static_cast<int>(r));
      MKC_CU(d, cuStreamBeginCapture, streams_[r], CU_STREAM_CAPTURE_MODE_RELAXED);
    }
    enqueue();
    execs_.assign(ctx_.size(), nullptr);
    for (size_t r = 0; r < ctx_.size(); ++r) {
      make_current(static_cast<int>(r));
      CUgraph g{};
      MKC_CU(d, cuStreamEndCapture, streams_[r], &g);
      MKC_CU(d, cuGraphInstantiateWithFlags, &execs_[r], g, 0);
      MKC_CU(d, cuGraphDestroy, g);
    }
  }

  // Mean wall-clock microseconds per replay of every GPU's graph, over enough replays to last
  // about 0.2 s (at least 5), after two warm-up replays.
  double replay_us() {
    replay(2);
    auto t0 = Clock::now();
    replay(1);
    const double one = us_since(t0);
    const int times = std::clamp(static_cast<int>(200'000.0 / std::max(one, 1.0)), 5, 500);
    t0 = Clock::now();
    replay(times);
    return us_since(t0) / times;
  }

  void sync() const {
    const rt::Driver& d = rt::Driver::get();
    for (size_t r = 0; r < ctx_.size(); ++r) {
      make_current(static_cast<int>(r));
      MKC_CU(d, cuStreamSynchronize, streams_[r]);
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double us_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  void replay(int times) {
    const rt::Driver& d = rt::Driver::get();
    for (int t = 0; t < times; ++t) {
      for (size_t r = 0; r < ctx_.size(); ++r) {
        make_current(static_cast<int>(r));
        MKC_CU(d, cuGraphLaunch, execs_[r], streams_[r]);
      }
    }
    sync();
  }
  std::vector<CUcontext> ctx_;
  std::vector<CUstream> streams_;
  std::vector<CUgraphExec> execs_;
};

// mkc's side: mean microseconds per launch of a job, launches back to back after a warm-up, over
// enough launches to last about 0.2 s (at least 10, at most `max_iters`).
inline double time_job(rt::LocalJob& job, int max_iters) {
  job.launch();
  const double first = job.time_launches(3);
  const int iters = std::clamp(static_cast<int>(200'000.0 / std::max(first, 1.0)), 10, max_iters);
  return job.time_launches(iters);
}

}  // namespace mkc::bench
