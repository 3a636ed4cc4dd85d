// Code generation and the JIT: every sample becomes an sm_90a cubin through NVRTC (default shapes,
// two ranks) with no register spills; generation is deterministic; the disk cache hits, survives a
// corrupt entry and several processes compiling at once; an error in a device function points at
// its .mks line; the checked-in example under docs/ matches what the generator writes today; GEMM
// tasks get the wgmma tile, its shared memory and tensor maps where the operands allow it.
#include "compiler/codegen/codegen.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/kinds/kind.h"
#include "compiler/passes/passes.h"
#include "compiler/pipeline.h"
#include "compiler/sema/check.h"
#include "dsl/parser.h"
#include "jit/jit.h"
#include "jit/nvrtc.h"
#include "tools/mkc/cli.h"

namespace mkc {
namespace {

std::string temp_dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The whole pipeline for one world size; fails the test on errors in the schedule.
std::unique_ptr<compiler::Compilation> build(
    std::shared_ptr<const dsl::SourceFile> file, int64_t ranks,
    std::map<std::string, int64_t> defines = {},
    codegen::CodegenOptions::Tables tables = codegen::CodegenOptions::Tables::kData) {
  compiler::CheckOptions opts;
  opts.ranks = {ranks};
  opts.defines = std::move(defines);
  auto c = compiler::compile_file(file, opts, "", true, nullptr, tables);
  REQUIRE_MESSAGE(c->ok(), dsl::render_text(c->diagnostics.all(), false));
  return c;
}

TEST_CASE("every sample compiles to an sm_90a cubin without spills") {
  // No kernel spills: the wgmma tiles that need more than the kernel's 168 registers (the grouped
  // GEMM worker's list pipeline, the attention tile at both head dims) reallocate them with
  // setmaxnreg (templates/mkc/hopper.cuh).
  // Default shapes (the MoE FFN's grouped GEMMs are persistent workers, so its 4,096 tokens no
  // longer make tens of thousands of tasks).
  const std::map<std::string, std::map<std::string, int64_t>> overrides;
  jit::JitOptions jo;
  jo.cache_dir = temp_dir("cache_all");
  int samples = 0;
  for (const auto& entry : std::filesystem::directory_iterator("samples")) {
    if (entry.path().extension() != ".mks") continue;
    ++samples;
    const auto o = overrides.find(entry.path().stem().string());
    auto b = build(dsl::SourceFile::read(entry.path().string()), 2,
                   o != overrides.end() ? o->second : std::map<std::string, int64_t>{});
    const jit::JitOutput out = jit::jit_compile(
        b->kernels[0].source, entry.path().stem().string() + ".cu", b->kernels[0].kernel_name, jo);
    MESSAGE(fmt::format("{}: {} tasks, {} registers, {} B spills, {} B smem, {:.2f} s",
                        entry.path().string(), b->plans[0].tasks.size(), out.registers,
                        out.spill_bytes, out.smem_bytes, out.seconds));
    CHECK(out.cubin.compare(0, 4,
                            "\x7f"
                            "ELF") == 0);
    CHECK(out.registers > 0);
    CHECK_MESSAGE(out.spill_bytes == 0, entry.path() << " spills " << out.spill_bytes << " bytes");
    // The kinds' declared static shared memory bounds what ptxas allocates, and the dynamic part
    // fits beside it (a kernel that asked for more would not launch).
    CHECK_MESSAGE(out.smem_bytes <= b->kernels[0].static_smem_bound,
                  entry.path() << ": " << out.smem_bytes << " B static, bound "
                               << b->kernels[0].static_smem_bound);
    CHECK(b->kernels[0].static_smem_bound + b->kernels[0].dynamic_smem <= kinds::kHopperSmemPerCta);
    // ptxas says when it makes every wgmma wait for the one before (notes C7512, C7520: too few
    // registers, a branch between a wgmma and the use of its registers): a kernel then runs
    // its tensor-core tiles at a fraction of their speed with nothing else to show for it.
    CHECK_MESSAGE(out.log.find("are serialized") == std::string::npos,
                  entry.path() << ": ptxas serialises wgmma:\n"
                               << out.log);
  }
  CHECK(samples >= 10);
}

// GEMMs of few rows take the swapped tile (templates/mkc/gemm_sm90.cuh, SwapShape): the tile's
// rows rounded up to 8, 16 or 32 are A's TMA box and the class's rows, 64-column tiles run on one
// consumer warpgroup, and every variant compiles for sm_90a without a spill or a serialised
// wgmma (bf16 and f16, f32 and 16-bit C, bias and an epilogue function).
TEST_CASE("GEMM: tiles of at most 32 rows are swapped, and compile without spills") {
  struct Case {
    const char *ab, *c;
    int64_t m, n;
    const char* tile;
    const char* epilogue;
    const char* path;  // the class's tile in its device path
    int box_rows;
  };
  const Case cases[] = {
      {"bf16", "bf16", 1, 520, " tile(64, 128, 64)", "", "8x128", 8},
      {"f16", "f32", 13, 296, " tile(64, 256, 64)", ", epilogue = softplus, bias = bias", "16x256",
       16},
      {"bf16", "bf16", 20, 1024, " tile(64, 128, 64)", ", epilogue = softplus", "32x128", 32},
      {"bf16", "bf16", 5, 200, " tile(64, 64, 64)", ", bias = bias", "8x64", 8},
  };
  jit::JitOptions jo;
  jo.cache_dir = temp_dir("cache_swap");
  for (const Case& k : cases) {
    const auto file = std::make_shared<dsl::SourceFile>(
        "s.mks",
        fmt::format("schedule s {{\n  param M = {}, N = {}, K = 136\n  input A : {}[M, K]\n"
                    "  input B : {}[K, N]\n  input bias : f32[N]\n  output C : {}[M, N]\n"
                    "  device softplus(x: f32) -> f32 {{ return log1pf(expf(x)); }}\n"
                    "  compute mm = gemm(A, B -> C{}){}\n}}\n",
                    k.m, k.n, k.ab, k.ab, k.c, k.epilogue, k.tile));
    auto c = build(file, 1);
    const codegen::Generated& g = c->kernels[0];
    INFO(fmt::format("{} x {}{}{}", k.m, k.n, k.tile, k.epilogue));
    // A last column block of at most 64 columns is a 64-column swapped tile of its own class.
    REQUIRE(!g.paths.empty());
    CHECK(g.paths[0].find(std::string("wgmma + TMA ") + k.path) != std::string::npos);
    for (const std::string& p : g.paths)
      CHECK(p.find("wgmma + TMA " + std::to_string(k.box_rows) + "x") != std::string::npos);
    REQUIRE(g.tensor_maps.size() == 2u);
    CHECK(g.tensor_maps[0].box_rows == k.box_rows);
    CHECK(g.tensor_maps[1].box_rows == 64);
    const jit::JitOutput out = jit::jit_compile(g.source, "s.cu", g.kernel_name, jo);
    MESSAGE(fmt::format("{}x{}{}: {} registers, {} B spills", k.m, k.n, k.tile, out.registers,
                        out.spill_bytes));
    CHECK(out.spill_bytes == 0);
    CHECK_MESSAGE(out.log.find("are serialized") == std::string::npos, out.log);
  }
}

// 2-CTA clusters (templates/mkc/gemm_sm90.cuh, load_stage_pair; compiler/passes/schedule.cc,
// the pair rule): asked for by a tuned entry, the tiles pair up where they can, each pair's
// halves at the same place of CTAs 2c and 2c + 1 sharing B's columns, the kernel asks for
// clusters of 2, and the pair's class compiles for sm_90a without a spill; where they cannot,
// the decision says why and the tiles run on their own.
// The Hopper tile stores a 16-bit C through shared memory and TMA (gemm_sm90.cuh's
// store_tile_tma) where each 64 x 64 box of a task is whole or ends at C's edge; the kernel then
// completes those stores before signals and at its end (MKC_BULK_STORES), and compiles without
// spills. An f32 C, split-K parts and swapped tiles store directly.
TEST_CASE("GEMM: C leaves by TMA stores where the boxes allow, and compiles without spills") {
  jit::JitOptions jo;
  jo.cache_dir = temp_dir("cache_store");
  struct Case {
    int64_t m, n, k;
    const char* c_type;
    const char* tile;
    bool store;
  };
  for (const Case& x : {Case{3000, 2504, 1000, "bf16", "128, 256, 64", true},
                        Case{200, 520, 256, "f16", "64, 128, 64", true},
                        Case{200, 520, 256, "bf16", "128, 128, 64", true},
                        Case{300, 520, 256, "f32", "128, 128, 64", false},
                        Case{16, 520, 256, "bf16", "64, 128, 64", false}}) {
    INFO(fmt::format("{} x {} x {} {} C, tile({})", x.m, x.n, x.k, x.c_type, x.tile));
    auto c = build(
        std::make_shared<dsl::SourceFile>(
            "s.mks", fmt::format("schedule s {{\n  param M = {}, N = {}, K = {}\n  input A : "
                                 "bf16[M, K]\n  input B : bf16[K, N]\n  input bias : f32[N]\n"
                                 "  output C : {}[M, N]\n  device softplus(x: f32) -> f32 {{ "
                                 "return x > 20.0f ? x : log1pf(expf(x)); }}\n  compute mm = "
                                 "gemm(A, B -> C, epilogue = softplus, bias = bias) tile({})\n"
                                 "}}\n",
                                 x.m, x.n, x.k, x.c_type, x.tile)),
        1);
    const codegen::Generated& g = c->kernels[0];
    CHECK((g.source.find("#define MKC_BULK_STORES 1") != std::string::npos) == x.store);
    CHECK(g.static_smem_bound + g.dynamic_smem <= kinds::kHopperSmemPerCta);
    // (A last row block of at most 32 rows runs the swapped tile, which stores directly.)
    bool stored = false;
    for (const std::string& path : g.paths)
      stored = stored || path.find("C stored by TMA") != std::string::npos;
    CHECK(stored == x.store);
    if (x.store) {
      // C's map: 64 x 64 boxes over the whole C.
      bool c_map = false;
      for (const codegen::TensorMapSpec& m : g.tensor_maps)
        c_map = c_map || (m.rows == x.m && m.cols == x.n && m.box_rows == 64 && m.box_cols == 64);
      CHECK(c_map);
    }
    const jit::JitOutput out = jit::jit_compile(g.source, "s.cu", g.kernel_name, jo);
    MESSAGE(fmt::format("{}x{}x{} {} C: {} registers, {} B spills, {} B smem", x.m, x.n, x.k,
                        x.c_type, out.registers, out.spill_bytes, g.dynamic_smem));
    CHECK(out.spill_bytes == 0);
    CHECK_MESSAGE(out.log.find("are serialized") == std::string::npos, out.log);
  }
}

TEST_CASE("GEMM: 2-CTA cluster pairs, where the shape and the lists allow them") {
  const auto gemm = [](int64_t m, int64_t n, int64_t k, const char* extra) {
    return std::make_shared<dsl::SourceFile>(
        "p.mks", fmt::format("schedule p {{\n  param M = {}, N = {}, K = {}\n  input A : bf16[M, "
                             "K]\n  input B : bf16[K, N]\n  output C : bf16[M, N]\n  compute mm = "
                             "gemm(A, B -> C)\n{}}}\n",
                             m, n, k, extra));
  };
  const auto with = [](std::vector<int64_t> tile, int64_t split, int64_t cluster) {
    return [=](const compiler::CheckedSchedule& s) {
      std::map<std::string, plan::LowerOptions::Tuned> out;
      for (const compiler::OpInstance& op : s.ops)
        if (op.kind == compiler::OpKind::kGemm)
          out[op.name] = plan::LowerOptions::Tuned{tile, split, cluster};
      return out;
    };
  };
  const auto compile = [](std::shared_ptr<const dsl::SourceFile> f, const compiler::TunedFor& t) {
    compiler::CheckOptions opts;
    opts.ranks = {1};
    auto c = compiler::compile_file(f, opts, "", true, t);
    REQUIRE_MESSAGE(c->ok(), dsl::render_text(c->diagnostics.all(), false));
    return c;
  };
  const auto gemm_tasks = [](const plan::Plan& p) {
    std::vector<abi::GemmTileArgs> out;
    for (const plan::Task& t : p.tasks)
      if (t.kind == plan::TaskKind::kGemmTile) out.push_back(plan::args_as<abi::GemmTileArgs>(t));
    return out;
  };
  jit::JitOptions jo;
  jo.cache_dir = temp_dir("cache_pairs");
  for (const int64_t bn : {256, 128}) {
    // 3000 rows: 24 row blocks, the last of 56 rows (still a 128-row half, zero filled); a bias
    // and an epilogue function, the tile's most registers.
    auto c = compile(std::make_shared<dsl::SourceFile>(
                         "p.mks",
                         "schedule p {\n  param M = 3000, N = 5000, K = 4000\n  input A : bf16[M, "
                         "K]\n  input B : bf16[K, N]\n  input bias : f32[N]\n  output C : bf16[M, "
                         "N]\n  device softplus(x: f32) -> f32 { return x > 20.0f ? x : "
                         "log1pf(expf(x)); }\n  compute mm = gemm(A, B -> C, epilogue = softplus, "
                         "bias = bias)\n}\n"),
                     with({128, bn, 64}, 1, 2));
    const plan::Plan& p = c->plans[0];
    const codegen::Generated& g = c->kernels[0];
    INFO("BN " << bn);
    CHECK(p.decisions.at(0).reason.find("2-CTA clusters sharing B") != std::string::npos);
    CHECK_MESSAGE(p.decisions.size() == 1u, p.decisions.back().reason);  // the pairs stayed
    CHECK(g.cluster == 2);
    CHECK(g.ctas % 2 == 0);
    // Paired, and C stored by TMA (N 5000: the last column block ends at C's edge).
    CHECK(g.source.find(fmt::format("128, {}, false, true, true>(a, v, args", bn)) !=
          std::string::npos);
    CHECK(g.tensor_maps.at(0).box_rows == 128);
    for (const std::string& path : g.paths)
      CHECK(path.find("in 2-CTA clusters") != std::string::npos);
    for (const abi::GemmTileArgs& a : gemm_tasks(p)) CHECK(a.cluster == 1);
    // The pair rule: CTA 2c's tiles and CTA 2c + 1's are the two halves of one pair at each
    // place (rows 2q and 2q + 1 of one column block); a launch fence may come first.
    const auto tiles_of = [&](size_t cta) {
      std::vector<int> out;
      for (const int t : p.cta_tasks[0][cta])
        if (p.tasks[t].kind == plan::TaskKind::kGemmTile) out.push_back(t);
      return out;
    };
    int pairs = 0;
    for (size_t cta = 0; cta + 1 < p.cta_tasks[0].size(); cta += 2) {
      const std::vector<int> l0 = tiles_of(cta), l1 = tiles_of(cta + 1);
      REQUIRE(l0.size() == l1.size());
      for (size_t i = 0; i < l0.size(); ++i) {
        const auto h0 = plan::args_as<abi::GemmTileArgs>(p.tasks[l0[i]]);
        const auto h1 = plan::args_as<abi::GemmTileArgs>(p.tasks[l1[i]]);
        CHECK(h0.n0 == h1.n0);
        CHECK(h0.m0 % 256 == 0);
        CHECK(h1.m0 == h0.m0 + 128);
        ++pairs;
      }
    }
    CHECK(pairs * 2 == static_cast<int>(gemm_tasks(p).size()));
    const jit::JitOutput out = jit::jit_compile(g.source, "p.cu", g.kernel_name, jo);
    MESSAGE(
        fmt::format("pair 128x{}: {} registers, {} B spills", bn, out.registers, out.spill_bytes));
    CHECK(out.spill_bytes == 0);
    CHECK_MESSAGE(out.log.find("are serialized") == std::string::npos, out.log);
  }
  {
    // GEMM + all-reduce at R = 1: the pairs on the compute CTAs, the all-reduce's tasks after
    // them on the comm CTAs.
    compiler::CheckOptions opts;
    opts.ranks = {1};
    opts.defines = {{"M", 1024}, {"N", 1024}, {"K", 256}};
    // The sample has no tile(...), so a tuned entry sets its tiles.
    const std::string text = dsl::SourceFile::read("samples/gemm_allreduce.mks")->text();
    REQUIRE(text.find(" tile(") == std::string::npos);
    auto c = compiler::compile_file(std::make_shared<dsl::SourceFile>("gemm_allreduce.mks", text),
                                    opts, "", true, with({128, 128, 64}, 1, 2));
    REQUIRE(c->ok());
    std::string reasons;
    for (const plan::Decision& d : c->plans[0].decisions) reasons += d.reason + "\n";
    INFO(reasons);
    CHECK(reasons.find("2-CTA clusters sharing B") != std::string::npos);
    CHECK(c->kernels[0].cluster == 2);
  }
  const auto refused = [&](std::shared_ptr<const dsl::SourceFile> f, const compiler::TunedFor& t,
                           const char* why) {
    auto c = compile(f, t);
    const plan::Plan& p = c->plans[0];
    std::string reasons;
    for (const plan::Decision& d : p.decisions) reasons += d.reason + "\n";
    INFO(reasons);
    CHECK(reasons.find(why) != std::string::npos);
    CHECK(c->kernels[0].cluster == 1);
    for (const abi::GemmTileArgs& a : gemm_tasks(p)) CHECK(a.cluster == 0);
  };
  refused(gemm(2900, 5000, 4000, ""), with({128, 256, 64}, 1, 2), "23 row blocks do not pair up");
  refused(gemm(256, 1024, 8192, ""), with({128, 128, 64}, 2, 2), "the tiles are split over K");
  refused(gemm(3000, 5000, 4000, ""), with({64, 256, 64}, 1, 2), "128-row tiles");
  // Two GEMMs, the second reading the first's output: its pairs would wait for the first's
  // tiles, which the pair rule forbids, so the scheduler unpairs every tile.
  refused(gemm(1024, 1024, 1024,
               "  output E : bf16[M, N]\n  input D : bf16[N, N]\n  compute mm2 = gemm(C, D -> "
               "E) after mm\n"),
          with({128, 128, 64}, 1, 2), "the lists break the pair rule");
}

// Split-K parts (templates/mkc/split_k.cuh) are classes of their own (the ticket and the sum of
// the parts in the epilogue), for every tile shape: each compiles for sm_90a without a spill or a
// serialised wgmma, the plan has no reduction tasks, and C's tile is written by the fused part.
TEST_CASE("GEMM: split-K parts reduce in the last part's epilogue, and compile without spills") {
  struct Case {
    const char *ab, *c;
    int64_t m, n, k;
    const char* tile;
    const char* epilogue;
    const char* path;
  };
  const Case cases[] = {
      {"bf16", "bf16", 256, 1024, 8192, " tile(128, 256, 64)", "", "128x256"},
      {"f16", "f32", 200, 520, 4160, " tile(128, 128, 64)", ", epilogue = softplus, bias = bias",
       "128x128"},
      {"bf16", "bf16", 100, 392, 8256, " tile(64, 128, 64)", ", bias = bias", "64x128"},
      {"f16", "f32", 13, 296, 3000, " tile(64, 256, 64)", ", epilogue = softplus", "16x256"},
      {"bf16", "bf16", 5, 200, 8192, " tile(64, 64, 64)", ", bias = bias", "8x64"},
  };
  jit::JitOptions jo;
  jo.cache_dir = temp_dir("cache_split");
  for (const Case& k : cases) {
    const auto file = std::make_shared<dsl::SourceFile>(
        "s.mks", fmt::format("schedule s {{\n  param M = {}, N = {}, K = {}\n  input A : {}[M, K]\n"
                             "  input B : {}[K, N]\n  input bias : f32[N]\n  output C : {}[M, N]\n"
                             "  device softplus(x: f32) -> f32 {{ return log1pf(expf(x)); }}\n"
                             "  compute mm = gemm(A, B -> C{}){}\n}}\n",
                             k.m, k.n, k.k, k.ab, k.ab, k.c, k.epilogue, k.tile));
    auto c = build(file, 1);
    const codegen::Generated& g = c->kernels[0];
    INFO(fmt::format("{} x {} x {}{}{}", k.m, k.n, k.k, k.tile, k.epilogue));
    CHECK(c->plans[0].decisions.at(0).reason.find("split-K") != std::string::npos);
    for (const plan::Task& t : c->plans[0].tasks) CHECK(t.kind != plan::TaskKind::kReduceTile);
    REQUIRE(!g.paths.empty());
    CHECK(g.paths[0].find(std::string("wgmma + TMA ") + k.path) != std::string::npos);
    CHECK(g.source.find(", true>(a, v, args, kBuffers, mkc_smem") != std::string::npos);
    const jit::JitOutput out = jit::jit_compile(g.source, "s.cu", g.kernel_name, jo);
    MESSAGE(fmt::format("split {}x{}x{}{}: {} registers, {} B spills", k.m, k.n, k.k, k.tile,
                        out.registers, out.spill_bytes));
    CHECK(out.spill_bytes == 0);
    // The last part's sum is a function of its own (split_k.cuh, sum_parts): no spill there
    // either, nor in any other function ptxas reports.
    CHECK(out.log.find("sum_parts") != std::string::npos);
    for (size_t at = out.log.find(" bytes spill stores"); at != std::string::npos;
         at = out.log.find(" bytes spill stores", at + 1))
      CHECK_MESSAGE(out.log.compare(at - 2, 2, " 0") == 0, out.log);
    CHECK_MESSAGE(out.log.find("are serialized") == std::string::npos, out.log);
  }
}

// Which GEMM tile the generator picks, and what it asks the runtime for: the wgmma tile (three
// warpgroups, a ring of dynamic shared memory, a TMA descriptor per operand view with the tile's
// boxes) for bf16/f16 (operands whose rows TMA cannot load staged into padded rows), the portable
// tile otherwise; the default tile follows the shape.
TEST_CASE("GEMM: the tile template, its tensor maps and the default tile for the shape") {
  const auto gemm = [](const char* ab, int64_t m, int64_t n, int64_t k, const char* tile) {
    return std::make_shared<dsl::SourceFile>(
        "g.mks", fmt::format("schedule g {{\n  param M = {}, N = {}, K = {}\n  input A : {}[M, "
                             "K]\n  input B : {}[K, N]\n  output C : f32[M, N]\n  compute mm = "
                             "gemm(A, B -> C){}\n}}\n",
                             m, n, k, ab, ab, tile));
  };
  {
    auto c = build(gemm("bf16", 8192, 8192, 8192, ""), 1);
    const codegen::Generated& g = c->kernels[0];
    CHECK(g.threads == 384);
    CHECK(g.dynamic_smem == 4 * 49152 + 2048);
    CHECK(g.source.find("gemm_tile_tma<__nv_bfloat16, float, float, 128, 256>") !=
          std::string::npos);
    REQUIRE(g.tensor_maps.size() == 2u);  // A and B, shared by every tile
    CHECK(g.tensor_maps[0].box_rows == 128);
    CHECK(g.tensor_maps[0].box_cols == 64);
    CHECK(g.tensor_maps[0].rows == 8192);
    CHECK(g.tensor_maps[1].box_rows == 64);
    CHECK(c->plans[0].decisions.at(0).choice == "tile(128, 256, 64)");
  }
  {
    // Few rows: 64-row tiles (the consumers split the columns), f16 works the same way.
    auto c = build(gemm("f16", 128, 8192, 1024, ""), 1);
    CHECK(c->plans[0].decisions.at(0).choice == "tile(64, 128, 64)");
    CHECK(c->kernels[0].source.find("gemm_tile_tma<__half, float, float, 64, 128>") !=
          std::string::npos);
    CHECK(c->kernels[0].tensor_maps.at(0).box_rows == 64);
    CHECK(c->kernels[0].dynamic_smem == 8 * 24576 + 2048);
  }
  {
    // 64 wide tiles or 256 narrow ones on 132 SMs: the cost model's pick is one wave of the wide
    // tile (the narrow one runs at 0.74 of its efficiency; tune/gemm_model.cc).
    auto c = build(gemm("bf16", 2048, 2048, 512, ""), 1);
    CHECK(c->plans[0].decisions.at(0).choice == "tile(128, 256, 64)");
    CHECK(c->plans[0].decisions.at(0).reason.rfind("default: the cost model's pick", 0) == 0);
  }
  {
    // Rows of 100 bf16 (200 bytes) cannot be TMA boxes: A is staged into rows of 128 (256 bytes)
    // and the tiles read that with TMA (its map spans the padded rows; columns past K are zero).
    auto c = build(gemm("bf16", 256, 256, 100, " tile(128, 128, 64)"), 1);
    const plan::Plan& p = c->plans[0];
    CHECK(p.decisions.at(0).reason.find("A staged: its rows (200 bytes) copied to rows of 256 "
                                        "bytes for TMA") != std::string::npos);
    CHECK(c->kernels[0].source.find("gemm_tile_tma<__nv_bfloat16, float, float, 128, 128>") !=
          std::string::npos);
    CHECK(c->kernels[0].source.find("mkc::copy_rows<__nv_bfloat16>") != std::string::npos);
    REQUIRE(c->kernels[0].tensor_maps.size() == 2u);
    CHECK(c->kernels[0].tensor_maps[0].cols == 128);
    CHECK(p.buffers.at(c->kernels[0].tensor_maps[0].buffer).name == "mm.a_staged");
  }
  {
    // fp8 operands: no tensor-core tile takes them yet, so nothing is staged: the portable tile,
    // no maps, 256 threads.
    auto c = build(gemm("fp8_e4m3", 256, 256, 100, " tile(128, 128, 64)"), 1);
    CHECK(c->plans[0].decisions.at(0).reason.find("staged") == std::string::npos);
    CHECK(c->kernels[0].tensor_maps.empty());
    CHECK(c->kernels[0].threads == 256);
    CHECK(c->kernels[0].dynamic_smem == 0);
    CHECK(c->kernels[0].source.find("gemm_tile_tma") == std::string::npos);
  }
}

// The grouped GEMM (MoE experts): persistent workers, one per compute CTA, on the wgmma tile with
// a 2-D map of X and a 3-D map of W [groups, K, N] where the operands allow it, else the SIMT
// tile; the choice is in the paths, the worker count in the plan's decisions.
TEST_CASE("grouped GEMM: workers, the tensor-core tile and its maps, the SIMT fallback") {
  const auto moe = [](int64_t h, const char* tile) {
    return std::make_shared<dsl::SourceFile>("moe.mks", fmt::format(R"(
schedule moe {{
  param T = 64, H = {}, F = 384, E = 8
  input   X      : bf16[T, H]
  input   W      : bf16[E, H, F]
  input   counts : i32[2, E]
  output  Y      : bf16[T, F]
  compute fc     = grouped_gemm(X, W -> Y, counts = counts){}
}}
)",
                                                                    h, tile));
  };
  {
    auto c = build(moe(256, ""), 1);
    const codegen::Generated& g = c->kernels[0];
    // Up to min(64 rows, 1 + 8 groups) = 9 tiles x 2 column blocks of 256: 18 items, 18 workers
    // (fewer than the 132 compute CTAs of a kernel without communication).
    REQUIRE(c->plans[0].decisions.size() == 1);
    CHECK(c->plans[0].decisions[0].choice == "tile(128, 256), 18 workers");
    CHECK(c->plans[0].tasks.size() == 18 + 2);  // + the launch fence and end
    REQUIRE(g.paths.size() == 1);
    INFO(g.paths[0]);
    CHECK(g.paths[0].find("wgmma + TMA 128x256") != std::string::npos);
    CHECK(g.threads == 384);
    CHECK(g.source.find("grouped_gemm_tile_tma<__nv_bfloat16, __nv_bfloat16, 128, 256>") !=
          std::string::npos);
    REQUIRE(g.tensor_maps.size() == 2);
    CHECK(g.tensor_maps[0].dims == 2);
    CHECK(g.tensor_maps[0].box_rows == 128);
    CHECK(g.tensor_maps[1].dims == 3);
    CHECK(g.tensor_maps[1].depth == 8);
    CHECK(g.tensor_maps[1].rows == 256);
    CHECK(g.tensor_maps[1].cols == 384);
    CHECK(g.tensor_maps[1].box_rows == 64);
    // The workers write Y as one scatter box, so they do not wait for each other.
    for (const plan::Task& t : c->plans[0].tasks) {
      if (t.kind != plan::TaskKind::kGroupedGemmTile) continue;
      CHECK(t.waits.empty());
      REQUIRE(t.writes.size() == 1);
      CHECK(t.writes[0].scatter);
    }
  }
  {
    auto c = build(moe(256, " tile(64, 128, 64)"), 1);
    CHECK(c->plans[0].decisions[0].choice == "tile(64, 128), 27 workers");
    CHECK(c->kernels[0].paths.at(0).find("wgmma + TMA 64x128") != std::string::npos);
  }
  for (const auto& [h, tile] :
       {std::pair<int64_t, const char*>{100, ""}, {256, " tile(192, 64)"}}) {
    // Rows of 100 bf16 cannot be TMA boxes; 192-row tiles are not the wgmma tile's.
    auto c = build(moe(h, tile), 1);
    INFO(c->kernels[0].paths.at(0));
    CHECK(c->kernels[0].paths.at(0).find("SIMT") != std::string::npos);
    CHECK(c->kernels[0].tensor_maps.empty());
  }
}

TEST_CASE("generation is deterministic") {
  const auto file = dsl::SourceFile::read("samples/moe_ffn_combine.mks");
  const std::map<std::string, int64_t> small = {{"T", 64}};
  for (const auto tables :
       {codegen::CodegenOptions::Tables::kData, codegen::CodegenOptions::Tables::kSource}) {
    auto a = build(file, 2, small, tables);
    auto b = build(file, 2, small, tables);
    CHECK(a->kernels[0].source == b->kernels[0].source);
    REQUIRE(a->kernels[0].tables.size() == b->kernels[0].tables.size());
    for (size_t k = 0; k < a->kernels[0].tables.size(); ++k)
      CHECK(a->kernels[0].tables[k].bytes == b->kernels[0].tables[k].bytes);
    CHECK(a->kernels[0].source.find("// Generated by mkc") == 0);
    CHECK(a->kernels[0].source.find("task_class_") != std::string::npos);
    // DSL names survive into the tables' comments, where the tables are in the source.
    if (tables == codegen::CodegenOptions::Tables::kSource)
      CHECK(a->kernels[0].source.find("fc1.worker(0)") != std::string::npos);
  }
}

TEST_CASE("the JIT cache: miss, then a hit; a corrupt entry is rebuilt") {
  auto b = build(dsl::SourceFile::read("samples/allreduce.mks"), 2);
  jit::JitOptions jo;
  jo.cache_dir = temp_dir("cache_hit");
  const jit::JitOutput cold =
      jit::jit_compile(b->kernels[0].source, "allreduce.cu", b->kernels[0].kernel_name, jo);
  CHECK_FALSE(cold.cache_hit);
  const jit::JitOutput warm =
      jit::jit_compile(b->kernels[0].source, "allreduce.cu", b->kernels[0].kernel_name, jo);
  CHECK(warm.cache_hit);
  CHECK(warm.cubin == cold.cubin);
  CHECK(warm.registers == cold.registers);
  MESSAGE(fmt::format("cold {:.3f} s, warm {:.2f} ms", cold.seconds, warm.seconds * 1e3));
  // Truncate the entry: it must be detected and rebuilt.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(jo.cache_dir)) {
    std::filesystem::resize_file(e.path(), std::filesystem::file_size(e.path()) / 2);
    ++entries;
  }
  CHECK(entries == 1);
  const jit::JitOutput rebuilt =
      jit::jit_compile(b->kernels[0].source, "allreduce.cu", b->kernels[0].kernel_name, jo);
  CHECK_FALSE(rebuilt.cache_hit);
  CHECK(rebuilt.cubin == cold.cubin);
  CHECK(jit::jit_compile(b->kernels[0].source, "allreduce.cu", b->kernels[0].kernel_name, jo)
            .cache_hit);
}

