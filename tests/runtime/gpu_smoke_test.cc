// On a GPU: the driver loads through dlopen, lists the devices, and a kernel compiled by NVRTC for
// the device's arch loads and computes the right result on random data. Skipped without a GPU.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "jit/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "tests/support/gpu.h"

namespace mkc::rt {
namespace {

GPU_TEST_CASE("every device: NVRTC saxpy loads, runs and matches the host on random data") {
  const Driver& d = Driver::get();
  const int n_dev = device_count();
  REQUIRE(n_dev > 0);
  constexpr const char* kSource = R"(
extern "C" __global__ void saxpy(float a, const float* x, const float* y, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = a * x[i] + y[i];
}
)";
  for (int dev_index = 0; dev_index < n_dev; ++dev_index) {
    const DeviceInfo info = device_info(dev_index);
    MESSAGE(fmt::format("device {}: {} cc {}.{} {} SMs", dev_index, info.name, info.cc_major,
                        info.cc_minor, info.sm_count));
    CHECK(info.sm_count > 0);
    jit::NvrtcOptions opts;
    opts.arch = info.arch();
    const jit::NvrtcOutput built = jit::nvrtc_compile(kSource, "saxpy.cu", opts);

    CUdevice dev{};
    MKC_CU(d, cuDeviceGet, &dev, dev_index);
    CUcontext ctx{};
    MKC_CU(d, cuDevicePrimaryCtxRetain, &ctx, dev);
    MKC_CU(d, cuCtxSetCurrent, ctx);
    CUmodule mod{};
    MKC_CU(d, cuModuleLoadData, &mod, built.cubin.data());
    CUfunction fn{};
    MKC_CU(d, cuModuleGetFunction, &fn, mod, "saxpy");

    constexpr int n = 1 << 20;
    std::mt19937 rng(1234 + dev_index);
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    std::vector<float> x(n), y(n), out(n);
    for (int i = 0; i < n; ++i) {
      x[i] = dist(rng);
      y[i] = dist(rng);
    }
    const float a = dist(rng);
    const size_t bytes = n * sizeof(float);
    CUdeviceptr dx{}, dy{}, dout{};
    MKC_CU(d, cuMemAlloc, &dx, bytes);
    MKC_CU(d, cuMemAlloc, &dy, bytes);
    MKC_CU(d, cuMemAlloc, &dout, bytes);
    MKC_CU(d, cuMemcpyHtoD, dx, x.data(), bytes);
    MKC_CU(d, cuMemcpyHtoD, dy, y.data(), bytes);
    // Poison: 0xFF bytes are NaNs, so an unwritten element fails the comparison.
    MKC_CU(d, cuMemsetD8, dout, 0xFF, bytes);
    float a_arg = a;
    int n_arg = n;
    void* args[] = {&a_arg, &dx, &dy, &dout, &n_arg};
    MKC_CU(d, cuLaunchKernel, fn, static_cast<unsigned>(info.sm_count * 4), 1, 1, 256, 1, 1, 0,
           nullptr, args, nullptr);
    MKC_CU(d, cuCtxSynchronize);
    MKC_CU(d, cuMemcpyDtoH, out.data(), dout, bytes);

    int bad = 0;
    for (int i = 0; i < n; ++i) {
      // The GPU contracts a*x+y into one FMA; so does std::fma.
      if (!(out[i] == std::fma(a, x[i], y[i]))) ++bad;
    }
    CHECK(bad == 0);
    MKC_CU(d, cuMemFree, dx);
    MKC_CU(d, cuMemFree, dy);
    MKC_CU(d, cuMemFree, dout);
    MKC_CU(d, cuModuleUnload, mod);
    MKC_CU(d, cuDevicePrimaryCtxRelease, dev);
  }
}

}  // namespace
}  // namespace mkc::rt
