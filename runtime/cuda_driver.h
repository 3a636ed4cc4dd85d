// The CUDA driver API, loaded at run time with dlopen. Nothing in mkc links libcuda: every binary
// starts on a machine without a driver and reports "no CUDA driver" only when it needs a GPU.
//
// Entry points are listed once (MKC_CUDA_DRIVER_ENTRY_POINTS) and resolved through
// cuGetProcAddress for the CUDA version of the headers we compile against, so each pointer has
// exactly the signature cuda.h declares (the driver may carry several ABI versions of a call).
// Every call goes through MKC_CU, which throws EnvironmentError naming the call, the place and the
// decoded CUresult.
#pragma once

#include <cuda.h>

#include <string>

namespace mkc::rt {

// X-macro: every driver entry point mkc uses. Add a call here and it is resolved and typed.
#define MKC_CUDA_DRIVER_ENTRY_POINTS(X) \
  X(cuInit)                             \
  X(cuDriverGetVersion)                 \
  X(cuGetErrorName)                     \
  X(cuGetErrorString)                   \
  X(cuDeviceGetCount)                   \
  X(cuDeviceGet)                        \
  X(cuDeviceGetName)                    \
  X(cuDeviceGetAttribute)               \
  X(cuDeviceTotalMem)                   \
  X(cuDevicePrimaryCtxRetain)           \
  X(cuDevicePrimaryCtxRelease)          \
  X(cuCtxSetCurrent)                    \
  X(cuCtxGetCurrent)                    \
  X(cuCtxSynchronize)                   \
  X(cuModuleLoadData)                   \
  X(cuModuleUnload)                     \
  X(cuModuleGetFunction)                \
  X(cuMemAlloc)                         \
  X(cuMemFree)                          \
  X(cuMemcpyHtoD)                       \
  X(cuMemcpyDtoH)                       \
  X(cuMemsetD8)                         \
  X(cuLaunchKernel)

// The loaded driver: one function pointer per entry point, named as in cuda.h.
class Driver {
 public:
  // Loads `library` (default: the system's libcuda.so.1) and resolves every entry point.
  // Throws EnvironmentError with a hint when the library or an entry point is missing.
  static Driver load(const char* library = "libcuda.so.1");

  // The process-wide driver, loaded and cuInit'ed on first use.
  static const Driver& get();

#define MKC_DECLARE_ENTRY(name) decltype(&::name) name = nullptr;
  MKC_CUDA_DRIVER_ENTRY_POINTS(MKC_DECLARE_ENTRY)
#undef MKC_DECLARE_ENTRY

  int version() const {
    return version_;
  }  // e.g. 13000 for CUDA 13.0

 private:
  int version_ = 0;
};

// "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory) at runtime/heap.cc:42"
std::string describe_cu_error(const Driver& drv, CUresult code, const char* call, const char* file,
                              int line);

// Throws EnvironmentError from describe_cu_error.
[[noreturn]] void throw_cu_error(const Driver& drv, CUresult code, const char* call,
                                 const char* file, int line);

// MKC_CU(drv, cuMemAlloc, &ptr, bytes): calls the entry point, throws on any result but success.
#define MKC_CU(drv, name, ...)                                                     \
  do {                                                                             \
    const CUresult mkc_cu_result_ = (drv).name(__VA_ARGS__);                       \
    if (mkc_cu_result_ != CUDA_SUCCESS) {                                          \
      ::mkc::rt::throw_cu_error((drv), mkc_cu_result_, #name, __FILE__, __LINE__); \
    }                                                                              \
  } while (0)

// One visible GPU, as the driver reports it.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  size_t total_mem = 0;
  // The NVRTC target for this device: sm_90a on Hopper (wgmma/TMA), sm_XY elsewhere.
  std::string arch() const;
};

// Lists the GPUs the driver sees. Throws EnvironmentError when there is no driver.
int device_count();
DeviceInfo device_info(int ordinal);

}  // namespace mkc::rt