TEST_CASE("eight processes compiling the same kernel at once all get it") {
  auto b = build(dsl::SourceFile::read("samples/allgather.mks"), 8, {{"M", 1024}});
  jit::JitOptions jo;
  jo.cache_dir = temp_dir("cache_procs");
  std::vector<pid_t> kids;
  for (int i = 0; i < 8; ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 1;
      try {
        const jit::JitOutput out =
            jit::jit_compile(b->kernels[0].source, "allgather.cu", b->kernels[0].kernel_name, jo);
        code = out.cubin.size() > 64 ? 0 : 1;
      } catch (...) {
        code = 2;
      }
      _exit(code);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  // One entry, valid, no temporary files left behind.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(jo.cache_dir)) {
    CHECK(e.path().extension() == ".mkcc");
    ++entries;
  }
  CHECK(entries == 1);
  CHECK(jit::jit_compile(b->kernels[0].source, "allgather.cu", b->kernels[0].kernel_name, jo)
            .cache_hit);
}

TEST_CASE("an error in a device function points at its line in the .mks file") {
  auto file = std::make_shared<dsl::SourceFile>("broken.mks", R"(schedule broken {
  input  X : f32[1024]
  output Y : f32[1024]
  device twice(x: f32) -> f32 {
    return no_such_function(x);
  }
  compute m = map(twice, X -> Y)
}
)");
  auto b = build(file, 1);
  jit::JitOptions jo;
  jo.use_cache = false;
  try {
    jit::jit_compile(b->kernels[0].source, "broken.cu", b->kernels[0].kernel_name, jo);
    FAIL("a broken device function compiled");
  } catch (const jit::NvrtcCompileError& e) {
    CHECK_MESSAGE(e.log().find("broken.mks(5)") != std::string::npos, e.log());
    CHECK(e.log().find("no_such_function") != std::string::npos);
  }
}

