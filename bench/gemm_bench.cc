// GEMM benchmark: the kernel mkc generates for samples/gemm.mks against cuBLAS, in the same
// process, on the same GPU, on the same random bf16 data.
//
// For each shape M x N x K: compile the schedule with -D M,N,K for one rank (the whole pipeline:
// check, plan, codegen, NVRTC), fill A and B with random values, poison C (0xFF: NaN), run once
// and compare C with cuBLAS computing the same product with an f32 output (rel. L2 error; every
// element must have been written), then time both in alternating rounds (CUDA events around
// back-to-back launches; mkc's launch overhead included) and print the medians and the ratio.
//
// cuBLAS is loaded with dlopen (libcublas.so.13, from --cublas, LD_LIBRARY_PATH, the toolkit or
// PyTorch's wheels): mkc never links it.
//
// Usage: gemm_bench [--schedule samples/gemm.mks] [--shapes 8192x8192x8192,...] [--iters 20]
//                   [--rounds 3] [--cublas PATH] [--no-check] [--csv FILE]
// --csv FILE: one row per shape (bench/csv.h; bench/plot.py draws it).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/baselines.h"
#include "bench/csv.h"
#include "compiler/pipeline.h"
#include "dsl/diagnostics.h"
#include "dsl/source.h"
#include "jit/jit.h"
#include "runtime/cuda_driver.h"
#include "runtime/local_job.h"
#include "support/error.h"

