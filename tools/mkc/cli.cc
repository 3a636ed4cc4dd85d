// The `mkc` command line: a table of subcommands (check, compile, run, devices, help), each with
// its own usage (`mkc <command> --help`), the flags they share, and the mapping of mkc's errors to
// exit codes (cli.h). Output is checked at the end: a standard output that could not be written
// (a full disk) is an error, not a silent success.
#include "tools/mkc/cli.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <sstream>

#include "compiler/codegen/codegen.h"
#include "compiler/passes/passes.h"
#include "compiler/pipeline.h"
#include "compiler/sema/check.h"
#include "compiler/verify_schedule.h"
#include "dsl/ast_json.h"
#include "dsl/diagnostics.h"
#include "dsl/parser.h"
#include "jit/jit.h"
#include "jit/nvrtc.h"
#include "runtime/bootstrap.h"
#include "runtime/cuda_driver.h"
#include "runtime/local_job.h"
#include "runtime/npy.h"
#include "runtime/trace.h"
#include "runtime/tune_run.h"
#include "runtime/verify.h"
#include "support/arch.h"
#include "support/error.h"
#include "support/phases.h"
#include "support/version.h"
#include "tune/apply.h"
#include "tune/db.h"

namespace mkc::cli {
namespace {

// Bounds on counts, so a typo cannot make mkc allocate or wait without end.
constexpr int64_t kMaxSms = 1024;             // today's largest GPUs have under 200 SMs
constexpr int64_t kMaxIters = 1'000'000;      // --iters
constexpr int64_t kMaxTimeoutMs = 3'600'000;  // --timeout-ms: one hour

constexpr const char* kCheckUsage = R"(usage: mkc check [options] FILE...

Parses and checks schedules; reports every error with its place (exit 1 if any).

options:
  -D NAME=VALUE        override a parameter's default, once per name; VALUE is an integer
                       written as in a schedule: 4096, 4_096, 0x1000 (or negative: -8)
  --ranks N            check for world size N only (default: 1, 2, 4 and 8)
  --ranks-per-node L   ranks per node (default: all ranks on one node)
  --sms N              multiprocessors of the target GPU, for role limits (1 to 1024; default 132)
  --emit=ast           print the syntax tree as JSON on stdout
  --diagnostics-format=text|json
                       how errors are printed on stderr (default text)
  --color=auto|always|never
                       colour text diagnostics (default: when stderr is a terminal)
  -h, --help           show this help

FILE must be a regular file (not a FIFO or a device) of at most 64 MiB.
)";

constexpr const char* kCompileUsage = R"(usage: mkc compile [options] FILE

Lowers a schedule to one persistent kernel and JIT-compiles it (NVRTC); prints registers, spills,
shared memory (static + dynamic), CTA roles, compile time and whether the JIT cache hit, then the
device code each task class runs on --arch (wgmma on sm_90a, mma.sync on sm_80+, else SIMT).

options (and -D, --ranks-per-node, --sms, --color as for `mkc check`):
  --ranks N            the world size to build the kernel for (default 2)
  --arch sm_XY         target GPU architecture (default sm_90a; sm_80 works too; an arch NVRTC
                       does not compile for is refused with the list it accepts)
  -o DIR               where artefacts go (default: the current directory)
  --emit LIST          artefacts, comma-separated: cu, ptx, cubin, plan (default cubin),
                       written as DIR/<name>.cu, .ptx, .cubin, .plan.json; each is written whole
                       (a temporary file renamed), and those of <name> this run did not write
                       are removed, so DIR never mixes two compiles
  --no-cache           compile even if the JIT cache has the kernel
  --verbose            print NVRTC's and ptxas's whole log (registers, wgmma serialisation)
  --rank R             plan and build rank R alone: the ranks within two steps of it are
                       lowered and scheduled, which give R the world's tasks, waits and CTA
                       lists, so the time does not grow with --ranks; the kernel holds R's
                       tables only and runs in a process that runs R alone (what `mkc run` and
                       the API build under a launcher)

The cubin holds the plan's tables, so it runs alone. `mkc run` and the API compile the tables as
data instead (copied into the module at load: NVRTC's time does not grow with the plan);
MKC_TABLES=data makes `compile` do the same (the cubin then needs them copied in, see
docs/COMPILER.md), MKC_TABLES=source makes every path compile them in.

  --tune-db FILE       the tuning database (default: $MKC_TUNE_DB, else tune.json in the JIT
                       cache's directory); its entry for this schedule, parameters, world, arch
                       and SMs, if any, sets the tiles of GEMMs without tile(...) (`mkc tune`
                       writes it; MKC_TUNE=off ignores it)
  -h, --help           show this help

JIT cache: $MKC_CACHE_DIR, else $XDG_CACHE_HOME/mkc, else ~/.cache/mkc, else
${TMPDIR:-/tmp}/mkc-cache-<uid>; one that cannot be used or written is a warning, not an error.
$MKC_NVRTC_OPTIONS adds NVRTC options.
)";

constexpr const char* kTuneUsage = R"(usage: mkc tune [options] FILE

Measures, on this machine's GPU, the schedule's GEMMs without tile(...) at the tiles and split-K
the cost model ranks best (tune/gemm_model.h), and its bf16/f16 attentions at head dim 64
without tile(...) at tile(128, 192) and, where the compiler's own is 192 queries by 128 keys,
tile(128, 128), one operation at a time, and stores the fastest in the tuning database, which
`mkc compile`, `mkc run` and the API then use for the same schedule, parameters, world size,
ranks per node, arch, SMs and NVRTC. A line per measurement.

options (and -D, --ranks, --ranks-per-node, --sms, --share-gpus as for `mkc run`):
  --tune-db FILE       the database to write (default as for `mkc compile`)
  --candidates N       per GEMM, measure the model's best N candidates (default 6, 1 to 32)
  --iters N            launches timed per measurement (default 20, at most 10000)
  --budget-s S         stop starting new measurements after S seconds (default 600)
  --dry-run            print the candidates and the model's times; measure nothing, no GPU
  -h, --help           show this help

In one process only (not under a launcher): ranks beyond the GPUs need --share-gpus, and their
times are then not the job's.
)";

constexpr const char* kRunUsage = R"(usage: mkc run [options] FILE

Compiles and runs a schedule on this machine's GPUs, one rank per GPU (all from one process, or
one rank per process under mkrun/torchrun/mpirun/srun). The schedule is checked before the CUDA
driver is loaded: its mistakes are reported on any machine. Under a launcher each process plans
its own rank (and the ranks within two steps of it) and builds that rank's kernel alone, so its
compile does not grow with the job; MKC_PLAN=world makes every process plan every rank.

