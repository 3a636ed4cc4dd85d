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

// What a device function may use: the element types as CUDA names them (host stand-ins that
// convert to and from float as CUDA's do), and the functions of CUDA's math library and its
// conversions that device code calls. Anything else is an unknown name to Clang.
constexpr const char* kPrelude =
    R"(// mkc's prelude for device functions (compiler/sema/clang_check.cc).
#define __device__
#define __forceinline__ inline
#define INFINITY __builtin_huge_valf()
#define NAN __builtin_nanf("")
#define MKC_SCALAR(T)                     \
  struct T {                              \
    T() = default;                        \
    T(float f) : v(f) {}                  \
    T(double d) : v(static_cast<float>(d)) {}     \
    T(int i) : v(static_cast<float>(i)) {}        \
    T(long long i) : v(static_cast<float>(i)) {}  \
    T(unsigned u) : v(static_cast<float>(u)) {}   \
    operator float() const { return v; }  \
    float v;                              \
  };
MKC_SCALAR(__half)
MKC_SCALAR(__nv_bfloat16)
#undef MKC_SCALAR
typedef __half half;
#define MKC_F1(name) float name##f(float); double name(double);
#define MKC_F2(name) float name##f(float, float); double name(double, double);
MKC_F1(exp) MKC_F1(exp2) MKC_F1(exp10) MKC_F1(expm1) MKC_F1(log) MKC_F1(log2) MKC_F1(log10)
MKC_F1(log1p) MKC_F1(sqrt) MKC_F1(rsqrt) MKC_F1(cbrt) MKC_F1(rcbrt) MKC_F1(sin) MKC_F1(cos)
MKC_F1(tan) MKC_F1(asin) MKC_F1(acos) MKC_F1(atan) MKC_F1(sinh) MKC_F1(cosh) MKC_F1(tanh)
MKC_F1(asinh) MKC_F1(acosh) MKC_F1(atanh) MKC_F1(erf) MKC_F1(erfc) MKC_F1(erfinv) MKC_F1(lgamma)
MKC_F1(tgamma) MKC_F1(fabs) MKC_F1(floor) MKC_F1(ceil) MKC_F1(round) MKC_F1(trunc) MKC_F1(rint)
MKC_F1(nearbyint) MKC_F1(logb) MKC_F1(normcdf) MKC_F1(normcdfinv)
MKC_F2(pow) MKC_F2(atan2) MKC_F2(fmin) MKC_F2(fmax) MKC_F2(fmod) MKC_F2(remainder)
MKC_F2(copysign) MKC_F2(hypot) MKC_F2(fdim)
#undef MKC_F1
#undef MKC_F2
float fmaf(float, float, float); double fma(double, double, double);
float __expf(float); float __logf(float); float __log2f(float); float __powf(float, float);
float __sinf(float); float __cosf(float); float __tanf(float); float __fdividef(float, float);
float __frcp_rn(float); float __fsqrt_rn(float); float __saturatef(float);
bool isnan(float); bool isnan(double); bool isinf(float); bool isinf(double);
bool isfinite(float); bool isfinite(double); bool signbit(float); bool signbit(double);
int abs(int); long long llabs(long long);
int min(int, int); unsigned min(unsigned, unsigned); long long min(long long, long long);
float min(float, float); double min(double, double);
int max(int, int); unsigned max(unsigned, unsigned); long long max(long long, long long);
float max(float, float); double max(double, double);
__half __float2half(float); float __half2float(__half);
__nv_bfloat16 __float2bfloat16(float); float __bfloat162float(__nv_bfloat16);
float __int2float_rn(int); int __float2int_rn(float); int __float2int_rz(float);
)";

}  // namespace

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
        if (abi == nullptr || check == nullptr || abi() != MKC_CLANG_PLUGIN_ABI) {
          result.second = p + ": not an mkc Clang plugin of ABI version " +
                          std::to_string(MKC_CLANG_PLUGIN_ABI);
          ::dlclose(lib);
        } else {
          result.first.reset(new ClangPlugin());  // kept for the process, like the library
          result.first->check_ = check;
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

}  // namespace mkc::compiler
