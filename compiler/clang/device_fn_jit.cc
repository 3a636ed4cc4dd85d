// mkc's Clang plugin, its second half: device functions compiled to host code, so that the CPU
// reference and `mkc verify` evaluate what the user wrote (compiler/clang/plugin_abi.h,
// MkcClangJit*). Clang generates optimised LLVM IR from the text (mkc's prelude, the functions,
// one `extern "C" double ENTRY(const double*)` per function); every loop gets a call that counts
// its iterations; LLVM's ORC JIT compiles the module for this CPU.
//
// What a call may do is bounded: the functions were held to the contract first
// (device_fn_check.cc: no memory, no globals, no recursion, no declarations of their own), the JIT
// resolves only the C library's math functions by name, and a loop that runs past the caller's
// budget, more than 2,048 calls open at once (a lambda that calls itself), or an integer division
// that would trap (tested before it runs, no signal involved) stops the batch with the tuple that
// stopped it.
#include <clang/CodeGen/CodeGenAction.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/Analysis/CFG.h>
#include <llvm/ExecutionEngine/JITSymbol.h>
#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/BasicBlock.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Transforms/Utils/BasicBlockUtils.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compiler/clang/frontend.h"
#include "compiler/clang/plugin_abi.h"

struct MkcClangJit {
  std::unique_ptr<llvm::orc::LLJIT> jit;
};

namespace {

using mkc_clang::Sink;

// The names a compiled function may reach outside its module: the C library's math (what the
// prelude declares, compiler/sema/clang_check.cc) and what LLVM lowers copies and fills of local
// arrays to.
const std::unordered_set<std::string>& allowed_symbols() {
  static const std::unordered_set<std::string> names = [] {
    std::unordered_set<std::string> out = {"memcpy", "memset", "memmove"};
    for (const char* f :
         {"exp",       "exp2",   "exp10", "expm1", "log",   "log2",  "log10", "log1p",
          "sqrt",      "cbrt",   "sin",   "cos",   "tan",   "asin",  "acos",  "atan",
          "sinh",      "cosh",   "tanh",  "asinh", "acosh", "atanh", "erf",   "erfc",
          "lgamma",    "tgamma", "fabs",  "floor", "ceil",  "round", "trunc", "rint",
          "nearbyint", "logb",   "pow",   "atan2", "fmin",  "fmax",  "fmod",  "remainder",
          "copysign",  "hypot",  "fdim",  "fma",   "frexp", "ldexp", "sincos"}) {
      out.insert(f);
      out.insert(std::string(f) + "f");
    }
    return out;
  }();
  return names;
}

// Why a batch stopped, set by the tick or the division guard before they jump out.
enum class Stop { kNone, kSteps, kDivision, kDepth };

// Calls a compiled function may have open at once: a lambda that calls itself gets past the
// contract's recursion check, and without a bound it would overflow the caller's stack. (CUDA's
// stack is a few KiB per thread: far fewer frames fit on the GPU.)
constexpr int kMaxDepth = 2048;
// Nor more stack than this (the contract keeps one call's locals under 64 KiB).
constexpr uintptr_t kMaxStackBytes = uintptr_t{1} << 20;

thread_local sigjmp_buf* t_escape = nullptr;  // set while a batch runs on this thread
thread_local unsigned long long t_steps_left = 0;
thread_local Stop t_stop = Stop::kNone;
thread_local int t_depth = 0;
thread_local uintptr_t t_stack_base = 0;  // an address in the batch's entry frame

// Called at the head of every loop of a compiled function.
extern "C" void mkc_eval_tick() {
  if (t_steps_left-- == 0) {
    t_stop = Stop::kSteps;
    siglongjmp(*t_escape, 1);
  }
}

// Called at the entry and before every return of every compiled function.
extern "C" void mkc_eval_enter() {
  // Frames of any size: the stack the batch has used so far, from its entry down to here.
  char probe = 0;
  const uintptr_t here = reinterpret_cast<uintptr_t>(&probe);
  if (++t_depth > kMaxDepth || (t_stack_base > here && t_stack_base - here > kMaxStackBytes)) {
    t_stop = Stop::kDepth;
    siglongjmp(*t_escape, 1);
  }
}
extern "C" void mkc_eval_leave() {
  --t_depth;
}

// Called where a compiled function would divide an integer by zero (or the least integer by -1,
// which traps on x86 too): the batch stops instead of the process.
extern "C" void mkc_eval_bad_division() {
  t_stop = Stop::kDivision;
  siglongjmp(*t_escape, 1);
}

// Clang's module, taken when code generation ends.
class Capture : public clang::EmitLLVMOnlyAction {
 public:
  Capture(llvm::LLVMContext* ctx, std::unique_ptr<llvm::Module>* out)
      : clang::EmitLLVMOnlyAction(ctx), out_(out) {}