options (and -D, --sms as for `mkc check`):
  --ranks N            ranks = GPUs to use (default: every GPU of the machine; under a
                       launcher the job's size)
  --ranks-per-node L   every L consecutive ranks are one node, also on one machine (default:
                       $MKC_RANKS_PER_NODE, else the launcher's ranks per host): edges between
                       nodes go through the host proxies (transport: $MKC_NET, docs/NET.md)
  --share-gpus         allow more ranks than GPUs (rank r on GPU r % G): for tests, not speed
  --check              compare every output of every rank with the reference (fresh random data;
                       device functions run on the GPU, the rest of the reference in f64)
  --iters N            time N back-to-back launches (at most 1000000) and print the time per
                       launch
  --timeout-ms T       how long a wait inside the kernel may take before it reports (default
                       5000, at most 3600000)
  --trace FILE         one more launch, traced: every task's start and end per CTA, written as
                       Chrome/Perfetto trace JSON (open in ui.perfetto.dev)
  --save DIR           write every rank's tensors after the first launch as DIR/<tensor>.rank<r>.npy
                       (bf16 as f32)
  --load DIR           take the inputs from DIR/<tensor>.rank<r>.npy instead of random data
  --tune-db FILE       the tuning database, as for `mkc compile` (`mkc tune` writes it);
                       MKC_TUNE=on tunes a schedule it has no entry for first (docs/TUNING.md)
  --seed N             the random inputs' seed (default 1)
  --routing KIND       how random MoE routing tables pick each token's (distinct) experts:
                       uniform (default), skewed (a few hot experts) or empty (a quarter of the
                       experts get no rows)
  -h, --help           show this help
)";

constexpr const char* kVerifyUsage = R"(usage: mkc verify [options] FILE

Trusts a schedule without a GPU: for each world size, checks it, builds the plan with the plan
verifier after every pass (boxes inside buffers and covering what each task touches, wait counts,
deadlocks, every read after its writer, every overwrite after its readers, launch fences), then
runs the plan on the CPU interpreter over several random interleavings and launches against the
reference. A race, a deadlock or a wrong output is reported with the task, the rank and the .mks
line (exit 1). Device functions run on the CPU as written, compiled by mkc's Clang plugin; where
the plugin is absent, as a stand-in (the data flow is checked, not their bodies), and verify says
so. The interpreter is for small shapes: pass them with -D.

options (and -D, --ranks, --ranks-per-node, --sms, --color as for `mkc check`):
  --interleavings N    random CTA interleavings the interpreter tries (default 4, at most 1000)
  --launches N         back-to-back launches per interleaving (default 2, at most 100)
  --seed N             the first interleaving's seed and the inputs' seed (default 1)
  --emit plan          print every verified plan as JSON on stdout, with each task's read and
                       write boxes (buffer, lo, hi); the summary then goes to stderr
  -h, --help           show this help
)";

constexpr const char* kDevicesUsage = R"(usage: mkc devices

Lists the GPUs the CUDA driver sees: name, compute capability, SMs, memory, NVRTC target.
Needs a driver (exit 2 without one).
)";

constexpr const char* kHelpUsage = R"(usage: mkc help [COMMAND]

Shows mkc's usage, or COMMAND's (the same as `mkc COMMAND --help`).
)";

constexpr const char* kUsageHead = R"(usage: mkc <command> [options]

mkc compiles .mks schedules into one persistent multi-GPU CUDA kernel.

commands:
)";

constexpr const char* kUsageTail = R"(
`mkc <command> --help` (or -h) shows a command's options.

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

// A positive integer flag value, at most `max`.
int64_t parse_count(const std::string& flag, const std::string& value, int64_t max = INT64_MAX) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || v <= 0 || v > max) {
    throw UserError(max == INT64_MAX
                        ? fmt::format("{} {}: expected a positive integer", flag, value)
                        : fmt::format("{} {}: expected an integer from 1 to {}", flag, value, max));
  }
  return v;
}

// The flags `check`, `compile` and `run` share, and the ones each adds: a command parses its
// arguments with `next()`, which handles the shared flags itself and hands back the others.
class Flags {
 public:
  // Every command that checks a schedule parses its device functions with Clang where the plugin
  // is there (compiler/sema/clang_check.h).
  explicit Flags(const std::vector<std::string>& args) : args_(args) {
    check.clang_device_fns = true;
  }

  compiler::CheckOptions check;
  std::string defines_text;  // "-D" values as given, for banners
  std::string color = "auto";
  std::vector<std::string> files;
  std::string tune_db;  // --tune-db (compile, run, tune)

  // Moves to the next argument that is not a shared flag or a file; false at the end.
  bool next() {
    while (++i_ < args_.size()) {
      const std::string& a = args_[i_];
      if (a == "-D" || (a.rfind("-D", 0) == 0 && a.size() > 2)) {
        const std::string d = a == "-D" ? value("-D") : a.substr(2);
        // The front end's parser: the language's integer rules (dsl::parse_int_literal), a name
        // that can be a parameter, each name once.
        compiler::add_define(d, &check);
        defines_text += (defines_text.empty() ? "" : " ") + d;
      } else if (is("--ranks")) {
        check.ranks = {parse_count("--ranks", value("--ranks"))};
      } else if (is("--ranks-per-node")) {
        check.ranks_per_node = parse_count("--ranks-per-node", value("--ranks-per-node"));
      } else if (is("--sms")) {
        check.sms = parse_count("--sms", value("--sms"), kMaxSms);
      } else if (is("--tune-db")) {
        tune_db = value("--tune-db");
        if (tune_db.empty()) throw UserError("--tune-db needs a file name");
      } else if (is("--color")) {
        color = value("--color");
        if (color != "auto" && color != "always" && color != "never") {
          throw UserError(fmt::format("--color={}: expected auto, always or never", color));
        }
      } else if (a.empty() || a[0] != '-') {
        files.push_back(a);
      } else {
        return true;
      }
    }
    return false;
  }
  const std::string& arg() const { return args_[i_]; }
  // True when the current argument is `flag` or `flag=...`.
  bool is(const std::string& flag) const {
    const std::string& a = args_[i_];
    return a == flag || a.rfind(flag + "=", 0) == 0;
  }
  // The value of the current flag: after `=`, or the next argument.
  std::string value(const std::string& flag) {
    const std::string& a = args_[i_];
    if (a.size() > flag.size() && a.compare(0, flag.size() + 1, flag + "=") == 0)
      return a.substr(flag.size() + 1);
    if (i_ + 1 >= args_.size()) throw UserError(fmt::format("{} needs a value", flag));
    return args_[++i_];
  }
  [[noreturn]] void unknown(const std::string& command) const {
    throw UserError(fmt::format("unknown option `{}` for `mkc {}`; run `mkc {} --help`", args_[i_],
                                command, command));
  }
  bool use_color(const Terminal& term) const {
    return color == "always" ||
           (color == "auto" && term.err_is_tty && std::getenv("NO_COLOR") == nullptr);
  }

 private:
  const std::vector<std::string>& args_;
  size_t i_ = 0;
};

int cmd_check(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
              Terminal term) {
  Flags f(args);
  bool emit_ast = false;
  bool json = false;
  while (f.next()) {
    if (f.arg() == "--emit=ast") {
      emit_ast = true;
    } else if (f.arg().rfind("--emit", 0) == 0) {
      throw UserError(fmt::format("{}: `mkc check` emits only `--emit=ast`", f.arg()));
    } else if (f.is("--diagnostics-format")) {
      const std::string v = f.value("--diagnostics-format");
      if (v != "text" && v != "json")
        throw UserError(fmt::format("--diagnostics-format={}: expected text or json", v));
      json = v == "json";
    } else {
      f.unknown("check");
    }
  }
  if (f.files.empty()) throw UserError("`mkc check` needs at least one .mks file");
  const bool use_color = f.use_color(term);
  const compiler::CheckOptions& opts = f.check;

  int rc = kExitOk;
  nlohmann::json all_diags = nlohmann::json::array();
  nlohmann::json asts = nlohmann::json::array();
  for (const std::string& path : f.files) {
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
                   opts.ranks.empty()
                       ? " (checked for 1, 2, 4 and 8 ranks)"
                       : fmt::format(" (checked for {} rank{})", s.ranks, s.ranks == 1 ? "" : "s"),
                   ms);
      }
    }
  }
  if (emit_ast) out << dsl::dump_json(asts.size() == 1 ? asts[0] : asts) << "\n";
  if (json) err << dsl::dump_json(nlohmann::json{{"diagnostics", all_diags}}) << "\n";
  return rc;
}

