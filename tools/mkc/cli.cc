#include "tools/mkc/cli.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <sstream>

#include "compiler/check.h"
#include "compiler/codegen.h"
#include "compiler/jit.h"
#include "compiler/nvrtc.h"
#include "compiler/passes.h"
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
  compile FILE         lower a schedule to one persistent kernel and JIT-compile it (NVRTC)
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

compile options (and -D, --ranks-per-node, --sms, --color as for check):
  --ranks N            the world size to build the kernel for (default 2)
  --arch sm_XY         target GPU architecture (default sm_90a; sm_80 works too)
  -o DIR               where artefacts go (default: the current directory)
  --emit LIST          artefacts, comma-separated: cu, ptx, cubin, plan (default cubin),
                       written as DIR/<name>.cu, .ptx, .cubin, .plan.json
  --no-cache           compile even if the JIT cache has the kernel

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

void write_file(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
  if (!f) throw EnvironmentError(fmt::format("cannot write `{}`", path));
}

int cmd_compile(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                Terminal term) {
  compiler::CheckOptions opts;
  opts.ranks = {2};
  std::string file, out_dir = ".", arch = "sm_90a", color = "auto";
  std::set<std::string> emit = {"cubin"};
  bool use_cache = true;
  std::string defines_text;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto value = [&](const std::string& flag) -> std::string {
      if (a.size() > flag.size() && a.compare(0, flag.size() + 1, flag + "=") == 0)
        return a.substr(flag.size() + 1);
      if (i + 1 >= args.size()) throw UserError(fmt::format("{} needs a value", flag));
      return args[++i];
    };
    if (a == "-D" || (a.rfind("-D", 0) == 0 && a.size() > 2)) {
      std::string d;
      if (a == "-D") {
        if (i + 1 >= args.size()) throw UserError("-D needs NAME=VALUE");
        d = args[++i];
      } else {
        d = a.substr(2);
      }
      parse_define(d, &opts);
      defines_text += (defines_text.empty() ? "" : " ") + d;
    } else if (a == "--ranks" || a.rfind("--ranks=", 0) == 0) {
      opts.ranks = {parse_count("--ranks", value("--ranks"))};
    } else if (a == "--ranks-per-node" || a.rfind("--ranks-per-node=", 0) == 0) {
      opts.ranks_per_node = parse_count("--ranks-per-node", value("--ranks-per-node"));
    } else if (a == "--sms" || a.rfind("--sms=", 0) == 0) {
      opts.sms = parse_count("--sms", value("--sms"));
    } else if (a == "--arch" || a.rfind("--arch=", 0) == 0) {
      arch = value("--arch");
      if (arch.rfind("sm_", 0) != 0) {
        throw UserError(
            fmt::format("--arch {}: expected a real architecture such as sm_90a or sm_80", arch));
      }
    } else if (a == "-o") {
      out_dir = value("-o");
    } else if (a == "--emit" || a.rfind("--emit=", 0) == 0) {
      emit.clear();
      std::stringstream ss(value("--emit"));
      for (std::string item; std::getline(ss, item, ',');) {
        if (item != "cu" && item != "ptx" && item != "cubin" && item != "plan") {
          throw UserError(
              fmt::format("--emit: unknown artefact `{}` (cu, ptx, cubin, plan)", item));
        }
        emit.insert(item);
      }
    } else if (a == "--no-cache") {
      use_cache = false;
    } else if (a == "--color" || a.rfind("--color=", 0) == 0) {
      color = value("--color");
    } else if (!a.empty() && a[0] == '-') {
      throw UserError(fmt::format("unknown option `{}` for `mkc compile`; run `mkc --help`", a));
    } else if (file.empty()) {
      file = a;
    } else {
      throw UserError("`mkc compile` takes one .mks file");
    }
  }
  if (file.empty()) throw UserError("`mkc compile` needs a .mks file");
  const bool use_color = color == "always" ||
                         (color == "auto" && term.err_is_tty && std::getenv("NO_COLOR") == nullptr);
  const auto file_src = dsl::SourceFile::read(file);
  dsl::Diagnostics diags;
  const dsl::Module module = dsl::parse(file_src, diags);
  std::vector<compiler::CheckedSchedule> checked;
  if (!diags.has_errors()) checked = compiler::check(module, opts, diags);
  err << dsl::render_text(diags.all(), use_color);
  if (diags.has_errors()) return kExitUserError;
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw EnvironmentError(fmt::format("cannot create `{}`: {}", out_dir, ec.message()));
  const std::string stem = std::filesystem::path(file).stem().string();
  for (const compiler::CheckedSchedule& s : checked) {
    const std::string name = checked.size() == 1 ? stem : stem + "." + s.name;
    plan::PassOptions po;
    po.sms = opts.sms;
    const plan::Plan p = plan::build_plan(s, po);
    codegen::CodegenOptions co;
    co.file = file_src;
    co.defines = defines_text;
    const codegen::Generated g = codegen::generate(p, co);
    if (emit.count("plan"))
      write_file(out_dir + "/" + name + ".plan.json", dsl::dump_json(plan::to_json(p)) + "\n");
    if (emit.count("cu")) write_file(out_dir + "/" + name + ".cu", g.source);
    std::string roles;
    for (const plan::Role& r : p.roles)
      roles += fmt::format("{}{}={}", roles.empty() ? "" : " ", r.name, r.count);
    if (emit.count("cubin") == 0 && emit.count("ptx") == 0) {
      fmt::print(out,
                 "{}: kernel {} for {} rank{}: roles {}, {} tasks, {} bytes of source (not "
                 "compiled: --emit has no cubin or ptx)\n",
                 file, g.kernel_name, s.ranks, s.ranks == 1 ? "" : "s", roles, p.tasks.size(),
                 g.source.size());
      continue;
    }
    jit::JitOptions jo;
    jo.arch = arch;
    jo.want_ptx = emit.count("ptx") > 0;
    jo.use_cache = use_cache;
    jit::JitOutput j;
    try {
      j = jit::jit_compile(g.source, name + ".cu", g.kernel_name, jo);
    } catch (const jit::NvrtcCompileError& e) {
      // Errors in the user's device functions point into the .mks file through #line.
      fmt::print(err, "mkc: error: {}\n", e.what());
      return e.log().find(".mks(") != std::string::npos ? kExitUserError : kExitEnvironment;
    }
    if (emit.count("cubin")) write_file(out_dir + "/" + name + ".cubin", j.cubin);
    if (emit.count("ptx")) write_file(out_dir + "/" + name + ".ptx", j.ptx);
    fmt::print(out,
               "{}: kernel {} for {} rank{}, {}: {} registers, {} B spills, {} B smem, roles {}, "
               "{} tasks, "
               "{:.2f} s ({})\n",
               file, g.kernel_name, s.ranks, s.ranks == 1 ? "" : "s", arch, j.registers,
               j.spill_bytes, j.smem_bytes, roles, p.tasks.size(), j.seconds,
               j.cache_hit ? "cache hit" : "cache miss");
  }
  return kExitOk;
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
  if (cmd == "compile") return cmd_compile(args, out, err, term);
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
