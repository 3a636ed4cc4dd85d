// The mkc command line, driven in-process: output and exit codes of the foundation commands;
// every command's --help; the flags' bounds and -D values; `mkc run` reporting the schedule's
// mistakes before it needs a driver; input files that are not regular files; a standard output
// that cannot be written. No GPU and no NVRTC compile needed (compile_cli_test has those).
#include "tools/mkc/cli.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <sstream>
#include <streambuf>

#include "support/version.h"
#include "tests/support/gpu.h"
#include "tests/support/run.h"

namespace mkc::cli {
namespace {

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result run_cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = run(args, out, err);
  return {code, out.str(), err.str()};
}

TEST_CASE("--version prints mkc's and NVRTC's versions") {
  const Result r = run_cli({"--version"});
  CHECK(r.code == 0);
  CHECK(r.out.find(std::string("mkc ") + kVersion) == 0);
  CHECK(r.out.find("NVRTC 1") != std::string::npos);
  CHECK(r.err.empty());
}

TEST_CASE("--help and help print the usage on stdout") {
  for (const char* flag : {"--help", "-h", "help"}) {
    const Result r = run_cli({flag});
    CHECK(r.code == 0);
    CHECK(r.out.find("usage: mkc") == 0);
  }
}

TEST_CASE("every command takes --help and -h: its own usage, exit 0, anywhere on the line") {
  for (const char* cmd : {"check", "compile", "run", "devices", "help"}) {
    for (const char* flag : {"--help", "-h"}) {
      const Result r = run_cli({cmd, flag});
      CHECK_MESSAGE(r.code == 0, cmd << " " << flag << ": " << r.err);
      CHECK_MESSAGE(r.out.find(std::string("usage: mkc ") + cmd) == 0, cmd << ": " << r.out);
      CHECK(r.err.empty());
    }
  }
  // After other arguments too, and before checking them: no "unknown option", no driver needed.
  const Result run = run_cli({"run", "samples/gemm.mks", "--iters", "5", "--help"});
  CHECK(run.code == 0);
  CHECK(run.out.find("usage: mkc run") == 0);
  const Result help_run = run_cli({"help", "run"});
  CHECK(help_run.code == 0);
  CHECK(help_run.out.find("usage: mkc run") == 0);
  CHECK(run_cli({"help", "frobnicate"}).code == 1);
  CHECK(run_cli({"devices", "extra"}).code == 1);
}

TEST_CASE("no arguments: usage on stderr, exit 1") {
  const Result r = run_cli({});
  CHECK(r.code == 1);
  CHECK(r.err.find("usage: mkc") == 0);
}

TEST_CASE("an unknown command is a user error naming it") {
  const Result r = run_cli({"frobnicate"});
  CHECK(r.code == 1);
  CHECK(r.err.find("unknown command or option `frobnicate`") != std::string::npos);
}

TEST_CASE("devices: lists GPUs, or exits 2 with a clear message when there is no driver") {
  const Result r = run_cli({"devices"});
  if (mkc::testing::gpu_present()) {
    CHECK(r.code == 0);
    CHECK(r.out.find("device(s)") != std::string::npos);
  } else {
    CHECK(r.code == 2);
    CHECK(r.err.find("no CUDA driver") != std::string::npos);
  }
}

TEST_CASE("run under a launcher: its variables are checked first, --ranks must agree with them") {
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  Result r = run_cli({"run", "samples/gemm.mks", "--ranks", "4"});
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("4 ranks asked for (--ranks), but this process is rank 1 of a job of 2 "
                           "(torchrun/mkrun)") != std::string::npos,
                r.err);
  ::setenv("RANK", "2", 1);
  r = run_cli({"run", "samples/gemm.mks"});
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("RANK") != std::string::npos, r.err);
}

}  // namespace
}  // namespace mkc::cli