namespace {

using mkc::EnvironmentError;
using mkc::UserError;
namespace rt = mkc::rt;

using Shape = mkc::bench::GemmShape;
using mkc::bench::Cublas;

// Large shapes; skinny ones (decode and small batches: M 16-256 rows against a wide weight, where
// split-K applies); two that are multiples of no tile dimension.
const std::vector<Shape> kDefaultShapes = {
    {8192, 8192, 8192}, {4096, 8192, 7168}, {2048, 8192, 14336}, {16, 8192, 7168},
    {64, 8192, 7168},   {128, 8192, 7168},  {256, 8192, 7168},   {16, 8192, 14336},
    {64, 8192, 14336},  {128, 8192, 14336}, {256, 8192, 14336},  {3000, 5000, 4000},
    {1000, 3000, 520}};

// Makes rank 0's context current for a scope.
struct Current {
  Current(const rt::Driver& d, CUcontext c) { MKC_CU(d, cuCtxSetCurrent, c); }
};

std::vector<Shape> parse_shapes(const std::string& text) {
  std::vector<Shape> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    Shape s{};
    if (std::sscanf(text.substr(pos, end - pos).c_str(), "%ldx%ldx%ld", &s.m, &s.n, &s.k) != 3 ||
        s.m <= 0 || s.n <= 0 || s.k <= 0)
      throw UserError(fmt::format("--shapes: `{}` is not MxNxK", text.substr(pos, end - pos)));
    out.push_back(s);
    pos = end + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr const char* kUsage =
    "usage: gemm_bench [--schedule samples/gemm.mks] [--shapes 8192x8192x8192,...] [--iters 20]\n"
    "                  [--rounds 3] [--cublas PATH] [--no-check] [--csv FILE]\n"
    "mkc's kernel for a GEMM schedule against cuBLAS, same process, GPU and random bf16 data:\n"
    "each shape checked (rel. L2 against cuBLAS, C poisoned first), then both timed in\n"
    "alternating rounds; prints the medians and cuBLAS / mkc. --csv: one row per shape.\n";

int run(int argc, char** argv) {
  std::string schedule = "samples/gemm.mks", cublas_hint, csv_path;
  std::vector<Shape> shapes = kDefaultShapes;
  int iters = 20, rounds = 3;
  bool check = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UserError(fmt::format("{} needs a value", a));
      return argv[++i];
    };
    if (a == "--schedule") {
      schedule = value();
    } else if (a == "--shapes") {
      shapes = parse_shapes(value());
    } else if (a == "--iters") {
      iters = std::max(1, std::stoi(value()));
    } else if (a == "--rounds") {
      rounds = std::max(1, std::stoi(value()));
    } else if (a == "--cublas") {
      cublas_hint = value();
    } else if (a == "--no-check") {
      check = false;
    } else if (a == "--csv") {
      csv_path = value();
    } else {
      throw UserError(fmt::format("unknown option `{}`; see --help", a));
    }
  }
  mkc::bench::CsvWriter csv(
      csv_path, {"bench", "case", "m", "n", "k", "mkc_us", "mkc_tflops", "cublas_us",
                 "cublas_tflops", "cublas_over_mkc", "rel_l2", "registers", "spill_bytes"});
  const rt::Driver& d = rt::Driver::get();
  if (rt::device_count() == 0) throw EnvironmentError("no GPU");
  const rt::DeviceInfo dev = rt::device_info(0);
  const auto file = mkc::dsl::SourceFile::read(schedule);
  fmt::print("gemm_bench: {} on {} ({} SMs, {}), {} iterations x {} rounds per shape\n", schedule,
             dev.name, dev.sm_count, dev.arch(), iters, rounds);
  std::fflush(stdout);
  int failures = 0;
  std::unique_ptr<Cublas> cublas;
  fmt::print("{:>22} {:>10} {:>9} {:>10} {:>9} {:>8} {:>10}\n", "M x N x K", "mkc us", "TFLOP/s",
             "cuBLAS us", "TFLOP/s", "mkc/cuB", "rel. L2");
  for (const Shape& s : shapes) {
    mkc::compiler::CheckOptions opts;
    opts.ranks = {1};
    opts.defines = {{"M", s.m}, {"N", s.n}, {"K", s.k}};
    opts.sms = dev.sm_count;
    const auto c =
        mkc::compiler::compile_file(file, opts, fmt::format("M={} N={} K={}", s.m, s.n, s.k));
    if (!c->ok()) {
      fmt::print(stderr, "{}", mkc::dsl::render_text(c->diagnostics.all(), false));
      return 1;
    }
    const mkc::plan::Plan& p = c->plans[0];
    const mkc::codegen::Generated& g = c->kernels[0];
    mkc::jit::JitOptions jo;
    jo.arch = dev.arch();
    const mkc::jit::JitOutput j = mkc::jit::jit_compile(g.source, "gemm.cu", g.kernel_name, jo);
    rt::LocalJob job(p, j.cubin, g);
    Current cur(d, job.context(0));
    if (!cublas) {
      cublas = std::make_unique<Cublas>(cublas_hint);
      fmt::print(
          "  (cuBLAS from {}; mkc kernel: {} registers, {} B spilled, {} threads, {} B "
          "dynamic shared memory)\n",
          cublas->path(), j.registers, j.spill_bytes, g.threads, g.dynamic_smem);
    }
    int ia = -1, ib = -1, ic = -1;
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      if (p.buffers[b].name == "A") ia = static_cast<int>(b);
      if (p.buffers[b].name == "B") ib = static_cast<int>(b);
      if (p.buffers[b].name == "C") ic = static_cast<int>(b);
    }
    if (ia < 0 || ib < 0 || ic < 0) throw UserError(schedule + " needs tensors A, B and C");
    // Random bf16 A and B in [-1, 1).
    std::mt19937 rng(static_cast<unsigned>(s.m * 131 + s.n * 7 + s.k));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto [buf, count] : {std::pair{ia, s.m * s.k}, std::pair{ib, s.k * s.n}}) {
      std::vector<uint16_t> h(count);
      for (auto& x : h) x = rt::to_bf16(dist(rng));
      MKC_CU(d, cuMemcpyHtoD, job.buffer_address(0, buf), h.data(), h.size() * 2);
    }
    const CUdeviceptr A = job.buffer_address(0, ia), B = job.buffer_address(0, ib),
                      C = job.buffer_address(0, ic);
    const size_t mn = static_cast<size_t>(s.m * s.n);
    CUdeviceptr ref = 0, cub_out = 0;
    MKC_CU(d, cuMemAlloc, &cub_out, mn * 2);
    double rel = -1;
    if (check) {
      MKC_CU(d, cuMemAlloc, &ref, mn * 4);
      job.poison(0, ic);
      job.launch();
      cublas->gemm(job.stream(0), s, A, B, ref, CUDA_R_32F);
      MKC_CU(d, cuStreamSynchronize, job.stream(0));
      std::vector<uint16_t> got(mn);
      std::vector<float> want(mn);
      MKC_CU(d, cuMemcpyDtoH, got.data(), C, mn * 2);
      MKC_CU(d, cuMemcpyDtoH, want.data(), ref, mn * 4);
      double num = 0, den = 0;
      size_t unwritten = 0;
      for (size_t i = 0; i < mn; ++i) {
        const double x = rt::from_bf16(got[i]);
        if (std::isnan(x)) {
          ++unwritten;
          continue;
        }
        num += (x - want[i]) * (x - want[i]);
        den += static_cast<double>(want[i]) * want[i];
      }
      rel = std::sqrt(num / std::max(den, 1e-300));
      if (unwritten > 0 || !(rel <= 1e-2)) {
        ++failures;
        fmt::print("  {}x{}x{}: FAILED: rel. L2 error {:.2e}, {} elements unwritten\n", s.m, s.n,
                   s.k, rel, unwritten);
      }
      d.cuMemFree(ref);
    }
    // Warm up both, then alternate timed rounds.
    job.time_launches(2);
    CUevent e0{}, e1{};
    MKC_CU(d, cuEventCreate, &e0, CU_EVENT_DEFAULT);
    MKC_CU(d, cuEventCreate, &e1, CU_EVENT_DEFAULT);
    const auto time_cublas = [&](int n) {
      MKC_CU(d, cuEventRecord, e0, job.stream(0));
      for (int i = 0; i < n; ++i) cublas->gemm(job.stream(0), s, A, B, cub_out, CUDA_R_16BF);
      MKC_CU(d, cuEventRecord, e1, job.stream(0));
      MKC_CU(d, cuStreamSynchronize, job.stream(0));
      float ms = 0;
      MKC_CU(d, cuEventElapsedTime, &ms, e0, e1);
      return ms * 1000.0 / n;
    };
    time_cublas(2);
    std::vector<double> ours, theirs;
    for (int r = 0; r < rounds; ++r) {
      ours.push_back(job.time_launches(iters));
      theirs.push_back(time_cublas(iters));
    }
    d.cuEventDestroy(e0);
    d.cuEventDestroy(e1);
    d.cuMemFree(cub_out);
    const double us = median(ours), cus = median(theirs);
    const double flop = 2.0 * s.m * s.n * s.k;
    fmt::print("{:>22} {:>10.1f} {:>9.1f} {:>10.1f} {:>9.1f} {:>7.1f}% {:>10}\n",
               fmt::format("{}x{}x{}", s.m, s.n, s.k), us, flop / us / 1e6, cus, flop / cus / 1e6,
               100.0 * cus / us, rel < 0 ? std::string("-") : fmt::format("{:.2e}", rel));
    std::fflush(stdout);
    const auto cell = [](double v) { return mkc::bench::num(v); };
    csv.row({{"bench", "gemm_bench"},
             {"case", fmt::format("{}x{}x{}", s.m, s.n, s.k)},
             {"m", std::to_string(s.m)},
             {"n", std::to_string(s.n)},
             {"k", std::to_string(s.k)},
             {"mkc_us", cell(us)},
             {"mkc_tflops", cell(flop / us / 1e6)},
             {"cublas_us", cell(cus)},
             {"cublas_tflops", cell(flop / cus / 1e6)},
             {"cublas_over_mkc", cell(cus / us)},
             {"rel_l2", rel < 0 ? std::string() : cell(rel)},
             {"registers", std::to_string(j.registers)},
             {"spill_bytes", std::to_string(j.spill_bytes)}});
  }
  csv.finish();
  fmt::print("gemm_bench: {}\n",
             failures == 0 ? "all checks passed" : fmt::format("{} shape(s) FAILED", failures));
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return mkc::bench::guarded_main("gemm_bench", run, argc, argv);
}
