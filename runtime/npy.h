// NumPy .npy files (format version 1.0, little-endian, C order): how `mkc run --save DIR` writes
// every rank's tensors and `--load DIR` reads inputs, so any tool (numpy.load) can make or check
// them. bf16 has no NumPy type: it is written as f32 (exact) and read back from any float type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/sema/program.h"

namespace mkc::rt {

struct NpyArray {
  std::string descr;  // as in the header: "<f4", "<f2", "<i4", ...
  std::vector<int64_t> shape;
  std::vector<double> values;
};

// Writes `values` (already of `dtype`'s precision) as the NumPy type closest to `dtype`.
// Throws EnvironmentError when the file cannot be written.
void write_npy(const std::string& path, compiler::DType dtype, const std::vector<int64_t>& shape,
               const std::vector<double>& values);

// Reads a float (f2, f4, f8) or integer (i1 .. i8, u1 .. u8, b1) array. Throws UserError naming
// the file for anything else (big-endian, Fortran order, a header that is not NumPy's dict of
// descr, fortran_order and shape, a negative or overflowing shape, data shorter than the shape).
// With `expected_shape`, a file of another shape is refused before its data is read. Nothing is
// allocated beyond what the file's size backs.
NpyArray read_npy(const std::string& path, const std::vector<int64_t>* expected_shape = nullptr);

// "A.rank0.npy": the file of one rank's tensor in a --save/--load directory.
std::string npy_name(const std::string& tensor, int rank);

}  // namespace mkc::rt
