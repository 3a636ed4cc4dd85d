#include "runtime/device_fn_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "compiler/sema/device_code.h"
#include "jit/jit.h"
#include "runtime/cuda_driver.h"
#include "support/check.h"
#include "support/error.h"

namespace mkc::rt {
namespace {

using compiler::DType;

// Argument k of the tuple as the parameter type, and the result back as double: the conversions
// of the generated kernel (mkc::convert, templates/mkc/types.cuh).
std::string argument(DType t, size_t k) {
  return fmt::format("mkc::convert<{}>(mkc_a[{}])", compiler::cuda_type(t), k);
}

std::string result(const std::string& call) {
  return fmt::format("mkc::convert<double>({})", call);
}

// Tuples per launch: bounds the device buffers of one call ((arity + 1) x 8 bytes a tuple).
constexpr size_t kChunk = size_t{1} << 24;

// The loaded module, unloaded in its context when the last evaluator is gone.
struct Module {
  CUcontext ctx = nullptr;
  CUmodule mod = nullptr;
  ~Module() {
    if (!mod) return;
    const Driver& d = Driver::get();
    CUcontext prev = nullptr;
    d.cuCtxGetCurrent(&prev);
    d.cuCtxSetCurrent(ctx);
    d.cuModuleUnload(mod);
    d.cuCtxSetCurrent(prev);
  }
};

// Device memory freed at scope exit.
struct DeviceBuffer {
  CUdeviceptr ptr = 0;
  explicit DeviceBuffer(size_t bytes) {
    const Driver& d = Driver::get();
    MKC_CU(d, cuMemAlloc, &ptr, bytes ? bytes : 8);
  }
  ~DeviceBuffer() { Driver::get().cuMemFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

std::string arch_of(CUcontext ctx) {
  const Driver& d = Driver::get();
  CtxScope scope(d, ctx);
  CUdevice dev = 0;
  MKC_CU(d, cuCtxGetDevice, &dev);
  DeviceInfo info;
  MKC_CU(d, cuDeviceGetAttribute, &info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
         dev);
  MKC_CU(d, cuDeviceGetAttribute, &info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
         dev);
  return info.arch();
}

}  // namespace

std::string device_function_eval_source(const compiler::CheckedSchedule& s) {
  // The headers the generated kernel has before its device functions, so that a body that
  // compiles there compiles here; the functions at namespace scope, called as ::NAME.
  std::string src = "// mkc: the device functions of `" + s.name +
                    "`, one evaluator kernel each, for the check's reference\n"
                    "#include \"mkc/tasks.cuh\"\n\n";
  for (const compiler::DeviceFunction& f : s.device_fns)
    src += compiler::device_function_definition(f) + "\n";
  src += "\n";
  for (const compiler::DeviceFunction& f : s.device_fns) {
    const std::string call = compiler::device_function_call(f, argument);
    src += fmt::format(
        "extern \"C\" __global__ void mkc_eval_{}(const double* mkc_args, double* mkc_out, "
        "long long mkc_n) {{\n"
        "  const long long mkc_e = blockIdx.x * static_cast<long long>(blockDim.x) + "
        "threadIdx.x;\n"
        "  if (mkc_e >= mkc_n) return;\n"
        "  [[maybe_unused]] const double* mkc_a = mkc_args + mkc_e * {};\n"
        "  mkc_out[mkc_e] = {};\n"
        "}}\n\n",
        f.name, f.params.size(), result(call));
  }
  return src;
}

plan::BatchFns gpu_device_functions(const compiler::CheckedSchedule& s, CUcontext ctx,
                                    const plan::HostFns& have) {
  std::vector<const compiler::DeviceFunction*> todo;
  for (const compiler::DeviceFunction& f : s.device_fns)
    if (!have.count(f.name)) todo.push_back(&f);
  if (todo.empty()) return {};
  jit::JitOptions jo;
  jo.arch = arch_of(ctx);
  const std::string kernel = "mkc_eval_" + todo.front()->name;
  const jit::JitOutput built =
      jit::jit_compile(device_function_eval_source(s), s.name + "_eval.cu", kernel, jo);
  auto module = std::make_shared<Module>();
  module->ctx = ctx;
  const Driver& d = Driver::get();
  {
    CtxScope scope(d, ctx);
    MKC_CU(d, cuModuleLoadData, &module->mod, built.cubin.data());
  }
  plan::BatchFns out;
  for (const compiler::DeviceFunction* f : todo) {
    CUfunction fn = nullptr;
    {
      CtxScope scope(d, ctx);
      MKC_CU(d, cuModuleGetFunction, &fn, module->mod, ("mkc_eval_" + f->name).c_str());
    }
    const size_t arity = f->params.size();
    out[f->name] = [module, fn, arity, name = f->name](const std::vector<double>& args, size_t n) {
      MKC_CHECK(args.size() == n * arity);
      std::vector<double> res(n);
      if (n == 0) return res;
      const Driver& d = Driver::get();
      CtxScope scope(d, module->ctx);
      const size_t chunk = std::min(n, kChunk);
      DeviceBuffer in(chunk * arity * sizeof(double)), o(chunk * sizeof(double));
      for (size_t first = 0; first < n; first += chunk) {
        const size_t m = std::min(chunk, n - first);
        if (arity > 0) {
          MKC_CU(d, cuMemcpyHtoD, in.ptr, args.data() + first * arity, m * arity * sizeof(double));
        }
        long long count = static_cast<long long>(m);
        void* params[] = {&in.ptr, &o.ptr, &count};
        const unsigned threads = 256, blocks = static_cast<unsigned>((m + threads - 1) / threads);
        MKC_CU(d, cuLaunchKernel, fn, blocks, 1, 1, threads, 1, 1, 0, nullptr, params, nullptr);
        const CUresult sync = d.cuCtxSynchronize();
        if (sync != CUDA_SUCCESS) {
          throw EnvironmentError(fmt::format(
              "the check's evaluator of device function `{}` failed on the GPU: {}", name,
              describe_cu_error(d, sync, "cuCtxSynchronize", __FILE__, __LINE__)));
        }
        MKC_CU(d, cuMemcpyDtoH, res.data() + first, o.ptr, m * sizeof(double));
      }
      return res;
    };
  }
  return out;
}

}  // namespace mkc::rt
