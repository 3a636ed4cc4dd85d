// What the plugin's two halves (device_fn_check.cc, device_fn_jit.cc) share: how findings reach
// mkc, and how Clang is run on text held in memory. Only the plugin includes this (it includes
// LLVM).
#pragma once

#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/SourceLocation.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/FrontendAction.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "compiler/clang/plugin_abi.h"

namespace mkc_clang {

// The name the text is parsed under: an in-memory file, nothing on disk is reachable.
constexpr const char* kFileName = "/mkc/device_functions.cc";

// Where findings go: mkc's callback and its context.
struct Sink {
  MkcClangReport report;
  void* ctx;
  void operator()(size_t offset, size_t length, int severity, const std::string& message) const {
    report(ctx, offset, length, severity, message.c_str());
  }
};

// Byte offset of a location in the text, or SIZE_MAX when it is elsewhere.
size_t offset_of(const clang::SourceManager& sm, clang::SourceLocation loc);

// Clang's own diagnostics, passed on with their place.
class Collector : public clang::DiagnosticConsumer {
 public:
  explicit Collector(const Sink& sink) : sink_(sink) {}
  void HandleDiagnostic(clang::DiagnosticsEngine::Level level,
                        const clang::Diagnostic& info) override;

 private:
  const Sink& sink_;
};

// Runs `action` on `code` as C++17 from memory: no standard headers, no file system, bounded
// template and constexpr work, at most 20 errors; `extra` flags go before the file name (the
// check's -fsyntax-only, the JIT's optimisation level). Clang's diagnostics go to `sink`. False
// when Clang reported an error.
bool run_clang(const char* code, size_t length, std::unique_ptr<clang::FrontendAction> action,
               const std::vector<std::string>& extra, const Sink& sink);

}  // namespace mkc_clang