 protected:
  void EndSourceFileAction() override {
    clang::EmitLLVMOnlyAction::EndSourceFileAction();
    *out_ = takeModule();
  }

 private:
  std::unique_ptr<llvm::Module>* out_;
};

// A call to mkc_eval_tick at the head of every loop: the target of each back edge of a depth-first
// walk, which every cycle of the control flow graph has.
void count_loop_iterations(llvm::Module& m) {
  llvm::LLVMContext& c = m.getContext();
  const llvm::FunctionCallee tick = m.getOrInsertFunction(
      "mkc_eval_tick", llvm::FunctionType::get(llvm::Type::getVoidTy(c), false));
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    llvm::SmallVector<std::pair<const llvm::BasicBlock*, const llvm::BasicBlock*>, 8> back;
    llvm::FindFunctionBackedges(f, back);
    std::set<const llvm::BasicBlock*> heads;
    for (const auto& edge : back) heads.insert(edge.second);
    for (const llvm::BasicBlock* head : heads) {
      auto* block = const_cast<llvm::BasicBlock*>(head);
      llvm::IRBuilder<> ir(block, block->getFirstInsertionPt());
      ir.CreateCall(tick);
    }
  }
}

// A call to mkc_eval_enter at every function's entry and to mkc_eval_leave before each of its
// returns: the depth of calls is bounded, whatever calls what.
void count_call_depth(llvm::Module& m) {
  llvm::LLVMContext& c = m.getContext();
  llvm::FunctionType* type = llvm::FunctionType::get(llvm::Type::getVoidTy(c), false);
  const llvm::FunctionCallee enter = m.getOrInsertFunction("mkc_eval_enter", type);
  const llvm::FunctionCallee leave = m.getOrInsertFunction("mkc_eval_leave", type);
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    std::vector<llvm::ReturnInst*> returns;
    for (llvm::BasicBlock& b : f)
      if (auto* r = llvm::dyn_cast<llvm::ReturnInst>(b.getTerminator())) returns.push_back(r);
    llvm::BasicBlock& entry = f.getEntryBlock();
    llvm::IRBuilder<>(&entry, entry.getFirstInsertionPt()).CreateCall(enter);
    for (llvm::ReturnInst* r : returns) llvm::IRBuilder<>(r).CreateCall(leave);
  }
}

