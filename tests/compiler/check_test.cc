// The checker on real schedules: every sample is clean at world sizes 1, 2, 4 and 8, and the
// checked result holds the evaluated shapes, unrolled loop instances and resolved dependencies.
#include "compiler/sema/check.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>

#include "compiler/sema/device_code.h"
#include "compiler/sema/expr_eval.h"
#include "dsl/parser.h"
#include "support/error.h"

namespace mkc::compiler {
namespace {

struct Checked {
  dsl::Module module;  // kept alive: the checked schedule points into it
  std::vector<CheckedSchedule> schedules;
  std::string errors;
};

Checked check_text(const std::string& text, CheckOptions opts = {}) {
  Checked c;
  dsl::Diagnostics diags;
  c.module = dsl::parse(std::make_shared<dsl::SourceFile>("t.mks", text), diags);
  if (!diags.has_errors()) c.schedules = check(c.module, opts, diags);
  c.errors = dsl::render_text(diags.all(), false);
  return c;
}

Checked check_file(const std::string& path, CheckOptions opts = {}) {
  Checked c;
  dsl::Diagnostics diags;
  c.module = dsl::parse(dsl::SourceFile::read(path), diags);
  if (!diags.has_errors()) c.schedules = check(c.module, opts, diags);
  c.errors = dsl::render_text(diags.all(), false);
  return c;
}

const OpInstance* find(const CheckedSchedule& s, const std::string& name, int iteration = -1) {
  for (const OpInstance& op : s.ops) {
    if (op.name == name && op.iteration == iteration) return &op;
  }
  return nullptr;
}

bool depends_on(const CheckedSchedule& s, const OpInstance& op, const std::string& name,
                int iteration, Granule g) {
  for (const Dependency& d : op.deps) {
    if (s.ops[d.op].name == name && s.ops[d.op].iteration == iteration && d.granule == g)
      return true;
  }
  return false;
}

TEST_CASE("every sample checks clean at 1, 2, 4 and 8 ranks") {
  int samples = 0;
  for (const auto& entry : std::filesystem::directory_iterator("samples")) {
    if (entry.path().extension() != ".mks") continue;
    ++samples;
    for (int64_t r : {1, 2, 4, 8}) {
      CheckOptions opts;
      opts.ranks = {r};
      const Checked c = check_file(entry.path().string(), opts);
      CHECK_MESSAGE(c.errors.empty(), entry.path() << " at R = " << r << ":\n" << c.errors);
      CHECK(c.schedules.size() == 1);
    }
  }
  CHECK(samples >= 10);
}

TEST_CASE("allgather_gemm: shapes follow R and -D overrides") {
  CheckOptions opts;
  opts.ranks = {4};
  opts.defines = {{"M", 1024}};
  const Checked c = check_file("samples/allgather_gemm.mks", opts);
  REQUIRE(c.errors.empty());
  const CheckedSchedule& s = c.schedules[0];
  CHECK(s.ranks == 4);
  CHECK(s.params.at("M") == 1024);
  CHECK(s.tensors[0].name == "A_part");
  CHECK(s.tensors[0].shape == std::vector<int64_t>{256, 8192});
  CHECK(s.tensors[1].shape == std::vector<int64_t>{1024, 8192});
  CHECK(s.tensors[1].placement == dsl::Placement::kSymmetric);
  const OpInstance* mm = find(s, "mm");
  REQUIRE(mm != nullptr);
  CHECK(mm->tile == std::vector<int64_t>{128, 256, 64});
  CHECK(mm->has_rows_from);
  CHECK(depends_on(s, *mm, "ag", -1, Granule::kChunk));
  const OpInstance* ag = find(s, "ag");
  CHECK(ag->chunk == std::vector<int64_t>{128, 8192});
  CHECK(ag->algo == "auto");
}

TEST_CASE("ring_attention: the loop unrolls with per-iteration dependencies") {
  CheckOptions opts;
  opts.ranks = {4};
  const Checked c = check_file("samples/ring_attention.mks", opts);
  REQUIRE(c.errors.empty());
  const CheckedSchedule& s = c.schedules[0];
  // init + 4 attention steps + 3 shifts (the last step has nothing to pass on).
  CHECK(s.ops.size() == 8);
  CHECK(find(s, "kv", 3) == nullptr);
  const OpInstance* kv0 = find(s, "kv", 0);
  REQUIRE(kv0 != nullptr);
  CHECK(kv0->deps.size() == 1);  // init; kv[-1] names nothing
  CHECK(kv0->inputs[0].index == std::vector<int64_t>{0});
  CHECK(kv0->outputs[0].index == std::vector<int64_t>{1});
  const OpInstance* att2 = find(s, "att", 2);
  REQUIRE(att2 != nullptr);
  CHECK(att2->inputs[1].index == std::vector<int64_t>{0, 0});
  CHECK(att2->inputs[2].index == std::vector<int64_t>{0, 1});
  CHECK(depends_on(s, *att2, "kv", 1, Granule::kChunk));
  CHECK(depends_on(s, *att2, "att", 1, Granule::kTile));
  CHECK(depends_on(s, *att2, "init", -1, Granule::kAll));
}

TEST_CASE("ring_attention_causal: positions per rank and step; O[0] and O[1] merge apart") {
  CheckOptions opts;
  opts.ranks = {3};
  opts.defines = {{"S", 600}};
  const Checked c = check_file("samples/ring_attention_causal.mks", opts);
  REQUIRE_MESSAGE(c.errors.empty(), c.errors);
  const CheckedSchedule& s = c.schedules[0];
  // 2 x 2 attentions at step 0, 2 x 4 after, the shift of step 0 and of step 1.
  CHECK(s.ops.size() == 14);
  const int64_t C = 600 / 6;
  for (int i = 0; i < 6; ++i) {
    const OpInstance* lo = find(s, i < 2 ? "lo0" : "lo", i);
    const OpInstance* hi = find(s, i < 2 ? "hi0" : "hi", i);
    REQUIRE(lo != nullptr);
    REQUIRE(hi != nullptr);
    CHECK(find(s, i < 2 ? "lo" : "lo0", i) == nullptr);
    // `hi` does not wait for `lo`: they merge into different slices of O. Each merges after
    // the one before it into the same slice, of whichever operation.
    CHECK_FALSE(depends_on(s, *hi, i < 2 ? "lo0" : "lo", i, Granule::kTile));
    if (i > 0) CHECK(depends_on(s, *lo, i <= 2 ? "lo0" : "lo", i - 1, Granule::kTile));
    // One merge group per slice: opened by lo0 at i = 0, closed by lo at i = 5.
    CHECK(lo->first_of_group == (i == 0));
    CHECK(lo->last_of_group == (i == 5));
    for (int64_t r = 0; r < 3; ++r) {
      // Rank r holds chunks r and 5 - r; at step i / 2 the block of rank (r - i / 2) mod 3.
      const int64_t src = ((r - i / 2) % 3 + 3) % 3;
      const int64_t k = i % 2 == 0 ? src : 5 - src;
      CHECK(evaluate(lo->per_rank.at("q_start"), r, s) == r * C);
      CHECK(evaluate(hi->per_rank.at("q_start"), r, s) == (5 - r) * C);
      CHECK(evaluate(lo->per_rank.at("k_start"), r, s) == k * C);
      CHECK(evaluate(hi->per_rank.at("k_start"), r, s) == k * C);
    }
  }
}

TEST_CASE("a merge into O is one sequence: O used between its attentions is refused") {
  const std::string text = R"(schedule s {
    input  Q : bf16[64, 16]
    input  K : bf16[64, 16]
    input  V : bf16[64, 16]
    output O : bf16[2, 64, 16]
    output X : bf16[64, 16]
    loop i in 0 .. 2 {
      compute a1 = attention(Q, K, V -> O[0], accumulate = 1) after a1[i - 1].tile
    }
    compute use = copy(O[S] -> X) after a1
    loop j in 0 .. 2 {
      compute a2 = attention(Q, K, V -> O[0], accumulate = 1) after a2[j - 1].tile, a1, use
    }
  })";
  const auto with = [&](const char* slice) {
    std::string t = text;
    t.replace(t.find("O[S]"), 4, slice);
    return check_text(t).errors;
  };
  const std::string e = with("O[0]");
  CHECK(e.find("`use` uses `O` while attentions merge into it (accumulate = 1, from `a1` on): "
               "the merged result is written only by the last of them [bad-argument]") !=
        std::string::npos);
  CHECK(e.find("note: the merge into it starts here") != std::string::npos);
  // The other slice is not part of the merge.
  CHECK(with("O[1]").empty());
}

