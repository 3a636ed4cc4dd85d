#include "compiler/sema/clang_check.h"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "compiler/clang/plugin_abi.h"
#include "compiler/sema/device_code.h"

namespace mkc::compiler {
namespace {

// What a device function may use, defined for the host so that Clang can both check a body and
// compile it for the CPU (compiler/oracle/clang_eval.h): the element types as CUDA names them
// (host stand-ins that hold a float and round to their own precision when made, as CUDA's
// conversions do: 16-bit floats to nearest, fp8 to nearest and saturated to the largest finite
// value), the functions of CUDA's math library (the C library's where it has them), and CUDA's
// conversions and 16-bit intrinsics. Anything else is an unknown name to Clang.
constexpr const char* kPrelude =
    R"(// mkc's prelude for device functions (compiler/sema/clang_check.cc).
#define __device__
#define __host__
#define __forceinline__ inline
#define INFINITY __builtin_huge_valf()
#define NAN __builtin_nanf("")
#define MKC_LIBM1(n) float n##f(float); double n(double);
#define MKC_LIBM2(n) float n##f(float, float); double n(double, double);
extern "C" {
MKC_LIBM1(exp) MKC_LIBM1(exp2) MKC_LIBM1(exp10) MKC_LIBM1(expm1) MKC_LIBM1(log) MKC_LIBM1(log2)
MKC_LIBM1(log10) MKC_LIBM1(log1p) MKC_LIBM1(sqrt) MKC_LIBM1(cbrt) MKC_LIBM1(sin) MKC_LIBM1(cos)
MKC_LIBM1(tan) MKC_LIBM1(asin) MKC_LIBM1(acos) MKC_LIBM1(atan) MKC_LIBM1(sinh) MKC_LIBM1(cosh)
MKC_LIBM1(tanh) MKC_LIBM1(asinh) MKC_LIBM1(acosh) MKC_LIBM1(atanh) MKC_LIBM1(erf) MKC_LIBM1(erfc)
MKC_LIBM1(lgamma) MKC_LIBM1(tgamma) MKC_LIBM1(fabs) MKC_LIBM1(floor) MKC_LIBM1(ceil)
MKC_LIBM1(round) MKC_LIBM1(trunc) MKC_LIBM1(rint) MKC_LIBM1(nearbyint) MKC_LIBM1(logb)
MKC_LIBM2(pow) MKC_LIBM2(atan2) MKC_LIBM2(fmin) MKC_LIBM2(fmax) MKC_LIBM2(fmod)
MKC_LIBM2(remainder) MKC_LIBM2(copysign) MKC_LIBM2(hypot) MKC_LIBM2(fdim)
float fmaf(float, float, float); double fma(double, double, double);
}
#undef MKC_LIBM1
#undef MKC_LIBM2
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline double rcbrt(double x) { return 1.0 / cbrt(x); }
inline double erfinv(double y) {
  if (!(y > -1.0 && y < 1.0)) return y == 1.0 ? INFINITY : y == -1.0 ? -INFINITY : NAN;
  // A single-precision polynomial start (Giles, 2010), then two Newton steps on erf.
  double w = -log((1.0 - y) * (1.0 + y)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08; p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w; p = 0.00021858087 + p * w; p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w; p = 0.246640727 + p * w; p = 1.50140941 + p * w;
  } else {
    w = sqrt(w) - 3.0;
    p = -0.000200214257; p = 0.000100950558 + p * w; p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w; p = 0.00573950773 + p * w; p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w; p = 1.00167406 + p * w; p = 2.83297682 + p * w;
  }
  double x = p * y;
  for (int i = 0; i < 2; ++i) x -= (erf(x) - y) / (1.1283791670955126 * exp(-x * x));
  return x;
}
inline float erfinvf(float y) { return static_cast<float>(erfinv(y)); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.7071067811865476); }
inline float normcdff(float x) { return static_cast<float>(normcdf(x)); }
inline double normcdfinv(double p) { return 1.4142135623730951 * erfinv(2.0 * p - 1.0); }
inline float normcdfinvf(float p) { return static_cast<float>(normcdfinv(p)); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
inline bool isnan(float x) { return __builtin_isnan(x); }
inline bool isnan(double x) { return __builtin_isnan(x); }
inline bool isinf(float x) { return __builtin_isinf(x); }
inline bool isinf(double x) { return __builtin_isinf(x); }
inline bool isfinite(float x) { return __builtin_isfinite(x); }
inline bool isfinite(double x) { return __builtin_isfinite(x); }
inline bool signbit(float x) { return __builtin_signbit(x); }
inline bool signbit(double x) { return __builtin_signbit(x); }
inline int abs(int x) { return x < 0 ? -x : x; }
inline long long llabs(long long x) { return x < 0 ? -x : x; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
// v rounded to nearest (ties to even) with `mantissa` bits after the leading one, exponents down to
// `min_exp` (below it, subnormal spacing); above `largest`, infinity or (saturate) the largest.
inline float mkc_round_float(float f, int mantissa, int min_exp, double largest, bool saturate) {
  const double v = f;
  if (v != v || v == 0.0) return f;
  const double a = v < 0.0 ? -v : v;
  double r = largest;
  if (!__builtin_isinf(a)) {
    int e = 0;
    __builtin_frexp(a, &e);
    const int lead = e - 1 < min_exp ? min_exp : e - 1;
    const double ulp = __builtin_ldexp(1.0, lead - mantissa);
    r = __builtin_nearbyint(a / ulp) * ulp;
  }
  if (r > largest) r = saturate ? largest : INFINITY;
  return static_cast<float>(v < 0.0 ? -r : r);
}
#define MKC_SCALAR(T, MANTISSA, MIN_EXP, LARGEST, SATURATE)                       \
  struct T {                                                                      \
    T() = default;                                                                \
    T(float f) : v(mkc_round_float(f, MANTISSA, MIN_EXP, LARGEST, SATURATE)) {}   \
    T(double d) : T(static_cast<float>(d)) {}                                     \
    T(int i) : T(static_cast<float>(i)) {}                                        \
    T(long long i) : T(static_cast<float>(i)) {}                                  \
    T(unsigned u) : T(static_cast<float>(u)) {}                                   \
    operator float() const { return v; }                                          \
    float v;                                                                      \
  };
MKC_SCALAR(__half, 10, -14, 65504.0, false)
MKC_SCALAR(__nv_bfloat16, 7, -126, 3.3895313892515355e38, false)
MKC_SCALAR(__nv_fp8_e4m3, 3, -6, 448.0, true)
MKC_SCALAR(__nv_fp8_e5m2, 2, -14, 57344.0, true)
#undef MKC_SCALAR
typedef __half half;
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return h; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return h; }
#define MKC_HALF_OPS(T)                                                      \
  inline T __hadd(T a, T b) { return T(float(a) + float(b)); }               \
  inline T __hsub(T a, T b) { return T(float(a) - float(b)); }               \
  inline T __hmul(T a, T b) { return T(float(a) * float(b)); }               \
  inline T __hdiv(T a, T b) { return T(float(a) / float(b)); }               \
  inline T __hneg(T a) { return T(-float(a)); }                              \
  inline T __habs(T a) { return T(fabsf(float(a))); }                        \
  inline T __hfma(T a, T b, T c) { return T(fmaf(float(a), float(b), float(c))); } \
  inline T __hmax(T a, T b) { return T(fmaxf(float(a), float(b))); }         \
  inline T __hmin(T a, T b) { return T(fminf(float(a), float(b))); }
MKC_HALF_OPS(__half)
MKC_HALF_OPS(__nv_bfloat16)
#undef MKC_HALF_OPS
inline float __int2float_rn(int i) { return static_cast<float>(i); }
inline int __float2int_rn(float f) { return static_cast<int>(__builtin_rintf(f)); }
inline int __float2int_rz(float f) { return static_cast<int>(f); }
)";

}  // namespace