// Every integer division and remainder whose divisor may be zero (or, signed, -1 with the least
// dividend) first tests its operands and calls mkc_eval_bad_division when they would trap.
void guard_divisions(llvm::Module& m) {
  llvm::LLVMContext& c = m.getContext();
  const llvm::FunctionCallee bad = m.getOrInsertFunction(
      "mkc_eval_bad_division", llvm::FunctionType::get(llvm::Type::getVoidTy(c), false));
  std::vector<llvm::BinaryOperator*> divisions;
  for (llvm::Function& f : m) {
    for (llvm::BasicBlock& b : f) {
      for (llvm::Instruction& i : b) {
        auto* op = llvm::dyn_cast<llvm::BinaryOperator>(&i);
        if (op == nullptr) continue;
        const auto code = op->getOpcode();
        if (code != llvm::Instruction::SDiv && code != llvm::Instruction::UDiv &&
            code != llvm::Instruction::SRem && code != llvm::Instruction::URem)
          continue;
        const bool is_signed = code == llvm::Instruction::SDiv || code == llvm::Instruction::SRem;
        if (const auto* k = llvm::dyn_cast<llvm::ConstantInt>(op->getOperand(1));
            k != nullptr && !k->isZero() && !(is_signed && k->isMinusOne()))
          continue;
        divisions.push_back(op);
      }
    }
  }
  for (llvm::BinaryOperator* op : divisions) {
    const bool is_signed =
        op->getOpcode() == llvm::Instruction::SDiv || op->getOpcode() == llvm::Instruction::SRem;
    llvm::IRBuilder<> ir(op);
    llvm::Value* a = op->getOperand(0);
    llvm::Value* d = op->getOperand(1);
    llvm::Type* t = d->getType();
    llvm::Value* trap = ir.CreateICmpEQ(d, llvm::Constant::getNullValue(t));
    if (is_signed) {
      const unsigned bits = t->getScalarSizeInBits();
      llvm::Value* least =
          ir.CreateICmpEQ(a, llvm::ConstantInt::get(t, llvm::APInt::getSignedMinValue(bits)));
      llvm::Value* minus_one = ir.CreateICmpEQ(d, llvm::Constant::getAllOnesValue(t));
      trap = ir.CreateOr(trap, ir.CreateAnd(least, minus_one));
    }
    if (t->isVectorTy()) trap = ir.CreateOrReduce(trap);
    llvm::Instruction* then = llvm::SplitBlockAndInsertIfThen(trap, op, /*Unreachable=*/true);
    llvm::IRBuilder<>(then).CreateCall(bad);
  }
}

void report_error(const Sink& sink, llvm::Error e, const char* what) {
  sink(SIZE_MAX, 0, kMkcClangError, std::string(what) + ": " + llvm::toString(std::move(e)));
}

}  // namespace

extern "C" __attribute__((visibility("default"))) MkcClangJit* mkc_clang_jit_compile(
    const char* code, size_t length, MkcClangReport report, void* ctx) {
  const Sink sink{report, ctx};
  try {
    static std::once_flag targets;
    std::call_once(targets, [] {
      llvm::InitializeNativeTarget();
      llvm::InitializeNativeTargetAsmPrinter();
    });
    auto context = std::make_unique<llvm::LLVMContext>();
    std::unique_ptr<llvm::Module> module;
    // -fno-finite-loops: a loop that never ends must reach its tick, not be assumed away.
    if (!mkc_clang::run_clang(code, length, std::make_unique<Capture>(context.get(), &module),
                              {"-O2", "-fno-finite-loops", "-fno-math-errno"}, sink) ||
        module == nullptr) {
      if (module == nullptr) sink(SIZE_MAX, 0, kMkcClangError, "Clang generated no code");
      return nullptr;
    }
    count_loop_iterations(*module);
    count_call_depth(*module);
    guard_divisions(*module);

    auto built = llvm::orc::LLJITBuilder().create();
    if (!built) {
      report_error(sink, built.takeError(), "LLVM's JIT could not start");
      return nullptr;
    }
    auto out = std::make_unique<MkcClangJit>();
    out->jit = std::move(*built);
    llvm::orc::LLJIT& jit = *out->jit;
    // A name that does not resolve comes back from the lookup (mkc_clang_jit_lookup says it);
    // nothing is printed on the process's stderr.
    jit.getExecutionSession().setErrorReporter(
        [](llvm::Error e) { llvm::consumeError(std::move(e)); });
    module->setDataLayout(jit.getDataLayout());
    llvm::orc::JITDylib& lib = jit.getMainJITDylib();

    // What the plugin's own passes call (the loop counter, the call depth, the division guard).
    llvm::orc::SymbolMap own;
    const auto define = [&](const char* name, void (*fn)()) {
      own[jit.mangleAndIntern(name)] =
          llvm::JITEvaluatedSymbol(llvm::pointerToJITTargetAddress(fn),
                                   llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
    };
    define("mkc_eval_tick", &mkc_eval_tick);
    define("mkc_eval_enter", &mkc_eval_enter);
    define("mkc_eval_leave", &mkc_eval_leave);
    define("mkc_eval_bad_division", &mkc_eval_bad_division);
    if (llvm::Error e = lib.define(llvm::orc::absoluteSymbols(std::move(own)))) {
      report_error(sink, std::move(e), "LLVM's JIT");
      return nullptr;
    }
    const char prefix = jit.getDataLayout().getGlobalPrefix();
    auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        prefix, [prefix](const llvm::orc::SymbolStringPtr& name) {
          llvm::StringRef n = *name;
          if (prefix != '\0' && n.startswith(std::string(1, prefix))) n = n.drop_front();
          return allowed_symbols().count(n.str()) > 0;
        });
    if (!process) {
      report_error(sink, process.takeError(), "LLVM's JIT cannot search the process");
      return nullptr;
    }
    lib.addGenerator(std::move(*process));
    if (llvm::Error e =
            jit.addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(context)))) {
      report_error(sink, std::move(e), "LLVM's JIT refused the module");
      return nullptr;
    }
    return out.release();
  } catch (const std::exception& e) {
    sink(SIZE_MAX, 0, kMkcClangError, std::string("Clang failed: ") + e.what());
  } catch (...) {
    sink(SIZE_MAX, 0, kMkcClangError, "Clang failed");
  }
  return nullptr;
}

