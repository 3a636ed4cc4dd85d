// GEMM+AllReduce (a row-parallel linear layer: every rank multiplies its A[M, K] by its B[K, N] and
// the products are summed over the ranks) — mkc's one fused kernel for samples/gemm_allreduce.mks
// against cuBLAS then NCCL (one CUDA graph per GPU) and against cuBLAS's GEMM alone, in the same
// process, on the same random bf16 data, rank r on GPU r.
//
// For each M: compile the sample with -D M,N,K for the local GPUs through the JIT API, fill A and
// B, run once, compare every rank's C with the baseline's (cublasGemmEx into a bf16 C, then
// ncclAllReduce on it in place; rel. L2), then time mkc's launches back to back and replays of the
// baseline's graphs (20 layers per graph). Prints the times, baseline / mkc (above 1: mkc is
// faster) and mkc / GEMM alone (the target: within 10%, i.e. communication hidden).
//
// Usage: gemm_allreduce_bench [--m 128,1024,4096] [--n 8192] [--k 7168] [--ranks R]
//                             [--schedule samples/gemm_allreduce.mks] [--cublas PATH] [--nccl PATH]
//                             [--csv FILE]
// --csv FILE: one row per M (bench/csv.h; bench/plot.py draws it).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/baselines.h"
#include "bench/csv.h"
#include "runtime/api.h"
#include "runtime/cuda_driver.h"
#include "runtime/local_job.h"
#include "support/error.h"

namespace {

using mkc::EnvironmentError;
using mkc::UserError;
using mkc::bench::Cublas;
using mkc::bench::GemmShape;
using mkc::bench::MultiGraph;
using mkc::bench::Nccl;
namespace rt = mkc::rt;

std::vector<int64_t> parse_list(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0)
      throw UserError(fmt::format("{}: `{}` is not a positive integer", flag, item));
    out.push_back(v);
    pos = comma + 1;
  }
  return out;
}

int tensor_index(const mkc::Kernel& k, const std::string& name) {
  const std::vector<mkc::TensorInfo> ts = k.tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].name == name) return static_cast<int>(i);
  }
  throw UserError(fmt::format("the schedule has no tensor `{}`", name));
}

constexpr const char* kUsage =
    "usage: gemm_allreduce_bench [--m 128,1024,4096] [--n 8192] [--k 7168] [--ranks R]\n"
    "                            [--schedule samples/gemm_allreduce.mks] [--cublas PATH]\n"
    "                            [--nccl PATH] [--csv FILE]\n"
    "mkc's fused GEMM+AllReduce against cuBLAS then NCCL in a CUDA graph, and against the GEMM\n"
    "alone, same process and data, rank r on GPU r: each M checked, then timed; prints\n"
    "baseline / mkc and mkc / GEMM alone. --csv: one row per M.\n";

