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

#define MKC_CLANG_PLUGIN_ABI 1

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

#ifdef __cplusplus
}
#endif
