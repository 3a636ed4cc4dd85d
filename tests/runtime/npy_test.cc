// .npy files as `mkc run --save/--load` writes and reads them: round trips for every element
// type mkc saves, the exact bytes of a header NumPy itself writes, clear errors for files mkc
// cannot read, and hostile headers (a shape that overflows or is negative, a dtype refused only
// after gigabytes were allocated, a key inside another value) refused before any allocation.
#include "runtime/npy.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

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

TEST_CASE("npy: every half-precision value, and values between them, as the compiler rounds") {
  // The reader and writer convert halves by hand (the fuzzers build with a clang without
  // _Float16): every one of the 63,488 non-NaN halves round-trips bit for bit, and doubles
  // between them round to the half the compiler's own conversion gives (nearest, ties to even).
  std::vector<double> v;
  std::vector<uint16_t> bits;
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaN
    _Float16 f;
    const uint16_t b = static_cast<uint16_t>(h);
    std::memcpy(&f, &b, 2);
    v.push_back(static_cast<double>(f));
    bits.push_back(b);
  }
  const std::string path = temp_path("halves.npy");
  write_npy(path, compiler::DType::kF16, {static_cast<int64_t>(v.size())}, v);
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() >= 2 * bits.size());
  const char* data = bytes.data() + bytes.size() - 2 * bits.size();
  int wrong = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    uint16_t got;
    std::memcpy(&got, data + 2 * i, 2);
    wrong += got != bits[i];
  }
  CHECK(wrong == 0);
  const NpyArray a = read_npy(path);
  CHECK(a.values == v);
  // Between halves, at halfway points and past the largest.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> dist(-70000, 70000);
  std::vector<double> mid;
  for (int i = 0; i < 20000; ++i) mid.push_back(dist(rng) / (i % 7 == 0 ? 1e6 : 1.0));
  for (double x : {0.5 * (1.0 + 1.0009765625), 65504.0, 65519.99, 65520.0, 5.96e-8, 2.98e-8})
    mid.push_back(x);
  write_npy(path, compiler::DType::kF16, {static_cast<int64_t>(mid.size())}, mid);
  const NpyArray b = read_npy(path);
  int off = 0;
  for (size_t i = 0; i < mid.size(); ++i) {
    const double want = static_cast<double>(static_cast<_Float16>(mid[i]));
    off += !(b.values[i] == want);
  }
  CHECK(off == 0);
  std::remove(path.c_str());
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

// A .npy file of this header (version 1.0) and these data bytes.
std::string with_header(const std::string& name, const std::string& header,
                        const std::string& data) {
  const std::string p = temp_path(name);
  std::ofstream f(p, std::ios::binary);
  f << std::string("\x93NUMPY\x01\x00", 8) << static_cast<char>(header.size() & 0xff)
    << static_cast<char>(header.size() >> 8) << header << data;
  return p;
}

TEST_CASE("npy: hostile headers are refused before any allocation the file does not back") {
  // Each: a header, the data bytes after it, and the reason the error names.
  struct Case {
    const char* what;
    std::string header;
    std::string data;
    const char* reason;
  };
  const std::vector<Case> cases = {
      // 8 GB of doubles were allocated and zeroed for this 120-byte file, then the dtype refused.
      {"complex of 10^9", "{'descr': '<c8', 'fortran_order': False, 'shape': (1000000000,), }", "",
       "dtype `<c8`"},
      {"shape overflow",
       "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", "",
       "more than 2^63"},
      {"dimension overflow",
       "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", "",
       "too large"},
      {"negative dimension", "{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }",
       std::string(16, '\0'), "non-negative"},
      {"unterminated descr", "{'descr': '<f4, 'fortran_order': False, 'shape': (1,), }",
       std::string(4, '\0'), "bad header"},
      {"descr never closed", "{'descr': '<f4", "", "not terminated"},
      {"shape inside another value",
       "{'descr': '<f4', 'fortran_order': False, 'note': \"'shape': (9,)\", 'shape': (1,), }",
       std::string(4, '\0'), "`note`"},
      {"shape given twice",
       "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'shape': (2,), }",
       std::string(8, '\0'), "given twice"},
      {"no shape", "{'descr': '<f4', 'fortran_order': False, }", "", "no `shape`"},
      {"fortran order", "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }",
       std::string(4, '\0'), "Fortran"},
      {"truncated data", "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }",
       std::string(16, '\0'), "truncated data"},
      {"odd element size", "{'descr': '<f3', 'fortran_order': False, 'shape': (1,), }",
       std::string(3, '\0'), "dtype `<f3`"},
      {"text after the dict", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } x",
       std::string(4, '\0'), "after the header"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::string p = with_header("hostile.npy", c.header, c.data);
    CHECK_THROWS_WITH_AS(read_npy(p), doctest::Contains(c.reason), UserError);
    std::remove(p.c_str());
  }
  // A version 2.0 header length of 4 GiB: refused from its length, not allocated.
  {
    const std::string p = temp_path("v2.npy");
    std::ofstream f(p, std::ios::binary);
    f << std::string("\x93NUMPY\x02\x00\xff\xff\xff\xff", 12) << "{}";
    f.close();
    CHECK_THROWS_WITH_AS(read_npy(p), doctest::Contains("a header of 4294967295 bytes"), UserError);
    std::remove(p.c_str());
  }
}

TEST_CASE("npy: an expected shape is checked before the data is read") {
  // The header promises 10^12 elements; the caller expects 5: refused on the shape, at once.
  const std::string p = with_header(
      "expect.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", "");
  const std::vector<int64_t> five = {5};
  CHECK_THROWS_WITH_AS(read_npy(p, &five),
                       doctest::Contains("has shape (1000000000000), expected (5)"), UserError);
  // The right shape reads; spaces and no trailing comma as other writers put them.
  const std::string q = with_header(
      "spaced.npy", "{ 'descr' : '<i4' , 'fortran_order' : False , 'shape' : ( 2 , 3 ) }",
      std::string("\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00\x05\x00\x00\x00"
                  "\x06\x00\x00\x00",
                  24));
  const std::vector<int64_t> two_by_three = {2, 3};
  const NpyArray a = read_npy(q, &two_by_three);
  CHECK(a.values == std::vector<double>{1, 2, 3, 4, 5, 6});
  // A scalar: shape ().
  const std::string s =
      with_header("scalar.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
                  std::string(8, '\0'));
  CHECK(read_npy(s).values.size() == 1);
  std::remove(p.c_str());
  std::remove(q.c_str());
  std::remove(s.c_str());
}

}  // namespace
}  // namespace mkc::rt
