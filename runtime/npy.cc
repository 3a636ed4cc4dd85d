#include "runtime/npy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <utility>

#include "support/error.h"

namespace mkc::rt {
namespace {

const char kMagic[] = "\x93NUMPY";

std::string descr_for(compiler::DType t) {
  switch (t) {
    case compiler::DType::kF16:
      return "<f2";
    case compiler::DType::kF64:
      return "<f8";
    case compiler::DType::kI32:
      return "<i4";
    case compiler::DType::kI64:
      return "<i8";
    default:  // bf16, f32, fp8: f32 holds them exactly
      return "<f4";
  }
}

template <typename T>
void append(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

// IEEE half precision by hand (clang has no _Float16 on x86 before 15, and the fuzzers build with
// clang 14): exact for every half, round to nearest even from a double.
double half_to_double(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else if (exp == 31) {
    v = mant != 0 ? std::numeric_limits<double>::quiet_NaN()
                  : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(mant + 1024, exp - 25);
  }
  return (h & 0x8000) != 0 ? -v : v;
}

uint16_t double_to_half(double d) {
  const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  if (std::isnan(d)) return 0x7e00;
  const double a = std::fabs(d);
  if (a >= 65520.0) return sign | 0x7c00;  // past the largest half (65504) and its halfway point
  if (a < std::ldexp(1.0, -14)) {  // subnormal, in units of 2^-24 (1024 is the first normal)
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  int e = 0;
  double scaled = std::nearbyint(std::frexp(a, &e) * 2048.0);  // 1024 .. 2048
  int biased = e + 14;
  if (scaled == 2048.0) {
    scaled = 1024.0;
    ++biased;
  }
  if (biased >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(biased << 10) | static_cast<uint16_t>(scaled - 1024.0);
}

template <typename T>
double load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return static_cast<double>(v);
}

// NumPy writes headers under a kilobyte; a larger one is not a file mkc wrote or NumPy did.
constexpr size_t kMaxHeaderBytes = 1 << 20;

// The header's Python dict literal, read as one: {'key': value, ...} with string, True/False and
// tuple-of-integers values (what NumPy writes); anything else is refused, never guessed at.
class HeaderReader {
 public:
  HeaderReader(const std::string& text, const std::function<UserError(const std::string&)>& bad)
      : s_(text), bad_(bad) {}

  struct Header {
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
  };

  Header read() {
    Header h;
    bool descr = false, fortran = false, shape = false;
    expect('{');
    while (!peek('}')) {
      const std::string key = string_literal("a key");
      expect(':');
      if (key == "descr" && !descr) {
        h.descr = string_literal("the descr");
        descr = true;
      } else if (key == "fortran_order" && !fortran) {
        h.fortran_order = boolean();
        fortran = true;
      } else if (key == "shape" && !shape) {
        h.shape = tuple();
        shape = true;
      } else {
        throw bad_(fmt::format("the header's key `{}` is {}", key,
                               key == "descr" || key == "fortran_order" || key == "shape"
                                   ? "given twice"
                                   : "not one of descr, fortran_order, shape"));
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (i_ != s_.size()) throw bad_("text after the header's dict");
    if (!descr || !fortran || !shape)
      throw bad_(fmt::format("no `{}` in the header", !descr     ? "descr"
                                                      : !fortran ? "fortran_order"
                                                                 : "shape"));
    return h;
  }

 private:
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
  }
  bool peek(char c) {
    skip_space();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c)) throw bad_(fmt::format("a bad header (expected `{}` at byte {})", c, i_));
    ++i_;
  }
  std::string string_literal(const char* what) {
    skip_space();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"'))
      throw bad_(fmt::format("a bad header ({} is not a string)", what));
    const char quote = s_[i_++];
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != quote) {
      if (s_[i_] == '\\' || s_[i_] == '\n') throw bad_(fmt::format("a bad header ({})", what));
      ++i_;
    }
    if (i_ >= s_.size()) throw bad_(fmt::format("a bad header ({} is not terminated)", what));
    return s_.substr(start, i_++ - start);
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const size_t n = std::strlen(word);
      if (s_.compare(i_, n, word) == 0) {
        i_ += n;
        return value;
      }
    }
    throw bad_("a bad header (fortran_order is not True or False)");
  }
  // (), (n,), (a, b, ...): non-negative integers.
  std::vector<int64_t> tuple() {
    std::vector<int64_t> out;
    expect('(');
    while (!peek(')')) {
      skip_space();
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_])))
        throw bad_("a bad shape (dimensions are non-negative integers)");
      int64_t n = 0;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
        if (n > (INT64_MAX - 9) / 10) throw bad_("a shape dimension too large");
        n = n * 10 + (s_[i_++] - '0');
      }
      out.push_back(n);
      if (!peek(')')) expect(',');
    }
    expect(')');
    return out;
  }

  const std::string& s_;
  const std::function<UserError(const std::string&)>& bad_;
  size_t i_ = 0;
};

// The bytes of one element of the types mkc reads, 0 for any other.
int element_bytes(char kind, const std::string& size) {
  static const std::map<std::string, int> sizes = {{"1", 1}, {"2", 2}, {"4", 4}, {"8", 8}};
  const auto it = sizes.find(size);
  if (it == sizes.end()) return 0;
  const int n = it->second;
  if (kind == 'f') return n >= 2 ? n : 0;
  if (kind == 'b') return n == 1 ? 1 : 0;
  if (kind == 'i' || kind == 'u') return n;
  return 0;
}

}  // namespace

std::string npy_name(const std::string& tensor, int rank) {
  return fmt::format("{}.rank{}.npy", tensor, rank);
}

