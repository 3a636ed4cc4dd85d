// Device functions through Clang: mkc's plugin (compiler/clang, libmkc_clang.so) parses a
// function as C++ with a prelude of mkc's own (the element types and the functions a device
// function may call) and holds it to the device-function contract (dsl/SPEC.md). The checker calls
// it for every device function when CheckOptions::clang_device_fns is set (the CLI sets it); its
// findings become `[device-function]` diagnostics at the body's own line and column.
//
// The plugin is loaded with dlopen, once per process, from $MKC_CLANG_PLUGIN, else beside the
// running program (its folder, then compiler/clang/ under it, as bazel-bin lays it out). Where it
// or LLVM 14 is absent (the GPU machine) nothing fails: plugin() says why, and the check notes
// once that device functions were not parsed.
#pragma once

#include <cstddef>
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

class ClangPlugin {
 public:
  // The process's plugin, or null with `*why` saying what was tried and what failed.
  static const ClangPlugin* get(std::string* why);
  // Clang's findings on `code` for the function named `function`.
  std::vector<ClangFinding> check(const std::string& code, const std::string& function) const;

 private:
  ClangPlugin() = default;
  void* check_ = nullptr;  // MkcClangCheckFn
};

// The text Clang reads for device function `index` of `fns`: the prelude, the functions before it
// declared (a body may call them), then the function itself as code generation writes it;
// `*body_at` is where its body's first character is in the text, `*definition_at` where its
// definition starts.
std::string clang_check_text(const std::vector<DeviceFunction>& fns, size_t index, size_t* body_at,
                             size_t* definition_at = nullptr);

}  // namespace mkc::compiler