// "Permission denied (EACCES)".
std::string errno_text(int e) {
  const char* name = strerrorname_np(e);
  return fmt::format("{} ({})", std::strerror(e), name != nullptr ? name : std::to_string(e));
}

// The artefacts `mkc compile` may write for a kernel named <name>.
constexpr const char* kArtefactSuffixes[] = {".cu", ".ptx", ".cubin", ".plan.json"};

// One kernel's artefacts in -o DIR. Each is written to a temporary file in DIR and renamed into
// place, so a failure (a full disk, a crash) never leaves a truncated artefact. finish(), and the
// destructor when the compile failed half way, remove the artefacts of the same name that this run
// did not write: DIR never holds a new .cu beside an old .cubin.
class Artefacts {
 public:
  Artefacts(std::string dir, std::string name) : dir_(std::move(dir)), name_(std::move(name)) {}
  ~Artefacts() { prune(); }
  Artefacts(const Artefacts&) = delete;
  Artefacts& operator=(const Artefacts&) = delete;

  void write(const std::string& suffix, const std::string& data) {
    write(suffix, [&](const Sink& sink) { sink(data); });
  }

  // The same for a file handed over in pieces: `produce` calls its sink with each in order.
  using Sink = std::function<void(std::string_view)>;
  void write(const std::string& suffix, const std::function<void(const Sink&)>& produce) {
    const std::string path = dir_ + "/" + name_ + suffix;
    std::mt19937_64 rng(std::random_device{}());
    const std::string tmp =
        fmt::format("{}/.{}{}.tmp.{}.{:x}", dir_, name_, suffix, ::getpid(), rng());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0)
      throw EnvironmentError(fmt::format("cannot write `{}`: {}", path, errno_text(errno)));
    int err = 0;
    const Sink sink = [&](std::string_view data) {
      for (size_t done = 0; done < data.size() && err == 0;) {
        const ssize_t k = ::write(fd, data.data() + done, data.size() - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
          err = k < 0 ? errno : EIO;
        } else {
          done += static_cast<size_t>(k);
        }
      }
    };
    try {
      produce(sink);
    } catch (...) {
      ::close(fd);
      ::unlink(tmp.c_str());
      throw;
    }
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
    if (err != 0) {
      ::unlink(tmp.c_str());
      throw EnvironmentError(fmt::format("cannot write `{}`: {}", path, errno_text(err)));
    }
    written_.insert(suffix);
  }

  // Removes the stale artefacts; EnvironmentError when one stays.
  void finish() {
    const std::string failed = prune();
    if (!failed.empty()) throw EnvironmentError(failed);
  }

 private:
  // The stale artefacts removed; what could not be, as a message ("" when all went).
  std::string prune() noexcept {
    std::string failed;
    for (const char* suffix : kArtefactSuffixes) {
      if (written_.count(suffix)) continue;
      const std::string path = dir_ + "/" + name_ + suffix;
      if (::unlink(path.c_str()) != 0 && errno != ENOENT && failed.empty()) {
        failed = fmt::format("cannot remove the stale `{}` (not written by this compile): {}", path,
                             errno_text(errno));
      }
    }
    return failed;
  }

  std::string dir_, name_;
  std::set<std::string> written_;
};

// Keeps a compilation until the process ends instead of freeing it, when the process ends right
// after the command (Terminal::process_exits): a plan of a quarter of a million tasks is millions
// of small allocations, and freeing them took about half a second of a 3 s compile
// (gemm_allreduce at 64 ranks, --rank 0, docs/RESULTS.md). The memory stays reachable from here, so
// leak checkers do not report it (Clang does the same with -disable-free).
class Burial {
 public:
  Burial(std::unique_ptr<compiler::Compilation>* c, bool on) : c_(c), on_(on) {}
  Burial(const Burial&) = delete;
  Burial& operator=(const Burial&) = delete;
  ~Burial() {
    if (!on_ || *c_ == nullptr) return;
    static auto* graves = new std::vector<compiler::Compilation*>;  // never freed
    graves->push_back(c_->release());
  }

 private:
  std::unique_ptr<compiler::Compilation>* c_;
  bool on_;
};

// Parses and checks `file` through the whole pipeline, printing its diagnostics; null on errors.
// Without `generate`, it stops at the plans (no kernel source).
std::unique_ptr<compiler::Compilation> front_end(
    std::shared_ptr<const dsl::SourceFile> file, const Flags& f, std::ostream& err,
    const Terminal& term, bool generate = true, const compiler::TunedFor& tuned = nullptr,
    codegen::CodegenOptions::Tables tables = codegen::CodegenOptions::Tables::kData) {
  auto c =
      compiler::compile_file(std::move(file), f.check, f.defines_text, generate, tuned, tables);
  err << dsl::render_text(c->diagnostics.all(), f.use_color(term));
  if (!c->ok()) return nullptr;
  return c;
}

// The tuning database's path for these flags: --tune-db, $MKC_TUNE_DB, or tune.json beside the
// JIT cache ("" when that directory cannot be used: no tuning then).
std::string tune_db_path(const Flags& f) {
  return tune::default_db_path(f.tune_db);
}

// compile_file's hook applying the database's entry for each schedule (MKC_TUNE=off: none).
compiler::TunedFor tuned_hook(const Flags& f, std::shared_ptr<const dsl::SourceFile> file,
                              const std::string& arch, std::ostream& err) {
  const std::string path = tune_db_path(f);
  if (path.empty()) return nullptr;
  return tune::tuned_from_db(path, std::move(file), f.check, arch, err);
}

std::string roles_text(const plan::Plan& p) {
  std::string roles;
  for (const plan::Role& r : p.roles)
    roles += fmt::format("{}{}={}", roles.empty() ? "" : " ", r.name, r.count);
  return roles;
}

// NVRTC's and ptxas's warnings (a serialised wgmma, a register cap ignored) matter for speed; the
// cache's problems matter for the next compile's time.
void print_jit_warnings(const jit::JitOutput& j, std::ostream& err) {
  size_t pos = 0;
  while (pos < j.log.size()) {
    size_t end = j.log.find('\n', pos);
    if (end == std::string::npos) end = j.log.size();
    const std::string_view l(j.log.data() + pos, end - pos);
    if (l.find("warning") != std::string_view::npos && l.rfind("Remark", 0) != 0)
      fmt::print(err, "mkc: note: {}\n", l);
    pos = end + 1;
  }
  for (const std::string& w : j.warnings) fmt::print(err, "mkc: warning: {}\n", w);
}

// The shared memory a CTA of the kernel uses on `arch`: the dynamic part is the Hopper tiles'
// staging on sm_90a and the portable tiles' elsewhere (as LocalJob chooses), the static part is
// ptxas's figure.
std::string smem_text(const jit::JitOutput& j, const codegen::Generated& g,
                      const std::string& arch) {
  const int64_t dynamic = mkc::arch_has_wgmma(arch) ? g.dynamic_smem : g.portable_smem;
  if (j.smem_bytes < 0) return fmt::format("smem unknown (static unknown + {} B dynamic)", dynamic);
  return fmt::format("{} B smem ({} static + {} dynamic)", j.smem_bytes + dynamic, j.smem_bytes,
                     dynamic);
}

