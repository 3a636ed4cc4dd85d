// The C interface between mkc and its Clang plugin (libmkc_clang.so,
// compiler/clang/device_fn_check.cc), which mkc loads with dlopen: nothing in mkc links LLVM, so
// `mkc` and libmkc.so start where LLVM is absent (the GPU machine), and `mkc check` says then what
// it did not check (compiler/sema/clang_check.h). Plain C types only; a plugin of another ABI
// version is not used.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MKC_CLANG_PLUGIN_ABI 2

// What a finding is.
enum MkcClangSeverity { kMkcClangNote = 0, kMkcClangWarning = 1, kMkcClangError = 2 };

// Called once per finding: where it is as a byte range of the checked text, how bad, and what.
typedef void (*MkcClangReport)(void* ctx, size_t offset, size_t length, int severity,
                               const char* message);

// The plugin's ABI version (MKC_CLANG_PLUGIN_ABI when it was built).
typedef int (*MkcClangAbiFn)(void);

// Parses `code` (one C++ translation unit of `length` bytes: mkc's prelude, then device functions)
// with Clang and holds the function named `function` (the last one of that name) to the device
// function contract: a pure function of its arguments (no global or static variable, pointer,
// address, dereference, allocation, `asm`, exception or recursion). Clang's own errors (an unknown
// function, a wrong type, a path that does not return) are findings too. Returns 0 when the check
// ran (with findings or not), nonzero when Clang could not run (a finding says why).
typedef int (*MkcClangCheckFn)(const char* code, size_t length, const char* function,
                               MkcClangReport report, void* ctx);

// Device functions compiled to host code (compiler/clang/device_fn_jit.cc): Clang generates LLVM
// IR for `code` (a translation unit whose entry points are `extern "C" double ENTRY(const double*
// args)`), every loop of it counts its iterations, and LLVM's JIT compiles it for this CPU. Math
// functions resolve to the C library of the process. Returns a module (released with
// MkcClangJitReleaseFn), or null with findings saying why.
typedef struct MkcClangJit MkcClangJit;
typedef MkcClangJit* (*MkcClangJitCompileFn)(const char* code, size_t length, MkcClangReport report,
                                             void* ctx);

// The entry point named `entry` of a module (compiled and linked now), or null with why in `why`
// (at most why_size bytes, terminated): no such entry, or a name it calls that did not resolve.
typedef void* (*MkcClangJitLookupFn)(MkcClangJit* jit, const char* entry, char* why,
                                     size_t why_size);

// Calls `entry` (from MkcClangJitLookupFn) on n argument tuples of `arity` doubles each
// (args[e * arity + k]), writing results[e]. Each call may run at most `max_steps` loop
// iterations; an integer division that would trap (by zero, or the least integer by -1) or a call
// over that budget stops the batch:
// returns the index of the tuple that stopped it and writes why in `why` (at most why_size bytes,
// terminated); returns n when every call returned.
typedef size_t (*MkcClangJitCallFn)(void* entry, const double* args, size_t arity, size_t n,
                                    double* results, unsigned long long max_steps, char* why,
                                    size_t why_size);

typedef void (*MkcClangJitReleaseFn)(MkcClangJit* jit);

#ifdef __cplusplus
}
#endif
