// What a device function may not be called or contain, for the CUDA C++ that code generation
// emits around it. A device function's name and parameter names become C++ identifiers at
// namespace scope of the generated kernel, and its body is pasted in as written and compiled by
// NVRTC: a name that is a keyword, a type or something the generated code or CUDA already defines
// breaks that compile. (What its body may hold is dsl/cpp_body.h's: a preprocessor directive
// would run on the machine that compiles, `#include "/etc/passwd"` printing the file in NVRTC's
// diagnostics.)
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "compiler/sema/program.h"

namespace mkc::compiler {

// The CUDA C++ type of an element type ("__nv_bfloat16", "float", ...).
const char* cuda_type(DType t);

// A device function as one line of CUDA C++: `__device__ __forceinline__ RET NAME(PARAMS) {BODY}`.
// The generated kernel and the check's evaluator (runtime/device_fn_eval.h) both compile this.
std::string device_function_definition(const DeviceFunction& f);

// `::NAME(a0, a1, ...)`, argument k written by `argument(its type, k)`: how the evaluators of
// device functions (runtime/device_fn_eval.h on the GPU, compiler/oracle/clang_eval.h on the CPU)
// call one from the argument tuple they were given.
std::string device_function_call(const DeviceFunction& f,
                                 const std::function<std::string(DType, size_t)>& argument);

// Why `name` cannot name a device function or one of its parameters ("a C++ keyword", ...), or
// null when it can.
const char* reserved_device_name(std::string_view name);

}  // namespace mkc::compiler
