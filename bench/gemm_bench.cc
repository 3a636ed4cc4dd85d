// GEMM benchmark: the kernel mkc generates for samples/gemm.mks against cuBLAS, in the same
// process, on the same GPU, on the same random bf16 data.
//
// For each shape M x N x K: compile the schedule with -D M,N,K for one rank (the whole pipeline:
// check, plan, codegen, NVRTC) with the compiler's own choice of tile and split ("auto": its rule,
// no tuning database), fill A and B with random values, poison C (0xFF: NaN), run once and compare
// C with cuBLAS computing the same product with an f32 output (rel. L2 error; every element must
// have been written), then time both in alternating rounds (CUDA events around back-to-back
// launches; mkc's launch overhead included) and print the medians and the ratio.
//
// With --tune N, each shape is also tuned in this process (runtime/tune_run.h, what `mkc tune`
// does: the rule's choice and the cost model's best N candidates measured, the fastest kept; no
// database written), the winner is compiled, checked the same way and timed in the same rounds.
// --sweep runs issue 36's GEMM cases (M in {1, 16, 128, 512, 4096, 16384} x (N, K) in {(1280,
// 8192), (8192, 1024), (3584, 8192), (8192, 3584), (7168, 2048)}, then 8192^3, 3000 x 5000 x 4000
// and 1000 x 3000 x 520). At the end: the minimum and the geometric mean of cuBLAS / mkc for auto
// (and tuned). --picks measures given tiles and splits of the schedule's GEMM `mm` too, each with
// the cost model's time for it (the points its constants are fitted to).
//
// cuBLAS is loaded with dlopen (libcublas.so.13, from --cublas, LD_LIBRARY_PATH, the toolkit or
// PyTorch's wheels): mkc never links it.
//
// Usage: gemm_bench [--schedule samples/gemm.mks] [--shapes 8192x8192x8192,... | --sweep]
//                   [--tune N] [--iters 20] [--rounds 3] [--cublas PATH] [--no-check]
//                   [--picks BMxBN[/S|c2],...] [--csv FILE] [--list]
// --csv FILE: one row per shape (bench/csv.h; bench/plot.py draws it). --list: print the shapes
// and exit (no GPU needed).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <sstream>
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
#include "runtime/tune_run.h"
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

// Issue 36's GEMM sweep: decode to prefill rows against five weight shapes of current models,
// then one large cube and two shapes that are multiples of no tile dimension.
std::vector<Shape> sweep_shapes() {
  std::vector<Shape> out;
  const std::pair<int64_t, int64_t> nk[] = {
      {1280, 8192}, {8192, 1024}, {3584, 8192}, {8192, 3584}, {7168, 2048}};
  for (int64_t m : {1, 16, 128, 512, 4096, 16384}) {
    for (const auto& [n, k] : nk) out.push_back({m, n, k});
  }
  out.push_back({8192, 8192, 8192});
  out.push_back({3000, 5000, 4000});
  out.push_back({1000, 3000, 520});
  return out;
}

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

// --picks: "BMxBN[/S|c2],..." (a tile of BM x BN x 64, split-K S, default 1, or in 2-CTA
// clusters), each measured beside the compiler's own choice (the A/B points a cost-model fit
// needs).
struct Pick {
  int64_t bm = 0, bn = 0, split = 1, cluster = 1;
};
std::vector<Pick> parse_picks(const std::string& text) {
  std::vector<Pick> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    Pick p;
    char extra = 0;
    std::string body = item;
    if (body.size() > 2 && body.compare(body.size() - 2, 2, "c2") == 0) {
      p.cluster = 2;
      body.resize(body.size() - 2);
    }
    // The whole item: BMxBN, then /S or nothing (a trailing character is an error).
    int used = -1;
    int got = std::sscanf(body.c_str(), "%ldx%ld%n", &p.bm, &p.bn, &used);
    if (got == 2 && used >= 0 && static_cast<size_t>(used) < body.size()) {
      got =
          body[used] == '/' ? 2 + std::sscanf(body.c_str() + used, "/%ld%c", &p.split, &extra) : 0;
    }
    if (got < 2 || got > 3 || (p.bm != 64 && p.bm != 128) ||
        (p.bn != 64 && p.bn != 128 && p.bn != 256) || p.split < 1 || p.split > 16 ||
        (p.cluster > 1 && got > 2))
      throw UserError(
          fmt::format("--picks: `{}` is not BMxBN[/S|c2] (BM 64 or 128, BN 64, 128 or 256, S 1 "
                      "to 16; c2: in 2-CTA clusters, unsplit)",
                      item));
    out.push_back(p);
    pos = end + 1;
  }
  return out;
}

