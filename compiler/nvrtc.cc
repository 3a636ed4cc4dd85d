#include "compiler/nvrtc.h"

#include <fmt/format.h>
#include <nvrtc.h>

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

}  // namespace

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
