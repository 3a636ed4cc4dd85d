// mkc's Clang plugin (libmkc_clang.so), its first half: a schedule's device function parsed as C++
// by Clang's libTooling and held to the device-function contract (compiler/clang/plugin_abi.h).
// Loaded by compiler/sema/clang_check.cc with dlopen; the plugin's files are the only ones that
// include LLVM (the other half, device_fn_jit.cc, compiles checked functions for the CPU).
//
// The text is parsed from memory only (frontend.h: no real file system is reachable, and the
// scanner refuses directives before the text gets here), with no standard headers, a template
// depth and a constexpr budget of its own, and an error limit.
#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/AST/RecursiveASTVisitor.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendAction.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/clang/frontend.h"
#include "compiler/clang/plugin_abi.h"

namespace {

using mkc_clang::offset_of;
using mkc_clang::Sink;

// The contract, on the function named `name` (its last definition).
class Contract : public clang::RecursiveASTVisitor<Contract> {
 public:
  // Local variables of more bytes than this in all are refused (CUDA's stack is 512 KiB per
  // thread at most, and the CPU evaluator's is the caller's).
  static constexpr long long kMaxLocalBytes = 64 * 1024;

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
    const clang::QualType type = v->getType();
    if (type->isVariablyModifiedType()) {
      report(v, "`" + v->getNameAsString() +
                    "` is a variable-length array: a device function's locals have sizes known "
                    "when it compiles");
    } else if (v->isLocalVarDecl() && !v->isStaticLocal() && !type->isDependentType() &&
               !type->isIncompleteType() && !reported_locals_) {
      locals_bytes_ += ast_.getTypeSizeInChars(type).getQuantity();
      if (locals_bytes_ > kMaxLocalBytes) {
        reported_locals_ = true;
        report(v, "`" + v->getNameAsString() + "` brings the function's local variables to " +
                      std::to_string(locals_bytes_) +
                      " bytes: a device function's locals live in registers and the thread's "
                      "stack, at most " +
                      std::to_string(kMaxLocalBytes) + " bytes");
      }
    }
    if (v->getType()->isPointerType() || v->getType()->isReferenceType()) {
      report(v, "`" + v->getNameAsString() +
                    "` is a pointer or a reference: a device function computes on values");
    }
    return true;
  }
  bool VisitFunctionDecl(clang::FunctionDecl* f) {
    // Inside the body (the traversal starts there): a declaration names code outside the
    // function, which an `asm` label could bind to anything of the process. (A local class's
    // member functions are code of the function itself.)
    if (llvm::isa<clang::CXXMethodDecl>(f)) return true;
    report(f, "declares the function `" + f->getNameAsString() +
                  "` inside a device function: call the functions mkc declares, or another "
                  "device function of the schedule");
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
    // (The C library's functions are builtins to Clang too; only the compiler's own are refused.)
    if (callee != nullptr && callee->getBuiltinID() != 0 &&
        llvm::StringRef(callee->getNameAsString()).startswith("__builtin")) {
      report(c, "calls the compiler builtin `" + callee->getNameAsString() +
                    "`: call the math functions mkc declares (dsl/SPEC.md)");
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
  long long locals_bytes_ = 0;  // of the local variables seen so far
  bool reported_locals_ = false;
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
    mkc_clang::run_clang(code, length, std::make_unique<Action>(std::string(function), sink),
                         {"-fsyntax-only",
                          // Lossy conversions are warnings: float to integer, double to float,
                          // an integer float cannot hold exactly, 64 to 32 bits.
                          "-Wfloat-conversion", "-Wimplicit-float-conversion",
                          "-Wimplicit-int-float-conversion", "-Wshorten-64-to-32"},
                         sink);
    return 0;
  } catch (const std::exception& e) {
    sink(SIZE_MAX, 0, kMkcClangError, std::string("Clang failed: ") + e.what());
    return 1;
  } catch (...) {
    sink(SIZE_MAX, 0, kMkcClangError, "Clang failed");
    return 1;
  }
}
