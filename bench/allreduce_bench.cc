// All-reduce benchmark: mkc's generated kernels against NCCL captured in a CUDA graph, in the same
// process, on the same GPUs (rank r on GPU r), on the same random bf16 data.
//
// For each size (bytes per rank):
//   mkc launch     bench/allreduce.mks (out of place, X -> Y) through the JIT API, one launch per
//                  all-reduce, back to back (kernel launch included): mean us per launch.
//   mkc in-kernel  the same all-reduce K times in one persistent launch (a chain: each waits for
//                  the previous one, in place), timed at K and at 1: (t_K - t_1) / (K - 1) is what
//                  one more all-reduce costs inside a running kernel (chunks of max(64 Ki
//                  elements, N / 128), where the launch version lets the compiler choose).
//   NCCL graph     ncclAllReduce (bf16, sum) on every GPU's stream, 20 per CUDA graph (captured
//                  from every stream, one group per all-reduce), replayed: mean us per all-reduce.
// Correctness: mkc's Y against the fp64 sum of the ranks' (bf16-rounded) inputs, and against
// NCCL's output on the same X (rel. L2; with 2 ranks both round one f32 sum, so they agree
// bitwise). Y is poisoned (NaN) before the checked launch. Prints a table with the ratios (NCCL
// time / mkc time: above 1, mkc is faster) and the bus bandwidth, 2 (R - 1) / R x bytes / time.
//
// NCCL is loaded with dlopen (libnccl.so.2, from --nccl, LD_LIBRARY_PATH or the system): mkc
// never links it. Set NCCL_NVLS_ENABLE=0 on the lent machines (the bench sets it if unset).
//
// Usage: allreduce_bench [--sizes 8K,64K,512K,4M,32M,256M] [--chain 16] [--ranks R] [--nccl PATH]
//                        [--schedule bench/allreduce.mks] [--csv FILE]
// --csv FILE: one row per size (bench/csv.h; bench/plot.py draws it; chain_us is empty at 1 rank).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/baselines.h"
#include "bench/csv.h"
#include "runtime/api.h"
#include "runtime/cuda_driver.h"
#include "runtime/local_job.h"
#include "runtime/verify.h"
#include "support/error.h"

namespace {

using mkc::EnvironmentError;
using mkc::UserError;
namespace rt = mkc::rt;

using mkc::bench::MultiGraph;
using mkc::bench::Nccl;
using mkc::bench::time_job;

int64_t parse_size(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit(end);
  const int64_t mul = unit.empty() ? 1 : unit == "K" ? 1024 : unit == "M" ? 1 << 20 : 0;
  if (end == s.c_str() || mul == 0 || v <= 0)
    throw UserError(fmt::format("--sizes: `{}` is not a size (e.g. 8K, 4M, 65536)", s));
  return static_cast<int64_t>(v * mul);
}

std::string size_text(int64_t b) {
  if (b % (1 << 20) == 0) return fmt::format("{} MB", b >> 20);
  if (b % 1024 == 0) return fmt::format("{} KB", b >> 10);
  return fmt::format("{} B", b);
}

// The chain: K in-place all-reduces, each chunk after the same chunk of the previous one, in chunks
// of C elements (at most 128 chunks per all-reduce, so the kernel's task table stays small).
std::string chain_schedule() {
  return R"(schedule allreduce_chain {
  ranks R
  param N = 4096, K = 16, C = 4096
  input X : bf16[N] symmetric
  loop i in 0 .. K {
    comm ar = allreduce(X, sum) chunk(C) after ar[i - 1].chunk
  }
}
)";
}

int64_t chain_chunk(int64_t n) {
  return std::max<int64_t>(std::min<int64_t>(n, 65536), n / 128);
}

struct Row {
  int64_t bytes = 0;
  double mkc_us = 0, chain_us = 0, nccl_us = 0, err_ref = 0, err_nccl = 0;
  std::string algo;
};

constexpr const char* kUsage =
    "usage: allreduce_bench [--sizes 8K,64K,512K,4M,32M,256M] [--chain 16] [--ranks R]\n"
    "                       [--nccl PATH] [--schedule bench/allreduce.mks] [--csv FILE]\n"
    "mkc's all-reduce (one launch each, and K in one persistent launch) against NCCL in a CUDA\n"
    "graph, same process, GPUs and data: each size checked against the fp64 sum, then timed;\n"
    "prints NCCL / mkc and the bus bandwidth. --csv: one row per size.\n";

