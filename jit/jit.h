// The JIT: generated source -> cubin through NVRTC, with mkc's templates as in-memory headers and
// a disk cache.
//
// The cache key (jit_cache_key) covers, each field length-delimited so no two inputs run
// together: the source, the kernel's name, every embedded template (name and content: a changed
// template never hits a stale cubin), the NVRTC options, NVRTC's version, the target arch and
// whether PTX is kept. Entries live in a per-user directory: $MKC_CACHE_DIR, else
// $XDG_CACHE_HOME/mkc, else $HOME/.cache/mkc, else ${TMPDIR:-/tmp}/mkc-cache-<uid>. A directory
// mkc creates is made 0700; one that is not the user's, or that others may write to, is not used
// (the fallback under /tmp must also be a real directory, not a link, with no access for others).
//
// An entry is written to a temporary file (0600) and renamed into place, so processes compiling the
// same kernel at once (the 8 ranks of a job) never see a partial entry. It records its key and
// kernel name, the resource figures ptxas reported, its lengths and a checksum over all of them:
// an entry copied under another key's name, one for another kernel, or a corrupt or truncated one
// is a miss, compiled again and replaced; so is one not owned by the user or writable by others.
// The cubin must also hold the kernel's symbol. A cache that cannot be read or written (a
// read-only or full disk, a directory refused as above) never fails a compile: the kernel is
// compiled and returned, and JitOutput::warnings says what went wrong with which directory.
#pragma once

#include <string>
#include <vector>

#include "jit/nvrtc.h"

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
  int smem_bytes = -1;  // static shared memory per CTA (the kernel's dynamic part is not in it)
  // Problems with the cache that did not stop the compile (each names the directory or entry and
  // the reason, e.g. "Read-only file system (EROFS)"); empty when there were none.
  std::vector<std::string> warnings;
};

// Compiles `source` (a kernel named `kernel_name`, for the register report); `program_name` names
// it in NVRTC's messages. Throws NvrtcCompileError when it does not compile, UserError when NVRTC
// refuses the arch or an option.
JitOutput jit_compile(const std::string& source, const std::string& program_name,
                      const std::string& kernel_name, const JitOptions& options);

// The kernel's figures for a message: "168 registers, 0 B spilled (compiled)" or "(cache hit)";
// where ptxas's figures were not found, the log's ptxas lines (at most 12) instead, so that a
// failed "no spills" check says what ptxas did say.
std::string resources_text(const JitOutput& out);

// The cache directory in use (created 0700 if missing). Throws EnvironmentError when it cannot be
// created or is refused (not the user's, writable by others), naming it and why.
std::string cache_dir(const JitOptions& options);

// The cache key of a compile (hex): what jit_compile uses with the embedded templates, the
// options it passes NVRTC and NVRTC's version.
std::string jit_cache_key(const std::string& source, const std::string& kernel_name,
                          const std::vector<InMemoryHeader>& headers,
                          const std::vector<std::string>& nvrtc_options, int nvrtc_version,
                          const std::string& arch, bool want_ptx);

}  // namespace mkc::jit
