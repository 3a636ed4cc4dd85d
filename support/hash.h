// 64-bit FNV-1a: the one hash of cache keys, banners, JIT cache entries and tuning keys. Not
// cryptographic: it tells versions apart, it does not authenticate them.
#pragma once

#include <cstdint>
#include <string_view>

namespace mkc {

inline uint64_t fnv1a(std::string_view data, uint64_t seed = 0xcbf29ce484222325ull) {
  uint64_t h = seed;
  for (const unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace mkc
