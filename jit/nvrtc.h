// NVRTC, wrapped: compile one CUDA C++ translation unit (with in-memory headers) to a cubin for a
// GPU architecture. Works without a GPU or driver, so CI compiles every generated kernel.
//
// API failures throw EnvironmentError naming the nvrtc call and its decoded result; a program that
// does not compile throws NvrtcCompileError carrying NVRTC's log (the caller decides whether that
// is the user's device code or a bug in mkc's generator). An architecture this NVRTC does not
// compile for, or an option it refuses (from the caller or $MKC_NVRTC_OPTIONS), is the user's to
// fix: UserError naming it and what NVRTC accepts.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "templates/in_memory_header.h"

namespace mkc::jit {

struct NvrtcOptions {
  std::string arch = "sm_90a";     // --gpu-architecture; sm_90a enables wgmma/TMA/setmaxnreg
  std::vector<std::string> extra;  // more NVRTC options, e.g. -DNAME=1, --device-debug
  bool want_ptx = false;           // also return PTX (needs a virtual arch: compute_XY)
};

struct NvrtcOutput {
  std::string cubin;   // ELF image for cuModuleLoadData
  std::string ptx;     // when NvrtcOptions::want_ptx
  std::string log;     // NVRTC's log (warnings), may be empty
  double seconds = 0;  // wall time of nvrtcCompileProgram
};

class NvrtcCompileError : public std::runtime_error {
 public:
  NvrtcCompileError(std::string message, std::string log)
      : std::runtime_error(std::move(message)), log_(std::move(log)) {}
  const std::string& log() const { return log_; }

 private:
  std::string log_;
};

// Compiles `source` (named `program_name` in diagnostics) for options.arch.
NvrtcOutput nvrtc_compile(std::string_view source, std::string_view program_name,
                          const NvrtcOptions& options,
                          const std::vector<InMemoryHeader>& headers = {});

// The real architectures this NVRTC compiles for, as sm_XY names ("sm_75", ..., "sm_120"); an
// `a` (or `f`) suffix selects architecture-specific features where the GPU has them (sm_90a).
std::vector<std::string> supported_archs();

// NVRTC's version as major*1000 + minor*10 (e.g. 13000), a key of the JIT cache.
int nvrtc_version();

// The include directories NVRTC gets by default: the toolkit's include/ and include/cccl
// (libcu++). The toolkit root is the one mkc was built against, or $MKC_CUDA_HOME at run time.
std::vector<std::string> default_include_dirs();

}  // namespace mkc::jit