TEST_CASE("attention's q_start and k_start: integers that may use rank, nothing else") {
  const std::string head = R"(schedule s {
    ranks R
    input  Q : bf16[64, 16]
    input  K : bf16[64, 16]
    input  V : bf16[64, 16]
    output O : bf16[64, 16]
    compute a = attention(Q, K, V -> O, causal = 1, )";
  CHECK(check_text(head + "q_start = rank * 64, k_start = 3) }").errors.empty());
  CHECK(check_text(head + "q_start = 0.5) }")
            .errors.find("`q_start` is an integer (a position in the sequence), not a decimal "
                         "[bad-argument]") != std::string::npos);
  CHECK(check_text(head + "k_start = Q) }").errors.find("`Q` is a tensor, not a number") !=
        std::string::npos);
  CHECK(check_text(head + "k_start = 1 / (rank - 1)) }").errors.find("[division-by-zero]") !=
        std::string::npos);
  CHECK(check_text(head + "q_start = peer(1).Y) }")
            .errors.find(
                "`q_start` is an integer expression (a position in the sequence) [bad-argument]") !=
        std::string::npos);
  // `rank` elsewhere is still refused, and the hint names where it may go.
  const Checked c = check_text(head + "scale = rank) }");
  CHECK(c.errors.find("[rank-dependent]") != std::string::npos);
  CHECK(c.errors.find("attention's q_start and k_start") != std::string::npos);
}