TEST_CASE("sm_80 builds where no Hopper-only template is needed") {
  auto b = build(dsl::SourceFile::read("samples/gemm_allreduce.mks"), 2, {{"M", 256}});
  jit::JitOptions jo;
  jo.arch = "sm_80";
  jo.use_cache = false;
  const jit::JitOutput out =
      jit::jit_compile(b->kernels[0].source, "gemm_allreduce.cu", b->kernels[0].kernel_name, jo);
  CHECK(out.cubin.size() > 64);
}

TEST_CASE("docs/example/allreduce.cu is what the generator writes today") {
  // Regenerate with: bazel-bin/mkc compile samples/allreduce.mks -D N=131072 --ranks 2 --emit cu -o
  // docs/example
  const std::string dir = temp_dir("example");
  std::ostringstream out, err;
  REQUIRE(cli::run({"compile", "samples/allreduce.mks", "-D", "N=131072", "--ranks", "2", "--emit",
                    "cu", "-o", dir},
                   out, err) == 0);
  std::ifstream fresh(dir + "/allreduce.cu"), kept("docs/example/allreduce.cu");
  REQUIRE(kept.good());
  std::stringstream a, b;
  a << fresh.rdbuf();
  b << kept.rdbuf();
  CHECK_MESSAGE(a.str() == b.str(),
                "docs/example/allreduce.cu is stale: regenerate it (see the comment above)");
}

