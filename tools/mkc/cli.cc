#include "tools/mkc/cli.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <ostream>

#include "compiler/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "support/error.h"
#include "support/version.h"

namespace mkc::cli {
namespace {

constexpr const char* kUsage = R"(usage: mkc <command> [options]

mkc compiles .mks schedules into one persistent multi-GPU CUDA kernel.

commands:
  devices              list the GPUs the CUDA driver sees (needs a driver)
  help                 show this help

options:
  -h, --help           show this help
  --version            print mkc's version and the NVRTC it uses

exit codes: 0 success, 1 user error (bad schedule or flag), 2 environment or internal error.
docs: README.md, dsl/SPEC.md, docs/
)";

int cmd_version(std::ostream& out) {
  fmt::print(out, "mkc {} (NVRTC {}.{}, CUDA headers {}.{})\n", kVersion,
             jit::nvrtc_version() / 1000, (jit::nvrtc_version() % 1000) / 10, CUDA_VERSION / 1000,
             (CUDA_VERSION % 1000) / 10);
  return kExitOk;
}

int cmd_devices(std::ostream& out) {
  const int n = rt::device_count();
  const int v = rt::Driver::get().version();
  fmt::print(out, "CUDA driver {}.{}, {} device(s)\n", v / 1000, (v % 1000) / 10, n);
  for (int i = 0; i < n; ++i) {
    const rt::DeviceInfo d = rt::device_info(i);
    fmt::print(out, "  {}: {}  cc {}.{}  {} SMs  {:.1f} GiB  target {}\n", i, d.name, d.cc_major,
               d.cc_minor, d.sm_count, static_cast<double>(d.total_mem) / (1u << 30), d.arch());
  }
  return kExitOk;
}

int dispatch(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << kUsage;
    return kExitUserError;
  }
  const std::string& cmd = args[0];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    out << kUsage;
    return kExitOk;
  }
  if (cmd == "--version") return cmd_version(out);
  if (cmd == "devices") return cmd_devices(out);
  fmt::print(err, "mkc: error: unknown command or option `{}`; run `mkc --help` for the list\n",
             cmd);
  return kExitUserError;
}

}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    return dispatch(args, out, err);
  } catch (const UserError& e) {
    fmt::print(err, "mkc: error: {}\n", e.what());
    return kExitUserError;
  } catch (const EnvironmentError& e) {
    fmt::print(err, "mkc: error: {}\n", e.what());
    return kExitEnvironment;
  } catch (const std::exception& e) {
    fmt::print(err, "mkc: {}\n", e.what());
    return kExitEnvironment;
  }
}

}  // namespace mkc::cli
