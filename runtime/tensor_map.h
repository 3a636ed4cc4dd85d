// TMA descriptors (CUtensorMap) for the views a generated kernel loads with bulk tensor copies
// (codegen::TensorMapSpec, gemm_sm90.cuh, attention_sm90.cuh): 2-D or 3-D, row-major, 128-byte
// swizzle, zero
// fill outside the view. The constraints TMA puts on them (16-byte aligned start and row stride,
// box inner extent of at most 128 bytes under this swizzle) are checked here, with an error that
// names the buffer, before the driver sees them.
#pragma once

#include <cuda.h>

#include <string>

#include "compiler/codegen/codegen.h"
#include "runtime/cuda_driver.h"

namespace mkc::rt {

// `base` is the device address of the spec's buffer on the spec's rank; `buffer_name` is for
// messages. Throws InternalError for a spec the generator should not have made, EnvironmentError
// when the driver refuses it.
CUtensorMap encode_tensor_map(const Driver& d, CUdeviceptr base, const codegen::TensorMapSpec& spec,
                              const std::string& buffer_name);

}  // namespace mkc::rt