TEST_CASE("mkc compile writes the artefacts it is asked for and reports the kernel") {
  const std::string dir = temp_dir("artefacts");
  std::ostringstream out, err;
  const int code = cli::run({"compile", "samples/gemm_allreduce.mks", "-D", "M=256", "--emit",
                             "cu,ptx,cubin,plan", "-o", dir},
                            out, err);
  REQUIRE_MESSAGE(code == 0, err.str());
  for (const char* ext : {".cu", ".ptx", ".cubin", ".plan.json"}) {
    CHECK_MESSAGE(std::filesystem::file_size(dir + "/gemm_allreduce" + ext) > 0, ext);
  }
  CHECK(out.str().find("kernel mkc_gemm_allreduce for 2 ranks, sm_90a:") != std::string::npos);
  CHECK(out.str().find("registers") != std::string::npos);
  std::ostringstream o2, e2;
  CHECK(cli::run({"compile", "samples/gemm.mks", "--emit", "exe"}, o2, e2) == 1);
  CHECK(e2.str().find("unknown artefact `exe`") != std::string::npos);
}

}  // namespace
}  // namespace mkc

namespace mkc {
namespace {

// The attention task class: the tensor-core tile for bf16/f16 head dims 64 and 128 (3-D TMA maps
// of the [L, S, D] views, also for one slice: the device issues 3-D loads), the SIMT tile
// otherwise, and the choice named in Generated::paths; at head dim 64 with tile(128, 192), blocks
// of 192 keys (K and V boxes of 192 rows; a consumer then holds S and P of 192 keys); with
// tile(192, k) at head dim 64, tiles of 192 queries in three consumer warpgroups (512 threads, a
// Q box of 192 rows, 160 registers a consumer thread) and blocks of 128 keys.
// One kernel has one CTA size: an attention of 192-query tiles (512 threads) beside a tensor-core
// GEMM (384) is refused with the fix; with tile(128) they share a 384-thread kernel.
TEST_CASE("attention tiles of 192 queries and a tensor-core GEMM cannot share a kernel") {
  const auto schedule = [](int64_t queries) {
    return std::make_shared<dsl::SourceFile>("mixed.mks", fmt::format(R"(
schedule mixed {{
  input  Q : bf16[1, 2, 512, 64]
  input  K : bf16[1, 2, 512, 64]
  input  V : bf16[1, 2, 512, 64]
  output O : bf16[1, 2, 512, 64]
  input  A : bf16[256, 512]
  input  B : bf16[512, 256]
  output C : bf16[256, 256]
  compute att = attention(Q, K, V -> O) tile({})
  compute mm = gemm(A, B -> C)
}}
)",
                                                                      queries));
  };
  compiler::CheckOptions opts;
  opts.ranks = {1};
  const auto ok = compiler::compile_file(schedule(128), opts);
  REQUIRE_MESSAGE(ok->ok(), dsl::render_text(ok->diagnostics.all(), false));
  CHECK(ok->kernels[0].threads == 384);
  try {
    const auto c = compiler::compile_file(schedule(192), opts);
    FAIL("compiled: " << c->kernels[0].threads << " threads");
  } catch (const UserError& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find("one kernel has one CTA size") != std::string::npos, what);
    const bool names_512 = what.find("needs 512 threads") != std::string::npos ||
                           what.find(") 512, but") != std::string::npos;
    CHECK_MESSAGE(names_512, what);
    CHECK_MESSAGE(what.find("tile(128[, keys])") != std::string::npos, what);
    // At the attention's declaration (line 10 of the schedule's text, `att` at column 11).
    CHECK_MESSAGE(what.rfind("mixed.mks:10:11: ", 0) == 0, what);
  }
}

