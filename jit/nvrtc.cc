#include "jit/nvrtc.h"

#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "cuda_config/cuda_paths.h"
#include "support/error.h"

namespace mkc::jit {
namespace {

void check_nvrtc(nvrtcResult r, const char* call, const char* file, int line) {
  if (r != NVRTC_SUCCESS) {
    throw EnvironmentError(fmt::format("{} failed: {} ({}) at {}:{}", call, nvrtcGetErrorString(r),
                                       static_cast<int>(r), file, line));
  }
}

#define MKC_NVRTC(call) check_nvrtc((call), #call, __FILE__, __LINE__)

struct ProgramDeleter {
  void operator()(nvrtcProgram p) const { nvrtcDestroyProgram(&p); }
};
using Program = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  MKC_NVRTC(nvrtcGetProgramLogSize(prog, &size));
  std::string log(size, '\0');
  if (size > 0) MKC_NVRTC(nvrtcGetProgramLog(prog, log.data()));
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// The XY of "sm_XY", "sm_XYa", "sm_XYf" (or of a virtual "compute_XY"); -1 for anything else.
int arch_number(const std::string& arch) {
  const size_t begin = arch.rfind("sm_", 0) == 0 ? 3 : arch.rfind("compute_", 0) == 0 ? 8 : 0;
  if (begin == 0) return -1;
  size_t end = arch.size();
  if (end > begin && (arch.back() == 'a' || arch.back() == 'f')) --end;
  int v = -1;
  const auto [ptr, ec] = std::from_chars(arch.data() + begin, arch.data() + end, v);
  return end > begin && ec == std::errc() && ptr == arch.data() + end ? v : -1;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// NVRTC's own version, for messages ("13.0").
std::string version_text() {
  const int v = nvrtc_version();
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

// A real architecture this NVRTC knows, or UserError naming the ones it does.
void check_arch(const std::string& arch) {
  const int n = arch_number(arch);
  const std::vector<std::string> known = supported_archs();
  if (n >= 0 && std::find(known.begin(), known.end(), fmt::format("sm_{}", n)) != known.end())
    return;
  throw UserError(fmt::format(
      "GPU architecture `{}` is not one NVRTC {} compiles for; it accepts {} (with an `a` "
      "suffix, e.g. sm_90a, for the architecture-specific features mkc's Hopper GEMM uses)",
      arch, version_text(), joined(known)));
}

}  // namespace

std::vector<std::string> supported_archs() {
  int n = 0;
  MKC_NVRTC(nvrtcGetNumSupportedArchs(&n));
  std::vector<int> archs(static_cast<size_t>(std::max(n, 0)));
  if (n > 0) MKC_NVRTC(nvrtcGetSupportedArchs(archs.data()));
  std::vector<std::string> out;
  for (int a : archs) out.push_back(fmt::format("sm_{}", a));
  return out;
}

std::vector<std::string> default_include_dirs() {
  const char* env = std::getenv("MKC_CUDA_HOME");
  std::string root = env != nullptr && *env != '\0' ? env : MKC_CUDA_HOME;
  std::vector<std::string> dirs;
  for (const char* sub : {"/include/cccl", "/include"}) {
    if (std::filesystem::exists(root + sub)) dirs.push_back(root + sub);
  }
  return dirs;
}

int nvrtc_version() {
  int major = 0;
  int minor = 0;
  MKC_NVRTC(nvrtcVersion(&major, &minor));
  return major * 1000 + minor * 10;
}

NvrtcOutput nvrtc_compile(std::string_view source, std::string_view program_name,
                          const NvrtcOptions& options, const std::vector<InMemoryHeader>& headers) {
  check_arch(options.arch);
  std::vector<const char*> header_sources;
  std::vector<const char*> header_names;
  for (const InMemoryHeader& h : headers) {
    header_sources.push_back(h.source.c_str());
    header_names.push_back(h.name.c_str());
  }
  const std::string src(source);
  const std::string name(program_name);
  nvrtcProgram raw = nullptr;
  MKC_NVRTC(nvrtcCreateProgram(&raw, src.c_str(), name.c_str(), static_cast<int>(headers.size()),
                               header_sources.data(), header_names.data()));
  Program prog(raw);

  std::vector<std::string> opts = {
      fmt::format("--gpu-architecture={}", options.arch),
      "-std=c++17",
      "--device-as-default-execution-space",
  };
  for (const std::string& dir : default_include_dirs()) opts.push_back("-I" + dir);
  opts.insert(opts.end(), options.extra.begin(), options.extra.end());
  std::vector<const char*> opt_ptrs;
  for (const std::string& o : opts) opt_ptrs.push_back(o.c_str());

  const auto start = std::chrono::steady_clock::now();
  const nvrtcResult r =
      nvrtcCompileProgram(prog.get(), static_cast<int>(opt_ptrs.size()), opt_ptrs.data());
  NvrtcOutput out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.log = program_log(prog.get());
  if (r == NVRTC_ERROR_COMPILATION) {
    throw NvrtcCompileError(
        fmt::format("NVRTC could not compile {} for {}:\n{}", name, options.arch, out.log),
        out.log);
  }
  if (r == NVRTC_ERROR_INVALID_OPTION) {
    // The arch was checked above: one of the other options is the culprit, and NVRTC's log
    // names it.
    throw UserError(fmt::format(
        "NVRTC {} refused an option compiling {} for {}: {}; the options were {} (mkc's, and "
        "any from MKC_NVRTC_OPTIONS)",
        version_text(), name, options.arch, out.log.empty() ? "(no log)" : out.log,
        joined(options.extra)));
  }
  MKC_NVRTC(r);

  size_t size = 0;
  MKC_NVRTC(nvrtcGetCUBINSize(prog.get(), &size));
  if (size == 0) {
    throw EnvironmentError(
        fmt::format("NVRTC produced no cubin for {}: `{}` is a virtual architecture; use sm_XY",
                    name, options.arch));
  }
  out.cubin.resize(size);
  MKC_NVRTC(nvrtcGetCUBIN(prog.get(), out.cubin.data()));
  if (options.want_ptx) {
    MKC_NVRTC(nvrtcGetPTXSize(prog.get(), &size));
    out.ptx.resize(size);
    MKC_NVRTC(nvrtcGetPTX(prog.get(), out.ptx.data()));
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  }
  return out;
}

}  // namespace mkc::jit