int run(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  std::vector<int64_t> sizes = {8 << 10, 64 << 10, 512 << 10, 4 << 20, 32 << 20, 256 << 20};
  std::string schedule = "bench/allreduce.mks", nccl_path, csv_path;
  int chain = 16, ranks = 0;
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
    if (a == "--sizes") {
      sizes.clear();
      std::string list = value();
      size_t pos = 0;
      while (pos <= list.size()) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        sizes.push_back(parse_size(list.substr(pos, comma - pos)));
        pos = comma + 1;
      }
    } else if (a == "--chain") {
      chain = std::max(2, std::atoi(value().c_str()));
    } else if (a == "--ranks") {
      ranks = std::atoi(value().c_str());
    } else if (a == "--nccl") {
      nccl_path = value();
    } else if (a == "--schedule") {
      schedule = value();
    } else if (a == "--csv") {
      csv_path = value();
    } else {
      throw UserError(fmt::format("unknown argument `{}`; see --help", a));
    }
  }
  mkc::bench::CsvWriter csv(csv_path, {"bench", "case", "bytes", "ranks", "mkc_us", "nccl_us",
                                       "nccl_over_mkc", "chain_us", "mkc_busbw_gbs",
                                       "nccl_busbw_gbs", "rel_l2_ref", "rel_l2_nccl", "algorithm"});
  const rt::Driver& d = rt::Driver::get();
  const int gpus = rt::device_count();
  if (gpus == 0) throw EnvironmentError("no GPU: the CUDA driver sees no device");
  if (ranks == 0) ranks = gpus;
  Nccl nccl(nccl_path);
  int nccl_version = 0;
  nccl.check(nccl.version(&nccl_version), "ncclGetVersion");
  std::vector<ncclComm_t> comms(ranks);
  std::vector<int> devs(ranks);
  for (int r = 0; r < ranks; ++r) devs[r] = r;
  nccl.check(nccl.init_all(comms.data(), ranks, devs.data()), "ncclCommInitAll");
  const rt::DeviceInfo dev = rt::device_info(0);
  fmt::print(
      "all-reduce, bf16 sum, {} rank(s) on {} x {}; NCCL {} (CUDA graph of 20); mkc "
      "chain of {}\n",
      ranks, ranks, dev.name, nccl_version, chain);
  fflush(stdout);

  std::vector<Row> rows;
  std::mt19937_64 rng(2026);
  for (const int64_t bytes : sizes) {
    Row row;
    row.bytes = bytes;
    const int64_t n = bytes / 2;
    mkc::KernelOptions ko;
    ko.defines = {{"N", n}};
    ko.ranks = ranks;
    ko.use_launcher = false;
    mkc::Kernel k = mkc::Kernel::from_file(schedule, ko);
    for (const auto& dec : k.plan().decisions)
      row.algo += (row.algo.empty() ? "" : "; ") + dec.choice;
    rt::LocalJob& job = k.job();
    // Inputs, rounded to bf16 as uploaded; the fp64 sum is the reference.
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<double> sum(n, 0.0), x(n);
    for (int r = 0; r < ranks; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        x[i] = rt::from_bf16(rt::to_bf16(static_cast<float>(u(rng))));
        sum[i] += x[i];
      }
      k.set("X", r, x);
      job.poison(r, 1);
    }
    job.launch();
    double num = 0, den = 0;
    std::vector<std::vector<double>> y(ranks);
    for (int r = 0; r < ranks; ++r) {
      y[r] = k.get("Y", r);
      for (int64_t i = 0; i < n; ++i) {
        const double e = std::isnan(y[r][i]) ? 1e30 : y[r][i] - sum[i];
        num += e * e;
        den += sum[i] * sum[i];
      }
    }
    row.err_ref = std::sqrt(num / den);
    row.mkc_us = time_job(job, 2000);

    // NCCL on the same X, into its own output, on its own streams (one per GPU).
    std::vector<CUcontext> ctxs;
    for (int r = 0; r < ranks; ++r) ctxs.push_back(job.context(r));
    MultiGraph graphs(ctxs);
    std::vector<CUdeviceptr> out(ranks);
    for (int r = 0; r < ranks; ++r) {
      graphs.make_current(r);
      MKC_CU(d, cuMemAlloc, &out[r], static_cast<size_t>(bytes));
      MKC_CU(d, cuMemsetD8, out[r], 0xFF, static_cast<size_t>(bytes));
    }
    const int per_graph = 20;
    int calls = 0;
    graphs.capture([&]() {
      // Eagerly once (the warm-up, whose result is checked below), then captured 20 times.
      const int times = calls++ == 0 ? 1 : per_graph;
      for (int i = 0; i < times; ++i) {
        nccl.check(nccl.group_start(), "ncclGroupStart");
        for (int r = 0; r < ranks; ++r) {
          nccl.check(
              nccl.all_reduce(reinterpret_cast<const void*>(job.buffer_address(r, 0)),
                              reinterpret_cast<void*>(out[r]), static_cast<size_t>(n), ncclBfloat16,
                              ncclSum, comms[r], reinterpret_cast<cudaStream_t>(graphs.stream(r))),
              "ncclAllReduce");
        }
        nccl.check(nccl.group_end(), "ncclGroupEnd");
      }
    });
    // NCCL's result (from the eager run) against mkc's.
    double nn = 0, nd = 0;
    std::vector<uint16_t> h(n);
    for (int r = 0; r < ranks; ++r) {
      graphs.make_current(r);
      MKC_CU(d, cuMemcpyDtoH, h.data(), out[r], static_cast<size_t>(bytes));
      for (int64_t i = 0; i < n; ++i) {
        const double e = rt::from_bf16(h[i]) - y[r][i];
        nn += e * e;
        nd += y[r][i] * y[r][i];
      }
    }
    row.err_nccl = std::sqrt(nn / nd);
    row.nccl_us = graphs.replay_us() / per_graph;
    for (int r = 0; r < ranks; ++r) {
      graphs.make_current(r);
      MKC_CU(d, cuMemFree, out[r]);
    }

    // The chain: K all-reduces in one launch against one.
    double t_chain[2] = {0, 0};
    for (int c = 0; c < 2; ++c) {
      mkc::KernelOptions co = ko;
      co.defines["K"] = c == 0 ? 1 : chain;
      co.defines["C"] = chain_chunk(n);
      mkc::Kernel ck = mkc::Kernel::from_string("allreduce_chain.mks", chain_schedule(), co);
      if (bytes <= (4 << 20)) {  // the chain's result against the reference interpreter
        for (const rt::TensorCheck& t : rt::checked_launch(ck.job(), ck.plan(), {}, 5)) {
          if (!t.ok()) {
            fmt::print(stderr, "allreduce_bench: the chain of {} is wrong at {}: rank {} {}\n",
                       co.defines["K"], size_text(bytes), t.rank, t.rel_error);
            return 1;
          }
        }
      }
      for (int r = 0; r < ranks; ++r) {
        for (int64_t i = 0; i < n; ++i) x[i] = (i % 7 == 0) ? 1.0 : 0.0;  // stays exact
        ck.set("X", r, x);
      }
      t_chain[c] = time_job(ck.job(), 2000);
    }
    row.chain_us = (t_chain[1] - t_chain[0]) / (chain - 1);
    rows.push_back(row);
    const double bus = 2.0 * (ranks - 1) / ranks * static_cast<double>(bytes) / 1e3;  // MB*1e3
    // One rank moves nothing between GPUs: an extra all-reduce in the chain costs ~0 (noise).
    const std::string in_kernel = ranks == 1
                                      ? std::string("      n/a (1 rank)      ")
                                      : fmt::format("{:9.2f} us (NCCL/that {:5.2f})", row.chain_us,
                                                    row.nccl_us / row.chain_us);
    fmt::print(
        "  {:>7}: mkc launch {:9.2f} us | NCCL graph {:9.2f} us | NCCL/mkc {:5.2f} | mkc "
        "in-kernel {} | bus GB/s mkc {:6.1f} NCCL {:6.1f} | rel. L2 vs fp64 {:.1e}, vs NCCL "
        "{:.1e} | {}\n",
        size_text(bytes), row.mkc_us, row.nccl_us, row.nccl_us / row.mkc_us, in_kernel,
        bus / row.mkc_us, bus / row.nccl_us, row.err_ref, row.err_nccl, row.algo);
    fflush(stdout);
    const auto cell = [](double v) { return mkc::bench::num(v); };
    csv.row({{"bench", "allreduce_bench"},
             {"case", size_text(bytes)},
             {"bytes", std::to_string(bytes)},
             {"ranks", std::to_string(ranks)},
             {"mkc_us", cell(row.mkc_us)},
             {"nccl_us", cell(row.nccl_us)},
             {"nccl_over_mkc", cell(row.nccl_us / row.mkc_us)},
             {"chain_us", ranks == 1 ? std::string() : cell(row.chain_us)},
             {"mkc_busbw_gbs", cell(bus / row.mkc_us)},
             {"nccl_busbw_gbs", cell(bus / row.nccl_us)},
             {"rel_l2_ref", cell(row.err_ref)},
             {"rel_l2_nccl", cell(row.err_nccl)},
             {"algorithm", row.algo}});
    if (!(row.err_ref <= 1e-2)) {
      fmt::print(stderr, "allreduce_bench: mkc's result is wrong at {} (rel. L2 {:.2e})\n",
                 size_text(bytes), row.err_ref);
      return 1;
    }
  }
  for (ncclComm_t c : comms) nccl.destroy(c);
  csv.finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return mkc::bench::guarded_main("allreduce_bench", run, argc, argv);
}
