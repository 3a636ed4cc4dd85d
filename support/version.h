// mkc's version, printed by `mkc --version` and written into every generated kernel's banner.
#pragma once

#define MKC_VERSION_STRING "0.1.0"

namespace mkc {
inline constexpr const char* kVersion = MKC_VERSION_STRING;
}  // namespace mkc