TEST_CASE("attention's seqlens (packed sequences): i32 [n + 1], self-attention, whole") {
  const auto errors = [](const std::string& decls, const std::string& args) {
    const std::string text = fmt::format(R"(schedule s {{
    input  Q : bf16[2, 64, 16]
    input  K : bf16[2, 64, 16]
    input  V : bf16[2, 64, 16]
    output O : bf16[2, 64, 16]
    {}
    compute a = attention(Q, K, V -> O, {})
  }})",
                                         decls, args);
    return check_text(text).errors;
  };
  CHECK(errors("input L : i32[5]", "causal = 1, seqlens = L").empty());
  CHECK(errors("input L : i32[5]", "seqlens = L").empty());
  CHECK(errors("input L : i64[5]", "seqlens = L").find("sequence lengths are i32") !=
        std::string::npos);
  CHECK(errors("input L : i32[1]", "seqlens = L").find("[n + 1] with n >= 1") != std::string::npos);
  CHECK(errors("input L : i32[2, 3]", "seqlens = L").find("[n + 1] with n >= 1") !=
        std::string::npos);
  CHECK(errors("input L : i32[5]", "seqlens = 3").find("seqlens") != std::string::npos);
  CHECK(errors("input L : i32[5]", "causal = 1, seqlens = L, q_start = 4")
            .find("`q_start` does not go with `seqlens`") != std::string::npos);
  const std::string cross = check_text(R"(schedule s {
    input  Q : bf16[64, 16]
    input  K : bf16[32, 16]
    input  V : bf16[32, 16]
    input  L : i32[3]
    output O : bf16[64, 16]
    compute a = attention(Q, K, V -> O, seqlens = L)
  })")
                                .errors;
  CHECK(cross.find("Q has 64 rows and K 32") != std::string::npos);
  CHECK(errors("input L : i32[2, 5]", "seqlens = L[1]")
            .find("`seqlens` takes a whole tensor, not a slice of `L`") != std::string::npos);
  const std::string merged = check_text(R"(schedule s {
    input  Q : bf16[64, 16]
    input  K : bf16[64, 16]
    input  V : bf16[64, 16]
    input  L : i32[3]
    output O : bf16[64, 16]
    loop i in 0 .. 2 {
      compute a = attention(Q, K, V -> O, accumulate = 1, seqlens = L)
    }
  })")
                                 .errors;
  CHECK(merged.find("`accumulate` does not go with `seqlens`") != std::string::npos);
}

TEST_CASE("moe_ffn_combine: combine knows its dispatch; data-dependent counts are read") {
  CheckOptions opts;
  opts.ranks = {2};
  const Checked c = check_file("samples/moe_ffn_combine.mks", opts);
  REQUIRE(c.errors.empty());
  const CheckedSchedule& s = c.schedules[0];
  const OpInstance* back = find(s, "back");
  REQUIRE(back != nullptr);
  REQUIRE(back->dispatch_op >= 0);
  CHECK(s.ops[back->dispatch_op].name == "dispatch");
  CHECK(find(s, "dispatch")->ints.at("experts") == 256);
  CHECK(s.tensors[7].name == "counts");
  CHECK(s.tensors[7].shape == std::vector<int64_t>{2, 128});
}

TEST_CASE("a world size that does not divide is found, and names R") {
  const Checked c = check_text(
      "schedule s { ranks R\n param M = 12\n input X : f32[M / R] symmetric\n comm a = "
      "allreduce(X, sum) }");
  CHECK(c.schedules.empty());
  CHECK(c.errors.find("12 / 8 leaves a remainder (with R = 8)") != std::string::npos);
}

TEST_CASE("a cycle through a put to the next rank is a deadlock across ranks") {
  const Checked c = check_text(R"(schedule ring {
    ranks R
    input  X : f32[1024] symmetric
    output Y : f32[1024] symmetric
    compute c = copy(Y -> X) after p.chunk
    comm    p = put(X -> peer((rank + 1) % R).Y) after c
  })");
  CHECK(c.errors.find("dependency cycle across ranks: `c` waits for `p` waits for `c`") !=
        std::string::npos);
}

TEST_CASE("a cycle inside one rank is named without `across ranks`") {
  const Checked c = check_text(R"(schedule s {
    input  X : f32[64]
    output Y : f32[64]
    output Z : f32[64]
    compute a = copy(X -> Y) after b
    compute b = copy(X -> Z) after a
  })");
  CHECK(c.errors.find("dependency cycle: `a` waits for `b` waits for `a`") != std::string::npos);
}

TEST_CASE("hostile input: a loop's operation named like another name is one located error") {
  // Each crashed `mkc check` (a symbol index of -1 used as an index), or, for one name in two
  // loops, exited 2 with `map::at`: a clash now stops the check after the names.
  const std::string head =
      "schedule s {\n  param N = 64\n  input X : f32[N]\n  output Y : f32[N]\n";
  struct Case {
    std::string body, error;
  };
  const Case cases[] = {
      {"  compute c = copy(X -> Y)\n  loop i in 0 .. 2 {\n    compute c = copy(X -> Y)\n  }\n",
       "t.mks:7:13: error: `c` is already declared as an operation [duplicate-name]"},
      {"  loop i in 0 .. 2 {\n    compute N = copy(X -> Y)\n  }\n",
       "t.mks:6:13: error: `N` is already declared as a parameter [duplicate-name]"},
      {"  loop i in 0 .. 2 {\n    compute X = copy(X -> Y)\n  }\n",
       "t.mks:6:13: error: `X` is already declared as a tensor [duplicate-name]"},
      {"  loop i in 0 .. 2 {\n    compute c = copy(X -> Y)\n  }\n"
       "  loop j in 0 .. 2 {\n    compute c = copy(X -> Y)\n  }\n",
       "t.mks:9:13: error: `c` is already declared as an operation [duplicate-name]"},
      {"  loop i in 0 .. 2 {\n    loop i in 0 .. 2 {\n      compute c = copy(X -> Y)\n    }\n  }\n",
       "t.mks:6:10: error: `i` is already declared as a loop variable [duplicate-name]"},
  };
  for (const Case& k : cases) {
    const Checked c = check_text(head + k.body + "}\n");
    CHECK_MESSAGE(c.schedules.empty(), k.body);
    CHECK_MESSAGE(c.errors.find(k.error) != std::string::npos, c.errors);
  }
}

TEST_CASE("a loop-carried read without a wait is a race") {
  const Checked c = check_text(R"(schedule s {
    ranks R
    input  X : f32[2, 64] symmetric
    loop i in 0 .. 4 {
      comm p = shift(X[i % 2] -> X[(i + 1) % 2])
    }
  })");
  CHECK(c.errors.find("`p` reads `X`, which `p` writes, but does not wait for `p`") !=
        std::string::npos);
}