// The compiler's own 192-query tile at head dim 64 is for a schedule's one attention: beside
// another attention (at head dim 128, or asking for 128 queries), whose tile runs 384 threads,
// both take 128 and share a 384-thread kernel.
TEST_CASE("attention: 192 queries by default only for a schedule's one attention") {
  // `att` at head dim 64 without a tile, beside `second`: nothing, an attention at head dim 128
  // (on Q2, K2, V2), or one at head dim 64 (on Q, K, V into O3) asking for its own tile.
  const auto schedule = [](const std::string& second) {
    return std::make_shared<dsl::SourceFile>("two.mks", fmt::format(R"(
schedule two {{
  input  Q : bf16[1, 2, 512, 64]
  input  K : bf16[1, 2, 512, 64]
  input  V : bf16[1, 2, 512, 64]
  output O : bf16[1, 2, 512, 64]
  input  Q2 : bf16[1, 2, 256, 128]
  input  K2 : bf16[1, 2, 256, 128]
  input  V2 : bf16[1, 2, 256, 128]
  output O2 : bf16[1, 2, 256, 128]
  output O3 : bf16[1, 2, 512, 64]
  compute att = attention(Q, K, V -> O)
{0}}}
)",
                                                                    second));
  };
  struct Case {
    std::string second;
    int threads, queries;
  };
  for (const Case& k :
       {Case{"", 512, 192}, Case{"  compute att2 = attention(Q2, K2, V2 -> O2)\n", 384, 128},
        Case{"  compute att2 = attention(Q, K, V -> O3) tile(128, 192)\n", 384, 128},
        // Asking for 192 queries at head dim 64 (512 threads too): both 192.
        Case{"  compute att2 = attention(Q, K, V -> O3) tile(192)\n", 512, 192}}) {
    CAPTURE(k.second);
    compiler::CheckOptions opts;
    opts.ranks = {1};
    const auto c = compiler::compile_file(schedule(k.second), opts);
    REQUIRE_MESSAGE(c->ok(), dsl::render_text(c->diagnostics.all(), false));
    CHECK(c->kernels[0].threads == k.threads);
    for (const std::string& p : c->kernels[0].paths) {
      INFO(p);
      CHECK(p.find(fmt::format("tiles of {} queries", k.queries)) != std::string::npos);
    }
  }
}

