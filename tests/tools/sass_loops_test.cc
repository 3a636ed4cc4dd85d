// tools/sass_loops.py on a made-up SASS listing: one loop with wgmmas (its instructions, R2URs,
// uniform ops, exps and where its waits sit), one loop without (not listed), and bad input.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fstream>
#include <string>

#include "tests/support/run.h"

namespace {

using mkc::testing::run_command;
constexpr auto temp = mkc::testing::temp_path;

TEST_CASE("sass_loops: a wgmma loop's instructions, R2URs and waits against its exps") {
  const std::string path = temp("k.sass");
  std::ofstream(path) << R"(
        Function : mkc_k
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x00000a0000017a02 */
        /*0010*/                   R2UR UR4, R2 ;                         /* 0x00000000020472ca */
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
        /*0030*/                   UIADD3 UR5, UR5, 0x1, URZ ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0050*/                   MUFU.EX2 R24, R24 ;
        /*0060*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0070*/                   MUFU.EX2 R25, R25 ;
        /*0080*/              @!P0 BRA 0x10 ;
        /*0090*/                   IADD3 R3, R3, 0x1, RZ ;
        /*00a0*/              @!P1 BRA 0x90 ;
        /*00b0*/                   EXIT ;
)";
  const auto [rc, out] = run_command(fmt::format("python3 tools/sass_loops.py {}", path));
  REQUIRE_MESSAGE(rc == 0, out);
  // The loop 0x10-0x80: 8 instructions, 1 HGMMA, 1 R2UR, 1 uniform (UIADD3; R2UR is not), 2 exps;
  // wait 1 at its 4th instruction (no exp before it), wait 0 at its 6th (one before).
  CHECK_MESSAGE(out.find("loop 0x10-0x80: 8 instructions, 1 HGMMA, 1 R2UR, 1 uniform, 2 MUFU.EX2; "
                         "wait 1 at 3 (0 of 2 MUFU before), wait 0 at 5 (1 of 2 MUFU before)") !=
                    std::string::npos,
                out);
  // The loop at 0x90 has no wgmma.
  CHECK_MESSAGE(out.find("0x90-") == std::string::npos, out);
}

// cuobjdump starts each function's addresses at 0 (a kernel with a __noinline__ function has
// two): a loop's body holds its own function's instructions only.
TEST_CASE("sass_loops: each function's loops apart") {
  const std::string path = temp("two.sass");
  std::ofstream(path) << R"(
        Function : other
        /*0000*/                   UMOV UR4, 0x1 ;
        /*0010*/                   NOP ;
        /*0020*/                   EXIT ;
        Function : mkc_k
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
        /*0020*/                   MUFU.EX2 R24, R24 ;
        /*0030*/              @!P0 BRA 0x10 ;
        /*0040*/                   EXIT ;
)";
  const auto [rc, out] = run_command(fmt::format("python3 tools/sass_loops.py {}", path));
  REQUIRE_MESSAGE(rc == 0, out);
  // Three instructions of mkc_k, not other's UMOV and NOP at the same addresses.
  CHECK_MESSAGE(out.find("mkc_k: loop 0x10-0x30: 3 instructions, 1 HGMMA, 0 R2UR, 0 uniform, 1 "
                         "MUFU.EX2; no wgmma wait") != std::string::npos,
                out);
}

TEST_CASE("sass_loops: input without SASS is an error, SASS without a wgmma loop is not") {
  const std::string empty = temp("empty.sass");
  std::ofstream(empty) << "not a listing\n";
  auto [rc, out] = run_command(fmt::format("python3 tools/sass_loops.py {}", empty));
  CHECK(rc == 1);
  CHECK_MESSAGE(out.find("no SASS instructions") != std::string::npos, out);
  const std::string flat = temp("flat.sass");
  std::ofstream(flat) << "        /*0000*/                   EXIT ;\n";
  std::tie(rc, out) = run_command(fmt::format("python3 tools/sass_loops.py {}", flat));
  CHECK(rc == 0);
  CHECK_MESSAGE(out.find("no loop with a wgmma") != std::string::npos, out);
}

}  // namespace
