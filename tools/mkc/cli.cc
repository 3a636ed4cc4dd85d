#include "tools/mkc/cli.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <ostream>

#include "compiler/check.h"
#include "compiler/nvrtc.h"
#include "dsl/ast_json.h"
#include "dsl/diagnostics.h"
#include "dsl/parser.h"
#include "runtime/cuda_driver.h"
#include "support/error.h"
#include "support/version.h"

namespace mkc::cli {
namespace {

constexpr const char* kUsage = R"(usage: mkc <command> [options]

mkc compiles .mks schedules into one persistent multi-GPU CUDA kernel.

commands:
  check FILE...        parse and check schedules; report every error with its place
  devices              list the GPUs the CUDA driver sees (needs a driver)
  help                 show this help

check options:
  -D NAME=VALUE        override a parameter's default (repeatable)
  --ranks N            check for world size N only (default: 1, 2, 4 and 8)
  --ranks-per-node L   ranks per node (default: all ranks on one node)
  --sms N              multiprocessors of the target GPU, for role limits (default 132)
  --emit=ast           print the syntax tree as JSON on stdout
  --diagnostics-format=text|json
                       how errors are printed on stderr (default text)
  --color=auto|always|never
                       colour text diagnostics (default: when stderr is a terminal)

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

// Parses "NAME=VALUE" for -D.
void parse_define(const std::string& text, compiler::CheckOptions* opts) {
  const size_t eq = text.find('=');
  const std::string name = text.substr(0, eq);
  if (eq == std::string::npos || name.empty()) {
    throw UserError(fmt::format("-D {}: expected -D NAME=VALUE, e.g. -D M=4096", text));
  }
  const std::string value = text.substr(eq + 1);
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size()) {
    throw UserError(fmt::format("-D {}: `{}` is not an integer", text, value));
  }
  opts->defines[name] = v;
}

int64_t parse_count(const std::string& flag, const std::string& value) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || v <= 0) {
    throw UserError(fmt::format("{} {}: expected a positive integer", flag, value));
  }
  return v;
}

int cmd_check(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
              Terminal term) {
  compiler::CheckOptions opts;
  std::vector<std::string> files;
  bool emit_ast = false;
  bool json = false;
  std::string color = "auto";
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto value = [&](const std::string& flag) -> std::string {
      if (a.size() > flag.size() && a.compare(0, flag.size() + 1, flag + "=") == 0)
        return a.substr(flag.size() + 1);
      if (i + 1 >= args.size()) throw UserError(fmt::format("{} needs a value", flag));
      return args[++i];
    };
    if (a == "-D") {
      if (i + 1 >= args.size()) throw UserError("-D needs NAME=VALUE");
      parse_define(args[++i], &opts);
    } else if (a.rfind("-D", 0) == 0) {
      parse_define(a.substr(2), &opts);
    } else if (a == "--ranks" || a.rfind("--ranks=", 0) == 0) {
      opts.ranks = {parse_count("--ranks", value("--ranks"))};
    } else if (a == "--ranks-per-node" || a.rfind("--ranks-per-node=", 0) == 0) {
      opts.ranks_per_node = parse_count("--ranks-per-node", value("--ranks-per-node"));
    } else if (a == "--sms" || a.rfind("--sms=", 0) == 0) {
      opts.sms = parse_count("--sms", value("--sms"));
    } else if (a == "--emit=ast") {
      emit_ast = true;
    } else if (a.rfind("--emit", 0) == 0) {
      throw UserError(fmt::format("{}: `mkc check` emits only `--emit=ast`", a));
    } else if (a == "--diagnostics-format" || a.rfind("--diagnostics-format=", 0) == 0) {
      const std::string v = value("--diagnostics-format");
      if (v != "text" && v != "json")
        throw UserError(fmt::format("--diagnostics-format={}: expected text or json", v));
      json = v == "json";
    } else if (a == "--color" || a.rfind("--color=", 0) == 0) {
      color = value("--color");
      if (color != "auto" && color != "always" && color != "never")
        throw UserError(fmt::format("--color={}: expected auto, always or never", color));
    } else if (!a.empty() && a[0] == '-') {
      throw UserError(fmt::format("unknown option `{}` for `mkc check`; run `mkc --help`", a));
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) throw UserError("`mkc check` needs at least one .mks file");
  const bool use_color = color == "always" ||
                         (color == "auto" && term.err_is_tty && std::getenv("NO_COLOR") == nullptr);

  int rc = kExitOk;
  nlohmann::json all_diags = nlohmann::json::array();
  nlohmann::json asts = nlohmann::json::array();
  for (const std::string& path : files) {
    const auto start = std::chrono::steady_clock::now();
    dsl::Diagnostics diags;
    std::shared_ptr<const dsl::SourceFile> file;
    try {
      file = dsl::SourceFile::read(path);
    } catch (const UserError& e) {
      fmt::print(err, "mkc: error: {}\n", e.what());
      rc = kExitUserError;
      continue;
    }
    const dsl::Module module = dsl::parse(file, diags);
    std::vector<compiler::CheckedSchedule> checked;
    if (!diags.has_errors()) checked = compiler::check(module, opts, diags);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (emit_ast) asts.push_back(dsl::to_json(module));
    if (json) {
      for (const dsl::Diagnostic& d : diags.all()) all_diags.push_back(dsl::to_json(d));
    } else {
      err << dsl::render_text(diags.all(), use_color);
    }
    if (diags.has_errors()) {
      rc = kExitUserError;
      if (!json)
        fmt::print(err, "{}: {} error{}\n", path, diags.error_count(),
                   diags.error_count() == 1 ? "" : "s");
      continue;
    }
    if (!emit_ast) {
      for (const compiler::CheckedSchedule& s : checked) {
        fmt::print(out, "{}: schedule `{}` ok: {} tensors, {} operations{} ({:.1f} ms)\n", path,
                   s.name, s.tensors.size(), s.ops.size(),
                   opts.ranks.empty() ? " (checked for 1, 2, 4 and 8 ranks)"
                                      : fmt::format(" (checked for {} ranks)", s.ranks),
                   ms);
      }
    }
  }
  if (emit_ast) out << dsl::dump_json(asts.size() == 1 ? asts[0] : asts) << "\n";
  if (json) err << dsl::dump_json(nlohmann::json{{"diagnostics", all_diags}}) << "\n";
  return rc;
}

int dispatch(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
             Terminal term) {
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
  if (cmd == "check") return cmd_check(args, out, err, term);
  fmt::print(err, "mkc: error: unknown command or option `{}`; run `mkc --help` for the list\n",
             cmd);
  return kExitUserError;
}

}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, Terminal term) {
  try {
    return dispatch(args, out, err, term);
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
