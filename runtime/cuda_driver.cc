#include "runtime/cuda_driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>

#include "support/error.h"

namespace mkc::rt {
namespace {

using GetProcAddressFn = decltype(&::cuGetProcAddress);

}  // namespace

Driver Driver::load(const char* library) {
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw EnvironmentError(fmt::format(
        "no CUDA driver: dlopen(\"{}\") failed: {}. mkc needs an NVIDIA driver to run kernels "
        "(compiling with `mkc check`/`mkc compile` works without one); on a GPU machine check "
        "that the driver is installed and that libcuda.so.1 is on the loader path",
        library, why != nullptr ? why : "unknown error"));
  }
  // The handle is deliberately never closed: function pointers from it live for the process.
  auto get_proc = reinterpret_cast<GetProcAddressFn>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    throw EnvironmentError(
        fmt::format("CUDA driver in {} is too old: it lacks cuGetProcAddress_v2 (CUDA 12.0+); "
                    "update the NVIDIA driver to one supporting CUDA {}.{}",
                    library, CUDA_VERSION / 1000, (CUDA_VERSION % 1000) / 10));
  }
  Driver d;
#define MKC_RESOLVE_ENTRY(name, version)                                                          \
  {                                                                                               \
    void* fn = nullptr;                                                                           \
    CUdriverProcAddressQueryResult status{};                                                      \
    CUresult r = get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);             \
    if (r != CUDA_SUCCESS || fn == nullptr) {                                                     \
      throw EnvironmentError(fmt::format(                                                         \
          "CUDA driver in {} has no entry point {} (ABI version {}; cuGetProcAddress result {}, " \
          "status {}); update the NVIDIA driver",                                                 \
          library, #name, version, static_cast<int>(r), static_cast<int>(status)));               \
    }                                                                                             \
    d.name = reinterpret_cast<decltype(d.name)>(fn);                                              \
  }
  MKC_CUDA_DRIVER_ENTRY_POINTS(MKC_RESOLVE_ENTRY)
#undef MKC_RESOLVE_ENTRY
#define MKC_RESOLVE_OPTIONAL(name, version)                                                  \
  {                                                                                          \
    void* fn = nullptr;                                                                      \
    CUdriverProcAddressQueryResult status{};                                                 \
    if (get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS) \
      d.name = reinterpret_cast<decltype(d.name)>(fn);                                       \
  }
  MKC_CUDA_DRIVER_OPTIONAL_ENTRY_POINTS(MKC_RESOLVE_OPTIONAL)
#undef MKC_RESOLVE_OPTIONAL
  MKC_CU(d, cuInit, 0);
  MKC_CU(d, cuDriverGetVersion, &d.version_);
  return d;
}

const Driver& Driver::get() {
  // A failed load throws out of the initializer, so the next call tries again.
  static const Driver driver = load();
  return driver;
}

std::string describe_cu_error(const Driver& drv, CUresult code, const char* call, const char* file,
                              int line) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (drv.cuGetErrorName == nullptr || drv.cuGetErrorName(code, &name) != CUDA_SUCCESS) {
    name = nullptr;
  }
  if (drv.cuGetErrorString == nullptr || drv.cuGetErrorString(code, &text) != CUDA_SUCCESS) {
    text = nullptr;
  }
  return fmt::format("{} failed: {} ({}) at {}:{}", call,
                     name != nullptr ? name : fmt::format("CUresult {}", static_cast<int>(code)),
                     text != nullptr ? text : "no description", file, line);
}

void throw_cu_error(const Driver& drv, CUresult code, const char* call, const char* file,
                    int line) {
  throw EnvironmentError(describe_cu_error(drv, code, call, file, line));
}

std::string DeviceInfo::arch() const {
  // $MKC_ARCH overrides (e.g. sm_90 on a Hopper GPU: the kernels without wgmma, for testing the
  // portable templates there).
  if (const char* forced = std::getenv("MKC_ARCH"); forced != nullptr && *forced != '\0')
    return forced;
  // Hopper's wgmma and setmaxnreg exist only in the arch-specific target.
  if (cc_major == 9 && cc_minor == 0) return "sm_90a";
  return fmt::format("sm_{}{}", cc_major, cc_minor);
}

int device_count() {
  const Driver& d = Driver::get();
  int n = 0;
  MKC_CU(d, cuDeviceGetCount, &n);
  return n;
}

DeviceInfo device_info(int ordinal) {
  const Driver& d = Driver::get();
  CUdevice dev{};
  MKC_CU(d, cuDeviceGet, &dev, ordinal);
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  MKC_CU(d, cuDeviceGetName, name, static_cast<int>(sizeof(name)), dev);
  info.name = name;
  MKC_CU(d, cuDeviceGetAttribute, &info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
         dev);
  MKC_CU(d, cuDeviceGetAttribute, &info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
         dev);
  MKC_CU(d, cuDeviceGetAttribute, &info.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  MKC_CU(d, cuDeviceTotalMem, &info.total_mem, dev);
  return info;
}

}  // namespace mkc::rt