TEST_CASE("peer indices are taken modulo R and may not divide by zero on any rank") {
  const Checked ok = check_text(R"(schedule s { ranks R
    input X : f32[64]
    output Y : f32[64] symmetric
    comm p = put(X -> peer(rank - 1).Y) })");
  CHECK(ok.errors.empty());
  const Checked bad = check_text(R"(schedule s { ranks R
    input X : f32[64]
    output Y : f32[64] symmetric
    comm p = put(X -> peer(4 / rank).Y) })");
  CHECK(bad.errors.find("[division-by-zero]") != std::string::npos);
}

TEST_CASE("the language's arithmetic: % is never negative, cdiv rounds up, overflow is reported") {
  CHECK(apply_binary("%", -7, 3).value == 2);
  CHECK(apply_binary("%", 7, -3).value == 1);
  CHECK(apply_binary("%", -7, -3).value == 2);
  CHECK(apply_binary("/", -7, 2).value == -3);
  CHECK(apply_call("cdiv", 7, 2).value == 4);
  CHECK(apply_call("cdiv", -7, 2).value == -3);
  CHECK(apply_call("cdiv", -4, 2).value == -2);
  CHECK(apply_call("cdiv", -7, -2).value == 4);
  CHECK(apply_binary("/", INT64_MIN, -1).failure == EvalFailure::kOverflow);
  CHECK(apply_binary("%", INT64_MIN, -1).failure == EvalFailure::kOverflow);
  CHECK(apply_binary("*", INT64_MAX, 2).failure == EvalFailure::kOverflow);
  CHECK(apply_binary("/", 1, 0).failure == EvalFailure::kDivisionByZero);
  CHECK(apply_binary("/", 7, 2, true).failure == EvalFailure::kInexactDivision);
  CHECK(apply_unary("-", INT64_MIN).failure == EvalFailure::kOverflow);
  CHECK(apply_unary("!", 5).value == 0);
}

TEST_CASE("compiler::evaluate gives the values the checker saw, negative divisors included") {
  // One evaluator for both: before, compiler::evaluate had its own `%` and cdiv, which disagreed
  // with the checker's for negative operands (here -3 instead of -1 for rank 0).
  CheckOptions opts;
  opts.ranks = {2};
  const Checked c = check_text(R"(schedule s { ranks R
    input X : f32[64]
    output Y : f32[64] symmetric
    comm p = put(X -> peer(cdiv(rank - 4, 2) + 7 % (rank - 3)).Y) })",
                               opts);
  REQUIRE_MESSAGE(c.errors.empty(), c.errors);
  const CheckedSchedule& s = c.schedules[0];
  const dsl::Expr& peer = s.ops[0].outputs[0].peer;
  CHECK(evaluate(peer, 0, s) == -1);
  CHECK(evaluate(peer, 1, s) == 0);
}

// Checks `text` and returns how long it took, in milliseconds (reported, not asserted: the
// outcome is; a regression to unbounded work shows as a test timeout, and tools/stress.py times
// the extreme cases in CI).
double timed_check(const std::string& text, Checked* out, CheckOptions opts = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  *out = check_text(text, opts);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TEST_CASE("front end issue: a chain of 20,000 operators is a located error, not a stack overflow") {
  std::string text = "schedule s {\n  param M = 1";
  for (int i = 0; i < 20000; ++i) text += " + 0";
  Checked c;
  const double ms = timed_check(text + "\n}\n", &c);
  CHECK(c.errors.find("t.mks:2:4107: error: expression more than 1024 operators deep "
                      "[nesting-too-deep]") != std::string::npos);
  MESSAGE("checked in " << ms << " ms");
  // An ordinary long sum is fine, and evaluates.
  std::string sum = "schedule s { param M = 1";
  for (int i = 0; i < 199; ++i) sum += " + 1";
  const Checked ok = check_text(sum + "\n input X : f32[M] }");
  REQUIRE_MESSAGE(ok.errors.empty(), ok.errors);
  CHECK(ok.schedules[0].params.at("M") == 200);
}

TEST_CASE("front end issue: arithmetic on the most negative integer is an error, not a crash") {
  // cdiv(INT64_MIN, -1) died with SIGFPE.
  const Checked c = check_text("schedule s { param M = cdiv(-9223372036854775807 - 1, -1) }");
  CHECK(c.errors.find("`cdiv(-9223372036854775807 - 1, -1)` = cdiv(-9223372036854775808, -1) "
                      "overflows 64 bits [overflow]") != std::string::npos);
  const Checked d = check_text("schedule s { param M = (-9223372036854775807 - 1) / -1 }");
  CHECK(d.errors.find("[overflow]") != std::string::npos);
  const Checked n = check_text("schedule s { param M = -(-9223372036854775807 - 1) }");
  CHECK(n.errors.find("negation overflows 64 bits [overflow]") != std::string::npos);
  // `%` by the most negative integer is defined: |b| does not fit, the result does.
  CHECK(apply_binary("%", -5, INT64_MIN).value == INT64_MAX - 4);
  CHECK(apply_call("cdiv", INT64_MIN, -1).failure == EvalFailure::kOverflow);
  CHECK(apply_call("cdiv", INT64_MIN, 1).value == INT64_MIN);
  // allgather's result rows overflowed silently: the operation vanished without an error.
  CheckOptions opts;
  opts.ranks = {8};
  const Checked g = check_text(R"(schedule s { ranks R
    input  X : fp8_e4m3[2305843009213693952] symmetric
    output Y : fp8_e4m3[16] symmetric
    comm a = allgather(X -> Y) })",
                               opts);
  CHECK(g.errors.find("overflows 64 bits [overflow]") != std::string::npos);
}