TEST_CASE("attention: the tensor-core tile where it applies, with 3-D maps, named in the paths") {
  const auto schedule = [](int64_t d, int64_t keys, int64_t queries = 128) {
    return std::make_shared<dsl::SourceFile>("attn.mks", fmt::format(R"(
schedule attn {{
  input  Q : bf16[1, 1, 200, {0}]
  input  K : bf16[1, 1, 300, {0}]
  input  V : bf16[1, 1, 300, {0}]
  output O : bf16[1, 1, 200, {0}]
  compute att = attention(Q, K, V -> O, causal = 1) tile({2}, {1})
}}
)",
                                                                     d, keys, queries));
  };
  struct Case {
    int64_t d, asked, keys, queries = 128;
  };
  for (const Case k :
       {Case{64, 128, 128}, Case{128, 128, 128}, Case{40, 128, 128}, Case{64, 192, 192},
        Case{128, 192, 128}, Case{64, 128, 128, 192}, Case{64, 192, 128, 192}}) {
    const int64_t d = k.d;
    CAPTURE(d);
    CAPTURE(k.asked);
    CAPTURE(k.queries);
    compiler::CheckOptions opts;
    opts.ranks = {1};
    const auto c = compiler::compile_file(schedule(d, k.asked, k.queries), opts);
    REQUIRE_MESSAGE(c->ok(), dsl::render_text(c->diagnostics.all(), false));
    const codegen::Generated& g = c->kernels[0];
    REQUIRE(g.paths.size() == 1);
    INFO(g.paths[0]);
    if (d == 40) {
      CHECK(g.paths[0].find("SIMT") != std::string::npos);
      CHECK(g.tensor_maps.empty());
      // The SIMT tile runs one task a call: the kernel's loop has no chains.
      CHECK(g.source.find("run_chain") == std::string::npos);
      continue;
    }
    CHECK(g.paths[0].find("wgmma") != std::string::npos);
    // With three consumer warpgroups a CTA's consecutive tiles run as one chain
    // (attention_chain_tma), the loop signalling for the last; with two, one tile a call.
    CHECK((g.source.find("run_chain(rec.cls, a, kTasks, kViews, kArgs, run, n,") !=
           std::string::npos) == (k.queries == 192));
    CHECK(g.source.find("attention_chain_tma<") != std::string::npos);
    CHECK(g.source.find("attention_tile_tma<") == std::string::npos);
    CHECK(g.paths[0].find(fmt::format("blocks of {} keys", k.keys)) != std::string::npos);
    CHECK(g.paths[0].find(fmt::format("tiles of {} queries", k.queries)) != std::string::npos);
    CHECK(g.threads == 128 + 2 * k.queries);
    // The consumers' registers (setmaxnreg: 232, or 160 for three) hold O, S and P without a
    // spill, and nothing makes ptxas serialise the overlapped Q Kᵀ / P V wgmmas (causal: the
    // mask's branches too).
    jit::JitOptions jo;
    jo.cache_dir = temp_dir("cache_attn");
    const jit::JitOutput out = jit::jit_compile(g.source, "attn.cu", g.kernel_name, jo);
    CHECK(out.spill_bytes == 0);
    CHECK_MESSAGE(out.log.find("are serialized") == std::string::npos, out.log);
    // Q's map, then K's and V's.
    REQUIRE(g.tensor_maps.size() == 3);
    for (size_t i = 0; i < g.tensor_maps.size(); ++i) {
      const codegen::TensorMapSpec& m = g.tensor_maps[i];
      CHECK(m.dims == 3);
      CHECK(m.depth == 1);
      CHECK(m.cols == d);
      CHECK(m.box_rows == (i == 0 ? k.queries : k.keys));
      CHECK(m.box_cols == 64);
    }
  }
}

}  // namespace
}  // namespace mkc
