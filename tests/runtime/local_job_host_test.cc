// The parts of rt::LocalJob that need no GPU: the host-side conversion of values to a buffer's
// element type and back (rounding, NaN, integers, unsupported types), and the message a device
// error record becomes (the task, the event, the counts and the .mks line), on a plan compiled
// here from a sample.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "compiler/pipeline.h"
#include "runtime/local_job.h"
#include "runtime/local_job_convert.h"
#include "runtime/local_job_errors.h"
#include "support/error.h"

namespace mkc::rt {
namespace {

using compiler::DType;

TEST_CASE("conversion: every supported element type round-trips what it can hold") {
  const std::vector<double> values = {0.0, 1.0, -2.5, 3.0e4, 65504.0, -7.0};
  for (DType t : {DType::kF16, DType::kBf16, DType::kF32, DType::kF64}) {
    const std::vector<unsigned char> bytes = encode_values(t, values);
    CHECK(bytes.size() == values.size() * compiler::dtype_bytes(t));
    const std::vector<double> back = decode_values(t, bytes);
    REQUIRE(back.size() == values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const double tol = t == DType::kBf16 ? 4e-3 : t == DType::kF16 ? 1e-3 : 0;
      CHECK_MESSAGE(std::fabs(back[i] - values[i]) <= tol * std::fabs(values[i]),
                    std::string(compiler::dtype_name(t)) << " " << values[i] << " -> " << back[i]);
    }
  }
  const std::vector<double> ints = {0, 1, -1, 2147483647.0, -2147483648.0};
  CHECK(decode_values(DType::kI32, encode_values(DType::kI32, ints)) == ints);
  const std::vector<double> big = {9007199254740992.0, -3.0};
  CHECK(decode_values(DType::kI64, encode_values(DType::kI64, big)) == big);
}

TEST_CASE("conversion: bf16 rounds to nearest even, NaN stays NaN") {
  // 1 + 2^-8 is half way between two bf16 values: it rounds to the even one (1.0).
  CHECK(from_bf16(to_bf16(1.0f + 1.0f / 256)) == 1.0f);
  CHECK(from_bf16(to_bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
  CHECK(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  const std::vector<double> nan = {std::nan("")};
  CHECK(std::isnan(decode_values(DType::kBf16, encode_values(DType::kBf16, nan))[0]));
}

TEST_CASE("conversion: an element type upload does not support is named") {
  CHECK_FALSE(convertible(DType::kFp8E4m3));
  CHECK_THROWS_WITH_AS(encode_values(DType::kFp8E4m3, {1.0}),
                       doctest::Contains("uploading fp8_e4m3 data is not supported yet"),
                       UserError);
  CHECK_THROWS_WITH_AS(decode_values(DType::kFp8E4m3, {}), doctest::Contains("downloading"),
                       UserError);
}

TEST_CASE("errors: a timed-out wait names the task, the event, the counts and the .mks line") {
  compiler::CheckOptions opts;
  opts.ranks = {2};
  opts.defines = {{"M", 256}, {"K", 64}};
  const auto c = compiler::compile_file(dsl::SourceFile::read("samples/allgather.mks"), opts);
  REQUIRE(c->ok());
  const plan::Plan& p = c->plans[0];
  // The first task that waits on something, as the device would report it.
  int task = -1, event = -1;
  for (size_t t = 0; t < p.tasks.size() && task < 0; ++t) {
    if (!p.tasks[t].waits.empty()) {
      task = static_cast<int>(t);
      event = p.tasks[t].waits[0].event;
    }
  }
  REQUIRE(task >= 0);
  // The device names the counter by its slot on the waiting rank (plan::Event).
  const int rank = p.tasks[task].rank;
  REQUIRE(p.events[event].rank == rank);
  abi::ErrorRecord e{};
  e.flag = abi::kWaitTimeout;
  e.rank = rank;
  e.task = task;
  e.event = p.events[event].slot;
  e.expected = 8;
  e.seen = 3;
  const std::string msg = launch_error_message(e, p, c->file.get(), 4, 300'000'000);
  CHECK_MESSAGE(msg.find(fmt::format("launch 4 timed out on rank {}: task {}", rank,
                                     p.tasks[task].label)) == 0,
                msg);
  CHECK_MESSAGE(msg.find("waited 0.3 s for event " + p.events[event].name +
                         " to reach 8, seen 3") != std::string::npos,
                msg);
  CHECK_MESSAGE(msg.find("samples/allgather.mks:") != std::string::npos, msg);
  // Out-of-range indices (a corrupt record) are printed as numbers, not looked up.
  e.task = 1 << 30;
  e.event = -5;
  const std::string odd = launch_error_message(e, p, nullptr, 1, 1'000'000'000);
  CHECK_MESSAGE(odd.find("task task 1073741824 (from ?)") != std::string::npos, odd);
  CHECK_MESSAGE(odd.find("for event event -5") != std::string::npos, odd);
  e.flag = abi::kPipelineTimeout;
  CHECK(launch_error_message(e, p, nullptr, 1, 1'000'000'000).find("shared-memory pipeline") !=
        std::string::npos);
}

}  // namespace
}  // namespace mkc::rt
