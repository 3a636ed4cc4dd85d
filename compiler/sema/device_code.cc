// The names a device function cannot take, grouped by why. The lists follow what the generated
// kernel sees: the C++20 keywords, mkc's element types, the types and built-ins of CUDA and of the
// headers the generated code includes (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, <cuda/atomic>), the
// common functions of CUDA's math library, and the names code generation itself defines at
// namespace scope.
#include "compiler/sema/device_code.h"

#include <fmt/format.h>

#include <array>
#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/sema/program.h"

namespace mkc::compiler {
namespace {

using Names = std::unordered_set<std::string>;

const Names& keywords() {
  static const Names k = {
      "alignas",       "alignof",     "and",
      "and_eq",        "asm",         "auto",
      "bitand",        "bitor",       "bool",
      "break",         "case",        "catch",
      "char",          "char8_t",     "char16_t",
      "char32_t",      "class",       "compl",
      "concept",       "const",       "consteval",
      "constexpr",     "constinit",   "const_cast",
      "continue",      "co_await",    "co_return",
      "co_yield",      "decltype",    "default",
      "delete",        "do",          "double",
      "dynamic_cast",  "else",        "enum",
      "explicit",      "export",      "extern",
      "false",         "float",       "for",
      "friend",        "goto",        "if",
      "inline",        "int",         "long",
      "mutable",       "namespace",   "new",
      "noexcept",      "not",         "not_eq",
      "nullptr",       "operator",    "or",
      "or_eq",         "private",     "protected",
      "public",        "register",    "reinterpret_cast",
      "requires",      "return",      "short",
      "signed",        "sizeof",      "static",
      "static_assert", "static_cast", "struct",
      "switch",        "template",    "this",
      "thread_local",  "throw",       "true",
      "try",           "typedef",     "typeid",
      "typename",      "union",       "unsigned",
      "using",         "virtual",     "void",
      "volatile",      "wchar_t",     "while",
      "xor",           "xor_eq",
  };
  return k;
}

const Names& types() {
  static const Names t = {
      "int8_t",   "int16_t",  "int32_t",     "int64_t",      "uint8_t",  "uint16_t",
      "uint32_t", "uint64_t", "size_t",      "ptrdiff_t",    "intptr_t", "uintptr_t",
      "half",     "half2",    "nv_bfloat16", "nv_bfloat162", "dim3",
  };
  return t;
}

// CUDA's built-in variables and functions, and the C library functions device code may call.
const Names& builtins() {
  static const Names b = {
      "threadIdx", "blockIdx",  "blockDim",  "gridDim",   "warpSize",   "printf",    "malloc",
      "free",      "memcpy",    "memset",    "assert",    "clock",      "clock64",   "min",
      "max",       "abs",       "atomicAdd", "atomicSub", "atomicExch", "atomicMin", "atomicMax",
      "atomicInc", "atomicDec", "atomicCAS", "atomicAnd", "atomicOr",   "atomicXor",
  };
  return b;
}

// The math library, float and double forms, and the half-precision functions of cuda_fp16.h and
// cuda_bf16.h (h... and h2...).
const Names& math() {
  static const Names m = [] {
    Names out;
    for (const char* f :
         {"sqrt",   "rsqrt",    "cbrt",      "rcbrt",     "exp",    "exp2",    "exp10",  "expm1",
          "log",    "log2",     "log10",     "log1p",     "pow",    "sin",     "cos",    "tan",
          "asin",   "acos",     "atan",      "atan2",     "sinh",   "cosh",    "tanh",   "asinh",
          "acosh",  "atanh",    "erf",       "erfc",      "erfinv", "lgamma",  "tgamma", "fabs",
          "floor",  "ceil",     "round",     "rint",      "trunc",  "fmod",    "fmin",   "fmax",
          "fma",    "hypot",    "copysign",  "normcdf",   "sincos", "frexp",   "ldexp",  "modf",
          "nan",    "fdim",     "remainder", "nearbyint", "lround", "llround", "logb",   "ilogb",
          "scalbn", "nextafter"}) {
      out.insert(f);
      out.insert(std::string(f) + "f");
    }
    for (const char* f : {"isnan", "isinf", "isfinite", "signbit"}) out.insert(f);
    for (const char* f : {"exp", "exp2", "exp10", "log",  "log2",  "log10", "sqrt",  "rsqrt", "rcp",
                          "sin", "cos",  "tanh",  "ceil", "floor", "rint",  "trunc", "abs",   "add",
                          "sub", "mul",  "div",   "fma",  "neg",   "max",   "min",   "eq",    "ne",
                          "lt",  "le",   "gt",    "ge",   "isnan", "isinf"}) {
      out.insert(std::string("h") + f);
      out.insert(std::string("h2") + f);
    }
    return out;
  }();
  return m;
}

// What the generated kernel defines at namespace scope beside the device functions (see
// compiler/codegen/codegen.cc), and the namespaces it uses.
const Names& generated() {
  static const Names g = {
      "kRanks",   "kBuffers", "kCtas",    "kTasks",       "kViews",
      "kArgs",    "kWaits",   "kSignals", "kCtaStart",    "kCtaList",
      "run_task", "std",      "cuda",     "class_chains", "run_chain",
  };
  return g;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// char1 .. double4: CUDA's vector types.
bool is_vector_type(std::string_view name) {
  static const std::array<std::string_view, 12> bases = {
      "char", "uchar", "short",    "ushort",    "int",   "uint",
      "long", "ulong", "longlong", "ulonglong", "float", "double"};
  if (name.size() < 2) return false;
  const char last = name.back();
  if (last < '1' || last > '4') return false;
  const std::string_view base = name.substr(0, name.size() - 1);
  for (std::string_view b : bases) {
    if (b == base) return true;
  }
  return false;
}

}  // namespace

const char* reserved_device_name(std::string_view name) {
  const std::string n(name);
  if (keywords().count(n)) return "a C++ keyword";
  for (const std::string& t : dtype_names()) {
    if (name == t) return "one of mkc's element types";
  }
  if (types().count(n) || is_vector_type(name)) return "a C++ or CUDA type";
  if (name == "main") return "the name of a program's entry point";
  if (starts_with(name, "mkc") || starts_with(name, "task_class_") ||
      starts_with(name, "chain_class_") || generated().count(n))
    return "a name mkc's generated code uses";
  if (name.find("__") != std::string_view::npos ||
      (name.size() >= 2 && name[0] == '_' && name[1] >= 'A' && name[1] <= 'Z'))
    return "reserved in C++ (it contains `__` or starts with `_` and a capital letter)";
  if (starts_with(name, "cuda")) return "a name of the CUDA API";
  if (builtins().count(n)) return "a CUDA built-in";
  if (math().count(n)) return "a function of CUDA's math library";
  return nullptr;
}

const char* cuda_type(DType t) {
  switch (t) {
    case DType::kBf16:
      return "__nv_bfloat16";
    case DType::kF16:
      return "__half";
    case DType::kF32:
      return "float";
    case DType::kF64:
      return "double";
    case DType::kFp8E4m3:
      return "__nv_fp8_e4m3";
    case DType::kFp8E5m2:
      return "__nv_fp8_e5m2";
    case DType::kI32:
      return "int";
    case DType::kI64:
      return "long long";
  }
  return "void";
}

std::string device_function_call(const DeviceFunction& f,
                                 const std::function<std::string(DType, size_t)>& argument) {
  std::string call = "::" + f.name + "(";
  for (size_t k = 0; k < f.params.size(); ++k)
    call += (k ? ", " : "") + argument(f.params[k].second, k);
  return call + ")";
}

std::string device_function_definition(const DeviceFunction& f) {
  std::string params;
  for (const auto& [name, t] : f.params)
    params += fmt::format("{}{} {}", params.empty() ? "" : ", ", cuda_type(t), name);
  return fmt::format("__device__ __forceinline__ {} {}({}) {{{}}}", cuda_type(f.ret), f.name,
                     params, f.body);
}

}  // namespace mkc::compiler
