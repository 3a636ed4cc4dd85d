// The CUDA driver API, loaded at run time with dlopen. Nothing in mkc links libcuda: every binary
// starts on a machine without a driver and reports "no CUDA driver" only when it needs a GPU.
//
// Entry points are listed once (MKC_CUDA_DRIVER_ENTRY_POINTS), each pinned to one ABI version and
// resolved through cuGetProcAddress for that version, typed with cudaTypedefs.h's
// PFN_<name>_v<version>. Pinning matters: the driver carries several ABIs of some calls, and the
// newest is not always the one cuda.h's plain name declares (CUDA 13's cuCtxSynchronize at version
// 13000 takes a CUcontext; the header's cuCtxSynchronize(void) is version 2000).
// Every call goes through MKC_CU, which throws EnvironmentError naming the call, the place and the
// decoded CUresult.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

namespace mkc::rt {

// X-macro: every driver entry point mkc uses, with the ABI version whose PFN type we call through.
// Add a call here (its version from cudaTypedefs.h) and it is resolved and typed.
#define MKC_CUDA_DRIVER_ENTRY_POINTS(X)                \
  X(cuInit, 2000)                                      \
  X(cuDriverGetVersion, 2020)                          \
  X(cuGetErrorName, 6000)                              \
  X(cuGetErrorString, 6000)                            \
  X(cuDeviceGetCount, 2000)                            \
  X(cuDeviceGet, 2000)                                 \
  X(cuDeviceGetName, 2000)                             \
  X(cuDeviceGetAttribute, 2000)                        \
  X(cuDeviceTotalMem, 3020)                            \
  X(cuDevicePrimaryCtxRetain, 7000)                    \
  X(cuDevicePrimaryCtxRelease, 11000)                  \
  X(cuCtxSetCurrent, 4000)                             \
  X(cuCtxGetCurrent, 4000)                             \
  X(cuCtxGetDevice, 2000)                              \
  X(cuCtxSynchronize, 2000)                            \
  X(cuModuleLoadData, 2000)                            \
  X(cuModuleUnload, 2000)                              \
  X(cuModuleGetFunction, 2000)                         \
  X(cuModuleGetGlobal, 3020)                           \
  X(cuMemAlloc, 3020)                                  \
  X(cuMemFree, 3020)                                   \
  X(cuMemcpyHtoD, 3020)                                \
  X(cuMemcpyDtoH, 3020)                                \
  X(cuMemcpyHtoDAsync, 3020)                           \
  X(cuMemcpyDtoHAsync, 3020)                           \
  X(cuMemsetD8, 3020)                                  \
  X(cuMemsetD8Async, 3020)                             \
  X(cuLaunchKernel, 4000)                              \
  X(cuLaunchKernelEx, 11060)                           \
  X(cuCtxEnablePeerAccess, 4000)                       \
  X(cuDeviceCanAccessPeer, 4000)                       \
  X(cuStreamCreate, 2000)                              \
  X(cuStreamSynchronize, 2000)                         \
  X(cuStreamDestroy, 4000)                             \
  X(cuMemHostAlloc, 2020)                              \
  X(cuMemHostGetDevicePointer, 3020)                   \
  X(cuMemFreeHost, 2000)                               \
  X(cuMemHostRegister, 6050)                           \
  X(cuMemHostUnregister, 4000)                         \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050) \
  X(cuOccupancyMaxActiveClusters, 11070)               \
  X(cuEventCreate, 2000)                               \
  X(cuEventRecord, 2000)                               \
  X(cuEventElapsedTime, 2000)                          \
  X(cuEventDestroy, 4000)                              \
  X(cuFuncSetAttribute, 9000)                          \
  X(cuTensorMapEncodeTiled, 12000)                     \
  X(cuIpcGetMemHandle, 4010)                           \
  X(cuIpcOpenMemHandle, 11000)                         \
  X(cuIpcCloseMemHandle, 4010)                         \
  X(cuDeviceGetPCIBusId, 4010)                         \
  X(cuDeviceGetByPCIBusId, 4010)                       \
  X(cuStreamBeginCapture, 10010)                       \
  X(cuStreamEndCapture, 10000)                         \
  X(cuGraphInstantiateWithFlags, 11040)                \
  X(cuGraphLaunch, 10000)                              \
  X(cuGraphExecDestroy, 10000)                         \
  X(cuGraphDestroy, 10000)                             \
  X(cuMemGetAddressRange, 3020)                        \
  X(cuPointerGetAttribute, 4000)                       \
  X(cuStreamGetCtx, 9020)                              \
  X(cuStreamWriteValue64, 11070)

// Entry points mkc uses when the driver has them and does without otherwise (null when missing):
// cuMemcpyBatchAsync (CUDA 12.8+) makes the proxy's many small copies one call.
#define MKC_CUDA_DRIVER_OPTIONAL_ENTRY_POINTS(X) X(cuMemcpyBatchAsync, 12080)

// The loaded driver: one function pointer per entry point, named as in cuda.h.
class Driver {
 public:
  // Loads `library` (default: the system's libcuda.so.1) and resolves every entry point.
  // Throws EnvironmentError with a hint when the library or an entry point is missing.
  static Driver load(const char* library = "libcuda.so.1");

  // The process-wide driver, loaded and cuInit'ed on first use.
  static const Driver& get();

#define MKC_DECLARE_ENTRY(name, version) PFN_##name##_v##version name = nullptr;
  MKC_CUDA_DRIVER_ENTRY_POINTS(MKC_DECLARE_ENTRY)
  MKC_CUDA_DRIVER_OPTIONAL_ENTRY_POINTS(MKC_DECLARE_ENTRY)
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

// Makes a context current for a scope and restores the one current before.
class CtxScope {
 public:
  CtxScope(const Driver& d, CUcontext c) : d_(d) {
    d_.cuCtxGetCurrent(&prev_);
    MKC_CU(d_, cuCtxSetCurrent, c);
  }
  ~CtxScope() { d_.cuCtxSetCurrent(prev_); }
  CtxScope(const CtxScope&) = delete;
  CtxScope& operator=(const CtxScope&) = delete;

 private:
  const Driver& d_;
  CUcontext prev_ = nullptr;
};

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
