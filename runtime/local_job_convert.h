// Host-side conversion between the values callers hand the job (double) and the bytes a buffer
// holds, for every element type upload and download support (bf16, f16, f32, f64, i32, i64).
// Pure functions on host memory, so they are tested without a GPU; LocalJob::upload and download
// (local_job_convert.cc) copy their bytes to and from the device.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/sema/program.h"

namespace mkc::rt {

// Whether upload and download convert this element type.
bool convertible(compiler::DType t);

// `values` as the bytes of `t` (bf16 rounds to nearest even, NaN stays NaN; integers truncate).
// Throws UserError naming the type when it is not convertible.
std::vector<unsigned char> encode_values(compiler::DType t, const std::vector<double>& values);
// The other way: `bytes` (a whole number of elements of `t`) as doubles.
std::vector<double> decode_values(compiler::DType t, const std::vector<unsigned char>& bytes);

}  // namespace mkc::rt
