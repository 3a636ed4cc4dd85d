#include "runtime/tensor_map.h"

#include <fmt/format.h>

#include "support/error.h"

namespace mkc::rt {

CUtensorMap encode_tensor_map(const Driver& d, CUdeviceptr base, const codegen::TensorMapSpec& s,
                              const std::string& buffer_name) {
  CUtensorMapDataType type;
  switch (s.dtype) {
    case compiler::DType::kBf16:
      type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
      break;
    case compiler::DType::kF16:
      type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
      break;
    default:
      throw InternalError(fmt::format("tensor map of `{}`: element type {} has no TMA tile path",
                                      buffer_name, compiler::dtype_name(s.dtype)));
  }
  const int64_t eb = compiler::dtype_bytes(s.dtype);
  const CUdeviceptr start = base + static_cast<CUdeviceptr>(s.offset * eb);
  const auto bad = [&](const std::string& why) {
    return InternalError(
        fmt::format("tensor map of `{}` on rank {} (offset {}, {} x {}, box {} x {}): {}",
                    buffer_name, s.rank, s.offset, s.rows, s.cols, s.box_rows, s.box_cols, why));
  };
  if (start % 16 != 0) throw bad("the start is not 16-byte aligned");
  if ((s.cols * eb) % 16 != 0) throw bad("the row stride is not a multiple of 16 bytes");
  if (s.box_cols * eb > 128) throw bad("the box is wider than the 128-byte swizzle");
  if (s.box_rows < 1 || s.box_rows > 256 || s.rows < 1 || s.cols < 1) throw bad("bad extents");
  if (s.depth < 1 || (s.dims != 2 && s.dims != 3) || (s.dims == 2 && s.depth != 1))
    throw bad("bad dimensions");
  // 2-D [rows][cols], or 3-D [depth][rows][cols] with boxes of one slice (a box never crosses
  // into the next slice: rows past a slice's end are zero-filled).
  const cuuint32_t rank = static_cast<cuuint32_t>(s.dims);
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(s.cols), static_cast<cuuint64_t>(s.rows),
                              static_cast<cuuint64_t>(s.depth)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(s.cols * eb),
                                 static_cast<cuuint64_t>(s.rows * s.cols * eb)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(s.box_cols),
                             static_cast<cuuint32_t>(s.box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap map{};
  MKC_CU(d, cuTensorMapEncodeTiled, &map, type, rank, reinterpret_cast<void*>(start), dims, strides,
         box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return map;
}

}  // namespace mkc::rt