extern "C" __attribute__((visibility("default"))) void* mkc_clang_jit_lookup(MkcClangJit* jit,
                                                                             const char* entry,
                                                                             char* why,
                                                                             size_t why_size) {
  if (jit == nullptr || entry == nullptr) return nullptr;
  auto found = jit->jit->lookup(entry);
  if (!found) {
    const std::string text = llvm::toString(found.takeError());
    if (why != nullptr && why_size > 0) std::snprintf(why, why_size, "%s", text.c_str());
    return nullptr;
  }
  return reinterpret_cast<void*>(static_cast<uintptr_t>(found->getAddress()));
}

extern "C" __attribute__((visibility("default"))) size_t mkc_clang_jit_call(
    void* entry, const double* args, size_t arity, size_t n, double* results,
    unsigned long long max_steps, char* why, size_t why_size) {
  using Fn = double (*)(const double*);
  const Fn fn = reinterpret_cast<Fn>(entry);
  sigjmp_buf escape;
  sigjmp_buf* const outer = t_escape;
  // Where the batch is, read after a jump out of it: in memory, not a register.
  volatile size_t index = 0;
  if (sigsetjmp(escape, 0) != 0) {
    t_escape = outer;
    if (why != nullptr && why_size > 0) {
      std::snprintf(why, why_size, "%s",
                    t_stop == Stop::kDivision
                        ? "divided an integer by zero (or the least integer by -1)"
                    : t_stop == Stop::kDepth
                        ? "had more than 2048 calls (or 1 MiB of stack) open at once: does a "
                          "lambda call itself without end?"
                        : "ran more loop iterations than the evaluator allows; does a loop end?");
    }
    return index;
  }
  t_escape = &escape;
  char base = 0;
  t_stack_base = reinterpret_cast<uintptr_t>(&base);
  for (size_t e = 0; e < n; ++e) {
    index = e;
    t_steps_left = max_steps;
    t_stop = Stop::kNone;
    t_depth = 0;
    results[e] = fn(args + e * arity);
  }
  t_escape = outer;
  return n;
}

extern "C" __attribute__((visibility("default"))) void mkc_clang_jit_release(MkcClangJit* jit) {
  delete jit;
}
