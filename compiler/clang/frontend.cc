#include "compiler/clang/frontend.h"

#include <clang/Basic/FileManager.h>
#include <clang/Tooling/Tooling.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/VirtualFileSystem.h>

namespace mkc_clang {

size_t offset_of(const clang::SourceManager& sm, clang::SourceLocation loc) {
  if (loc.isInvalid()) return SIZE_MAX;
  const clang::SourceLocation file_loc = sm.getFileLoc(loc);
  if (!sm.isInMainFile(file_loc)) return SIZE_MAX;
  return sm.getFileOffset(file_loc);
}

void Collector::HandleDiagnostic(clang::DiagnosticsEngine::Level level,
                                 const clang::Diagnostic& info) {
  clang::DiagnosticConsumer::HandleDiagnostic(level, info);
  int severity = kMkcClangNote;
  if (level == clang::DiagnosticsEngine::Warning) severity = kMkcClangWarning;
  if (level == clang::DiagnosticsEngine::Error || level == clang::DiagnosticsEngine::Fatal)
    severity = kMkcClangError;
  if (level == clang::DiagnosticsEngine::Ignored || level == clang::DiagnosticsEngine::Remark)
    return;
  llvm::SmallString<256> text;
  info.FormatDiagnostic(text);
  size_t offset = SIZE_MAX;
  if (info.hasSourceManager()) offset = offset_of(info.getSourceManager(), info.getLocation());
  sink_(offset, 0, severity, std::string(text.str()));
}

bool run_clang(const char* code, size_t length, std::unique_ptr<clang::FrontendAction> action,
               const std::vector<std::string>& extra, const Sink& sink) {
  auto memory = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
  memory->addFile(kFileName, 0,
                  llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(code, length)));
  auto files = llvm::makeIntrusiveRefCnt<clang::FileManager>(clang::FileSystemOptions(), memory);
  std::vector<std::string> args = {"mkc-clang",
                                   "-x",
                                   "c++",
                                   "-std=c++17",
                                   "-nostdinc",
                                   "-nostdinc++",
                                   "-fno-exceptions",
                                   "-ferror-limit=20",
                                   "-ftemplate-depth=64",
                                   "-fconstexpr-depth=64",
                                   "-fconstexpr-steps=1000000",
                                   "-fbracket-depth=256",
                                   "-Werror=return-type",
                                   "-Wno-unused-value",
                                   "-fno-caret-diagnostics"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back(kFileName);
  Collector collector(sink);
  clang::tooling::ToolInvocation invocation(args, std::move(action), files.get());
  invocation.setDiagnosticConsumer(&collector);
  const bool ok = invocation.run();
  return ok && collector.getNumErrors() == 0;
}

}  // namespace mkc_clang
