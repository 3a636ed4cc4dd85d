#include "compiler/oracle/clang_eval.h"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "compiler/sema/clang_check.h"
#include "compiler/sema/device_code.h"
#include "support/error.h"

namespace mkc::plan {
namespace {

// Argument k of the tuple as parameter type `t`: the generated kernel's conversion (a narrow
// float through f32; the prelude's narrow types round when made from a float).
std::string argument(compiler::DType t, size_t k) {
  const std::string type = compiler::cuda_type(t);
  if (t == compiler::DType::kF64) return fmt::format("mkc_a[{}]", k);
  if (compiler::dtype_is_float(t) && t != compiler::DType::kF32)
    return fmt::format("{}(static_cast<float>(mkc_a[{}]))", type, k);
  // An integer saturates (NaN: 0), as the GPU's conversion does; C++'s cast of a double out of
  // range is undefined, and Clang's optimiser may act on that.
  if (t == compiler::DType::kI32) return fmt::format("mkc_i32(mkc_a[{}])", k);
  if (t == compiler::DType::kI64) return fmt::format("mkc_i64(mkc_a[{}])", k);
  return fmt::format("static_cast<{}>(mkc_a[{}])", type, k);
}

// The compiled module of each schedule text, kept for the process: `mkc verify` checks one
// schedule at several world sizes, each with the same functions.
std::shared_ptr<const compiler::ClangJit> compiled(const compiler::ClangPlugin& plugin,
                                                   const std::string& text, std::string* why) {
  static std::mutex mutex;
  static std::map<std::string, std::pair<std::shared_ptr<const compiler::ClangJit>, std::string>>
      seen;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = seen.find(text);
  if (it == seen.end()) {
    std::vector<compiler::ClangFinding> findings;
    std::shared_ptr<const compiler::ClangJit> jit = plugin.compile(text, &findings);
    std::string failure;
    if (jit == nullptr) {
      for (const compiler::ClangFinding& f : findings) {
        if (f.severity < 2) continue;
        failure += (failure.empty() ? "" : "; ") + f.message;
      }
      if (failure.empty()) failure = "the plugin compiled nothing";
    }
    it = seen.emplace(text, std::make_pair(std::move(jit), std::move(failure))).first;
  }
  *why = it->second.second;
  return it->second.first;
}

}  // namespace

std::string clang_eval_text(const compiler::CheckedSchedule& s) {
  std::string text = compiler::device_fn_prelude();
  text +=
      "inline int mkc_i32(double v) {\n"
      "  return v != v ? 0 : v <= -2147483648.0 ? -2147483647 - 1\n"
      "       : v >= 2147483647.0 ? 2147483647 : static_cast<int>(v);\n"
      "}\n"
      "inline long long mkc_i64(double v) {\n"
      "  return v != v ? 0 : v <= -9223372036854775808.0 ? -9223372036854775807LL - 1\n"
      "       : v >= 9223372036854775807.0 ? 9223372036854775807LL : static_cast<long long>(v);\n"
      "}\n";
  text += fmt::format("// the device functions of `{}`\n", s.name);
  for (const compiler::DeviceFunction& f : s.device_fns)
    text += compiler::device_function_definition(f) + "\n";
  for (const compiler::DeviceFunction& f : s.device_fns) {
    const std::string call = compiler::device_function_call(f, argument);
    text += fmt::format(
        "extern \"C\" double mkc_host_{}([[maybe_unused]] const double* mkc_a) {{\n"
        "  return static_cast<double>({});\n"
        "}}\n",
        f.name, call);
  }
  return text;
}

ClangFunctions clang_device_functions(const compiler::CheckedSchedule& s, uint64_t max_steps) {
  ClangFunctions out;
  if (s.device_fns.empty()) return out;
  std::string why;
  const compiler::ClangPlugin* plugin = compiler::ClangPlugin::get(&why);
  if (plugin == nullptr) {
    out.why = "mkc's Clang plugin is not loaded (" + why + ")";
    return out;
  }
  std::shared_ptr<const compiler::ClangJit> jit = compiled(*plugin, clang_eval_text(s), &why);
  if (jit == nullptr) {
    out.why = "Clang could not compile the device functions for the CPU: " + why;
    return out;
  }
  HostFns fns;
  for (const compiler::DeviceFunction& f : s.device_fns) {
    std::string missing;
    void* entry = jit->entry("mkc_host_" + f.name, &missing);
    if (entry == nullptr) {
      out.why = fmt::format("LLVM's JIT could not link device function `{}`: {}", f.name,
                            missing.empty() ? "no entry point" : missing);
      return out;
    }
    std::vector<std::string> names;
    for (const auto& p : f.params) names.push_back(p.first);
    fns[f.name] = [jit, entry, names, name = f.name, max_steps](const std::vector<double>& a) {
      std::vector<double> args(a);
      args.resize(names.size(), 0.0);
      double result = 0;
      std::string stop;
      if (jit->call(entry, args.data(), args.size(), 1, &result, max_steps, &stop) < 1) {
        std::string shown;
        for (size_t k = 0; k < names.size(); ++k)
          shown += fmt::format("{}{} = {}", k ? ", " : "", names[k], args[k]);
        throw UserError(fmt::format("device function `{}`, called on the CPU with ({}), {}", name,
                                    shown, stop));
      }
      return result;
    };
  }
  out.fns = std::move(fns);
  return out;
}

}  // namespace mkc::plan