const char* device_fn_prelude() {
  return kPrelude;
}

std::string clang_check_text(const std::vector<DeviceFunction>& fns, size_t index, size_t* body_at,
                             size_t* definition_at) {
  std::string text = kPrelude;
  for (size_t i = 0; i < index && i < fns.size(); ++i) {
    // The functions before it as declarations: callable, their bodies checked on their own.
    // (Not inline: an inline function declared and never defined is a warning of its own.)
    text += std::string("__device__ ") + cuda_type(fns[i].ret) + " " + fns[i].name + "(";
    for (size_t p = 0; p < fns[i].params.size(); ++p) {
      text += (p > 0 ? ", " : "") + std::string(cuda_type(fns[i].params[p].second)) + " " +
              fns[i].params[p].first;
    }
    text += ");\n";
  }
  const std::string def = device_function_definition(fns.at(index));
  if (definition_at != nullptr) *definition_at = text.size();
  *body_at = text.size() + def.size() - fns[index].body.size() - 1;
  text += def;
  text += '\n';
  return text;
}

const ClangPlugin* ClangPlugin::get(std::string* why) {
  // Where to look, read each time (MKC_CLANG_PLUGIN may change: tests set it); each path is
  // tried once per process and what it gave is kept, like the library itself once loaded.
  std::vector<std::string> paths;
  if (const char* env = std::getenv("MKC_CLANG_PLUGIN"); env != nullptr && *env != '\0') {
    paths.push_back(env);
  } else {
    char exe[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
      const std::string self(exe, static_cast<size_t>(n));
      const std::string dir = self.substr(0, self.rfind('/'));
      paths.push_back(dir + "/libmkc_clang.so");                               // a bundle
      paths.push_back(dir + "/compiler/clang/libmkc_clang.so");                // bazel-bin/mkc
      paths.push_back(self + ".runfiles/mkc/compiler/clang/libmkc_clang.so");  // a test's data
    }
  }
  static std::mutex mutex;
  // path -> the plugin (null: it failed) and why it failed
  static std::map<std::string, std::pair<std::unique_ptr<ClangPlugin>, std::string>> tried;
  std::lock_guard<std::mutex> lock(mutex);
  std::string failures;
  for (const std::string& p : paths) {
    auto it = tried.find(p);
    if (it == tried.end()) {
      std::pair<std::unique_ptr<ClangPlugin>, std::string> result{nullptr, ""};
      if (void* lib = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL); lib == nullptr) {
        const char* e = ::dlerror();
        result.second = e != nullptr ? e : p + ": cannot be loaded";
      } else {
        auto abi = reinterpret_cast<MkcClangAbiFn>(::dlsym(lib, "mkc_clang_abi"));
        void* check = ::dlsym(lib, "mkc_clang_check");
        void* compile = ::dlsym(lib, "mkc_clang_jit_compile");
        void* lookup = ::dlsym(lib, "mkc_clang_jit_lookup");
        void* call = ::dlsym(lib, "mkc_clang_jit_call");
        void* release = ::dlsym(lib, "mkc_clang_jit_release");
        if (abi == nullptr || check == nullptr || compile == nullptr || lookup == nullptr ||
            call == nullptr || release == nullptr || abi() != MKC_CLANG_PLUGIN_ABI) {
          result.second = p + ": not an mkc Clang plugin of ABI version " +
                          std::to_string(MKC_CLANG_PLUGIN_ABI);
          ::dlclose(lib);
        } else {
          result.first.reset(new ClangPlugin());  // kept for the process, like the library
          result.first->check_ = check;
          result.first->jit_compile_ = compile;
          result.first->jit_lookup_ = lookup;
          result.first->jit_call_ = call;
          result.first->jit_release_ = release;
        }
      }
      it = tried.emplace(p, std::move(result)).first;
    }
    if (it->second.first != nullptr) return it->second.first.get();
    failures += (failures.empty() ? "" : "; ") + it->second.second;
  }
  if (why != nullptr) *why = failures.empty() ? "no plugin path (set MKC_CLANG_PLUGIN)" : failures;
  return nullptr;
}

