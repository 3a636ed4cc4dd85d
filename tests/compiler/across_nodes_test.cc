// Every sample across emulated nodes, on the CPU (issue 40's acceptance: "the interpreter across
// nodes at R = 4 and 8"): `mkc verify` (compiler::verify_schedule: the plan's checks after every
// pass, then the interpreter in random CTA interleavings and back-to-back launches against the
// reference) at 4 ranks as 2 nodes of 2, and 8 ranks as 2 nodes of 4 and as 4 nodes of 2, each
// sample at its small shape (samples/small_shapes.json), made smaller still for the ones whose
// GEMM or attention the interpreter computes element by element, so that the test stays within
// a minute under the sanitizers.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>
#include <string>

#include "compiler/verify_schedule.h"
#include "dsl/source.h"
#include "tests/compiler/small_shapes.h"

namespace mkc::compiler {
namespace {

std::map<std::string, std::map<std::string, int64_t>> shapes() {
  auto out = testing::small_shapes();
  // One 128 x 128 tile per GEMM, a quarter of the sequence per attention: the edges between
  // nodes are the same kinds, the interpreter's arithmetic a tenth.
  for (const char* gemm : {"allgather_gemm", "gemm", "gemm_allreduce", "gemm_reducescatter"}) {
    out[gemm]["M"] = 128;
    out[gemm]["N"] = 128;
    out[gemm]["K"] = 64;
  }
  for (const char* att : {"ring_attention", "ring_attention_causal"}) out[att]["S"] = 512;
  return out;
}

TEST_CASE("every sample verified across emulated nodes: 2 of 2, 2 of 4, 4 of 2") {
  const auto all = shapes();
  CHECK(all.size() >= 12);
  struct World {
    int ranks, per_node;
  };
  for (const World w : {World{4, 2}, World{8, 4}, World{8, 2}}) {
    for (const auto& [name, defines] : all) {
      const std::string label =
          fmt::format("{} at {} ranks, {} per node", name, w.ranks, w.per_node);
      CAPTURE(label);
      CheckOptions opts;
      opts.ranks = {w.ranks};
      opts.ranks_per_node = w.per_node;
      for (const auto& [k, v] : defines) opts.defines[k] = v;
      VerifyScheduleOptions vo;
      vo.interleavings = 2;
      const auto res =
          verify_schedule(dsl::SourceFile::read(fmt::format("samples/{}.mks", name)), opts, vo);
      CHECK_MESSAGE(res.exit_code == 0, res.errors);
      CHECK(res.output.find(fmt::format("{} nodes of {}, edges between them through the proxy",
                                        w.ranks / w.per_node, w.per_node)) != std::string::npos);
      CHECK(res.output.find("verified") != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace mkc::compiler