TEST_CASE("front end issue: a loop whose length overflows is rejected, not unrolled forever") {
  Checked c;
  const double ms = timed_check(R"(schedule s {
  input X : f32[4] symmetric
  loop i in -9223372036854775807 .. 1 { comm a = allreduce(X, sum) }
})",
                                &c);
  CHECK(c.errors.find("t.mks:3:3: error: loop `i` runs 9223372036854775808 iterations; at most "
                      "4096 are allowed [param-range]") != std::string::npos);
  MESSAGE("checked in " << ms << " ms");
}

TEST_CASE("front end issue: nested loops are counted before they are expanded") {
  // Three nested loops of 1,000 took ten minutes to be rejected.
  Checked c;
  const double ms = timed_check(R"(schedule s {
  input X : f32[4] symmetric
  loop i in 0 .. 1000 {
    loop j in 0 .. 1000 {
      loop k in 0 .. 1000 { comm a = allreduce(X, sum) }
    }
  }
})",
                                &c);
  CHECK(c.errors.find("t.mks:4:5: error: loop `j` runs 1000000 iterations in all inside loop `i` "
                      "(1000 iterations); at most 4096 loop iterations are allowed "
                      "[param-range]") != std::string::npos);
  CHECK(c.errors.find("t.mks:3:3: note: loop `i` is here") != std::string::npos);
  MESSAGE("checked in " << ms << " ms");
  // Bounds that use an outer loop's variable are counted per iteration, exactly: 64 triangles
  // of 2,016 iterations in all fit.
  const Checked tri = check_text(R"(schedule s {
  input X : f32[64, 64] symmetric
  loop i in 0 .. 64 {
    loop j in 0 .. i { comm a = allreduce(X[j], sum) when(i == 63) after a[j - 1] }
  }
})");
  CHECK_MESSAGE(tri.errors.empty(), tri.errors);
  // And loops without operations count too: empty nests cost time to walk.
  Checked empty;
  const double empty_ms = timed_check(R"(schedule s {
  loop i in 0 .. 100000 { loop j in 0 .. 100000 { loop k in 0 .. 100000 { } } }
})",
                                      &empty);
  CHECK(empty.errors.find("loop `i` runs 100000 iterations; at most 4096 are allowed") !=
        std::string::npos);
  MESSAGE("checked in " << empty_ms << " ms");
  // Inside an empty loop every loop is checked once, however long.
  Checked dead;
  const double dead_ms = timed_check(R"(schedule s {
  input X : f32[4] symmetric
  loop i in 0 .. 0 { loop j in 0 .. 4000 { loop k in 0 .. 4000 { comm a = allreduce(X, sum) } } }
})",
                                     &dead);
  CHECK_MESSAGE(dead.errors.empty(), dead.errors);
  MESSAGE("checked in " << dead_ms << " ms");
}

TEST_CASE("front end issue: device functions cannot include files or take reserved names") {
  const Checked inc = check_text(R"(schedule s {
  device leak(x: f32) -> f32 {
#include "/etc/passwd"
    return x;
  }
})");
  CHECK(inc.errors.find("t.mks:3:1: error: the body of device function `leak` holds a "
                        "preprocessor directive [device-function]") != std::string::npos);
  for (const char* name : {"float", "return", "main", "mkc", "mkc_fn_x", "threadIdx", "expf",
                           "__half", "f32", "bf16", "int4", "kTasks"}) {
    const Checked c =
        check_text(fmt::format("schedule s {{ device {}(x: f32) -> f32 {{ return x; }} }}", name));
    CHECK_MESSAGE(
        c.errors.find(fmt::format("`{}` cannot name a device function", name)) != std::string::npos,
        name);
  }
  const Checked param = check_text("schedule s { device f(int: f32) -> f32 { return 1.0f; } }");
  CHECK(param.errors.find("`int` cannot name a parameter of `f`: it is a C++ keyword") !=
        std::string::npos);
  const Checked fine = check_text(R"(schedule s {
  device gelu(x: f32) -> f32 {
    // a `#` in a comment, "# in a string" and x#y are not directives
    return 0.5f * x * (1.0f + tanhf(0.7978845608f * x)); /* # */
  }
})");
  CHECK_MESSAGE(fine.errors.empty(), fine.errors);
}

TEST_CASE("names device functions can take") {
  CHECK(reserved_device_name("gelu") == nullptr);
  CHECK(reserved_device_name("silu_") == nullptr);
}

