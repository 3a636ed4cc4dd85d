// The JIT: generated source -> cubin through NVRTC, with mkc's templates as in-memory headers and
// a disk cache.
//
// The cache key is a hash of the source, the NVRTC options, NVRTC's version and the target arch.
// Entries live in $MKC_CACHE_DIR, else $XDG_CACHE_HOME/mkc, else ~/.cache/mkc. Each is written to a
// temporary file and renamed into place, so processes compiling the same kernel at once (the 8
// ranks of a job) never see a partial entry; each carries its length and a checksum, so a corrupt
// or truncated entry is detected, removed and rebuilt.
#pragma once

#include <string>

namespace mkc::jit {

struct JitOptions {
  std::string arch = "sm_90a";
  bool want_ptx = false;
  bool use_cache = true;
  std::string cache_dir;  // empty: the default above
};

struct JitOutput {
  std::string cubin;
  std::string ptx;
  std::string log;
  bool cache_hit = false;
  double seconds = 0;    // wall time of the whole call
  int registers = -1;    // of the kernel, from ptxas (-1: not reported)
  int spill_bytes = -1;  // spill stores + loads of the kernel
  int stack_bytes = -1;
  int smem_bytes = -1;  // static shared memory per CTA
};

// Compiles `source` (a kernel named `kernel_name`, for the register report); `program_name` names
// it in NVRTC's messages. Throws NvrtcCompileError when it does not compile.
JitOutput jit_compile(const std::string& source, const std::string& program_name,
                      const std::string& kernel_name, const JitOptions& options);

// The cache directory in use (created if missing).
std::string cache_dir(const JitOptions& options);

}  // namespace mkc::jit