std::vector<ClangFinding> ClangPlugin::check(const std::string& code,
                                             const std::string& function) const {
  // A schedule is checked once per world size, each time with the same functions: Clang reads
  // each text once per process.
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::string>, std::vector<ClangFinding>> seen;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(code, function);
  if (auto it = seen.find(key); it != seen.end()) return it->second;
  std::vector<ClangFinding>& out = seen[key];
  const MkcClangReport report = [](void* ctx, size_t offset, size_t length, int severity,
                                   const char* message) {
    static_cast<std::vector<ClangFinding>*>(ctx)->push_back(
        ClangFinding{offset, length, severity, message != nullptr ? message : ""});
  };
  reinterpret_cast<MkcClangCheckFn>(check_)(code.data(), code.size(), function.c_str(), report,
                                            &out);
  return out;
}

std::shared_ptr<const ClangJit> ClangPlugin::compile(const std::string& code,
                                                     std::vector<ClangFinding>* findings) const {
  std::vector<ClangFinding> local;
  std::vector<ClangFinding>& out = findings != nullptr ? *findings : local;
  const MkcClangReport report = [](void* ctx, size_t offset, size_t length, int severity,
                                   const char* message) {
    static_cast<std::vector<ClangFinding>*>(ctx)->push_back(
        ClangFinding{offset, length, severity, message != nullptr ? message : ""});
  };
  MkcClangJit* handle =
      reinterpret_cast<MkcClangJitCompileFn>(jit_compile_)(code.data(), code.size(), report, &out);
  if (handle == nullptr) return nullptr;
  std::shared_ptr<ClangJit> jit(new ClangJit());
  jit->handle_ = handle;
  jit->lookup_ = jit_lookup_;
  jit->call_ = jit_call_;
  jit->release_ = jit_release_;
  return jit;
}

ClangJit::~ClangJit() {
  if (handle_ != nullptr)
    reinterpret_cast<MkcClangJitReleaseFn>(release_)(static_cast<MkcClangJit*>(handle_));
}

void* ClangJit::entry(const std::string& name, std::string* why) const {
  char text[1024] = {0};
  void* found = reinterpret_cast<MkcClangJitLookupFn>(lookup_)(static_cast<MkcClangJit*>(handle_),
                                                               name.c_str(), text, sizeof(text));
  if (found == nullptr && why != nullptr) *why = text;
  return found;
}

size_t ClangJit::call(void* entry, const double* args, size_t arity, size_t n, double* results,
                      uint64_t max_steps, std::string* why) const {
  char text[256] = {0};
  const size_t done = reinterpret_cast<MkcClangJitCallFn>(call_)(entry, args, arity, n, results,
                                                                 max_steps, text, sizeof(text));
  if (done < n && why != nullptr) *why = text;
  return done;
}

}  // namespace mkc::compiler
