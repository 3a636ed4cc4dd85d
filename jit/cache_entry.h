// The JIT cache's entry format, apart from the files and NVRTC (jit.cc reads and writes the
// files): "MKCC2 <key> <kernel>\n<cubin bytes> <ptx bytes> <log bytes> <registers> <spills>
// <stack> <smem> <checksum>\n" then the cubin, the PTX and the log. The checksum (FNV-1a) covers
// the header's fields and the payload, so an entry that is truncated, edited, or written for
// another key or kernel is refused, never used. Fuzzed by tests/fuzz/jit_cache_fuzzer.cc.
#pragma once

#include <string>

#include "jit/jit.h"

namespace mkc::jit {

// The format's first word: a new layout gets a new one (and so new keys: it is in the key).
inline constexpr const char* kEntryMagic = "MKCC2";

// The entry for `out`'s cubin, PTX, log and resource figures under `key` and `kernel` (names
// without spaces or newlines, as jit.cc makes them).
std::string encode_entry(const std::string& key, const std::string& kernel, const JitOutput& out);

// Fills `out`'s cubin, PTX, log and figures from `data` when it is a whole, intact entry for
// `key` and `kernel` whose cubin defines `kernel`; false (and `out` untouched) otherwise.
bool decode_entry(const std::string& data, const std::string& key, const std::string& kernel,
                  JitOutput* out);

}  // namespace mkc::jit