// The model's time the plan's decision records for its tile ("model: 12 us"), or -1.
double model_us_of(const mkc::plan::Plan& p) {
  for (const mkc::plan::Decision& d : p.decisions) {
    if (d.choice.rfind("tile(", 0) != 0) continue;
    const size_t at = d.reason.find("model: ");
    if (at != std::string::npos) return std::atof(d.reason.c_str() + at + 7);
  }
  return -1;
}

int parse_int(const std::string& flag, const std::string& text, int lo) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || v < lo)
    throw UserError(fmt::format("{}: `{}` is not an integer >= {}", flag, text, lo));
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One compiled kernel of the schedule for a shape: auto (the compiler's rule) or tuned (knobs).
struct Variant {
  std::string name;
  std::string pick;  // the tile and split the plan records
  std::unique_ptr<mkc::compiler::Compilation> compiled;
  mkc::jit::JitOutput jit;
  std::unique_ptr<rt::LocalJob> job;
  int ia = -1, ib = -1, ic = -1;
  double rel = -1;
  std::vector<double> times;
};

// What the plan says it chose for the GEMM: "tile(128, 256, 64)", with " split-K S" when split.
std::string pick_of(const mkc::plan::Plan& p) {
  for (const mkc::plan::Decision& d : p.decisions) {
    if (d.choice.rfind("tile(", 0) != 0) continue;
    const size_t at = d.reason.find("split-K: ");
    if (d.reason.find("2-CTA clusters sharing") != std::string::npos)
      return d.choice + " cluster 2";
    if (at == std::string::npos) return d.choice;
    return fmt::format("{} split-K {}", d.choice, std::atoi(d.reason.c_str() + at + 9));
  }
  return "?";
}

std::unique_ptr<Variant> build(const std::string& name,
                               const std::shared_ptr<const mkc::dsl::SourceFile>& file,
                               const mkc::compiler::CheckOptions& opts, const std::string& defines,
                               const mkc::tune::Knobs* knobs, const std::string& arch) {
  auto v = std::make_unique<Variant>();
  v->name = name;
  mkc::compiler::TunedFor hook = nullptr;
  if (knobs != nullptr) hook = [knobs](const mkc::compiler::CheckedSchedule&) { return *knobs; };
  v->compiled = mkc::compiler::compile_file(file, opts, defines, true, hook);
  if (!v->compiled->ok())
    throw UserError(mkc::dsl::render_text(v->compiled->diagnostics.all(), false));
  const mkc::plan::Plan& p = v->compiled->plans[0];
  const mkc::codegen::Generated& g = v->compiled->kernels[0];
  mkc::jit::JitOptions jo;
  jo.arch = arch;
  v->jit = mkc::jit::jit_compile(g.source, "gemm.cu", g.kernel_name, jo);
  v->job = std::make_unique<rt::LocalJob>(p, v->jit.cubin, g);
  v->pick = pick_of(p);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (p.buffers[b].name == "A") v->ia = static_cast<int>(b);
    if (p.buffers[b].name == "B") v->ib = static_cast<int>(b);
    if (p.buffers[b].name == "C") v->ic = static_cast<int>(b);
  }
  if (v->ia < 0 || v->ib < 0 || v->ic < 0)
    throw UserError(file->path() + " needs tensors A, B and C");
  return v;
}

// The rel. L2 error of the variant's C (poisoned, launched once) against cuBLAS's f32 product at
// `ref`; -1 and a FAILED line when an element was left unwritten or the error is over 1e-2.
double check_variant(const rt::Driver& d, Variant& v, const Shape& s, CUdeviceptr ref,
                     int* failures) {
  const size_t mn = static_cast<size_t>(s.m * s.n);
  v.job->poison(0, v.ic);
  v.job->launch();
  MKC_CU(d, cuStreamSynchronize, v.job->stream(0));
  std::vector<uint16_t> got(mn);
  std::vector<float> want(mn);
  MKC_CU(d, cuMemcpyDtoH, got.data(), v.job->buffer_address(0, v.ic), mn * 2);
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
  const double rel = std::sqrt(num / std::max(den, 1e-300));
  if (unwritten > 0 || !(rel <= 1e-2)) {
    ++*failures;
    fmt::print("  {}x{}x{} {} ({}): FAILED: rel. L2 error {:.2e}, {} elements unwritten\n", s.m,
               s.n, s.k, v.name, v.pick, rel, unwritten);
  }
  return rel;
}