namespace mkc::cli {
namespace {

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST_CASE(
    "run: a missing file, a bad schedule or an unknown -D is a user error before the driver") {
  Result r = run_cli({"run", "no/such/file.mks"});
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("cannot read `no/such/file.mks`") != std::string::npos, r.err);
  CHECK(r.err.find("CUDA driver") == std::string::npos);
  const std::string bad = temp_path("run_bad.mks");
  std::ofstream(bad) << "schedule b { input X : f32[Q] }\n";
  r = run_cli({"run", bad});
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("undefined name `Q`") != std::string::npos, r.err);
  r = run_cli({"run", "samples/gemm.mks", "-D", "NOPE=1"});
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("no parameter `NOPE`") != std::string::npos, r.err);
  // With the world size given, it is checked for that size.
  r = run_cli({"run", "samples/reducescatter.mks", "--ranks", "3", "-D", "M=1024"});
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("(with R = 3)") != std::string::npos, r.err);
  // An unknown routing kind is named with the ones there are.
  r = run_cli({"run", "samples/moe_dispatch_gemm.mks", "--routing", "hot"});
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("--routing hot: not a routing kind (uniform, skewed or empty)") !=
                    std::string::npos,
                r.err);
  // A good schedule gets as far as the driver (or runs, on a GPU machine).
  if (!mkc::testing::gpu_present()) {
    r = run_cli({"run", "samples/gemm.mks", "-D", "M=256", "-D", "N=256", "-D", "K=256"});
    CHECK(r.code == 2);
    CHECK_MESSAGE(r.err.find("no CUDA driver") != std::string::npos, r.err);
  }
}

TEST_CASE("-D values: decimal with _ separators and 0x hex, in int64; each name once") {
  for (const char* ok : {"M=4_096", "M=0x1000", "M=0X10_00", "M=4096", "M=1_0_2_4"}) {
    const Result r = run_cli({"check", "--ranks", "1", "-D", ok, "samples/gemm.mks"});
    CHECK_MESSAGE(r.code == 0, ok << ": " << r.err);
  }
  // The values reach the schedule: M = 0x10 = 16 rows.
  const Result ast = run_cli({"compile", "--emit", "cu", "-D", "M=0x10", "-D", "N=1_024", "-o",
                              temp_path("define_out"), "--ranks", "1", "samples/gemm.mks"});
  CHECK_MESSAGE(ast.code == 0, ast.err);
  std::ifstream cu(temp_path("define_out") + "/gemm.cu");
  std::stringstream text;
  text << cu.rdbuf();
  // The banner lists every parameter's value (sorted by name), however -D wrote them.
  CHECK_MESSAGE(text.str().find("Parameters: K=8192, M=16, N=1024.") != std::string::npos,
                text.str().substr(0, 300));
  for (const char* bad :
       {"M=", "M=_1", "M=1_", "M=0x", "M=0x_", "M=1.5", "M=+4", "M= 4", "M=0o17", "M=4k"}) {
    const Result r = run_cli({"check", "-D", bad, "samples/gemm.mks"});
    CHECK_MESSAGE(r.code == 1, bad);
    CHECK_MESSAGE(
        r.err.find("is not an integer (write 4096, 4_096 or 0x1000)") != std::string::npos,
        bad << ": " << r.err);
  }
  // An integer past 64 bits is said to be one.
  for (const char* big : {"M=9223372036854775808", "M=0x8000000000000000"}) {
    const Result r = run_cli({"check", "-D", big, "samples/gemm.mks"});
    CHECK_MESSAGE(r.code == 1, big);
    CHECK_MESSAGE(r.err.find("is out of range: integers must fit in 64 bits") != std::string::npos,
                  big << ": " << r.err);
  }
  const Result name = run_cli({"check", "-D", "1M=4", "samples/gemm.mks"});
  CHECK(name.code == 1);
  CHECK_MESSAGE(name.err.find("-D 1M=4: `1M` is not a parameter name") != std::string::npos,
                name.err);
  const Result twice = run_cli({"check", "-D", "M=1", "-DM=2", "samples/gemm.mks"});
  CHECK(twice.code == 1);
  CHECK_MESSAGE(twice.err.find("`M` is already set (-D M=1)") != std::string::npos, twice.err);
}

TEST_CASE("flags with bounds: --sms, --iters, --timeout-ms; --emit must name something") {
  const Result sms = run_cli({"compile", "--emit", "cu", "--sms", "1000000000", "-o",
                              temp_path("sms_out"), "samples/allreduce.mks"});
  CHECK(sms.code == 1);
  CHECK_MESSAGE(
      sms.err.find("--sms 1000000000: expected an integer from 1 to 1024") != std::string::npos,
      sms.err);
  CHECK(run_cli({"check", "--sms", "1024", "samples/allreduce.mks"}).code == 0);
  CHECK(run_cli({"run", "--iters", "2000000000", "samples/allreduce.mks"}).code == 1);
  CHECK(run_cli({"run", "--timeout-ms", "99999999999999", "samples/allreduce.mks"}).code == 1);
  for (const char* emit : {"", ",", "cu,", ",cu", "cu,,plan"}) {
    const Result r =
        run_cli({"compile", "--emit", emit, "-o", temp_path("emit_out"), "samples/allreduce.mks"});
    CHECK_MESSAGE(r.code == 1, "--emit `" << emit << "`");
    CHECK(r.out.empty());
  }
}

