// A structure-aware generator of `.mks` schedules, and the property every schedule it makes must
// keep through the compiler. Random bytes almost never get past the parser; these schedules are
// well-formed and mostly well-ordered, so they reach the checker's deeper rules, lowering, the
// dependency and schedule passes and the CPU interpreter, with the shapes hostile users write:
// loops (nested, empty, switched off by `when`), names that clash (a loop operation named like a
// parameter, a tensor, a top-level operation or another loop's operation), `after` in every
// direction (backward, forward, at itself, into earlier and later iterations, per tile or chunk of
// the wrong kind), comm into symmetric ring slots, a ring attention and an MoE dispatch + grouped
// GEMM + combine with dependencies dropped or slots swapped, and device bodies with comments,
// literals, digraphs, digit separators, line splices and directives, in code and hidden in
// comments.
//
// Two front ends share it: tests/fuzz/mks_gen_fuzzer.cc (libFuzzer's bytes choose; tools/fuzz.sh)
// and tests/fuzz/mks_gen_test.cc (a seeded generator; in the README's tests and under the
// sanitizers in CI).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mkc::fuzz {

// Where the generator's choices come from: fuzz bytes (each choice consumes some; when they run
// out every choice is 0, so short inputs make short schedules) or a seeded PRNG.
class Choices {
 public:
  explicit Choices(std::string_view bytes) : bytes_(bytes) {}
  explicit Choices(uint64_t seed) : seeded_(true), state_(seed * 0x9e3779b97f4a7c15ULL + 1) {}
  // A value in [0, n); 0 when n is 0.
  size_t pick(size_t n);
  // True with about `percent` per cent; false when the bytes have run out.
  bool chance(int percent) { return pick(100) >= static_cast<size_t>(100 - percent); }

 private:
  std::string_view bytes_;
  size_t at_ = 0;
  bool seeded_ = false;
  uint64_t state_ = 0;
};

struct Generated {
  std::string text;  // the .mks file
  // A device body holds a directive, a brace digraph or an unclosed literal or comment in code
  // (not inside a comment or literal): `mkc check` must refuse the schedule.
  bool hostile_body = false;
  int ranks_per_node = 0;  // the --ranks-per-node to try the schedule with at R 2 (0: one node)
};

Generated generate_schedule(Choices& choices);

// The property, for R = 1, 2 and 3: parsing, checking, planning (`compile --emit plan`, code
// generation included) and `mkc verify` at these small shapes end in a result or a UserError,
// never another exception; a schedule `compile` accepts is one `verify` finds no race, deadlock or
// wrong output in; and a hostile device body is refused. Returns "" when it holds, else what
// broke (with the schedule's text). `verified`, when given, is incremented once per world size
// at which the schedule compiled and verify ran it clean (how deep the schedule got).
std::string check_property(const Generated& schedule, int* verified = nullptr);

}  // namespace mkc::fuzz
