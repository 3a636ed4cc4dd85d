// .npy files as `mkc run --save/--load` writes and reads them: round trips for every element
// type mkc saves, the exact bytes of a header NumPy itself writes, and clear errors for files
// mkc cannot read.
#include "runtime/npy.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "support/error.h"

namespace mkc::rt {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("mkc_npy_" + name)).string();
}

TEST_CASE("npy: random arrays of every saved type round-trip exactly") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-100, 100);
  struct Case {
    compiler::DType t;
    const char* descr;
    std::vector<int64_t> shape;
  };
  const Case cases[] = {
      {compiler::DType::kF32, "<f4", {3, 5}},    {compiler::DType::kBf16, "<f4", {7}},
      {compiler::DType::kF16, "<f2", {2, 3, 4}}, {compiler::DType::kF64, "<f8", {1}},
      {compiler::DType::kI32, "<i4", {4, 1}},    {compiler::DType::kI64, "<i8", {}}};
  for (const Case& c : cases) {
    int64_t n = 1;
    for (int64_t d : c.shape) n *= d;
    std::vector<double> v(n);
    for (double& x : v) {
      x = dist(rng);
      // Values the type holds exactly.
      if (c.t == compiler::DType::kF16) x = static_cast<double>(static_cast<_Float16>(x));
      if (c.t == compiler::DType::kF32 || c.t == compiler::DType::kBf16) x = static_cast<float>(x);
      if (c.t == compiler::DType::kI32 || c.t == compiler::DType::kI64) x = std::round(x);
    }
    const std::string path = temp_path(c.descr + std::string(".npy"));
    write_npy(path, c.t, c.shape, v);
    const NpyArray a = read_npy(path);
    CHECK(a.descr == c.descr);
    CHECK(a.shape == c.shape);
    CHECK(a.values == v);
    // NumPy pads the header so that the data starts at a multiple of 64 bytes.
    CHECK((10 + (std::filesystem::file_size(path) - n * std::stoi(c.descr + 2))) % 64 == 10);
    std::remove(path.c_str());
  }
}

TEST_CASE("npy: a header as NumPy writes it") {
  write_npy(temp_path("hdr.npy"), compiler::DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  std::ifstream f(temp_path("hdr.npy"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() == 128 + 24);
  CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  CHECK(bytes.substr(10, 59) == "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
  CHECK(bytes[127] == '\n');
  write_npy(temp_path("one.npy"), compiler::DType::kF32, {5}, {1, 2, 3, 4, 5});
  CHECK(read_npy(temp_path("one.npy")).shape == std::vector<int64_t>{5});
}

TEST_CASE("npy: files mkc cannot read are named with the reason") {
  const std::string p = temp_path("bad.npy");
  {
    std::ofstream f(p, std::ios::binary);
    f << "not numpy at all";
  }
  CHECK_THROWS_WITH_AS(read_npy(p), doctest::Contains("no NumPy magic"), UserError);
  {
    std::ofstream f(p, std::ios::binary);
    const std::string h = "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }";
    f << std::string("\x93NUMPY\x01\x00", 8) << static_cast<char>(h.size()) << '\0' << h << "abcd";
  }
  CHECK_THROWS_WITH_AS(read_npy(p), doctest::Contains("little-endian"), UserError);
  CHECK_THROWS_WITH_AS(read_npy(temp_path("missing.npy")), doctest::Contains("cannot open"),
                       UserError);
  std::remove(p.c_str());
}

}  // namespace
}  // namespace mkc::rt