TEST_CASE("run: a world size past the bound is refused as given, not narrowed to an int") {
  // 4294967298 is 2 once narrowed to 32 bits, 2147483648 is negative: both are refused whole,
  // before any GPU is looked for.
  for (const char* ranks : {"4294967298", "2147483648", "4097"}) {
    const Result r = run_cli({"run", "--ranks", ranks, "samples/allreduce.mks"});
    CHECK_MESSAGE(r.code == 1, ranks << ": " << r.err);
    CHECK_MESSAGE(r.err.find(std::string("--ranks ") + ranks +
                             ": the world size must be between 1 and 4096") != std::string::npos,
                  r.err);
  }
}

TEST_CASE("a huge role count is reported as it is, not wrapped") {
  const std::string path = temp_path("roles.mks");
  std::ofstream(path) << "schedule r {\n  ranks R\n  input X : f32[4096] symmetric\n"
                         "  roles compute = 4611686018427387904, comm = 4611686018427387904\n"
                         "  comm ar = allreduce(X, sum) chunk(1024)\n}\n";
  const Result r = run_cli({"check", "--ranks", "2", path});
  CHECK(r.code == 1);
  CHECK_MESSAGE(
      r.err.find("the roles ask for more than 9223372036854775807 CTAs") != std::string::npos,
      r.err);
  std::ofstream(path) << "schedule r {\n  ranks R\n  input X : f32[4096] symmetric\n"
                         "  roles compute = 4611686018427387904, comm = 3\n"
                         "  comm ar = allreduce(X, sum) chunk(1024)\n}\n";
  const Result exact = run_cli({"check", "--ranks", "2", path});
  CHECK_MESSAGE(exact.err.find("the roles ask for 4611686018427387907 CTAs") != std::string::npos,
                exact.err);
}

TEST_CASE("inputs that are not regular files are refused at once: FIFO, /dev/zero, a directory") {
  const std::string fifo = temp_path("input.fifo");
  ::unlink(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Before the fix, opening the FIFO waited for a writer forever: run it aside, and unblock it
  // (by opening the other end) if it does not come back.
  auto pending = std::async(std::launch::async, [&] { return run_cli({"check", fifo}); });
  if (pending.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    FAIL("mkc check on a FIFO did not return");
  }
  const Result r = pending.get();
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("it is a FIFO (named pipe); mkc reads schedules from regular files") !=
                    std::string::npos,
                r.err);
  const Result zero = run_cli({"check", "/dev/zero"});
  CHECK(zero.code == 1);
  CHECK_MESSAGE(zero.err.find("it is a character device") != std::string::npos, zero.err);
  const Result dir = run_cli({"run", "samples"});
  CHECK(dir.code == 1);
  CHECK_MESSAGE(dir.err.find("it is a directory") != std::string::npos, dir.err);
}

TEST_CASE("inputs larger than 64 MiB are refused, naming the cap") {
  const std::string big = temp_path("big.mks");
  {
    std::ofstream f(big, std::ios::binary);
    f.seekp((64 << 20) + 1);
    f.put('\n');
  }
  const Result r = run_cli({"check", big});
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find("schedules larger than 64 MiB are refused") != std::string::npos, r.err);
}

// A stream whose every write fails as on a full disk.
class FullDisk : public std::streambuf {
 protected:
  int overflow(int) override {
    errno = ENOSPC;
    return traits_type::eof();
  }
  std::streamsize xsputn(const char*, std::streamsize) override {
    errno = ENOSPC;
    return 0;
  }
  int sync() override {
    errno = ENOSPC;
    return -1;
  }
};

TEST_CASE("a standard output that cannot be written is an error (exit 2), naming why") {
  FullDisk full;
  std::ostream out(&full);
  std::ostringstream err;
  const int code = run({"check", "--emit=ast", "samples/gemm.mks"}, out, err);
  CHECK(code == 2);
  CHECK_MESSAGE(err.str().find("cannot write the output: No space left on device (ENOSPC)") !=
                    std::string::npos,
                err.str());
  // The binary, with stdout on /dev/full.
  const auto [rc, text] =
      mkc::testing::run_command("{ ./mkc check --emit=ast samples/gemm.mks > /dev/full; }");
  CHECK_MESSAGE(rc == 2, text);
  CHECK_MESSAGE(text.find("No space left on device") != std::string::npos, text);
}

}  // namespace
}  // namespace mkc::cli
