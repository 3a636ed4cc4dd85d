#include "runtime/npy.h"

#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <fstream>

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

template <typename T>
double load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return static_cast<double>(v);
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
      append<_Float16>(out, static_cast<_Float16>(v));
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

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError(fmt::format("cannot open `{}`", path));
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto bad = [&](const std::string& why) {
    return UserError(fmt::format("`{}` is not a .npy file mkc can read: {}", path, why));
  };
  if (data.size() < 10 || data.compare(0, 6, kMagic, 6) != 0) throw bad("no NumPy magic");
  const int major = static_cast<unsigned char>(data[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(data[8]) | static_cast<unsigned char>(data[9]) << 8;
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (data.size() < 12) throw bad("truncated header");
    uint32_t n;
    std::memcpy(&n, data.data() + 8, 4);
    header_len = n;
    offset = 12;
  } else {
    throw bad(fmt::format("format version {}", major));
  }
  if (offset + header_len > data.size()) throw bad("truncated header");
  const std::string header = data.substr(offset, header_len);
  NpyArray a;
  // The header is a Python dict literal; mkc needs three of its entries.
  const auto value_of = [&](const std::string& key) {
    const size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) throw bad(fmt::format("no `{}` in the header", key));
    size_t v = header.find(':', k);
    if (v == std::string::npos) throw bad("bad header");
    ++v;
    while (v < header.size() && header[v] == ' ') ++v;
    return v;
  };
  size_t v = value_of("descr");
  if (v >= header.size() || header[v] != '\'') throw bad("bad descr");
  const size_t close = header.find('\'', v + 1);
  if (close == std::string::npos) throw bad("bad descr");
  a.descr = header.substr(v + 1, close - v - 1);
  if (header.compare(value_of("fortran_order"), 5, "False") != 0)
    throw bad("Fortran order (save it C-contiguous)");
  v = value_of("shape");
  const size_t end = header.find(')', v);
  if (v >= header.size() || header[v] != '(' || end == std::string::npos) throw bad("bad shape");
  int64_t count = 1;
  for (size_t i = v + 1; i < end;) {
    if (std::isdigit(static_cast<unsigned char>(header[i]))) {
      int64_t n = 0;
      while (i < end && std::isdigit(static_cast<unsigned char>(header[i])))
        n = n * 10 + (header[i++] - '0');
      a.shape.push_back(n);
      count *= n;
    } else {
      ++i;
    }
  }
  const std::string& d = a.descr;
  const char order = d.empty() ? '?' : d[0];
  if (d.size() < 3 || (order != '<' && order != '|' && order != '='))
    throw bad(fmt::format("dtype `{}` (only little-endian data)", d));
  const char kind = d[1];
  const int size = std::atoi(d.c_str() + 2);
  const char* p = data.data() + offset + header_len;
  if (static_cast<int64_t>(data.size() - offset - header_len) < count * size)
    throw bad("truncated data");
  a.values.resize(count);
  for (int64_t i = 0; i < count; ++i, p += size) {
    double v;
    if (kind == 'f' && size == 2) {
      v = load<_Float16>(p);
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
    } else if (kind == 'u' && size == 8) {
      v = load<uint64_t>(p);
    } else {
      throw bad(fmt::format("dtype `{}`", d));
    }
    a.values[i] = v;
  }
  return a;
}

}  // namespace mkc::rt