std::string registers_text(const jit::JitOutput& j) {
  return j.registers < 0 ? "registers unknown" : fmt::format("{} registers", j.registers);
}

std::string spills_text(const jit::JitOutput& j) {
  return j.spill_bytes < 0 ? "spills unknown" : fmt::format("{} B spills", j.spill_bytes);
}

// What NVRTC's failure tells the user, and the exit code. An error in a device function's body
// points into the .mks file (#line): the user's (1). ptxas rejecting the PTX of a body's inline
// `asm` has no such place: when a body holds `asm`, those functions are named where they are and
// the first of ptxas's lines shown (1). Anything else is mkc's or the toolkit's (2).
int report_nvrtc_failure(const jit::NvrtcCompileError& e, const compiler::CheckedSchedule& s,
                         const dsl::SourceFile& file, std::ostream& err) {
  const std::string& log = e.log();
  if (log.find(".mks(") != std::string::npos || log.find("ptxas") == std::string::npos) {
    fmt::print(err, "mkc: error: {}\n", e.what());
    return log.find(".mks(") != std::string::npos ? kExitUserError : kExitEnvironment;
  }
  // `asm`, `__asm` or `__asm__` as a whole identifier.
  const auto holds_asm = [](const std::string& body) {
    const auto ident = [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    };
    for (size_t p = body.find("asm"); p != std::string::npos; p = body.find("asm", p + 1)) {
      size_t a = p, b = p + 3;
      while (a > 0 && ident(body[a - 1])) --a;
      while (b < body.size() && ident(body[b])) ++b;
      const std::string_view word(body.data() + a, b - a);
      if (word == "asm" || word == "__asm" || word == "__asm__") return true;
    }
    return false;
  };
  std::string holders;
  for (const compiler::DeviceFunction& f : s.device_fns) {
    if (!holds_asm(f.body)) continue;
    const dsl::LineCol lc = file.line_col(f.body_span.begin);
    holders += fmt::format("{}`{}` ({}:{}:{})", holders.empty() ? "" : ", ", f.name, file.path(),
                           lc.line, lc.col);
  }
  if (holders.empty()) {
    fmt::print(err, "mkc: error: {}\n", e.what());
    return kExitEnvironment;
  }
  // ptxas repeats an error per inlined copy of the function: the first lines say it.
  std::string first;
  int shown = 0, lines = 0;
  for (size_t pos = 0; pos < log.size();) {
    size_t end = log.find('\n', pos);
    if (end == std::string::npos) end = log.size();
    if (end > pos) {
      ++lines;
      if (shown < 4) {
        first += fmt::format("  {}\n", std::string_view(log).substr(pos, end - pos));
        ++shown;
      }
    }
    pos = end + 1;
  }
  fmt::print(err,
             "mkc: error: ptxas rejected the kernel's PTX; the inline `asm` of device function "
             "{} is where the schedule writes PTX:\n{}{}",
             holders, first,
             lines > shown ? fmt::format("  ({} more lines like these)\n", lines - shown) : "");
  return kExitUserError;
}

// Under MKC_DUMP_PASSES: every phase of the process's compile, then its wall time and peak memory
// (what `/usr/bin/time` would say, without it).
void print_phases(const Phases& phases, double wall_seconds, std::ostream& err) {
  const char* env = std::getenv("MKC_DUMP_PASSES");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "0") == 0) return;
  for (const Phases::Phase& ph : phases.all())
    fmt::print(err, "mkc: phase {:<24} {:9.2f} ms\n", ph.name, ph.seconds * 1e3);
  fmt::print(err,
             "mkc: process {:.2f} s wall ({:.2f} s in the phases above), peak {:.0f} MB resident\n",
             wall_seconds, phases.total(), peak_resident_bytes() / 1e6);
}

