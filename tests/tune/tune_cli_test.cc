// Tuning through the command line: `mkc compile` applies the database's entry for its exact key
// (and says so), ignores it under MKC_TUNE=off, warns past a corrupt file; `mkc tune --dry-run`
// lists the model's candidates without a GPU and `mkc tune` needs one; the search keeps the
// fastest measurement and stops at its budget.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compiler/pipeline.h"
#include "compiler/plan/plan.h"
#include "dsl/source.h"
#include "tests/support/gpu.h"
#include "tests/support/run.h"
#include "tune/apply.h"
#include "tune/db.h"

namespace {

using mkc::testing::run_command;

std::string temp_dir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = fmt::format("{}/tune_cli.{}", tmp != nullptr ? tmp : "/tmp", ::getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

// samples/gemm.mks at M = 16 for 2 ranks (mkc compile's default world), checked as mkc compiles it.
std::unique_ptr<mkc::compiler::Compilation> gemm16(mkc::compiler::CheckOptions* options) {
  options->ranks = {2};
  mkc::compiler::add_define("M=16", options);
  return mkc::compiler::compile_file(mkc::dsl::SourceFile::read("samples/gemm.mks"), *options, "",
                                     false);
}

nlohmann::json decision(const std::string& plan_path) {
  std::ifstream in(plan_path);
  const nlohmann::json p = nlohmann::json::parse(in);
  REQUIRE(p.at("decisions").size() == 1);
  return p.at("decisions")[0];
}

TEST_CASE("mkc compile --tune-db: the entry for the exact key sets the GEMM's tile and split") {
  const std::string dir = temp_dir(), db = dir + "/tune.json";
  mkc::compiler::CheckOptions options;
  const auto c = gemm16(&options);
  REQUIRE(c->ok());
  mkc::tune::Entry e;
  e.ops["mm"] = mkc::tune::OpKnobs{{64, 128, 64}, 2, 30.0};
  e.us = 30.0;
  e.tuned_at = "2026-12-05T04:00:00Z";
  mkc::tune::store(db, mkc::tune::tune_key(*c->file, c->checked[0], options, "sm_90a"), e);

  const std::string compile =
      fmt::format("./mkc compile samples/gemm.mks -D M=16 --emit plan -o {} --tune-db {}", dir, db);
  auto [rc, out] = run_command(compile);
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK_MESSAGE(out.find("note: tuned knobs from") != std::string::npos, out);
  nlohmann::json d = decision(dir + "/gemm.plan.json");
  CHECK(d.at("algorithm") == "tile(64, 128, 64)");
  const std::string reason = d.at("reason");
  CHECK_MESSAGE(reason.find("measured fastest by `mkc tune`") != std::string::npos, reason);
  CHECK_MESSAGE(reason.find("split-K: 2 parts") != std::string::npos, reason);

  // Another shape is another key: the cost model decides.
  std::tie(rc, out) = run_command(fmt::format(
      "./mkc compile samples/gemm.mks -D M=32 --emit plan -o {} --tune-db {}", dir, db));
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK(out.find("tuned knobs") == std::string::npos);
  CHECK(decision(dir + "/gemm.plan.json").at("reason").get<std::string>().rfind("default:", 0) ==
        0);

  // MKC_TUNE=off: the database is not read.
  std::tie(rc, out) = run_command("MKC_TUNE=off " + compile);
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK(out.find("tuned knobs") == std::string::npos);
  CHECK(decision(dir + "/gemm.plan.json")
            .at("reason")
            .get<std::string>()
            .rfind("default: the cost model's pick", 0) == 0);
  // A bad MKC_TUNE is the user's to fix.
  std::tie(rc, out) = run_command("MKC_TUNE=yes " + compile);
  CHECK(rc == 1);
  CHECK(out.find("MKC_TUNE=yes: expected off, cache or on") != std::string::npos);
}

TEST_CASE("mkc compile: a corrupt tuning database is a warning, and the compile goes on") {
  const std::string dir = temp_dir(), db = dir + "/corrupt.json";
  std::ofstream(db) << "{\"format\": \"mkc-tune-db\", \"version\": 1, \"entr";
  const auto [rc, out] = run_command(fmt::format(
      "./mkc compile samples/gemm.mks -D M=16 --emit plan -o {} --tune-db {}", dir, db));
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK_MESSAGE(
      out.find(fmt::format("warning: tuning database `{}`: not JSON", db)) != std::string::npos,
      out);
  CHECK(decision(dir + "/gemm.plan.json").at("reason").get<std::string>().rfind("default:", 0) ==
        0);
}

TEST_CASE("mkc tune: --dry-run lists the model's candidates; measuring needs a GPU") {
  auto [rc, out] = run_command("./mkc tune --dry-run samples/gemm.mks -D M=16 --candidates 3");
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK(out.find("mm (16 x 8192 x 8192, split-K allowed):") != std::string::npos);
  CHECK(out.find("* tile(") != std::string::npos);
  CHECK(out.find("model") != std::string::npos);
  // Three starred lines: the candidates that would be measured.
  size_t starred = 0;
  for (size_t p = out.find("    * "); p != std::string::npos; p = out.find("    * ", p + 1))
    ++starred;
  CHECK(starred == 3);
  // A schedule whose GEMMs all have tile(...): nothing to tune.
  std::tie(rc, out) = run_command("./mkc tune --dry-run samples/allgather.mks");
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK(out.find("0 operation(s) to tune (no tile(...))") != std::string::npos);
  // Flags are checked.
  std::tie(rc, out) = run_command("./mkc tune --dry-run --candidates 0 samples/gemm.mks");
  CHECK(rc == 1);
  std::tie(rc, out) = run_command("./mkc tune --bogus samples/gemm.mks");
  CHECK(rc == 1);
  CHECK(out.find("run `mkc tune --help`") != std::string::npos);
  std::tie(rc, out) = run_command("./mkc tune --help");
  CHECK(rc == 0);
  CHECK(out.find("usage: mkc tune") != std::string::npos);
  if (run_command("./mkc devices").first == 0) {
    MESSAGE("a GPU is present: `mkc tune` without --dry-run is not run here");
    return;
  }
  std::tie(rc, out) = run_command("./mkc tune samples/gemm.mks -D M=16");
  CHECK(rc == 2);
  CHECK_MESSAGE(
      (out.find("no CUDA driver") != std::string::npos || out.find("no GPU") != std::string::npos),
      out);
}

// `mkc tune` ranks a GEMM's candidates by the problem the lowering ranks them by
// (plan::gemm_problem): 2-CTA clusters where B's rows are unaligned (the problem tune built
// itself never allowed them), and a staged B's pitch and copies where its rows are not 16-byte
// multiples, with no clusters then; the model's first candidate is the plan's tile.
TEST_CASE("tune's GEMM problem is the lowering's: clusters, staged operands") {
  struct Case {
    int64_t M, N, K;
    int64_t b_pitch;
    bool pairs;
  };
  for (const Case& k : {Case{3000, 5000, 4000, 0, true}, Case{8192, 2500, 4096, 2560, false}}) {
    mkc::compiler::CheckOptions options;
    options.ranks = {1};
    for (const std::string& d :
         {fmt::format("M={}", k.M), fmt::format("N={}", k.N), fmt::format("K={}", k.K)})
      mkc::compiler::add_define(d, &options);
    const auto c = mkc::compiler::compile_file(mkc::dsl::SourceFile::read("samples/gemm.mks"),
                                               options, "", false);
    REQUIRE(c->ok());
    const auto gemms = mkc::tune::tunable_ops(c->checked[0], 132, 132);
    REQUIRE(gemms.size() == 1);
    const mkc::tune::GemmProblem& p = gemms[0].problem;
    INFO(k.M << "x" << k.N << "x" << k.K);
    CHECK(p.pairs == k.pairs);
    CHECK(p.b_pitch == k.b_pitch);
    CHECK((p.staged_bytes > 0) == (k.b_pitch > 0));
    const auto cands = mkc::tune::gemm_candidates(p);
    CHECK(std::any_of(cands.begin(), cands.end(), [](const auto& x) { return x.cluster == 2; }) ==
          k.pairs);
    const std::string& choice = c->plans[0].decisions.at(0).choice;
    CHECK(choice == fmt::format("tile({}, {}, {})", cands[0].bm, cands[0].bn, cands[0].bk));
  }
}

// GEMM + all-reduce: at one rank the in-place all-reduce is no task, the kernel's every CTA
// computes, and the lowering's model sees as many (it had counted 16 comm CTAs: 1024 x 8192 x
// 7168 predicted for 3 waves of 116 CTAs, run in 2 of 132); at two ranks 116 compute CTAs.
TEST_CASE("the lowering's GEMM problem has the plan's compute CTAs, at one rank and at two") {
  const auto file = std::make_shared<mkc::dsl::SourceFile>(
      "gar.mks",
      "schedule gar {\n  ranks R\n  param M = 1024, N = 8192, K = 7168\n  input A : bf16[M, K]\n"
      "  input B : bf16[K, N]\n  output C : bf16[M, N] symmetric\n  compute mm = gemm(A, B -> "
      "C) tile(auto)\n  comm ar = allreduce(C, sum) chunk(128, 256) after mm.tile\n}\n");
  for (const int64_t ranks : {1, 2}) {
    mkc::compiler::CheckOptions options;
    options.ranks = {ranks};
    const auto c = mkc::compiler::compile_file(file, options, "", false);
    REQUIRE(c->ok());
    int64_t ctas = 0;
    for (const mkc::plan::Role& r : c->plans[0].roles)
      if (r.name == "compute") ctas = r.count;
    CHECK(ctas == (ranks == 1 ? 132 : 116));
    const auto gemms = mkc::tune::tunable_ops(c->checked[0], ctas, 132);
    REQUIRE(gemms.size() == 1);
    const auto cands = mkc::tune::gemm_candidates(gemms[0].problem);
    INFO("R " << ranks << ": " << c->plans[0].decisions.at(0).reason);
    CHECK(c->plans[0].decisions.at(0).choice == cands[0].text());
    CHECK(c->plans[0].decisions.at(0).reason.find(
              fmt::format("model: {:.0f} us,", cands[0].predicted_us)) != std::string::npos);
  }
}

TEST_CASE("tune search: the fastest measurement wins, each one has a line, the budget stops it") {
  mkc::compiler::CheckOptions options;
  const auto c = gemm16(&options);
  REQUIRE(c->ok());
  const auto gemms = mkc::tune::tunable_ops(c->checked[0], 132, 132);
  REQUIRE(gemms.size() == 1);
  CHECK(gemms[0].op == "mm");
  CHECK(gemms[0].problem.M == 16);
  CHECK(gemms[0].problem.K == 8192);
  CHECK(gemms[0].problem.splittable);
  // A stand-in for the GPU: the compiler's choice (the model's first) 40 us, the model's last
  // candidate 25 us, the rest 35 us. The first is measured once, as the compiler's choice.
  const auto cands = mkc::tune::gemm_candidates(gemms[0].problem);
  REQUIRE(cands.size() >= 3);
  const mkc::tune::GemmCandidate last = cands.back();
  int measured = 0;
  const mkc::tune::Measure measure = [&](const mkc::tune::Knobs& k) {
    ++measured;
    if (k.empty()) return 40.0;
    const auto& t = k.at("mm");
    CHECK_FALSE((t.tile == std::vector<int64_t>{cands[0].bm, cands[0].bn, cands[0].bk} &&
                 t.split_k == cands[0].split_k));
    return t.tile == std::vector<int64_t>{last.bm, last.bn, last.bk} && t.split_k == last.split_k
               ? 25.0
               : 35.0;
  };
  mkc::tune::SearchOptions so;
  so.candidates = static_cast<int>(cands.size());  // all of them
  std::ostringstream progress;
  const mkc::tune::Entry e = mkc::tune::search(gemms, measure, so, progress);
  CHECK(measured == static_cast<int>(cands.size()));  // the choice, then every other candidate
  REQUIRE(e.ops.count("mm") == 1);
  CHECK(e.ops.at("mm").tile == std::vector<int64_t>{last.bm, last.bn, last.bk});
  CHECK(e.ops.at("mm").split_k == last.split_k);
  CHECK(e.us == doctest::Approx(25.0));
  CHECK(progress.str().find("the compiler's own choice: 40.00 us") != std::string::npos);
  CHECK(progress.str().find("mm " + last.text()) != std::string::npos);
  CHECK(progress.str().find("best so far") != std::string::npos);

  // Nothing beats the compiler's choice: an entry without ops (the model's pick stays).
  const mkc::tune::Measure slow = [](const mkc::tune::Knobs& k) { return k.empty() ? 10.0 : 20.0; };
  std::ostringstream p2;
  const mkc::tune::Entry none = mkc::tune::search(gemms, slow, so, p2);
  CHECK(none.ops.empty());
  CHECK(none.us == doctest::Approx(10.0));

  // A spent budget: the baseline only.
  so.budget_s = -1;
  measured = 0;
  std::ostringstream p3;
  mkc::tune::search(gemms, measure, so, p3);
  CHECK(measured == 1);
  CHECK(p3.str().find("time budget") != std::string::npos);
}

// Attention's tile is a knob at head dim 64 (the compiler's 192 queries by 128 keys, or 128 by 128
// beside a GEMM; 128 queries by 128 and 192 keys besides): the search measures them, and a
// compile with the winner lowers the attention with it and says so.
TEST_CASE("tune: attention's key block at head dim 64 is measured, and the compile applies it") {
  const auto schedule = [](int64_t d, const std::string& clause) {
    return std::make_shared<mkc::dsl::SourceFile>(
        "attn.mks", fmt::format("schedule attn {{\n  input Q : bf16[2, 3, 300, {0}]\n  input K : "
                                "bf16[2, 3, 300, {0}]\n  input V : bf16[2, 3, 300, {0}]\n  output "
                                "O : bf16[2, 3, 300, {0}]\n  compute att = attention(Q, K, V -> O, "
                                "causal = 1){1}\n}}\n",
                                d, clause));
  };
  mkc::compiler::CheckOptions options;
  options.ranks = {1};
  const auto ops_of = [&](int64_t d, const std::string& clause) {
    const auto c = mkc::compiler::compile_file(schedule(d, clause), options, "", false);
    REQUIRE(c->ok());
    return mkc::tune::tunable_ops(c->checked[0], 132, 132);
  };
  // Head dim 128, or a tile asked for: nothing to tune.
  CHECK(ops_of(128, "").empty());
  CHECK(ops_of(64, " tile(128)").empty());
  const auto ops = ops_of(64, " tile(auto)");
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].op == "att");
  CHECK(ops[0].kind == mkc::compiler::OpKind::kAttention);
  CHECK(ops[0].own == std::vector<int64_t>{192, 128});
  CHECK(ops[0].tiles == std::vector<std::vector<int64_t>>{{128, 128}, {128, 192}});
  // A stand-in for the GPU where 128 queries by 192 keys win.
  int measured = 0;
  const mkc::tune::Measure measure = [&](const mkc::tune::Knobs& k) {
    ++measured;
    if (k.empty()) return 30.0;
    return k.at("att").tile == std::vector<int64_t>{128, 192} ? 27.0 : 31.0;
  };
  std::ostringstream progress;
  const mkc::tune::Entry e = mkc::tune::search(ops, measure, mkc::tune::SearchOptions{}, progress);
  CHECK(measured == 3);
  REQUIRE(e.ops.count("att") == 1);
  CHECK(e.ops.at("att").tile == std::vector<int64_t>{128, 192});
  CHECK_MESSAGE(
      progress.str().find("att tile(128, 192) [2/2]: 27.00 us  best so far") != std::string::npos,
      progress.str());
  // Beside a GEMM the compiler's tile is 128 by 128 (one kernel, one CTA size), and 192 keys the
  // one other choice.
  {
    const auto mixed = std::make_shared<mkc::dsl::SourceFile>(
        "mixed.mks",
        "schedule mixed {\n  input Q : bf16[1, 2, 256, 64]\n  input K : bf16[1, 2, 256, 64]\n  "
        "input V : bf16[1, 2, 256, 64]\n  output O : bf16[1, 2, 256, 64]\n  input A : "
        "bf16[128, 256]\n  input B : bf16[256, 128]\n  output C : bf16[128, 128]\n  compute "
        "att = attention(Q, K, V -> O)\n  compute mm = gemm(A, B -> C) tile(128, 128, 64)\n}\n");
    const auto c = mkc::compiler::compile_file(mixed, options, "", false);
    REQUIRE(c->ok());
    const auto m = mkc::tune::tunable_ops(c->checked[0], 132, 132);
    REQUIRE(m.size() == 1);
    CHECK(m[0].own == std::vector<int64_t>{128, 128});
    CHECK(m[0].tiles == std::vector<std::vector<int64_t>>{{128, 192}});
  }
  // The compile with the winner: every tile of the attention asks for 192-key blocks.
  mkc::tune::Knobs knobs;
  knobs["att"] = mkc::plan::LowerOptions::Tuned{{128, 192}, 1, 1};
  const auto c =
      mkc::compiler::compile_file(schedule(64, ""), options, "", false,
                                  [&](const mkc::compiler::CheckedSchedule&) { return knobs; });
  REQUIRE(c->ok());
  int tiles = 0;
  for (const mkc::plan::Task& t : c->plans[0].tasks) {
    if (t.kind != mkc::plan::TaskKind::kAttentionTile) continue;
    ++tiles;
    CHECK(mkc::plan::args_as<mkc::abi::AttentionTileArgs>(t).key_block == 192);
  }
  CHECK(tiles == 2 * 3 * 3);  // B x H x query tiles of 128 (300 rows: 3)
  REQUIRE(c->plans[0].decisions.size() == 1);
  CHECK(c->plans[0].decisions[0].choice == "tile(128, 192)");
  CHECK(c->plans[0].decisions[0].reason.find("mkc tune") != std::string::npos);
  // `mkc tune --dry-run` lists it.
  const std::string dir = temp_dir();
  { std::ofstream(dir + "/attn.mks") << schedule(64, "")->text(); }
  const auto [rc, out] = run_command("./mkc tune --dry-run --ranks 1 " + dir + "/attn.mks");
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK_MESSAGE(out.find("att (attention, the compiler's tile(192, 128)):\n    * tile(128, 128)\n "
                         "   * tile(128, 192)") != std::string::npos,
                out);
}