int run(int argc, char** argv) {
  std::vector<int64_t> ms = {128, 1024, 4096};
  int64_t n = 8192, kdim = 7168;
  int ranks = 0;
  std::string schedule = "samples/gemm_allreduce.mks", cublas_path, nccl_path, csv_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UserError(fmt::format("{} needs a value", a));
      return argv[++i];
    };
    if (a == "--m") {
      ms = parse_list("--m", value());
    } else if (a == "--n") {
      n = parse_list("--n", value()).at(0);
    } else if (a == "--k") {
      kdim = parse_list("--k", value()).at(0);
    } else if (a == "--ranks") {
      ranks = static_cast<int>(parse_list("--ranks", value()).at(0));
    } else if (a == "--schedule") {
      schedule = value();
    } else if (a == "--cublas") {
      cublas_path = value();
    } else if (a == "--nccl") {
      nccl_path = value();
    } else if (a == "--csv") {
      csv_path = value();
    } else {
      throw UserError(fmt::format("unknown option `{}`; see --help", a));
    }
  }
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  mkc::bench::CsvWriter csv(
      csv_path, {"bench", "case", "m", "n", "k", "ranks", "mkc_us", "baseline_us", "gemm_us",
                 "baseline_over_mkc", "mkc_over_gemm", "rel_l2", "ok"});
  const rt::Driver& d = rt::Driver::get();
  const int gpus = rt::device_count();
  if (gpus == 0) throw EnvironmentError("no GPU: the CUDA driver sees no device");
  if (ranks == 0) ranks = gpus;
  if (ranks > gpus) throw UserError(fmt::format("--ranks {}: {} GPU(s) here", ranks, gpus));
  Nccl nccl(nccl_path);
  std::vector<ncclComm_t> comms(ranks);
  std::vector<int> devs(ranks);
  for (int r = 0; r < ranks; ++r) devs[r] = r;
  nccl.check(nccl.init_all(comms.data(), ranks, devs.data()), "ncclCommInitAll");
  fmt::print(
      "GEMM+AllReduce, bf16, {} rank(s) on {}; N = {}, K = {}; baseline cuBLAS then NCCL in "
      "a CUDA graph\n",
      ranks, rt::device_info(0).name, n, kdim);
  fmt::print("{:>6} {:>11} {:>14} {:>12} {:>14} {:>13} {:>9}\n", "M", "mkc us", "cuBLAS+NCCL us",
             "cuBLAS us", "baseline/mkc", "mkc/GEMM", "rel. L2");
  std::fflush(stdout);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  int failures = 0;
  for (const int64_t m : ms) {
    mkc::KernelOptions ko;
    ko.defines = {{"M", m}, {"N", n}, {"K", kdim}};
    ko.ranks = ranks;
    ko.use_launcher = false;
    mkc::Kernel k = mkc::Kernel::from_file(schedule, ko);
    rt::LocalJob& job = k.job();
    const int ia = tensor_index(k, "A"), ib = tensor_index(k, "B"), ic = tensor_index(k, "C");
    for (int r = 0; r < ranks; ++r) {
      std::vector<double> a(m * kdim), b(kdim * n);
      for (double& v : a) v = u(rng);
      for (double& v : b) v = u(rng) / std::sqrt(static_cast<double>(kdim));
      k.set("A", r, a);
      k.set("B", r, b);
      job.poison(r, ic);
    }
    job.launch();
    std::vector<std::vector<double>> c_mkc(ranks);
    for (int r = 0; r < ranks; ++r) c_mkc[r] = k.get("C", r);
    const double mkc_us = mkc::bench::time_job(job, 1000);

    // The baseline on the same A and B: one cuBLAS handle per GPU, C in its own buffers.
    std::vector<CUcontext> ctxs;
    for (int r = 0; r < ranks; ++r) ctxs.push_back(job.context(r));
    const size_t c_bytes = static_cast<size_t>(m * n) * 2;
    std::vector<std::unique_ptr<Cublas>> blas(ranks);
    std::vector<CUdeviceptr> c_base(ranks);
    MultiGraph layer(ctxs), gemm_only(ctxs);
    for (int r = 0; r < ranks; ++r) {
      layer.make_current(r);
      blas[r] = std::make_unique<Cublas>(cublas_path);
      MKC_CU(d, cuMemAlloc, &c_base[r], c_bytes);
      MKC_CU(d, cuMemsetD8, c_base[r], 0xFF, c_bytes);
    }
    const GemmShape shape{m, n, kdim};
    auto gemms = [&](const MultiGraph& g) {
      for (int r = 0; r < ranks; ++r) {
        g.make_current(r);
        blas[r]->gemm(g.stream(r), shape, job.buffer_address(r, ia), job.buffer_address(r, ib),
                      c_base[r], CUDA_R_16BF);
      }
    };
    auto all_reduce = [&](const MultiGraph& g) {
      nccl.check(nccl.group_start(), "ncclGroupStart");
      for (int r = 0; r < ranks; ++r) {
        nccl.check(nccl.all_reduce(reinterpret_cast<const void*>(c_base[r]),
                                   reinterpret_cast<void*>(c_base[r]), static_cast<size_t>(m * n),
                                   ncclBfloat16, ncclSum, comms[r],
                                   reinterpret_cast<cudaStream_t>(g.stream(r))),
                   "ncclAllReduce");
      }
      nccl.check(nccl.group_end(), "ncclGroupEnd");
    };
    const int per_graph = 20;
    int calls = 0;
    layer.capture([&]() {
      const int times = calls++ == 0 ? 1 : per_graph;  // eager once (checked below), then 20
      for (int i = 0; i < times; ++i) {
        gemms(layer);
        all_reduce(layer);
      }
    });
    // Every rank's C against the baseline's (the eager run).
    double num = 0, den = 0;
    std::vector<uint16_t> h(static_cast<size_t>(m * n));
    for (int r = 0; r < ranks; ++r) {
      layer.make_current(r);
      MKC_CU(d, cuMemcpyDtoH, h.data(), c_base[r], c_bytes);
      for (size_t i = 0; i < h.size(); ++i) {
        const double want = rt::from_bf16(h[i]), got = c_mkc[r][i];
        const double e = std::isnan(got) ? 1e30 : got - want;
        num += e * e;
        den += want * want;
      }
    }
    const double rel = std::sqrt(num / den);
    const double base_us = layer.replay_us() / per_graph;
    gemm_only.capture([&]() {
      for (int i = 0; i < per_graph; ++i) gemms(gemm_only);
    });
    const double gemm_us = gemm_only.replay_us() / per_graph;
    for (int r = 0; r < ranks; ++r) {
      layer.make_current(r);
      MKC_CU(d, cuMemFree, c_base[r]);
    }
    const bool ok = rel <= 1e-2;
    failures += !ok;
    fmt::print("{:>6} {:>11.1f} {:>14.1f} {:>12.1f} {:>14.3f} {:>13.3f} {:>9.1e}{}\n", m, mkc_us,
               base_us, gemm_us, base_us / mkc_us, mkc_us / gemm_us, rel, ok ? "" : "  WRONG");
    std::fflush(stdout);
    const auto cell = [](double v) { return mkc::bench::num(v); };
    csv.row({{"bench", "gemm_allreduce_bench"},
             {"case", fmt::format("M={}", m)},
             {"m", std::to_string(m)},
             {"n", std::to_string(n)},
             {"k", std::to_string(kdim)},
             {"ranks", std::to_string(ranks)},
             {"mkc_us", cell(mkc_us)},
             {"baseline_us", cell(base_us)},
             {"gemm_us", cell(gemm_us)},
             {"baseline_over_mkc", cell(base_us / mkc_us)},
             {"mkc_over_gemm", cell(mkc_us / gemm_us)},
             {"rel_l2", cell(rel)},
             {"ok", ok ? "1" : "0"}});
  }
  for (ncclComm_t c : comms) nccl.destroy(c);
  csv.finish();
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return mkc::bench::guarded_main("gemm_allreduce_bench", run, argc, argv);
}