struct Summary {
  double min = 1e300, log_sum = 0;
  int n = 0;
  void add(double ratio) {
    min = std::min(min, ratio);
    log_sum += std::log(ratio);
    ++n;
  }
  std::string text() const {
    return n == 0 ? "-"
                  : fmt::format("min {:.3f}, geometric mean {:.3f} over {} shapes", min,
                                std::exp(log_sum / n), n);
  }
};

constexpr const char* kUsage =
    "usage: gemm_bench [--schedule samples/gemm.mks] [--shapes 8192x8192x8192,... | --sweep]\n"
    "                  [--tune N] [--iters 20] [--rounds 3] [--cublas PATH] [--no-check]\n"
    "                  [--picks BMxBN[/S|c2],...] [--csv FILE] [--list]\n"
    "mkc's kernel for a GEMM schedule against cuBLAS, same process, GPU and random bf16 data:\n"
    "each shape checked (rel. L2 against cuBLAS, C poisoned first), then timed in alternating\n"
    "rounds; prints the medians and cuBLAS / mkc (above 1: mkc is faster).\n"
    "  --sweep      issue 36's 33 GEMM shapes (decode to prefill against five weights, 8192^3,\n"
    "               3000x5000x4000, 1000x3000x520) instead of the default 13\n"
    "  --tune N     also tune each shape here (the rule's choice and the cost model's best N\n"
    "               candidates measured, as `mkc tune` does; no database written) and time the\n"
    "               winner beside the compiler's own choice\n"
    "  --picks L    also measure these tiles and splits of the GEMM `mm` for every shape\n"
    "               (BMxBN[/S|c2]: tile BM x BN x 64, split-K S or 2-CTA clusters; the plan's\n"
    "               pick is printed), a\n"
    "               line each with the cost model's time beside\n"
    "  --list       print the shapes and exit (no GPU needed)\n"
    "  --csv FILE   one row per shape\n";