int cmd_compile(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                Terminal term) {
  Flags f(args);
  f.check.ranks = {2};
  std::string out_dir = ".", arch = "sm_90a";
  std::set<std::string> emit = {"cubin"};
  bool use_cache = true, verbose = false;
  while (f.next()) {
    if (f.is("--arch")) {
      arch = f.value("--arch");
      if (arch.rfind("sm_", 0) != 0)
        throw UserError(
            fmt::format("--arch {}: expected a real architecture such as sm_90a or sm_80", arch));
    } else if (f.arg() == "-o") {
      out_dir = f.value("-o");
    } else if (f.is("--emit")) {
      emit.clear();
      const std::string list = f.value("--emit");
      std::stringstream ss(list);
      for (std::string item; std::getline(ss, item, ',');) {
        if (item != "cu" && item != "ptx" && item != "cubin" && item != "plan") {
          throw UserError(
              item.empty()
                  ? fmt::format("--emit `{}`: an empty artefact name (cu, ptx, cubin, plan)", list)
                  : fmt::format("--emit: unknown artefact `{}` (cu, ptx, cubin, plan)", item));
        }
        emit.insert(item);
      }
      // "", "cu," and ",cu" would silently write less than was asked for.
      if (emit.empty() || list.back() == ',') {
        throw UserError(fmt::format(
            "--emit `{}`: name at least one artefact, comma-separated: cu, ptx, cubin, plan",
            list));
      }
    } else if (f.arg() == "--no-cache") {
      use_cache = false;
    } else if (f.arg() == "--verbose") {
      verbose = true;
    } else if (f.is("--rank")) {
      const std::string v = f.value("--rank");
      // 0-based: 0, or a positive integer (checked against the world size after --ranks).
      try {
        f.check.plan_rank = v == "0" ? 0 : parse_count("--rank", v);
      } catch (const UserError&) {
        throw UserError(fmt::format("--rank {}: expected a rank, an integer from 0", v));
      }
    } else {
      f.unknown("compile");
    }
  }
  if (f.files.size() != 1) throw UserError("`mkc compile` takes one .mks file");
  const std::string& file = f.files[0];
  Stopwatch process;
  // Only the plan asked for: no kernel is generated (a plan across nodes has none yet).
  const bool plan_only = emit.size() == 1 && emit.count("plan") == 1;
  const auto source = dsl::SourceFile::read(file);
  f.check.arch = arch;
  // The cubin written stands alone: its tables in it (MKC_TABLES=data: declared, not written).
  auto c = front_end(source, f, err, term, !plan_only, tuned_hook(f, source, arch, err),
                     codegen::CodegenOptions::Tables::kSource);
  if (c == nullptr) return kExitUserError;
  const Burial burial(&c, term.process_exits);
  Phases& phases = c->phases;
  // Everything before NVRTC: parse, check, the passes, code generation.
  const double planned = phases.total();
  Stopwatch clock;
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw EnvironmentError(fmt::format("cannot create `{}`: {}", out_dir, ec.message()));
  const std::string stem = std::filesystem::path(file).stem().string();
  for (size_t k = 0; k < c->checked.size(); ++k) {
    const compiler::CheckedSchedule& s = c->checked[k];
    const plan::Plan& p = c->plans[k];
    const std::string name = c->checked.size() == 1 ? stem : stem + "." + s.name;
    Artefacts files(out_dir, name);
    if (emit.count("plan")) {
      clock.lap();
      // A rank's plan (--rank) holds that rank's tasks; the peers' lowered for their edges with it
      // are scaffolding, and were most of the file.
      const int64_t only = p.lowered.empty() ? -1 : f.check.plan_rank;
      files.write(".plan.json",
                  [&](const Artefacts::Sink& sink) { plan::write_json(p, sink, only); });
      phases.add("write plan", clock.lap());
    }
    if (plan_only) {
      files.finish();
      if (!p.lowered.empty()) {
        std::vector<int64_t> with;
        for (int64_t r = 0; r < s.ranks; ++r) {
          if (p.lowered[r] && r != f.check.plan_rank) with.push_back(r);
        }
        int64_t own = 0;
        for (const plan::Task& t : p.tasks) own += t.rank == f.check.plan_rank ? 1 : 0;
        fmt::print(out,
                   "{}: plan of rank {} of {}, with the tasks of rank{} {} it needs: {}; "
                   "planned in {:.3f} s{}\n",
                   file, f.check.plan_rank, s.ranks, with.size() == 1 ? "" : "s",
                   with.empty() ? std::string("none") : fmt::format("{}", fmt::join(with, ", ")),
                   plan::summary(p), planned,
                   fmt::format("; the JSON holds rank {}'s {} tasks", f.check.plan_rank, own));
        continue;
      }
      fmt::print(out, "{}: plan for {} rank{}: {}; planned in {:.3f} s\n", file, s.ranks,
                 s.ranks == 1 ? "" : "s", plan::summary(p), planned);
      continue;
    }
    const codegen::Generated& g = c->kernels[k];
    // "for 8 ranks", or "for rank 3 of 8" (--rank: the kernel holds that rank's tables only).
    const std::string for_ranks = g.rank >= 0
                                      ? fmt::format("rank {} of {}", g.rank, s.ranks)
                                      : fmt::format("{} rank{}", s.ranks, s.ranks == 1 ? "" : "s");
    if (emit.count("cu")) files.write(".cu", g.source);
    if (emit.count("cubin") == 0 && emit.count("ptx") == 0) {
      files.finish();
      fmt::print(out,
                 "{}: kernel {} for {}: roles {}, {} tasks, {} bytes of source (not "
                 "compiled: --emit has no cubin or ptx)\n",
                 file, g.kernel_name, for_ranks, roles_text(p), g.task_count(p), g.source.size());
      continue;
    }
    jit::JitOptions jo;
    jo.arch = arch;
    jo.want_ptx = emit.count("ptx") > 0;
    jo.use_cache = use_cache;
    jit::JitOutput j;
    try {
      clock.lap();
      j = jit::jit_compile(g.source, name + ".cu", g.kernel_name, jo);
      phases.add(j.cache_hit ? "jit (cache hit)" : "jit (nvrtc)", clock.lap());
    } catch (const jit::NvrtcCompileError& e) {
      return report_nvrtc_failure(e, s, *c->file, err);
    }
    if (verbose) {
      fmt::print(err, "{}{}", j.log, j.log.empty() || j.log.back() == '\n' ? "" : "\n");
      for (const std::string& w : j.warnings) fmt::print(err, "mkc: warning: {}\n", w);
    } else {
      print_jit_warnings(j, err);
    }
    if (emit.count("cubin")) files.write(".cubin", j.cubin);
    if (emit.count("ptx")) files.write(".ptx", j.ptx);
    files.finish();
    fmt::print(out,
               "{}: kernel {} for {}, {}: {}, {}, {}, roles {}, {} tasks, {:.2f} s ({}), "
               "planned in {:.3f} s\n",
               file, g.kernel_name, for_ranks, arch, registers_text(j), spills_text(j),
               smem_text(j, g, arch), roles_text(p), g.task_count(p), j.seconds,
               j.cache_hit ? "cache hit" : "cache miss", planned);
    // The device code each task class runs on this target.
    for (const std::string& path : g.paths) fmt::print(out, "  {}\n", path);
  }
  print_phases(phases, process.lap(), err);
  return kExitOk;
}

// Inputs from DIR/<tensor>.rank<r>.npy (`mkc run --load`): every input tensor of every rank must
// be there, with the tensor's shape.
plan::InputFn npy_inputs(const plan::Plan& p, const std::string& dir, int ranks) {
  const compiler::CheckedSchedule& s = *p.source;
  // Read every file up front: a missing or mis-shaped one fails before anything runs.
  auto loaded = std::make_shared<std::vector<std::vector<std::vector<double>>>>(ranks);
  for (int r = 0; r < ranks; ++r) {
    (*loaded)[r].resize(s.tensors.size());
    for (size_t t = 0; t < s.tensors.size(); ++t) {
      if (s.tensors[t].kind != dsl::TensorKind::kInput) continue;
      const std::string path = dir + "/" + rt::npy_name(s.tensors[t].name, r);
      // A file of another shape is refused from its header (its data is never read).
      rt::NpyArray a = rt::read_npy(path, &s.tensors[t].shape);
      (*loaded)[r][t] = std::move(a.values);
    }
  }
  return [loaded, &s](int rank, int, plan::RankData& data) {
    for (size_t t = 0; t < s.tensors.size(); ++t) {
      if (s.tensors[t].kind == dsl::TensorKind::kInput) data[t] = (*loaded)[rank][t];
    }
  };
}

// `mkc run`'s check of the schedule before the driver is loaded (the real compile, for the GPUs'
// SMs and the ranks they give, comes after). With the world size known (--ranks, a launcher) it
// is checked for that size; otherwise for 1, 2, 4 and 8 ranks, and it fails only when every one
// of them has errors (the GPUs decide the size later): then the errors for one rank are shown.
bool precheck(const std::shared_ptr<const dsl::SourceFile>& file, const Flags& f, int ranks,
              std::ostream& err, const Terminal& term) {
  dsl::Diagnostics parsed;
  const dsl::Module module = dsl::parse(file, parsed);
  if (parsed.has_errors()) {
    err << dsl::render_text(parsed.all(), f.use_color(term));
    return false;
  }
  std::vector<int64_t> sizes = {1, 2, 4, 8};
  if (ranks > 0) sizes = {ranks};
  std::optional<dsl::Diagnostics> first;
  for (int64_t r : sizes) {
    compiler::CheckOptions opts = f.check;
    opts.ranks = {r};
    dsl::Diagnostics diags;
    compiler::check(module, opts, diags);
    if (!diags.has_errors()) return true;
    if (!first) first = std::move(diags);
  }
  err << dsl::render_text(first->all(), f.use_color(term));
  return false;
}