TEST_CASE("-D values follow the language's integer rules, and a repeated -D is an error") {
  CheckOptions opts;
  add_define("M=0x10", &opts);
  add_define("N=4_096", &opts);
  CHECK(opts.defines.at("M") == 16);
  CHECK(opts.defines.at("N") == 4096);
  const auto message = [&](const char* text) {
    try {
      add_define(text, &opts);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("M=32") == "-D M=32: `M` is already set (-D M=16); give each parameter once");
  CHECK(message("K=abc") == "-D K=abc: `abc` is not an integer (write 4096, 4_096 or 0x1000)");
  CHECK(message("K=99999999999999999999") ==
        "-D K=99999999999999999999: `99999999999999999999` is out of range: integers must fit "
        "in 64 bits");
  CHECK(message("K") == "-D K: expected -D NAME=VALUE, e.g. -D M=4096");
  CHECK(message("=4") == "-D =4: expected -D NAME=VALUE, e.g. -D M=4096");
  CHECK(message("1K=4") == "-D 1K=4: `1K` is not a parameter name");
  CHECK(opts.defines.size() == 2);
  // The values reach the checker.
  const Checked c = check_file("samples/allreduce.mks", opts);
  CHECK(c.errors.find("-D M=16: schedule `allreduce` has no parameter `M`") != std::string::npos);
}

TEST_CASE("a peer index that uses a loop variable is kept with the variable's value") {
  // compiler::evaluate saw `i` after unrolling and stopped with an internal error.
  CheckOptions opts;
  opts.ranks = {2};
  const Checked c = check_text(R"(schedule s { ranks R
    input  X : f32[64] symmetric
    output Y : f32[4, 64] symmetric
    loop i in 0 .. 4 { comm p = put(X -> peer(rank + i).Y[i]) } })",
                               opts);
  REQUIRE_MESSAGE(c.errors.empty(), c.errors);
  const CheckedSchedule& s = c.schedules[0];
  REQUIRE(s.ops.size() == 4);
  CHECK(evaluate(s.ops[3].outputs[0].peer, 1, s) == 4);
}

TEST_CASE("chunks need not divide the tensor: the last chunk of a dimension is partial") {
  struct Case {
    const char* file;
    std::map<std::string, int64_t> defines;
    int64_t ranks;
  };
  const Case cases[] = {
      {"samples/gemm_allreduce.mks", {{"M", 1000}, {"N", 3000}, {"K", 520}}, 2},
      {"samples/allreduce.mks", {{"N", 1000}}, 1},
      {"samples/ring_attention.mks", {{"S", 3000}}, 2},
  };
  for (const Case& k : cases) {
    CheckOptions opts;
    opts.defines = k.defines;
    opts.ranks = {k.ranks};
    const Checked c = check_file(k.file, opts);
    CHECK_MESSAGE(c.errors.empty(), k.file << ":\n" << c.errors);
  }
  // The sizes are kept as written; a size past its dimension is one chunk.
  CheckOptions opts;
  opts.defines = {{"N", 1000}};
  const Checked c = check_file("samples/allreduce.mks", opts);
  REQUIRE(c.schedules.size() == 1);
  CHECK(find(c.schedules[0], "ar")->chunk == std::vector<int64_t>{65536});
  // Sizes must still be positive and no more than the tensor's dimensions.
  const auto with_chunk = [](const char* chunk) {
    return check_text(fmt::format(
        "schedule s {{ input X : f32[100, 30] symmetric\n comm a = allreduce(X, sum) {} }}",
        chunk));
  };
  CHECK(with_chunk("chunk(0, 7)")
            .errors.find("chunk size `0` is 0; it must be at least 1 [param-range]") !=
        std::string::npos);
  CHECK(with_chunk("chunk(1, 7, 7)")
            .errors.find("chunk has 3 sizes, but `X` has 2 dimensions [bad-argument]") !=
        std::string::npos);
  CHECK(with_chunk("chunk(33, 7)").errors.empty());
}

TEST_CASE("the instance budget is proven before unrolling, and names the loop that breaks it") {
  const auto loops = [](const std::string& body) {
    return "schedule s {\n  input X : f32[4096, 4]\n  output Y : f32[4096, 4]\n" + body + "}\n";
  };
  // 1,000 iterations of five operations.
  Checked five;
  const double ms = timed_check(loops(R"(  loop i in 0 .. 1000 {
    compute a = copy(X[i] -> Y[i])
    compute b = copy(X[i] -> Y[i]) after a
    compute c = copy(X[i] -> Y[i]) after b
    compute d = copy(X[i] -> Y[i]) after c
    compute e = copy(X[i] -> Y[i]) after d
  }
)"),
                                &five);
  CHECK(five.errors.find("t.mks:4:3: error: loop `i` unrolls to 5000 operation instances; a "
                         "schedule unrolls to at most 4096 [param-range]") != std::string::npos);
  MESSAGE("checked in " << ms << " ms");
  // What comes before counts; and so do the instances `when` switches off, which are checked.
  const Checked before = check_text(loops(R"(  compute a = copy(X -> Y)
  loop i in 0 .. 2048 {
    compute b = copy(X[i] -> Y[i]) after a when(i == 0)
    compute c = copy(X[i] -> Y[i]) after a when(i == 1)
  }
)"));
  CHECK(before.errors.find("loop `i` unrolls to 4096 operation instances, 4097 with the 1 before "
                           "it; a schedule unrolls to at most 4096") != std::string::npos);
  // Bounds that use an outer variable are counted exactly: a triangle of 64 rows of two
  // operations is 4032 instances, one of 65 rows 4160.
  const auto triangle = [&](int rows) {
    return check_text(loops(fmt::format(R"(  loop i in 0 .. {} {{
    loop j in 0 .. i {{
      compute a = copy(X[j] -> Y[j]) when(i == 0)
      compute b = copy(X[j] -> Y[j]) when(i == 0)
    }}
  }}
)",
                                        rows)));
  };
  CHECK_MESSAGE(triangle(64).errors.empty(), triangle(64).errors);
  CHECK(triangle(65).errors.find("loop `i` unrolls to 4160 operation instances") !=
        std::string::npos);
  // At the limit, a schedule checks; the body of an empty loop after it is still checked, and
  // does not count (it made a spurious "more than 4096" error before).
  const Checked full = check_text(loops(R"(  loop i in 0 .. 4096 { compute a = copy(X[i] -> Y[i]) }
  loop j in 0 .. 0 { compute b = copy(X[j] -> Y[j]) }
)"));
  CHECK_MESSAGE(full.errors.empty(), full.errors);
  REQUIRE(full.schedules.size() == 1);
  CHECK(full.schedules[0].ops.size() == 4096);
  const Checked dead = check_text(loops("  loop j in 0 .. 0 { compute b = copy(Q -> Y) }\n"));
  CHECK(dead.errors.find("undefined tensor `Q`") != std::string::npos);
}