GPU_TEST_CASE("mkc tune on a GPU: it measures, stores, and run applies; MKC_TUNE=on tunes a miss") {
  const std::string dir = temp_dir(), db = dir + "/gpu.json";
  const std::string shape = "-D M=256 -D N=1024 -D K=4096";
  auto [rc, out] = run_command(fmt::format(
      "./mkc tune samples/gemm.mks {} --candidates 3 --iters 5 --tune-db {}", shape, db));
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK(out.find("the compiler's own choice:") != std::string::npos);
  CHECK(out.find("[3/3]") != std::string::npos);
  CHECK(out.find("tuned: ") != std::string::npos);
  CHECK(mkc::tune::read_all(db).size() == 1);
  // run applies the entry when it has knobs (the compiler's own choice may have won: then none).
  std::tie(rc, out) =
      run_command(fmt::format("./mkc run samples/gemm.mks {} --check --tune-db {}", shape, db));
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK(out.find("check: passed") != std::string::npos);
  const bool knobs = !mkc::tune::read_all(db).begin()->second.second.ops.empty();
  CHECK((out.find("tuned knobs from") != std::string::npos) == knobs);
  // MKC_TUNE=on: a new shape is tuned before it runs, once.
  const std::string other = "-D M=128 -D N=512 -D K=2048";
  std::tie(rc, out) = run_command(
      fmt::format("MKC_TUNE=on ./mkc run samples/gemm.mks {} --check --tune-db {}", other, db));
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK(out.find("MKC_TUNE=on, no entry in the database yet") != std::string::npos);
  CHECK(mkc::tune::read_all(db).size() == 2);
  std::tie(rc, out) = run_command(
      fmt::format("MKC_TUNE=on ./mkc run samples/gemm.mks {} --check --tune-db {}", other, db));
  REQUIRE_MESSAGE(rc == 0, out);
  CHECK(out.find("no entry in the database yet") == std::string::npos);
}

}  // namespace