// Tunes each schedule of `file` with GEMMs to tune on this process's GPU(s) (`mkc tune`, and
// `mkc run` under MKC_TUNE=on for schedules the database has no entry for: `only_missing`),
// storing each winner in `db`. `f` holds the world and SMs the kernels are built for.
int tune_schedules(const std::shared_ptr<const dsl::SourceFile>& file, const Flags& f,
                   const rt::DeviceInfo& dev, bool share_gpus, int64_t iters,
                   const tune::SearchOptions& so, const std::string& db, bool only_missing,
                   std::ostream& out, std::ostream& err, const Terminal& term) {
  // Each measurement compiles the whole file with the trial's knobs for schedule `k`.
  const auto c = front_end(file, f, err, term);
  if (c == nullptr) return kExitUserError;
  for (size_t k = 0; k < c->checked.size(); ++k) {
    const compiler::CheckedSchedule& s = c->checked[k];
    int64_t ctas = f.check.sms;
    for (const plan::Role& r : c->plans[k].roles)
      if (r.name == "compute") ctas = r.count;
    const std::vector<tune::TunableOp> ops = tune::tunable_ops(s, ctas, f.check.sms);
    const tune::Key key = tune::tune_key(*file, s, f.check, dev.arch());
    if (only_missing && (ops.empty() || tune::lookup(db, key, nullptr).has_value())) continue;
    if (ops.empty()) {
      fmt::print(out,
                 "{}: schedule {}: no GEMM, nor attention at head dim 64, without tile(...): "
                 "nothing to tune\n",
                 f.files[0], s.name);
      continue;
    }
    fmt::print(out, "{}: schedule {} on {} rank(s), {}: tuning {} operation(s){}\n", f.files[0],
               s.name, s.ranks, dev.name, ops.size(),
               only_missing ? " (MKC_TUNE=on, no entry in the database yet)" : "");
    out.flush();
    rt::TuneRunOptions to;
    to.check = f.check;
    to.defines_text = f.defines_text;
    to.arch = dev.arch();
    to.share_gpus = share_gpus;
    to.iters = static_cast<int>(iters);
    to.search = so;
    const std::optional<rt::Tuned> found = rt::tune_schedule(file, k, to, out);
    if (!found) continue;  // front_end's gemms said otherwise: nothing to store
    const tune::Entry& e = found->entry;
    tune::Entry stored = e;
    stored.tuned_at = tune::utc_now();
    tune::store(db, key, stored);
    std::string picks;
    for (const auto& [op, kn] : e.ops)
      picks += fmt::format("{}{} tile({}) split-K {}{}", picks.empty() ? "" : ", ", op,
                           fmt::join(kn.tile, ", "), kn.split_k,
                           kn.cluster > 1 ? fmt::format(" cluster {}", kn.cluster) : "");
    fmt::print(out, "tuned: {:.2f} us per launch ({}); written to {}\n", e.us,
               picks.empty() ? "the compiler's own choice is the fastest" : picks, db);
    out.flush();
  }
  return kExitOk;
}

// Runs a schedule on this machine's GPUs: every rank in this process (one per GPU, or several per
// GPU with --share-gpus), or this process's rank only under a launcher (mkrun, torchrun, ...).
int cmd_run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
            Terminal term) {
  Flags f(args);
  int64_t iters = 0;
  bool check = false, share_gpus = false;
  uint64_t timeout_ms = 5000;
  std::string trace_path, save_dir, load_dir;
  uint64_t seed = 1;
  plan::Routing routing = plan::Routing::kUniform;
  while (f.next()) {
    if (f.is("--seed")) {
      seed = static_cast<uint64_t>(parse_count("--seed", f.value("--seed")));
    } else if (f.is("--routing")) {
      const std::string r = f.value("--routing");
      if (r == "uniform") {
        routing = plan::Routing::kUniform;
      } else if (r == "skewed") {
        routing = plan::Routing::kSkewed;
      } else if (r == "empty") {
        routing = plan::Routing::kEmptyExperts;
      } else {
        throw UserError(
            fmt::format("--routing {}: not a routing kind (uniform, skewed or empty)", r));
      }
    } else if (f.is("--iters")) {
      iters = parse_count("--iters", f.value("--iters"), kMaxIters);
    } else if (f.arg() == "--check") {
      check = true;
    } else if (f.arg() == "--share-gpus") {
      share_gpus = true;
    } else if (f.is("--timeout-ms")) {
      timeout_ms = static_cast<uint64_t>(
          parse_count("--timeout-ms", f.value("--timeout-ms"), kMaxTimeoutMs));
    } else if (f.is("--trace")) {
      trace_path = f.value("--trace");
    } else if (f.is("--save")) {
      save_dir = f.value("--save");
    } else if (f.is("--load")) {
      load_dir = f.value("--load");
    } else {
      f.unknown("run");
    }
  }
  if (f.files.size() != 1) throw UserError("`mkc run` takes one .mks file");
  // Under a one-process-per-rank launcher (mkrun, torchrun, mpirun, srun) this process is one rank
  // of the job; otherwise it runs every rank itself.
  const rt::World world = rt::detect_world();
  // Bounded before it narrows to an int (4294967298 had become 2 ranks).
  if (!f.check.ranks.empty() && f.check.ranks[0] > compiler::kMaxRanks)
    throw UserError(fmt::format("--ranks {}: the world size must be between 1 and {}",
                                f.check.ranks[0], compiler::kMaxRanks));
  const int requested = f.check.ranks.empty() ? 0 : static_cast<int>(f.check.ranks[0]);
  const int known = rt::job_size(world, requested);  // a mismatch needs no GPU to be named
  // The schedule next: a missing file, a mistake in it or an unknown -D is the user's to fix,
  // and is reported as such on a machine without a driver too.
  const auto file = dsl::SourceFile::read(f.files[0]);
  if (!precheck(file, f, known, err, term)) return kExitUserError;
  // Then the driver: without a GPU this fails at once, before any compiling.
  const int gpus = rt::device_count();
  if (gpus == 0) throw EnvironmentError("no GPU: the CUDA driver sees no device");
  const rt::DeviceInfo dev = rt::device_info(0);
  std::unique_ptr<rt::Rendezvous> group;
  const rt::Placement place = rt::place_ranks(world, requested, gpus, share_gpus);
  const int64_t per_gpu = place.per_gpu;
  f.check.ranks = {place.ranks};
  // Nodes: --ranks-per-node, else $MKC_RANKS_PER_NODE (both emulate nodes on one host too), else
  // the launcher's (ranks per host). Edges between nodes go through the host proxies.
  f.check.ranks_per_node = rt::ranks_per_node(world, f.check.ranks_per_node,
                                              [](const char* n) { return std::getenv(n); });
  // Ranks of one process that share a GPU run side by side: each kernel gets its part of the SMs.
  f.check.sms = std::min<int64_t>(f.check.sms, dev.sm_count / per_gpu);
  f.check.arch = dev.arch();
  // MKC_TUNE=on: what the database has no entry for is tuned first, in one process only (the
  // ranks of a launched job would each measure, and race to store).
  if (tune::mode_from_env() == tune::Mode::kOn && world.size == 1) {
    const std::string db = tune_db_path(f);
    if (db.empty()) {
      fmt::print(err,
                 "mkc: warning: MKC_TUNE=on, but no tuning database path (the JIT cache's "
                 "directory cannot be used; pass --tune-db FILE): not tuning\n");
    } else if (const int rc = tune_schedules(file, f, dev, share_gpus, 20, tune::SearchOptions{},
                                             db, true, out, err, term);
               rc != kExitOk) {
      return rc;
    }
  }
  // Under a launcher this process plans its own rank's neighbourhood and builds that rank's
  // kernel (MKC_PLAN=world: every rank's, as a process running them all does).
  f.check.plan_rank = rt::planned_rank(world, [](const char* n) { return std::getenv(n); });
  auto c = front_end(file, f, err, term, true, tuned_hook(f, file, dev.arch(), err));
  if (c == nullptr) return kExitUserError;
  const Burial burial(&c, term.process_exits);
  if (world.size > 1) group = std::make_unique<rt::Rendezvous>(world, std::chrono::seconds(120));
  // Under a launcher rank 0 prints the job's lines; every rank prints its own checks and errors.
  const bool leader = world.rank == 0;
  int rc = kExitOk;
  for (size_t k = 0; k < c->checked.size(); ++k) {
    const plan::Plan& p = c->plans[k];
    const codegen::Generated& g = c->kernels[k];
    jit::JitOptions jo;
    jo.arch = dev.arch();
    const jit::JitOutput j = jit::jit_compile(g.source, p.schedule + ".cu", g.kernel_name, jo);
    print_jit_warnings(j, err);
    rt::LocalJobOptions lo;
    lo.file = c->file;
    lo.timeout_ns = timeout_ms * 1'000'000ull;
    lo.share_gpus = share_gpus;
    lo.group = group.get();
    rt::LocalJob job(p, j.cubin, g, lo);
    if (leader) {
      fmt::print(out,
                 "{}: kernel {} on {} rank(s), {} ({} per process, {}) ({}, {} tasks{}, "
                 "roles {}, compiled in {:.2f} s, {})\n",
                 f.files[0], g.kernel_name, job.ranks(), dev.name, job.local_ranks().size(),
                 group ? world.source : "one process", registers_text(j), g.task_count(p),
                 g.rank >= 0 ? fmt::format(" in rank {}'s own kernel (each process plans and "
                                           "builds its rank's)",
                                           g.rank)
                             : "",
                 roles_text(p), j.seconds, j.cache_hit ? "cache hit" : "cache miss");
      out.flush();
    }
    const plan::InputFn inputs = load_dir.empty() ? plan::random_inputs(p, seed, routing)
                                                  : npy_inputs(p, load_dir, job.ranks());
    if (check) {
      int failed = 0;
      for (const rt::TensorCheck& t : rt::checked_launch(job, p, {}, inputs)) {
        if (!t.ok()) ++failed;
        fmt::print(out, "  rank {} {:<12} rel. L2 error {:.2e} (tolerance {:.0e}){}{}\n", t.rank,
                   t.tensor, t.rel_error, t.tolerance,
                   t.unwritten ? fmt::format(", {} elements unwritten", t.unwritten) : "",
                   t.ok() ? "" : "  FAILED");
        out.flush();
      }
      fmt::print(out, "check{}: {}\n", group ? fmt::format(" (rank {})", world.rank) : "",
                 failed == 0 ? "passed" : fmt::format("{} tensor(s) FAILED", failed));
      out.flush();
      if (failed) rc = kExitUserError;
    } else {
      rt::upload_inputs(job, p, inputs);
      job.launch();
    }
    if (!save_dir.empty()) {
      std::filesystem::create_directories(save_dir);
      const compiler::CheckedSchedule& s = *p.source;
      for (int r : job.local_ranks()) {
        for (size_t t = 0; t < s.tensors.size(); ++t) {
          rt::write_npy(save_dir + "/" + rt::npy_name(s.tensors[t].name, r), s.tensors[t].dtype,
                        s.tensors[t].shape, job.download(r, static_cast<int>(t)));
        }
      }
      fmt::print(out, "saved {} tensors of {} rank(s) to {}/\n", s.tensors.size(),
                 job.local_ranks().size(), save_dir);
      out.flush();
    }
    if (iters > 0) {
      job.launch();  // warm-up
      const double us = job.time_launches(static_cast<int>(iters));
      if (leader) {
        fmt::print(out,
                   "time: {:.2f} us per launch ({} launches, {} ranks, kernel launch included{})\n",
                   us, iters, job.ranks(),
                   per_gpu > 1 || world.local_size > gpus ? "; ranks share GPUs: not a speed" : "");
        out.flush();
      }
    }
    if (!trace_path.empty()) {
      const int n = rt::traced_launch(job, p, trace_path);
      if (leader) {
        fmt::print(out, "trace: {} task events of launch {} written to {}\n", n, job.launches(),
                   trace_path);
        out.flush();
      }
    }
  }
  return rc;
}