// The waits a checked schedule holds, in all.
uint64_t total_waits(const CheckedSchedule& s) {
  uint64_t n = 0;
  for (const OpInstance& op : s.ops) n += op.deps.size();
  return n;
}

TEST_CASE("dependencies cost what they are, not what the source repeats") {
  // Three layers of 1,000 instances, each waiting on the whole loop before it: the race check
  // walked the waits once per reader (a minute for this 15-line file); and `after x` written 200
  // times made 200 waits per instance of x (13 GB and minutes for an 800-byte file). The work is
  // counted, not timed: the steps are a few per instance, access and wait.
  const auto layers = [](const std::string& after) {
    return fmt::format(R"(schedule s {{
  input X : f32[64]
  scratch T : f32[1000, 64]
  scratch U : f32[1000, 64]
  output Y : f32[1000, 64]
  loop i in 0 .. 1000 {{ compute x = copy(X -> T[i]) }}
  loop j in 0 .. 1000 {{ compute y = copy(T[j] -> U[j]) after {} }}
  loop k in 0 .. 1000 {{ compute z = copy(U[k] -> Y[k]) after y }}
}})",
                       after);
  };
  std::string repeated = "x";
  for (int i = 0; i < 199; ++i) repeated += ", x";
  for (const std::string& after : {std::string("x"), repeated}) {
    CAPTURE(after.size());
    const Checked c = check_text(layers(after));
    REQUIRE_MESSAGE(c.errors.empty(), c.errors);
    const CheckedSchedule& s = c.schedules[0];
    REQUIRE(s.ops.size() == 3 * 1000);
    CHECK(find(s, "y", 7)->deps.size() == 1000);
    CHECK(depends_on(s, *find(s, "z", 9), "y", 999, Granule::kAll));
    const uint64_t waits = total_waits(s);
    CHECK(waits == 2 * 1000 * 1000);
    // Naming: each of x and y indexed once, then the instances named (once per reference).
    CHECK(s.work.named <= 2 * 1000 + waits);
    // Races: every read waits for its writer directly, so the reader's waits are marked once.
    CHECK(s.work.races <= 4 * s.ops.size() + waits);
  }
}

TEST_CASE("the race check: found behind a fan-in, and at a few steps per access") {
  // z reads T, written by x, and waits only for y, which waits for all of x: no race, through
  // the closure of the waits.
  const Checked through = check_text(
      "schedule s {\n  input X : f32[64]\n  scratch T : f32[64, 64]\n  output Y : f32[64, 64]\n"
      "  loop i in 0 .. 64 { compute x = copy(X -> T[i]) }\n"
      "  loop j in 0 .. 64 { compute y = copy(X -> Y[j]) after x }\n"
      "  loop k in 0 .. 64 { compute z = copy(T[k] -> Y[k]) after y }\n}\n");
  CHECK_MESSAGE(through.errors.empty(), through.errors);
  // Without y's wait on x, it is a race, reported once; the same at 1,000 instances a layer.
  for (int n : {64, 1000}) {
    CAPTURE(n);
    const Checked racy = check_text(
        fmt::format("schedule s {{\n  input X : f32[64]\n  scratch T : f32[{0}, 64]\n"
                    "  output Y : f32[{0}, 64]\n"
                    "  loop i in 0 .. {0} {{ compute x = copy(X -> T[i]) }}\n"
                    "  loop j in 0 .. {0} {{ compute y = copy(X -> Y[j]) }}\n"
                    "  loop k in 0 .. {0} {{ compute z = copy(T[k] -> Y[k]) after y }}\n}}\n",
                    n));
    const std::string race =
        "error: `z` reads `T`, which `x` writes, but does not wait for `x` [missing-dependency]";
    const size_t at = racy.errors.find(race);
    CHECK(at != std::string::npos);
    CHECK(racy.errors.find(race, at + 1) == std::string::npos);  // once, not once per instance
  }
  const Checked missing = check_text(
      "schedule s {\n  input X : f32[64]\n  scratch T : f32[64, 64]\n  output Y : f32[64, 64]\n"
      "  loop i in 0 .. 64 { compute x = copy(X -> T[i]) }\n"
      "  loop k in 0 .. 64 { compute z = copy(T[k] -> Y[k]) after z[k - 1] }\n}\n");
  CHECK(missing.errors.find("`z` reads `T`, which `x` writes, but does not wait for `x`") !=
        std::string::npos);
  // A wait for the wrong slice is a race too: z[k] waits for x[k + 1], it reads x[k]'s rows.
  const Checked shifted = check_text(
      "schedule s {\n  input X : f32[64]\n  scratch T : f32[65, 64]\n  output Y : f32[64, 64]\n"
      "  loop i in 0 .. 65 { compute x = copy(X -> T[i]) }\n"
      "  loop k in 0 .. 64 { compute z = copy(T[k] -> Y[k]) after x[k + 1] }\n}\n");
  CHECK(shifted.errors.find("`z` reads `T`, which `x` writes, but does not wait for `x`") !=
        std::string::npos);
  // A read of the whole tensor overlaps every row written: its last writer is the last row's.
  const Checked whole = check_text(
      "schedule s {\n  input X : f32[64]\n  scratch T : f32[64, 64]\n  output Y : f32[64, 64]\n"
      "  loop i in 0 .. 64 { compute x = copy(X -> T[i]) }\n"
      "  compute z = copy(T -> Y) after x[62]\n}\n");
  CHECK(whole.errors.find("`z` reads `T`, which `x` writes, but does not wait for `x`") !=
        std::string::npos);
  const Checked whole_ok = check_text(
      "schedule s {\n  input X : f32[64]\n  scratch T : f32[64, 64]\n  output Y : f32[64, 64]\n"
      "  loop i in 0 .. 64 { compute x = copy(X -> T[i]) after x[i - 1] }\n"
      "  compute z = copy(T -> Y) after x[63]\n}\n");
  CHECK_MESSAGE(whole_ok.errors.empty(), whole_ok.errors);
  // 2,000 writers and readers of one tensor, each reader waiting for its own row's writer: the
  // steps are a few per instance, where every reader scanned every writer (and every instance of
  // the operation it waits for).
  const Checked rows = check_text(R"(schedule s {
  input X : f32[64]
  scratch T : f32[2000, 64]
  output Y : f32[2000, 64]
  loop i in 0 .. 2000 {
    compute a = copy(X -> T[i])
    compute b = copy(T[i] -> Y[i]) after a
  }
})");
  REQUIRE_MESSAGE(rows.errors.empty(), rows.errors);
  const CheckedSchedule& s = rows.schedules[0];
  REQUIRE(s.ops.size() == 4000);
  CHECK(total_waits(s) == 2000);
  CHECK(s.work.named <= 2 * 2000);
  CHECK(s.work.races <= 4 * s.ops.size());
}

}  // namespace
}  // namespace mkc::compiler

