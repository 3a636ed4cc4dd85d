// Device functions through Clang: mkc's plugin (compiler/clang, libmkc_clang.so) parses a
// function as C++ with a prelude of mkc's own (the element types and the functions a device
// function may call) and holds it to the device-function contract (dsl/SPEC.md); it also compiles
// checked functions for the CPU (ClangPlugin::compile, used by compiler/oracle/clang_eval.h). The
// checker calls it for every device function when CheckOptions::clang_device_fns is set (the CLI
// sets it); its findings become `[device-function]` diagnostics at the body's own line and column.
//
// The plugin is loaded with dlopen, once per process, from $MKC_CLANG_PLUGIN, else beside the
// running program (its folder, then compiler/clang/ under it, as bazel-bin lays it out). Where it
// or LLVM 14 is absent (the GPU machine) nothing fails: plugin() says why, and the check notes
// once that device functions were not parsed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/sema/program.h"

namespace mkc::compiler {

struct ClangFinding {
  static constexpr size_t kNowhere = static_cast<size_t>(-1);
  size_t offset = kNowhere;  // into the checked text
  size_t length = 0;
  int severity = 2;  // 0 note, 1 warning, 2 error (compiler/clang/plugin_abi.h)
  std::string message;
};

// A module of host code the plugin compiled (device functions for the CPU: compiler/clang,
// device_fn_jit.cc); released when the last holder lets go.
class ClangJit {
 public:
  ~ClangJit();
  ClangJit(const ClangJit&) = delete;
  ClangJit& operator=(const ClangJit&) = delete;
  // The entry point `extern "C" double NAME(const double*)`, or null with `*why` saying why.
  void* entry(const std::string& name, std::string* why = nullptr) const;
  // Calls `entry` on n tuples of `arity` arguments (args[e * arity + k]) into results[e]. Each call
  // may run at most `max_steps` loop iterations. Returns n, or the index of the tuple whose call
  // stopped the batch with `*why` saying why (a loop over the budget, an integer division by zero).
  size_t call(void* entry, const double* args, size_t arity, size_t n, double* results,
              uint64_t max_steps, std::string* why) const;

 private:
  friend class ClangPlugin;
  ClangJit() = default;
  void* handle_ = nullptr;  // MkcClangJit*
  void* lookup_ = nullptr;
  void* call_ = nullptr;
  void* release_ = nullptr;
};

class ClangPlugin {
 public:
  // The process's plugin, or null with `*why` saying what was tried and what failed.
  static const ClangPlugin* get(std::string* why);
  // Clang's findings on `code` for the function named `function`.
  std::vector<ClangFinding> check(const std::string& code, const std::string& function) const;
  // `code` compiled for this CPU (its entry points `extern "C" double NAME(const double*)`), or
  // null with Clang's and LLVM's findings in `*findings`.
  std::shared_ptr<const ClangJit> compile(const std::string& code,
                                          std::vector<ClangFinding>* findings) const;

 private:
  ClangPlugin() = default;
  void* check_ = nullptr;        // MkcClangCheckFn
  void* jit_compile_ = nullptr;  // MkcClangJitCompileFn
  void* jit_lookup_ = nullptr;   // MkcClangJitLookupFn
  void* jit_call_ = nullptr;     // MkcClangJitCallFn
  void* jit_release_ = nullptr;  // MkcClangJitReleaseFn
};

// mkc's prelude: what every text given to the plugin starts with (the element types, math and
// conversions a device function may call), defined so that it both checks and compiles.
const char* device_fn_prelude();

// The text Clang reads for device function `index` of `fns`: the prelude, the functions before it
// declared (a body may call them), then the function itself as code generation writes it;
// `*body_at` is where its body's first character is in the text, `*definition_at` where its
// definition starts.
std::string clang_check_text(const std::vector<DeviceFunction>& fns, size_t index, size_t* body_at,
                             size_t* definition_at = nullptr);

}  // namespace mkc::compiler
