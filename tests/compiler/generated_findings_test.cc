// What the structure-aware schedule generator (tests/fuzz/mks_gen.h) found on its first runs: each
// schedule below went through `mkc compile` and then failed `mkc verify` (a race, or a wrong
// output). Each now either verifies clean or is refused with a located error, before planning.
#include <doctest/doctest.h>

#include <initializer_list>
#include <memory>
#include <string>

#include "compiler/pipeline.h"
#include "compiler/verify_schedule.h"
#include "dsl/source.h"
#include "support/error.h"

namespace mkc::compiler {
namespace {

std::shared_ptr<const dsl::SourceFile> file_of(const std::string& body) {
  return std::make_shared<dsl::SourceFile>("found.mks", "schedule g {\n  ranks R\n" + body + "}\n");
}

CheckOptions world(int64_t ranks, int64_t per_node = 0) {
  CheckOptions o;
  o.ranks = {ranks};
  o.ranks_per_node = per_node;
  return o;
}

VerifyScheduleResult verify(const std::string& body, int64_t ranks, int64_t per_node = 0) {
  VerifyScheduleOptions vo;
  vo.interleavings = 4;
  vo.launches = 3;
  return verify_schedule(file_of(body), world(ranks, per_node), vo);
}

// `body` verifies clean (plan and interpreter) at each world size of `ranks`.
void verifies_at(const std::string& body, std::initializer_list<int64_t> ranks) {
  for (int64_t r : ranks) {
    INFO("R ", r);
    const auto v = verify(body, r);
    CHECK_MESSAGE(v.exit_code == 0, v.errors);
  }
}

// A chain of `after`s through a shift: `c` waits for `b`, which waits for `a`, so `c` may read
// what `a` wrote. `after b` waited only for b's tasks that write into c's rank (the peer's
// shift), not for this rank's own, which had waited for `a`: c raced with a on Y0.
TEST_CASE("`after` chains through an operation whose tasks write only into peers") {
  const std::string body =
      "  input   A  : f32[6, 3]\n"
      "  output  Y0 : f32[6, 3]\n"
      "  output  Y1 : f32[6, 3] symmetric\n"
      "  scratch S0 : f32[6, 3] symmetric\n"
      "  compute a = copy(A -> Y0)\n"
      "  comm    b = shift(A -> S0) after a\n"
      "  compute c = copy(Y0 -> Y1) after b\n";
  verifies_at(body, {1, 2, 3, 4});
}

// The same chain where the middle operation has no task on the rank: an all-reduce in place at
// one rank lowers to nothing, so `c after b` waited for nothing and c raced with a on S.
TEST_CASE("`after` chains through an operation with no task on the rank") {
  const std::string body =
      "  input   A : f32[6, 3]\n"
      "  scratch S : f32[6, 3] symmetric\n"
      "  output  Y : f32[6, 3]\n"
      "  compute a = copy(A -> S)\n"
      "  comm    b = allreduce(S, sum) after a.tile\n"
      "  compute c = copy(S -> Y) after b\n";
  verifies_at(body, {1, 2, 3});
}

// Two shifts from one sender into the same elements of the receiver, with no reader between:
// a peer's write was not on the credit frontier, so the second did not wait for the first.
TEST_CASE("a second write into a peer's elements waits for the first; across nodes it is refused") {
  const std::string body =
      "  input   A2 : f32[6, 3]\n"
      "  scratch S1 : f32[6, 3] symmetric\n"
      "  loop i in 0 .. 3 {\n"
      "    comm o1 = shift(A2 -> S1, by = 1) after o1[i - 1]\n"
      "  }\n";
  verifies_at(body, {2, 3});
  // Between nodes a proxied write lands before the signals into its node only: no task of the
  // sender's node can wait for it, so the pass refuses the schedule, naming both writes' places.
  const auto v = verify(body, 2, 1);
  CHECK(v.exit_code == 1);
  CHECK(v.errors.find("nothing orders the two writes' landing") != std::string::npos);
  CHECK(v.errors.find("`o1[1].chunk(0).to(1)` on rank 0 (found.mks:6:5)") != std::string::npos);
  CHECK(v.errors.find("`o1[0].chunk(0).to(1)` on rank 0 (found.mks:6:5)") != std::string::npos);
  CHECK_THROWS_AS(compile_file(file_of(body), world(2, 1), "", /*generate=*/false), UserError);
  // With a reader on the receiving rank between the writes (the ring's pattern) it plans.
  const std::string ring =
      "  input   A2 : f32[6, 3]\n"
      "  output  Y  : f32[6, 3]\n"
      "  scratch S1 : f32[6, 3] symmetric\n"
      "  loop i in 0 .. 3 {\n"
      "    comm    o1 = shift(A2 -> S1, by = 1) after o1[i - 1], use[i - 1]\n"
      "    compute use = copy(S1 -> Y) after o1.chunk, use[i - 1]\n"
      "  }\n";
  for (int64_t per_node : {0, 1}) {
    INFO("per node ", per_node);
    const auto w = verify(ring, 2, per_node);
    CHECK_MESSAGE(w.exit_code == 0, w.errors);
  }
}

// A send whose source and destination are the same elements: every rank sends at once, so a
// peer's write landed on elements this rank had yet to send (a wrong output, not a race: each
// send waited for the other's read, which no task order can give both).
TEST_CASE("shift and put in place are refused at the operation") {
  for (const char* op : {"shift(S0 -> S0, by = -1)", "put(S0 -> peer(rank + 1).S0)"}) {
    INFO(op);
    const std::string body = std::string("  input   A  : f32[6, 3]\n") +
                             "  scratch S0 : f32[6, 3] symmetric\n"
                             "  compute a = copy(A -> S0)\n"
                             "  comm    b = " +
                             op + " after a\n";
    auto c = compile_file(file_of(body), world(2), "", /*generate=*/false);
    REQUIRE_FALSE(c->ok());
    const std::string text = dsl::render_text(c->diagnostics.all(), false);
    CHECK(text.find("found.mks:6:") != std::string::npos);
    CHECK(text.find("into the same elements of its peer's `S0`") != std::string::npos);
    CHECK(text.find("[bad-argument]") != std::string::npos);
  }
  // Another slot of the same tensor is another place: the ring's double buffer.
  const std::string slots =
      "  input   A  : f32[6, 3]\n"
      "  scratch B  : f32[2, 6, 3] symmetric\n"
      "  compute a = copy(A -> B[0])\n"
      "  comm    b = shift(B[0] -> B[1]) after a\n";
  const auto v = verify(slots, 3);
  CHECK_MESSAGE(v.exit_code == 0, v.errors);
}

}  // namespace
}  // namespace mkc::compiler