void write_npy(const std::string& path, compiler::DType dtype, const std::vector<int64_t>& shape,
               const std::vector<double>& values) {
  const std::string descr = descr_for(dtype);
  // (), (n,) or (a, b, ...): Python's tuple syntax.
  std::string shape_text = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    shape_text += fmt::format("{}{}", i ? ", " : "", shape[i]);
  shape_text += shape.size() == 1 ? ",)" : ")";
  std::string header =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape_text);
  // Magic (6) + version (2) + length (2) + header + '\n', padded to a multiple of 64.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string out(kMagic, 6);
  out += '\x01';
  out += '\x00';
  append<uint16_t>(out, static_cast<uint16_t>(header.size()));
  out += header;
  for (double v : values) {
    if (descr == "<f2") {
      append<uint16_t>(out, double_to_half(v));
    } else if (descr == "<f4") {
      append<float>(out, static_cast<float>(v));
    } else if (descr == "<f8") {
      append<double>(out, v);
    } else if (descr == "<i4") {
      append<int32_t>(out, static_cast<int32_t>(v));
    } else {
      append<int64_t>(out, static_cast<int64_t>(v));
    }
  }
  std::ofstream f(path, std::ios::binary);
  f << out;
  f.flush();
  if (!f) throw EnvironmentError(fmt::format("cannot write `{}`", path));
}

NpyArray read_npy(const std::string& path, const std::vector<int64_t>* expected_shape) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError(fmt::format("cannot open `{}`", path));
  const std::function<UserError(const std::string&)> bad = [&](const std::string& why) {
    return UserError(fmt::format("`{}` is not a .npy file mkc can read: {}", path, why));
  };
  // The file's size first: nothing is allocated beyond what the file holds.
  f.seekg(0, std::ios::end);
  const std::streamoff file_size = f.tellg();
  f.seekg(0);
  if (!f || file_size < 0) throw UserError(fmt::format("cannot read `{}`", path));
  const auto read_exact = [&](char* dst, size_t n) {
    f.read(dst, static_cast<std::streamsize>(n));
    return static_cast<size_t>(f.gcount()) == n;
  };
  char lead[12];
  if (!read_exact(lead, 10) || std::memcmp(lead, kMagic, 6) != 0) throw bad("no NumPy magic");
  const int major = static_cast<unsigned char>(lead[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(lead[8]) | static_cast<unsigned char>(lead[9]) << 8;
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (!read_exact(lead + 10, 2)) throw bad("truncated header");
    uint32_t n;
    std::memcpy(&n, lead + 8, 4);
    header_len = n;
    offset = 12;
  } else {
    throw bad(fmt::format("format version {}", major));
  }
  if (header_len > kMaxHeaderBytes)
    throw bad(fmt::format("a header of {} bytes (NumPy writes under a kilobyte)", header_len));
  if (static_cast<int64_t>(offset + header_len) > file_size) throw bad("truncated header");
  std::string header(header_len, '\0');
  if (!read_exact(header.data(), header_len)) throw bad("truncated header");
  const HeaderReader::Header h = HeaderReader(header, bad).read();
  NpyArray a;
  a.descr = h.descr;
  a.shape = h.shape;
  if (h.fortran_order) throw bad("Fortran order (save it C-contiguous)");
  const std::string& d = a.descr;
  const char order = d.empty() ? '?' : d[0];
  if (d.size() < 3 || (order != '<' && order != '|' && order != '='))
    throw bad(fmt::format("dtype `{}` (only little-endian data)", d));
  const char kind = d[1];
  const int size = element_bytes(kind, d.substr(2));
  if (size == 0) throw bad(fmt::format("dtype `{}` (f2, f4, f8, i1-i8, u1-u8, b1)", d));
  int64_t count = 1;
  for (int64_t n : a.shape) {
    if (n != 0 && count > INT64_MAX / n) throw bad("a shape of more than 2^63 elements");
    count *= n;
  }
  if (expected_shape != nullptr && a.shape != *expected_shape) {
    throw UserError(fmt::format("`{}` has shape ({}), expected ({})", path,
                                fmt::join(a.shape, ", "), fmt::join(*expected_shape, ", ")));
  }
  const int64_t available = file_size - static_cast<int64_t>(offset + header_len);
  if (count > available / size) {
    throw bad(fmt::format("truncated data ({} bytes for {} elements of {} bytes)", available, count,
                          size));
  }
  std::string data(static_cast<size_t>(count * size), '\0');
  if (!read_exact(data.data(), data.size())) throw bad("truncated data");
  a.values.resize(static_cast<size_t>(count));
  const char* p = data.data();
  for (int64_t i = 0; i < count; ++i, p += size) {
    double v = 0;
    if (kind == 'f' && size == 2) {
      uint16_t h;
      std::memcpy(&h, p, 2);
      v = half_to_double(h);
    } else if (kind == 'f' && size == 4) {
      v = load<float>(p);
    } else if (kind == 'f' && size == 8) {
      v = load<double>(p);
    } else if ((kind == 'i' || kind == 'b') && size == 1) {
      v = load<int8_t>(p);
    } else if (kind == 'i' && size == 2) {
      v = load<int16_t>(p);
    } else if (kind == 'i' && size == 4) {
      v = load<int32_t>(p);
    } else if (kind == 'i' && size == 8) {
      v = load<int64_t>(p);
    } else if (kind == 'u' && size == 1) {
      v = load<uint8_t>(p);
    } else if (kind == 'u' && size == 2) {
      v = load<uint16_t>(p);
    } else if (kind == 'u' && size == 4) {
      v = load<uint32_t>(p);
    } else {
      v = load<uint64_t>(p);
    }
    a.values[i] = v;
  }
  return a;
}

}  // namespace mkc::rt
