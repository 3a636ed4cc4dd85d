// libFuzzer target: any bytes as a JIT cache entry through jit::decode_entry. It must return,
// never crash or trip a sanitizer; an entry it accepts must be exactly what encode_entry writes for
// what it decoded (so no two texts are one entry); and the input cut into a cubin, PTX and log
// must survive encode then decode unchanged. Built and run by tools/fuzz.sh (clang 14).
#include <cstddef>
#include <cstdint>
#include <string>

#include "jit/cache_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string key = "0123456789abcdef0123456789abcdef", kernel = "mkc_fuzz";
  mkc::jit::JitOutput out;
  if (mkc::jit::decode_entry(text, key, kernel, &out)) {
    if (mkc::jit::encode_entry(key, kernel, out) != text) __builtin_trap();
  }
  // Round trip: the bytes as a payload whose cubin names the kernel.
  mkc::jit::JitOutput in;
  const size_t a = size / 3, b = size / 2;
  in.cubin = std::string(1, '\0') + kernel + std::string(1, '\0') + text.substr(0, a);
  in.ptx = text.substr(a, b - a);
  in.log = text.substr(b);
  in.registers = static_cast<int>(size % 255);
  in.spill_bytes = size > 0 ? data[0] : -1;
  const std::string entry = mkc::jit::encode_entry(key, kernel, in);
  mkc::jit::JitOutput back;
  if (!mkc::jit::decode_entry(entry, key, kernel, &back)) __builtin_trap();
  if (back.cubin != in.cubin || back.ptx != in.ptx || back.log != in.log ||
      back.registers != in.registers || back.spill_bytes != in.spill_bytes)
    __builtin_trap();
  // Another kernel or key: refused.
  if (mkc::jit::decode_entry(entry, key, "mkc_other", &back)) __builtin_trap();
  if (mkc::jit::decode_entry(entry, "ffff", kernel, &back)) __builtin_trap();
  return 0;
}
