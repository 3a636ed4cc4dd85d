// mkc's Clang plugin (libmkc_clang.so): a schedule's device function parsed as C++ by Clang's
// libTooling and held to the device-function contract (compiler/clang/plugin_abi.h). Loaded by
// compiler/sema/clang_check.cc with dlopen; this file is the only one that includes LLVM.
//
// The text is parsed from memory only (no real file system is reachable: a body cannot include
// anything, and the scanner refuses directives before the text gets here), with no standard
// headers, a template depth and a constexpr budget of its own, and an error limit.
#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/AST/RecursiveASTVisitor.h>
#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/FileManager.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendAction.h>
#include <clang/Tooling/Tooling.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/VirtualFileSystem.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/clang/plugin_abi.h"

namespace {

constexpr const char* kFileName = "/mkc/device_functions.cc";

struct Sink {
  MkcClangReport report;
  void* ctx;
  void operator()(size_t offset, size_t length, int severity, const std::string& message) const {
    report(ctx, offset, length, severity, message.c_str());
  }
};

// Byte offset of a location in the checked text, or SIZE_MAX when it is elsewhere.
size_t offset_of(const clang::SourceManager& sm, clang::SourceLocation loc) {
  if (loc.isInvalid()) return SIZE_MAX;
  const clang::SourceLocation file_loc = sm.getFileLoc(loc);
  if (!sm.isInMainFile(file_loc)) return SIZE_MAX;
  return sm.getFileOffset(file_loc);
}

// Clang's own diagnostics, passed on with their place.
class Collector : public clang::DiagnosticConsumer {
 public:
  explicit Collector(const Sink& sink) : sink_(sink) {}
  void HandleDiagnostic(clang::DiagnosticsEngine::Level level,
                        const clang::Diagnostic& info) override {
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

 private:
  const Sink& sink_;
};

// The contract, on the function named `name` (its last definition).
class Contract : public clang::RecursiveASTVisitor<Contract> {
 public:
  Contract(clang::ASTContext& ast, const std::string& name, const Sink& sink)
      : ast_(ast), name_(name), sink_(sink) {}

  void run() {
    const clang::FunctionDecl* target = nullptr;
    for (const clang::Decl* d : ast_.getTranslationUnitDecl()->decls()) {
      const auto* f = llvm::dyn_cast<clang::FunctionDecl>(d);
      if (f != nullptr && f->getNameAsString() == name_ && f->hasBody()) target = f;
    }
    if (target == nullptr) return;
    target_ = target;
    TraverseStmt(target->getBody());
  }

  bool VisitDeclRefExpr(clang::DeclRefExpr* e) {
    const auto* v = llvm::dyn_cast<clang::VarDecl>(e->getDecl());
    if (v != nullptr && v->hasGlobalStorage() && !v->isStaticLocal()) {
      report(e, "`" + v->getNameAsString() +
                    "` is a variable outside the function: a device function is a pure function of "
                    "its arguments");
    }
    return true;
  }
  bool VisitVarDecl(clang::VarDecl* v) {
    if (v->isStaticLocal()) {
      report(v, "`" + v->getNameAsString() +
                    "` is static: a device function keeps no state between calls");
    } else if (v->hasExternalStorage()) {
      report(v, "`" + v->getNameAsString() + "` declares a variable outside the function");
    }
    if (v->getType()->isPointerType() || v->getType()->isReferenceType()) {
      report(v, "`" + v->getNameAsString() +
                    "` is a pointer or a reference: a device function computes on values");
    }
    return true;
  }
  bool VisitUnaryOperator(clang::UnaryOperator* u) {
    if (u->getOpcode() == clang::UO_AddrOf)
      report(u, "takes an address: a device function computes on values, not memory");
    if (u->getOpcode() == clang::UO_Deref)
      report(u, "reads memory through a pointer: a device function computes on values");
    return true;
  }
  bool VisitArraySubscriptExpr(clang::ArraySubscriptExpr* a) {
    if (a->getBase()->getType()->isPointerType() &&
        !llvm::isa<clang::StringLiteral>(a->getBase()->IgnoreImpCasts())) {
      report(a, "indexes memory through a pointer: a device function computes on values");
    }
    return true;
  }
  bool VisitCXXNewExpr(clang::CXXNewExpr* e) {
    report(e, "allocates memory: a device function computes on values");
    return true;
  }
  bool VisitCXXDeleteExpr(clang::CXXDeleteExpr* e) {
    report(e, "frees memory: a device function computes on values");
    return true;
  }
  bool VisitGCCAsmStmt(clang::GCCAsmStmt* s) {
    report(s, "holds `asm`: a device function is portable C++");
    return true;
  }
  bool VisitCXXThrowExpr(clang::CXXThrowExpr* e) {
    report(e, "throws: device code has no exceptions");
    return true;
  }
  bool VisitCXXTryStmt(clang::CXXTryStmt* s) {
    report(s, "catches: device code has no exceptions");
    return true;
  }
  bool VisitCallExpr(clang::CallExpr* c) {
    const clang::FunctionDecl* callee = c->getDirectCallee();
    if (callee != nullptr && target_ != nullptr &&
        callee->getCanonicalDecl() == target_->getCanonicalDecl()) {
      report(c, "`" + name_ + "` calls itself: device functions may not recurse");
    }
    return true;
  }

