// The structure-aware schedule generator (tests/fuzz/mks_gen.h) on fixed seeds: every schedule it
// makes keeps the property (no crash, no internal error, what `compile` accepts `verify` finds
// sound, hostile device bodies refused). tools/fuzz.sh runs the same generator under libFuzzer.
#include "tests/fuzz/mks_gen.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace mkc::fuzz {
namespace {

TEST_CASE("generated schedules keep the compiler's property") {
  // MKC_GEN_SEEDS widens the run by hand (tools/fuzz.sh has the open-ended one); MKC_GEN_DUMP=DIR
  // writes each schedule there (seedN.mks) to look at with `mkc check`.
  const char* env = std::getenv("MKC_GEN_SEEDS");
  const char* dump = std::getenv("MKC_GEN_DUMP");
  const int seeds = env ? std::atoi(env) : 200;
  int verified = 0, hostile = 0;
  for (int seed = 1; seed <= seeds; ++seed) {
    Choices c(static_cast<uint64_t>(seed));
    const Generated g = generate_schedule(c);
    hostile += g.hostile_body;
    if (dump != nullptr)
      std::ofstream(std::string(dump) + "/seed" + std::to_string(seed) + ".mks") << g.text;
    const std::string broke = check_property(g, &verified);
    INFO("seed ", seed);
    CHECK_MESSAGE(broke.empty(), broke);
  }
  MESSAGE(seeds, " schedules, ", hostile, " with a hostile device body; ", verified,
          " (schedule, world size) pairs compiled and verified clean");
  // The generator is only worth its time if most schedules get past the check to the passes and
  // the interpreter (of 3 world sizes each).
  CHECK(verified >= seeds);
}

TEST_CASE("the generator is deterministic in its seed and varied across seeds") {
  Choices a(7), b(7), c(8);
  const std::string ta = generate_schedule(a).text;
  CHECK(ta == generate_schedule(b).text);
  CHECK(ta != generate_schedule(c).text);
  CHECK(ta.find("schedule g {") == 0);
}

TEST_CASE("fuzz bytes drive the same generator; no bytes make a minimal schedule") {
  Choices none{std::string_view{}};
  const Generated g = generate_schedule(none);
  CHECK(g.text.find("compute o0 = copy(") != std::string::npos);
  CHECK(check_property(g).empty());
}

}  // namespace
}  // namespace mkc::fuzz