int run(int argc, char** argv) {
  std::string schedule = "samples/gemm.mks", cublas_hint, csv_path;
  std::vector<Shape> shapes = kDefaultShapes;
  std::vector<Pick> picks;
  int iters = 20, rounds = 3, tune = 0;
  bool check = true, list = false, given_shapes = false, sweep = false;
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
      given_shapes = true;
    } else if (a == "--sweep") {
      shapes = sweep_shapes();
      sweep = true;
    } else if (a == "--tune") {
      tune = parse_int(a, value(), 0);
    } else if (a == "--iters") {
      iters = parse_int(a, value(), 1);
    } else if (a == "--rounds") {
      rounds = parse_int(a, value(), 1);
    } else if (a == "--cublas") {
      cublas_hint = value();
    } else if (a == "--no-check") {
      check = false;
    } else if (a == "--csv") {
      csv_path = value();
    } else if (a == "--picks") {
      picks = parse_picks(value());
    } else if (a == "--list") {
      list = true;
    } else {
      throw UserError(fmt::format("unknown option `{}`; see --help", a));
    }
  }
  if (sweep && given_shapes) throw UserError("--sweep and --shapes: give one of them");
  if (list) {
    for (const Shape& s : shapes) fmt::print("{}x{}x{}\n", s.m, s.n, s.k);
    return 0;
  }
  mkc::bench::CsvWriter csv(
      csv_path, {"bench", "case", "m", "n", "k", "mkc_us", "mkc_tflops", "cublas_us",
                 "cublas_tflops", "cublas_over_mkc", "rel_l2", "registers", "spill_bytes",
                 "auto_pick", "tuned_pick", "tuned_us", "cublas_over_tuned", "tuned_rel_l2"});
  const rt::Driver& d = rt::Driver::get();
  if (rt::device_count() == 0) throw EnvironmentError("no GPU");
  const rt::DeviceInfo dev = rt::device_info(0);
  const auto file = mkc::dsl::SourceFile::read(schedule);
  fmt::print("gemm_bench: {} on {} ({} SMs, {}), {} iterations x {} rounds per shape{}\n", schedule,
             dev.name, dev.sm_count, dev.arch(), iters, rounds,
             tune > 0 ? fmt::format(", tuned over the model's best {}", tune) : "");
  std::fflush(stdout);
  int failures = 0;
  std::unique_ptr<Cublas> cublas;
  Summary auto_sum, tuned_sum;
  fmt::print("{:>20} {:>9} {:>9} {:>6} {:>9} {:>9} {:>30}{}\n", "M x N x K", "cuBLAS us", "auto us",
             "ratio", "TFLOP/s", "rel. L2", "auto pick",
             tune > 0 ? fmt::format(" {:>9} {:>6} {:>30}", "tuned us", "ratio", "tuned pick") : "");
  for (const Shape& s : shapes) {
    mkc::compiler::CheckOptions opts;
    opts.ranks = {1};
    opts.defines = {{"M", s.m}, {"N", s.n}, {"K", s.k}};
    opts.sms = dev.sm_count;
    const std::string defines = fmt::format("M={} N={} K={}", s.m, s.n, s.k);
    std::vector<std::unique_ptr<Variant>> variants;
    variants.push_back(build("auto", file, opts, defines, nullptr, dev.arch()));
    if (tune > 0) {
      rt::TuneRunOptions to;
      to.check = opts;
      to.defines_text = defines;
      to.arch = dev.arch();
      to.iters = iters;
      to.search.candidates = tune;
      std::ostringstream progress;
      const std::optional<rt::Tuned> found = rt::tune_schedule(file, 0, to, progress);
      // What each candidate measured (the model's predictions beside), for the record.
      fmt::print("  {}x{}x{} tuning:\n{}", s.m, s.n, s.k, progress.str());
      mkc::tune::Knobs knobs;
      if (found) {
        for (const auto& [op, k] : found->entry.ops)
          knobs[op] = mkc::plan::LowerOptions::Tuned{k.tile, k.split_k, k.cluster};
      }
      // The rule's choice won (no knobs): the tuned kernel is that one, built again so that both
      // are timed the same way.
      variants.push_back(build("tuned", file, opts, defines, &knobs, dev.arch()));
    }
    const size_t first_pick = variants.size();
    for (const Pick& pk : picks) {
      mkc::tune::Knobs knobs;
      knobs["mm"] = mkc::plan::LowerOptions::Tuned{{pk.bm, pk.bn, 64}, pk.split, pk.cluster};
      variants.push_back(build("pick", file, opts, defines, &knobs, dev.arch()));
    }
    Variant& base = *variants[0];
    Current cur(d, base.job->context(0));
    if (!cublas) {
      cublas = std::make_unique<Cublas>(cublas_hint);
      fmt::print(
          "  (cuBLAS from {}; mkc kernel: {} registers, {} B spilled, {} threads, {} B "
          "dynamic shared memory)\n",
          cublas->path(), base.jit.registers, base.jit.spill_bytes,
          base.compiled->kernels[0].threads, base.compiled->kernels[0].dynamic_smem);
    }
    // Random bf16 A and B in [-1, 1), the same in every variant's buffers.
    std::mt19937 rng(static_cast<unsigned>(s.m * 131 + s.n * 7 + s.k));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<uint16_t> ha(static_cast<size_t>(s.m * s.k)), hb(static_cast<size_t>(s.k * s.n));
    for (auto& x : ha) x = rt::to_bf16(dist(rng));
    for (auto& x : hb) x = rt::to_bf16(dist(rng));
    for (auto& v : variants) {
      MKC_CU(d, cuMemcpyHtoD, v->job->buffer_address(0, v->ia), ha.data(), ha.size() * 2);
      MKC_CU(d, cuMemcpyHtoD, v->job->buffer_address(0, v->ib), hb.data(), hb.size() * 2);
    }
    const CUdeviceptr A = base.job->buffer_address(0, base.ia),
                      B = base.job->buffer_address(0, base.ib);
    const CUstream stream = base.job->stream(0);
    const size_t mn = static_cast<size_t>(s.m * s.n);
    CUdeviceptr ref = 0, cub_out = 0;
    MKC_CU(d, cuMemAlloc, &cub_out, mn * 2);
    if (check) {
      MKC_CU(d, cuMemAlloc, &ref, mn * 4);
      cublas->gemm(stream, s, A, B, ref, CUDA_R_32F);
      MKC_CU(d, cuStreamSynchronize, stream);
      for (auto& v : variants) v->rel = check_variant(d, *v, s, ref, &failures);
      d.cuMemFree(ref);
    }
    // Warm up, then alternate timed rounds: each variant, then cuBLAS.
    for (auto& v : variants) v->job->time_launches(2);
    CUevent e0{}, e1{};
    MKC_CU(d, cuEventCreate, &e0, CU_EVENT_DEFAULT);
    MKC_CU(d, cuEventCreate, &e1, CU_EVENT_DEFAULT);
    const auto time_cublas = [&](int n) {
      MKC_CU(d, cuEventRecord, e0, stream);
      for (int i = 0; i < n; ++i) cublas->gemm(stream, s, A, B, cub_out, CUDA_R_16BF);
      MKC_CU(d, cuEventRecord, e1, stream);
      MKC_CU(d, cuStreamSynchronize, stream);
      float ms = 0;
      MKC_CU(d, cuEventElapsedTime, &ms, e0, e1);
      return ms * 1000.0 / n;
    };
    time_cublas(2);
    std::vector<double> theirs;
    for (int r = 0; r < rounds; ++r) {
      for (auto& v : variants) v->times.push_back(v->job->time_launches(iters));
      theirs.push_back(time_cublas(iters));
    }
    d.cuEventDestroy(e0);
    d.cuEventDestroy(e1);
    d.cuMemFree(cub_out);
    const double us = median(base.times), cus = median(theirs);
    const double flop = 2.0 * s.m * s.n * s.k;
    const auto rel_text = [](double r) {
      return r < 0 ? std::string("-") : fmt::format("{:.2e}", r);
    };
    auto_sum.add(cus / us);
    std::string tuned_cols;
    double tus = 0;
    if (tune > 0) {
      const Variant& t = *variants[1];
      tus = median(t.times);
      tuned_sum.add(cus / tus);
      tuned_cols = fmt::format(" {:>9.1f} {:>6.3f} {:>30}", tus, cus / tus, t.pick);
    }
    fmt::print("{:>20} {:>9.1f} {:>9.1f} {:>6.3f} {:>9.1f} {:>9} {:>30}{}\n",
               fmt::format("{}x{}x{}", s.m, s.n, s.k), cus, us, cus / us, flop / us / 1e6,
               rel_text(base.rel), base.pick, tuned_cols);
    for (size_t i = first_pick; i < variants.size(); ++i) {
      const Variant& v = *variants[i];
      const double vus = median(v.times);
      fmt::print("{:>20} {:>9} {:>9.1f} {:>6.3f} {:>9.1f} {:>9} {:>30} model {:.0f} us\n", "pick",
                 "", vus, cus / vus, flop / vus / 1e6, rel_text(v.rel), v.pick,
                 model_us_of(v.compiled->plans[0]));
    }
    std::fflush(stdout);
    const auto cell = [](double v) { return mkc::bench::num(v); };
    std::map<std::string, std::string> row = {
        {"bench", "gemm_bench"},
        {"case", fmt::format("{}x{}x{}", s.m, s.n, s.k)},
        {"m", std::to_string(s.m)},
        {"n", std::to_string(s.n)},
        {"k", std::to_string(s.k)},
        {"mkc_us", cell(us)},
        {"mkc_tflops", cell(flop / us / 1e6)},
        {"cublas_us", cell(cus)},
        {"cublas_tflops", cell(flop / cus / 1e6)},
        {"cublas_over_mkc", cell(cus / us)},
        {"rel_l2", base.rel < 0 ? std::string() : cell(base.rel)},
        {"registers", std::to_string(base.jit.registers)},
        {"spill_bytes", std::to_string(base.jit.spill_bytes)},
        {"auto_pick", base.pick}};
    if (tune > 0) {
      const Variant& t = *variants[1];
      row["tuned_pick"] = t.pick;
      row["tuned_us"] = cell(tus);
      row["cublas_over_tuned"] = cell(cus / tus);
      row["tuned_rel_l2"] = t.rel < 0 ? std::string() : cell(t.rel);
    }
    csv.row(row);
  }
  csv.finish();
  fmt::print("gemm_bench: cuBLAS / mkc (above 1: mkc faster), auto: {}\n", auto_sum.text());
  if (tune > 0) fmt::print("gemm_bench: cuBLAS / mkc, tuned: {}\n", tuned_sum.text());
  fmt::print("gemm_bench: {}\n",
             failures == 0 ? "all checks passed" : fmt::format("{} check(s) FAILED", failures));
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return mkc::bench::guarded_main("gemm_bench", run, argc, argv);
}