 private:
  template <typename Node>
  void report(const Node* n, const std::string& message) {
    const clang::SourceManager& sm = ast_.getSourceManager();
    const size_t begin = offset_of(sm, n->getBeginLoc());
    const size_t end = offset_of(sm, n->getEndLoc());
    const size_t length =
        begin != SIZE_MAX && end != SIZE_MAX && end >= begin ? end - begin + 1 : 0;
    sink_(begin, length, kMkcClangError, message);
  }

  clang::ASTContext& ast_;
  std::string name_;
  const Sink& sink_;
  const clang::FunctionDecl* target_ = nullptr;
};

class Consumer : public clang::ASTConsumer {
 public:
  Consumer(const std::string& name, const Sink& sink) : name_(name), sink_(sink) {}
  void HandleTranslationUnit(clang::ASTContext& ast) override {
    // Only a function Clang accepted is worth holding to the contract.
    if (ast.getDiagnostics().hasErrorOccurred()) return;
    Contract(ast, name_, sink_).run();
  }

 private:
  std::string name_;
  const Sink& sink_;
};

class Action : public clang::ASTFrontendAction {
 public:
  Action(const std::string& name, const Sink& sink) : name_(name), sink_(sink) {}
  std::unique_ptr<clang::ASTConsumer> CreateASTConsumer(clang::CompilerInstance&,
                                                        llvm::StringRef) override {
    return std::make_unique<Consumer>(name_, sink_);
  }

 private:
  std::string name_;
  const Sink& sink_;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) int mkc_clang_abi(void) {
  return MKC_CLANG_PLUGIN_ABI;
}

extern "C" __attribute__((visibility("default"))) int mkc_clang_check(
    const char* code, size_t length, const char* function, MkcClangReport report, void* ctx) {
  const Sink sink{report, ctx};
  try {
    auto memory = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
    memory->addFile(kFileName, 0,
                    llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(code, length)));
    auto files = llvm::makeIntrusiveRefCnt<clang::FileManager>(clang::FileSystemOptions(), memory);
    const std::vector<std::string> args = {"mkc-clang",
                                           "-fsyntax-only",
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
                                           "-fno-caret-diagnostics",
                                           kFileName};
    Collector collector(sink);
    clang::tooling::ToolInvocation invocation(
        args, std::make_unique<Action>(std::string(function), sink), files.get());
    invocation.setDiagnosticConsumer(&collector);
    invocation.run();
    return 0;
  } catch (const std::exception& e) {
    sink(SIZE_MAX, 0, kMkcClangError, std::string("Clang failed: ") + e.what());
    return 1;
  } catch (...) {
    sink(SIZE_MAX, 0, kMkcClangError, "Clang failed");
    return 1;
  }
}