namespace mkc::compiler {
namespace {

// `check` accepted chunk grids the lowering then refused (a tensor of 10^15 elements, chunk(1)
// over 10^8): the budget is the checker's too, at the clause, with the same limit.
TEST_CASE("front end issue: a chunk grid past the task budget is a located error from check") {
  CheckOptions two;
  two.ranks = {2};
  const Checked tiny = check_text(R"(schedule s {
  ranks R
  input X : bf16[100000000] symmetric
  comm ar = allreduce(X, sum) chunk(1)
})",
                                  two);
  CHECK(tiny.errors.find("t.mks:4:31: error: chunk(1) cuts `X` into 1e+08 chunks, over mkc's "
                         "limit of 131072 tasks per rank") != std::string::npos);
  const Checked huge = check_text(R"(schedule s {
  ranks R
  input X : f32[1000000000000000] symmetric
  comm ar = allreduce(X, sum)
})",
                                  two);
  CHECK(huge.errors.find("makes 6.104e+10 chunks of about 64 KB, over mkc's limit of 131072") !=
        std::string::npos);
  CHECK(huge.errors.find("t.mks:4:3:") != std::string::npos);
  // At the limit exactly: accepted (the lowering counts the same grid against the same limit).
  const Checked edge = check_text(R"(schedule s {
  ranks R
  input X : bf16[131072] symmetric
  comm ar = allreduce(X, sum) chunk(1)
})",
                                  two);
  CHECK_MESSAGE(edge.errors.empty(), edge.errors);
}

TEST_CASE("tile(auto) and chunk(auto): the compiler chooses, as without the clause") {
  const std::string text = R"(schedule s {
  ranks R
  input  A : bf16[512, 256]
  input  B : bf16[256, 384]
  output C : bf16[512, 384] symmetric
  compute mm = gemm(A, B -> C) tile(auto)
  comm    ar = allreduce(C, sum) chunk(auto) after mm.tile
}
)";
  CheckOptions two;
  two.ranks = {2};
  const Checked c = check_text(text, two);
  REQUIRE_MESSAGE(c.errors.empty(), c.errors);
  REQUIRE(c.schedules.size() == 1);
  REQUIRE(c.schedules[0].ops.size() == 2);
  CHECK(c.schedules[0].ops[0].tile.empty());   // the lowering's rule or the tuned tile
  CHECK(c.schedules[0].ops[1].chunk.empty());  // about 64 KB of whole rows
  // The same schedule without the clauses checks to the same instances.
  std::string bare = text;
  for (const std::string clause : {" tile(auto)", " chunk(auto)"})
    bare.erase(bare.find(clause), clause.size());
  const Checked b = check_text(bare, two);
  REQUIRE(b.errors.empty());
  CHECK(b.schedules[0].ops[0].tile == c.schedules[0].ops[0].tile);
  CHECK(b.schedules[0].ops[1].chunk == c.schedules[0].ops[1].chunk);
  // `auto` stands alone, at its clause's place.
  std::string mixed = text;
  mixed.replace(mixed.find("tile(auto)"), 10, "tile(auto, 64)");
  const Checked m = check_text(mixed, two);
  CHECK_MESSAGE(
      m.errors.find("t.mks:6:32: error: `auto` stands alone in `tile(...)`") != std::string::npos,
      m.errors);
  CHECK(m.errors.find("[bad-argument]") != std::string::npos);
  // Any other word is still a name the schedule must declare.
  std::string other = text;
  other.replace(other.find("tile(auto)"), 10, "tile(autos)");
  const Checked o = check_text(other, two);
  CHECK_MESSAGE(o.errors.find("autos") != std::string::npos, o.errors);
}

}  // namespace
}  // namespace mkc::compiler