// `mkc tune`: the model's candidates for each GEMM without tile(...), measured on this process's
// GPU(s) one operation at a time; the fastest goes into the tuning database.
int cmd_tune(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
             Terminal term) {
  Flags f(args);
  tune::SearchOptions so;
  int64_t iters = 20;
  bool share_gpus = false, dry_run = false;
  while (f.next()) {
    if (f.is("--candidates")) {
      so.candidates = static_cast<int>(parse_count("--candidates", f.value("--candidates"), 32));
    } else if (f.is("--iters")) {
      iters = parse_count("--iters", f.value("--iters"), 10'000);
    } else if (f.is("--budget-s")) {
      so.budget_s = static_cast<double>(parse_count("--budget-s", f.value("--budget-s"), 86'400));
    } else if (f.arg() == "--share-gpus") {
      share_gpus = true;
    } else if (f.arg() == "--dry-run") {
      dry_run = true;
    } else {
      f.unknown("tune");
    }
  }
  if (f.files.size() != 1) throw UserError("`mkc tune` takes one .mks file");
  const rt::World world = rt::detect_world();
  if (world.size > 1)
    throw UserError(
        "`mkc tune` runs in one process (its ranks on this machine's GPUs, --share-gpus for more "
        "ranks than GPUs), not under a launcher");
  if (!f.check.ranks.empty() && f.check.ranks[0] > compiler::kMaxRanks)
    throw UserError(fmt::format("--ranks {}: the world size must be between 1 and {}",
                                f.check.ranks[0], compiler::kMaxRanks));
  const int requested = f.check.ranks.empty() ? 0 : static_cast<int>(f.check.ranks[0]);
  const auto file = dsl::SourceFile::read(f.files[0]);
  if (!precheck(file, f, requested, err, term)) return kExitUserError;
  if (dry_run) {
    // The model alone: the candidates each GEMM would be measured at, for the given world.
    f.check.ranks = {requested > 0 ? requested : 1};
    const auto c = front_end(file, f, err, term, false);
    if (c == nullptr) return kExitUserError;
    for (size_t k = 0; k < c->checked.size(); ++k) {
      int64_t ctas = f.check.sms;
      for (const plan::Role& r : c->plans[k].roles)
        if (r.name == "compute") ctas = r.count;
      const std::vector<tune::TunableOp> ops = tune::tunable_ops(c->checked[k], ctas, f.check.sms);
      fmt::print(out, "{}: schedule {}: {} operation(s) to tune (no tile(...)), {} compute CTAs\n",
                 f.files[0], c->checked[k].name, ops.size(), ctas);
      for (const tune::TunableOp& g : ops) {
        if (g.kind == compiler::OpKind::kAttention) {
          // Its tile besides the compiler's own, each measured.
          fmt::print(out, "  {} (attention, the compiler's tile({})):\n", g.op,
                     fmt::join(g.own, ", "));
          for (const std::vector<int64_t>& t : g.tiles)
            fmt::print(out, "    * tile({})\n", fmt::join(t, ", "));
          continue;
        }
        const auto cands = tune::gemm_candidates(g.problem);
        fmt::print(out, "  {} ({} x {} x {}{}):\n", g.op, g.problem.M, g.problem.N, g.problem.K,
                   g.problem.splittable ? ", split-K allowed" : "");
        for (size_t i = 0; i < cands.size(); ++i)
          fmt::print(out, "    {}{:<32} model {:>10.1f} us\n",
                     i < static_cast<size_t>(so.candidates) ? "* " : "  ", cands[i].text(),
                     cands[i].predicted_us);
      }
    }
    return kExitOk;
  }
  const int gpus = rt::device_count();
  if (gpus == 0)
    throw EnvironmentError(
        "no GPU: the CUDA driver sees no device (`mkc tune --dry-run` shows the candidates without "
        "one)");
  const rt::DeviceInfo dev = rt::device_info(0);
  const rt::Placement place = rt::place_ranks(world, requested, gpus, share_gpus);
  f.check.ranks = {place.ranks};
  f.check.ranks_per_node = rt::ranks_per_node(world, f.check.ranks_per_node,
                                              [](const char* n) { return std::getenv(n); });
  f.check.sms = std::min<int64_t>(f.check.sms, dev.sm_count / place.per_gpu);
  f.check.arch = dev.arch();
  const std::string db = tune_db_path(f);
  if (db.empty())
    throw EnvironmentError(
        "no tuning database path: the JIT cache's directory cannot be used; pass --tune-db FILE");
  return tune_schedules(file, f, dev, share_gpus, iters, so, db, false, out, err, term);
}

// `mkc verify`: the plan verifier and the CPU interpreter on the user's schedule, at the shapes
// given, over several interleavings (compiler/verify_schedule.h).
int cmd_verify(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
               Terminal term) {
  Flags f(args);
  compiler::VerifyScheduleOptions vo;
  while (f.next()) {
    if (f.is("--interleavings")) {
      vo.interleavings = static_cast<int>(
          std::min<int64_t>(1000, parse_count("--interleavings", f.value("--interleavings"))));
    } else if (f.is("--launches")) {
      vo.launches = static_cast<int>(
          std::min<int64_t>(100, parse_count("--launches", f.value("--launches"))));
    } else if (f.is("--seed")) {
      vo.seed = static_cast<uint64_t>(parse_count("--seed", f.value("--seed")));
    } else if (f.is("--emit")) {
      const std::string what = f.value("--emit");
      if (what != "plan")
        throw UserError(fmt::format("--emit {}: `mkc verify` emits `plan`", what));
      vo.emit_plan = true;
    } else {
      f.unknown("verify");
    }
  }
  if (f.files.size() != 1) throw UserError("`mkc verify` takes one .mks file");
  vo.color = f.use_color(term);
  const compiler::VerifyScheduleResult r =
      compiler::verify_schedule(dsl::SourceFile::read(f.files[0]), f.check, vo);
  err << r.errors;
  // With --emit plan, stdout is the plans' JSON alone (for tools); the summary goes to stderr.
  (vo.emit_plan ? err : out) << r.output;
  if (vo.emit_plan) out << r.plans;
  return r.exit_code;
}

int cmd_devices(const std::vector<std::string>& args, std::ostream& out, std::ostream&, Terminal) {
  if (args.size() > 1)
    throw UserError(fmt::format("`mkc devices` takes no arguments (got `{}`)", args[1]));
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

int cmd_help(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
             Terminal term);

// A subcommand: its name, its line in `mkc --help`, its own usage and what runs it.
struct Command {
  const char* name;
  const char* summary;
  const char* usage;
  int (*run)(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
             Terminal term);
};

const Command kCommands[] = {
    {"check", "parse and check schedules; report every error with its place", kCheckUsage,
     cmd_check},
    {"compile", "lower a schedule to one persistent kernel and JIT-compile it (NVRTC)",
     kCompileUsage, cmd_compile},
    {"run",
     "compile and run a schedule on this machine's GPUs, one rank per GPU\n"
     "                       (all from one process, or one rank per process under mkrun/torchrun)",
     kRunUsage, cmd_run},
    {"tune",
     "measure the GEMMs' tile and split-K candidates on the GPU and store the\n"
     "                       fastest in the tuning database",
     kTuneUsage, cmd_tune},
    {"devices", "list the GPUs the CUDA driver sees (needs a driver)", kDevicesUsage, cmd_devices},
    {"verify",
     "without a GPU: verify the plan after every pass (races, deadlocks, boxes) and\n"
     "                       run it on the CPU interpreter against the reference",
     kVerifyUsage, cmd_verify},
    {"help", "show this help, or a command's (`mkc help run`)", kHelpUsage, cmd_help},
};

const Command* find_command(const std::string& name) {
  for (const Command& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

std::string usage() {
  std::string text = kUsageHead;
  for (const Command& c : kCommands) text += fmt::format("  {:<21}{}\n", c.name, c.summary);
  return text + kUsageTail;
}

int cmd_help(const std::vector<std::string>& args, std::ostream& out, std::ostream&, Terminal) {
  if (args.size() == 1) {
    out << usage();
    return kExitOk;
  }
  const Command* c = find_command(args[1]);
  if (c == nullptr || args.size() > 2) {
    std::vector<std::string> names;
    for (const Command& k : kCommands) names.push_back(k.name);
    throw UserError(fmt::format("`mkc help` takes one command name: {}", fmt::join(names, ", ")));
  }
  out << c->usage;
  return kExitOk;
}

int dispatch(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
             Terminal term) {
  if (args.empty()) {
    err << usage();
    return kExitUserError;
  }
  const std::string& cmd = args[0];
  if (cmd == "-h" || cmd == "--help") {
    out << usage();
    return kExitOk;
  }
  if (cmd == "--version") return cmd_version(out);
  const Command* c = find_command(cmd);
  if (c == nullptr) {
    fmt::print(err, "mkc: error: unknown command or option `{}`; run `mkc --help` for the list\n",
               cmd);
    return kExitUserError;
  }
  // `mkc <command> ... --help` anywhere: the command's own usage, whatever else is there.
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "-h" || args[i] == "--help") {
      out << c->usage;
      return kExitOk;
    }
  }
  return c->run(args, out, err, term);
}

// Forwards to another stream's buffer and remembers the first failure with its errno, so a full
// disk or a closed file behind stdout is reported with its reason, and never looks like success
// (`mkc check --emit=ast x > /dev/full`).
class CheckedBuf : public std::streambuf {
 public:
  explicit CheckedBuf(std::streambuf* dest) : dest_(dest) {}
  bool failed() const { return failed_; }
  int error() const { return errno_; }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    errno = 0;
    const std::streamsize k = dest_ == nullptr ? 0 : dest_->sputn(s, n);
    if (k < n) fail();
    return k;
  }
  int sync() override {
    errno = 0;
    const int r = dest_ == nullptr ? -1 : dest_->pubsync();
    if (r != 0) fail();
    return r;
  }

 private:
  void fail() {
    if (!failed_) errno_ = errno;
    failed_ = true;
  }
  std::streambuf* dest_;
  bool failed_ = false;
  int errno_ = 0;
};

}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, Terminal term) {
  CheckedBuf checked(out.rdbuf());
  std::ostream out_checked(&checked);
  int rc = kExitEnvironment;
  try {
    rc = dispatch(args, out_checked, err, term);
  } catch (const UserError& e) {
    fmt::print(err, "mkc: error: {}\n", e.what());
    rc = kExitUserError;
  } catch (const EnvironmentError& e) {
    fmt::print(err, "mkc: error: {}\n", e.what());
    rc = kExitEnvironment;
  } catch (const std::exception& e) {
    fmt::print(err, "mkc: {}\n", e.what());
    rc = kExitEnvironment;
  }
  out_checked.flush();
  if (checked.failed() || !out_checked) {
    const int e = checked.error();
    fmt::print(err, "mkc: error: cannot write the output: {}\n",
               e != 0 ? errno_text(e) : std::string("the stream refused it"));
    return kExitEnvironment;
  }
  return rc;
}

}  // namespace mkc::cli
